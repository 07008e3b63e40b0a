// Golden data: vectors of each op (deterministic inputs and every correctly
// rounded output, as hex floats beside bit patterns) and the recorded error
// profile of each kernel.  `conform golden --regenerate` rewrites the vectors;
// `conform golden` checks that the oracle reproduces every stored output bit
// for bit and judges every registered kernel on the stored inputs
// (props::check_case); the kernel suites fail when a kernel's profile gets
// materially worse.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::golden {

std::filesystem::path default_dir();  // <source>/golden

// The version of golden/vectors/<op>.<fmt>.json this build reads and writes
// (docs/numerics.md, "Golden data").
constexpr int kVectorsVersion = 2;

struct Vector {
    std::string op;
    Format format = Format::fp32;  // the file's format: every input, and every output the op does not fix
    std::string family;            // the value family the inputs were drawn from
    Params params;
    std::vector<Tensor> inputs;   // in op.inputs order; trailing optional inputs may be absent
    std::vector<Tensor> outputs;  // every output, in op.outputs order, each correctly rounded into its own format
};

// The formats the outputs of `op` are stored in for vectors of format f: f,
// except the outputs every kernel keeps at a fixed width (output_formats in
// golden.cpp lists them).
std::vector<Format> output_formats(const OpSpec& op, Format f);

// The deterministic vector set of one op and format: inputs from fixed
// generator seeds, every output by the oracle.
std::vector<Vector> make_vectors(const std::string& op, Format f);
void write_vectors(const std::filesystem::path& file, const std::vector<Vector>& v);
// Files are untrusted: any malformed field is an io::FormatError naming the file and the field.
std::vector<Vector> read_vectors(const std::filesystem::path& file);
std::filesystem::path vector_file(const std::filesystem::path& dir, const std::string& op, Format f);

// Empty when the oracle reproduces every stored output of v bit for bit;
// otherwise the first output element that differs.
std::string oracle_difference(const Vector& v);

// Kernels on the golden inputs.  A kernel is judged on the vectors of its
// input format, or of its output format when it reads int8 codes
// (int8_gemm, dequantize).
Format vector_format(const KernelInfo& k);
// v's inputs in the formats kernel k reads (exact conversions only).
std::vector<Tensor> kernel_inputs(const KernelInfo& k, const Vector& v);

struct KernelCheck {
    std::string kernel;
    int vectors = 0;
    std::int64_t elements = 0;  // judged elements, over every output
    bool passed = false;
    std::string failure;        // the first failing vector and element; empty when passed
    std::uint64_t max_ulp = 0;
    std::optional<double> max_util;  // set when some output is judged by a derived bound
    std::string worst;               // the worst element (by utilization when bounded, else ulp), naming its vector
};
// Judges k on every vector by props::check_case.  No vector, or no judged
// element, is a failure, never a pass.
KernelCheck check_kernel(const KernelInfo& k, const std::vector<Vector>& vectors);

// Error profile of a kernel under the recorded seed and case count.
struct Profile {
    std::string kernel;
    std::uint64_t seed = 1;
    int cases = 100;
    std::uint64_t max_ulp = 0;
    std::vector<double> util_quantiles;  // p50, p90, p99, p99.9, max (empty: ULP-budget op)
};
constexpr double kUtilSlack = 0.05;  // "materially worse": a quantile up by more than 5% of the bound

Profile profile_of(const report::KernelReport& r, std::uint64_t seed, int cases);
void write_profile(const std::filesystem::path& file, const Profile& p);
std::optional<Profile> read_profile(const std::filesystem::path& file);
std::filesystem::path profile_file(const std::filesystem::path& dir, const std::string& kernel);
// Empty when `now` is no worse than `recorded`; otherwise what got worse.
std::string compare_profiles(const Profile& recorded, const Profile& now);

}  // namespace conform::golden
