#include "reports/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "reports/writers.hpp"

namespace conform::report {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* step, int err) {
    throw std::runtime_error(fmt::format("cannot write {}: {}: {}", path.string(), step, std::strerror(err)));
}

// The temporary file: closed and removed unless committed.
class TempFile {
public:
    explicit TempFile(const std::filesystem::path& target) : target_(target) {
        auto dir = target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
        name_ = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
        fd_ = ::mkstemp(name_.data());
        if (fd_ < 0) fail(target_, "cannot create temporary file", errno);
    }
    ~TempFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!committed_) ::unlink(name_.c_str());
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    void write_all(const std::string& data) {
        for (std::size_t done = 0; done < data.size();) {
            ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail(target_, "write", errno);
            done += static_cast<std::size_t>(n);
        }
    }
    void commit() {
        if (::fchmod(fd_, 0644) != 0) fail(target_, "chmod", errno);
        if (::fsync(fd_) != 0) fail(target_, "fsync", errno);
        int fd = fd_;
        fd_ = -1;
        if (::close(fd) != 0) fail(target_, "close", errno);
        if (::rename(name_.c_str(), target_.c_str()) != 0) fail(target_, "rename", errno);
        committed_ = true;
    }

private:
    std::filesystem::path target_;
    std::string name_;
    int fd_ = -1;
    bool committed_ = false;
};

// Best effort: make the rename itself durable.
void sync_directory(const std::filesystem::path& path) {
    auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::string& data) {
    TempFile tmp(path);
    tmp.write_all(data);
    tmp.commit();
    sync_directory(path);
}

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
