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
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "properties/verdict.hpp"
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

// Error profile of a built-in kernel (docs/numerics.md, "Error profiles"):
// its within_budget statistics at `cases` cases under each of `seeds`.  A
// change that makes the kernel materially worse fails the suite (drift())
// whatever seed the run uses:
//   - ULP-budget ops: a result farther from the correctly rounded one than
//     max_ulp, the largest seen over the recorded seeds;
//   - every op: the mean over cases of the fraction of results not
//     correctly rounded (props::mean_case_misrounded) above its mean + kDriftZ
//     sd over the recorded seeds (sd at least kMinMisroundedSd, scaled by
//     sqrt(recorded cases / cases now)); it catches a correctly rounded
//     kernel made just over twice as inaccurate, whose results then leave
//     the rounding interval;
//   - bound-based ops: the mean over cases of each case's worst utilization
//     (props::mean_case_util) above exp(mean + kDriftZ sd) of its logarithm
//     over the recorded seeds (sd at least kMinLogSd, scaled by
//     sqrt(recorded cases / cases now)).
struct Profile {
    std::string kernel;
    int cases = 100;
    std::vector<std::uint64_t> seeds;
    std::uint64_t max_ulp = 0;
    std::vector<double> case_util;   // mean_case_util per seed; empty for ULP-budget ops
    double cases_with_util = 0;      // mean number of cases that had a utilization
    std::vector<double> misrounded;  // per seed: props::mean_case_misrounded
    double log_mean() const;
    double log_sd() const;
};
inline constexpr int kProfileVersion = 2;
inline constexpr int kProfileSeeds = 10;
// One-sided normal tail of 4 sd: 3.2e-5 per kernel and run.
inline constexpr double kDriftZ = 4;
inline constexpr double kMinLogSd = 0.05;
inline constexpr double kMinMisroundedSd = 0.001;  // one result in a thousand

// Runs within_budget at `cases` cases for each of `seeds` (1..kProfileSeeds).
Profile record_profile(const KernelInfo& k, int cases, int seeds = kProfileSeeds);
void write_profile(const std::filesystem::path& file, const Profile& p);
// nullopt when there is none; std::runtime_error naming the file and field when malformed.
std::optional<Profile> read_profile(const std::filesystem::path& file);
std::filesystem::path profile_file(const std::filesystem::path& dir, const std::string& kernel);
// Empty when `now` (within_budget statistics of kernel k) shows no drift
// from `recorded`; otherwise what got worse, with the numbers.
std::string drift(const Profile& recorded, const KernelInfo& k, const props::Stats& now);
// The run's profile check (props::RunConfig::profile_check) for the profiles
// under `dir`: kernels without a recorded profile are not checked.
std::function<std::string(const KernelInfo&, const props::Stats&)> profile_checker(const std::filesystem::path& dir);

}  // namespace conform::golden
