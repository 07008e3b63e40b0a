// libFuzzer entry point over the case-file readers; see case_readers.hpp for
// the contract checked and docs/dumps.md for how to run it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "tests/fuzz/case_readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    conform::fuzz::run_case_readers(std::as_bytes(std::span(data, size)));
    return 0;
}
