// The file-system edge of io: whole files read under a size limit (untrusted
// input, refused before any allocation) and files replaced atomically (readers
// see either the old file or the complete new one, never a truncated mix, even
// if the process dies mid-write).  reports/ forwards write_file_atomic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace conform::io {

// The whole of `path`; FormatError naming the file when it does not exist, is
// not a regular file, is larger than `limit` bytes, or cannot be read.
std::vector<std::byte> read_file_bytes(const std::filesystem::path& path, std::uint64_t limit);

// Writes data to a temporary file in path's directory, fsyncs it, renames it
// over path and fsyncs the directory.  On failure the temporary file is
// removed, path is left as it was, and std::runtime_error names path.
void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> data);
void write_file_atomic(const std::filesystem::path& path, const std::string& data);

// The same, written piece by piece (a file larger than memory): a temporary
// file in path's directory, removed unless commit() renames it over path.
// std::runtime_error naming path on any failure.
class AtomicFile {
public:
    explicit AtomicFile(const std::filesystem::path& target);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;
    void write_all(std::span<const std::byte> data);                         // at the current end
    void write_at(std::uint64_t offset, std::span<const std::byte> data);    // anywhere
    void resize(std::uint64_t size);
    void commit();  // fsync, rename over the target, fsync the directory

private:
    std::filesystem::path target_;
    std::string name_;
    int fd_ = -1;
    bool committed_ = false;
};

}  // namespace conform::io
