// write_report_dir: the four report files, each replaced atomically (io/files.hpp).
#include "reports/atomic_file.hpp"

#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {

void write_report_dir(const std::filesystem::path& dir, const RunReport& r) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw std::runtime_error(fmt::format("cannot create report directory {}: {}", dir.string(), ec.message()));
    // Render everything first so a writer bug cannot leave a half-updated set.
    std::string md = to_markdown(r), junit = to_junit(r), html = to_html(r), json = to_json_text(r);
    write_file_atomic(dir / "report.md", md);
    write_file_atomic(dir / "junit.xml", junit);
    write_file_atomic(dir / "report.html", html);
    // report.json last: a reader that finds it new knows the other three are at least as new.
    write_file_atomic(dir / "report.json", json);
}

}  // namespace conform::report
