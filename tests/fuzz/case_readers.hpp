// Every reader of untrusted dump bytes (case files and model dumps), run on
// one input.  Shared by the libFuzzer target (case_reader_fuzz.cpp) and the
// corpus regression test (tests/fuzz_corpus_test.cpp), so both hold the
// readers to the same contract: each parse either succeeds or throws
// conform::io::FormatError, whatever parses is written back and read again
// unchanged, and is_model_dump_header agrees with the metadata the safetensors
// reader finds.  A broken contract throws std::logic_error (under libFuzzer:
// an uncaught exception, i.e. a crash).
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "io/case_file.hpp"
#include "io/metadata.hpp"
#include "io/model_dump.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"

namespace conform::fuzz {

// Which readers accepted the input (the regression test reports it).
struct ReaderResults {
    bool safetensors = false;
    bool safetensors_case = false;
    bool model_dump = false;
    bool npy = false;
    bool manifest = false;
};

inline void require(bool ok, const char* what) {
    if (!ok) throw std::logic_error(std::string("case reader contract broken: ") + what);
}

template <class Parse>
auto parsed_or_nullopt(Parse parse) -> std::optional<decltype(parse())> {
    try {
        return parse();
    } catch (const io::FormatError&) {
        return std::nullopt;
    }
}

inline ReaderResults run_case_readers(std::span<const std::byte> bytes) {
    using namespace io;
    ReaderResults r;
    if (auto file = parsed_or_nullopt([&] { return parse_safetensors(bytes, "fuzz.safetensors"); })) {
        r.safetensors = true;
        require(parse_safetensors(serialize_safetensors(*file), "again.safetensors") == *file,
                "safetensors round trip");
        if (auto c = parsed_or_nullopt([&] { return case_from_safetensors(*file, "fuzz.safetensors"); })) {
            r.safetensors_case = true;
            require(parse_case_safetensors(serialize_case_safetensors(*c), "again.safetensors") == *c,
                    "case round trip");
            try {
                case_manifest_text(*c);  // names from a safetensors file may not be usable as file names
            } catch (const std::invalid_argument&) {
            }
        }
        if (auto d = parsed_or_nullopt([&] { return model_dump_from_safetensors(*file, "fuzz.safetensors"); })) {
            r.model_dump = true;
            require(parse_model_dump(serialize_model_dump(*d), "again.safetensors") == *d, "model dump round trip");
        }
        const std::string* format = file->metadata ? metadata_value(*file->metadata, "conform.format") : nullptr;
        require(is_model_dump_header(bytes) == (format && *format == kModelFormat),
                "is_model_dump_header agrees with the metadata");
    } else {
        is_model_dump_header(bytes);  // must not crash on what the reader refuses
    }
    for (const std::optional<DType> declared : {std::optional<DType>{}, std::optional<DType>{DType::bf16}}) {
        if (auto t = parsed_or_nullopt([&] { return parse_npy(bytes, "fuzz.npy", declared); })) {
            r.npy = true;
            require(parse_npy(serialize_npy(*t), "again.npy", declared) == *t, "npy round trip");
        }
    }
    if (parsed_or_nullopt([&] { return parse_case_manifest(bytes, "case.json"); })) r.manifest = true;
    return r;
}

}  // namespace conform::fuzz
