// Helpers shared by the dump-file tests (case_file_test, model_dump_test):
// bytes from text, hand-made safetensors files, a tensor from bit patterns, a
// temporary directory, the FormatError check (source, field, detail), and the
// Python with NumPy that runs the writers under python/.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/format_error.hpp"
#include "io/stored_tensor.hpp"

namespace conform::io_testing {

namespace fs = std::filesystem;

inline std::vector<std::byte> bytes_of(std::string_view text) {
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    return {p, p + text.size()};
}

inline std::string text_of(std::span<const std::byte> bytes) {
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline std::string le64(std::uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
    return s;
}

// A safetensors file from header text and a data block of `data_bytes` zeros.
inline std::vector<std::byte> safetensors_file(const std::string& header, std::size_t data_bytes = 0) {
    return bytes_of(le64(header.size()) + header + std::string(data_bytes, '\0'));
}

inline io::StoredTensor tensor(io::DType d, std::vector<std::int64_t> shape, const std::vector<std::uint64_t>& bits) {
    io::StoredTensor t = io::StoredTensor::zeros(d, std::move(shape));
    for (std::size_t i = 0; i < bits.size(); ++i) t.set_bits(static_cast<std::int64_t>(i), bits[i]);
    return t;
}

// Runs `parse`, which must throw FormatError from `source` whose message
// names `field` and contains `detail`.
inline void expect_error(const std::function<void()>& parse, const std::string& source, const std::string& field,
                         const std::string& detail) {
    try {
        parse();
        ADD_FAILURE() << "no FormatError; expected one about " << field << ": " << detail;
    } catch (const io::FormatError& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.source(), source) << what;
        EXPECT_EQ(what.rfind(source + ": ", 0), 0u) << what;
        EXPECT_NE(what.find(field), std::string::npos) << "field " << field << " not in: " << what;
        EXPECT_NE(what.find(detail), std::string::npos) << "detail " << detail << " not in: " << what;
    }
}

// A fresh directory under the system temporary directory, removed afterwards.
class TempDir {
public:
    explicit TempDir(const std::string& prefix = "conform_io_test") {
        static int counter = 0;
        path_ = fs::temp_directory_path() / (prefix + "." + std::to_string(::getpid()) + "." + std::to_string(counter++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

inline void write_text(const fs::path& path, std::string_view text) { std::ofstream(path, std::ios::binary) << text; }

inline std::vector<std::byte> read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return bytes_of(text);
}

// A Python 3 with NumPy: $CONFORM_PYTHON, else python3 on PATH, else Debian's;
// "" when there is none (the tests that need it skip).
inline const std::string& python_with_numpy() {
    static const std::string python = [] {
        std::vector<std::string> candidates;
        if (const char* env = std::getenv("CONFORM_PYTHON")) candidates.push_back(env);
        candidates.insert(candidates.end(), {"python3", "/usr/bin/python3"});
        for (const auto& py : candidates)
            if (std::system((py + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return py;
        return std::string();
    }();
    return python;
}

}  // namespace conform::io_testing
