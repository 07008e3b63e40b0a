#include "io/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "io/format_error.hpp"

namespace conform::io {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& path, const char* step, int err) {
    throw std::runtime_error("cannot write " + path.string() + ": " + step + ": " + std::strerror(err));
}

fs::path directory_of(const fs::path& path) { return path.parent_path().empty() ? fs::path(".") : path.parent_path(); }

// Best effort: make the rename itself durable.
void sync_directory(const fs::path& path) {
    const int fd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(const fs::path& target) : target_(target) {
    name_ = (directory_of(target) / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
    fd_ = ::mkstemp(name_.data());
    if (fd_ < 0) fail(target_, "cannot create temporary file", errno);
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(name_.c_str());
}

void AtomicFile::write_all(std::span<const std::byte> data) {
    for (std::size_t done = 0; done < data.size();) {
        const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(target_, "write", errno);
        done += static_cast<std::size_t>(n);
    }
}

void AtomicFile::write_at(std::uint64_t offset, std::span<const std::byte> data) {
    for (std::size_t done = 0; done < data.size();) {
        const ssize_t n = ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(target_, "write", errno);
        done += static_cast<std::size_t>(n);
    }
}

void AtomicFile::resize(std::uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail(target_, "resize", errno);
}

void AtomicFile::commit() {
    if (::fchmod(fd_, 0644) != 0) fail(target_, "chmod", errno);
    if (::fsync(fd_) != 0) fail(target_, "fsync", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(target_, "close", errno);
    if (::rename(name_.c_str(), target_.c_str()) != 0) fail(target_, "rename", errno);
    committed_ = true;
    sync_directory(target_);
}

std::vector<std::byte> read_file_bytes(const fs::path& path, std::uint64_t limit) {
    const std::string source = path.string();
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (!fs::exists(status)) throw FormatError(source, "", "no such file");
    if (!fs::is_regular_file(status)) throw FormatError(source, "", "not a regular file");
    const std::uint64_t size = fs::file_size(path, ec);
    if (ec) throw FormatError(source, "", "cannot read: " + ec.message());
    if (size > limit)
        throw FormatError(source, "", std::to_string(size) + " bytes is above the " + std::to_string(limit) + "-byte limit");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FormatError(source, "", std::string("cannot open: ") + std::strerror(errno));
    std::vector<std::byte> bytes(size);
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
    if (static_cast<std::uint64_t>(in.gcount()) != size)
        throw FormatError(source, "", "read " + std::to_string(in.gcount()) + " of " + std::to_string(size) + " bytes");
    return bytes;
}

void write_file_atomic(const fs::path& path, std::span<const std::byte> data) {
    AtomicFile tmp(path);
    tmp.write_all(data);
    tmp.commit();
}

void write_file_atomic(const fs::path& path, const std::string& data) {
    write_file_atomic(path, std::as_bytes(std::span(data)));
}

}  // namespace conform::io
