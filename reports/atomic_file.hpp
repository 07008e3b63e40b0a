// Atomic file replacement: readers see either the old file or the complete
// new one, never a truncated mix, even if the process dies mid-write.
#pragma once
#include <filesystem>
#include <string>

namespace conform::report {

// Writes data to a temporary file in path's directory, fsyncs it, renames it
// over path and fsyncs the directory.  On failure the temporary file is
// removed, path is left as it was, and std::runtime_error names path.
void write_file_atomic(const std::filesystem::path& path, const std::string& data);

}  // namespace conform::report
