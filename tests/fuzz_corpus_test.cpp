// Regression test of the dump-file fuzzer's corpus: every file under
// tests/fuzz/corpus/ (seeds, inputs the fuzzer kept, reproducers of past
// findings, hand-made broken model dumps) goes through every reader (case
// files and model dumps), which must either parse it (and write back what it
// read) or throw FormatError.  Runs with the ordinary g++ build; the libFuzzer
// target itself is opt-in (CONFORM_BUILD_FUZZ, docs/dumps.md).
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/fuzz/case_readers.hpp"
#include "tests/io_testing.hpp"

namespace fuzz_corpus_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

namespace fs = std::filesystem;
using conform::io_testing::read_bytes;

namespace {

const fs::path kCorpus = fs::path(CONFORM_SOURCE_DIR) / "tests" / "fuzz" / "corpus";

}  // namespace

TEST(FuzzCorpus, EveryFileParsesOrIsAFormatError) {
    ASSERT_TRUE(fs::is_directory(kCorpus)) << kCorpus;
    int files = 0, model_files = 0;
    for (const auto& entry : fs::directory_iterator(kCorpus)) {
        if (!entry.is_regular_file()) continue;
        ++files;
        const std::string name = entry.path().filename().string();
        try {
            const auto accepted = conform::fuzz::run_case_readers(read_bytes(entry.path()));
            // Seeds are valid files of the form their name says.
            if (name.starts_with("seed-")) {
                const bool parsed = name.starts_with("seed-model") ? accepted.model_dump
                                    : name.ends_with(".safetensors") ? accepted.safetensors_case
                                    : name.ends_with(".npy")       ? accepted.npy
                                                                   : accepted.manifest;
                EXPECT_TRUE(parsed) << name << " is a seed: it must parse";
            }
            // Hand-made broken model dumps: each must reach its refusal.
            if (name.starts_with("broken-model-")) {
                EXPECT_FALSE(accepted.model_dump) << name << " must be refused";
            }
            model_files += name.starts_with("seed-model-") || name.starts_with("broken-model-");
        } catch (const std::exception& e) {
            ADD_FAILURE() << name << ": " << e.what();
        }
    }
    EXPECT_GE(files, 8);
    EXPECT_GE(model_files, 8);
}

}  // namespace fuzz_corpus_test
