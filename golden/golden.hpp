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
#include "properties/suite.hpp"
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
// its within_budget statistics case by case at a fixed seed and case count.
// drift() compares a run on the same cases (the same seed and count, so the
// same inputs) pair by pair, so that an unchanged kernel shows no
// difference at all and a kernel made k times as inaccurate shows every
// case's worst utilization k times the recorded one, however much those
// utilizations vary from case to case.  It fails:
//   - ULP-budget ops: a result farther from the correctly rounded one than
//     max_ulp, the largest recorded;
//   - bound-based ops: the geometric mean over the paired cases of the
//     ratio of each case's worst utilization to the recorded one above
//     kUtilDriftRatio;
//   - every op: the mean over the paired cases of the increase in the
//     fraction of results not correctly rounded above kMisroundedDrift (a
//     correctly rounded kernel made just over twice as inaccurate, whose
//     results then leave the rounding interval).
// The tolerances absorb the differences between the kernels' ISA paths
// (AVX-512 and AVX2 give different roundings in a few kernels; profiles
// are recorded on one of them).
struct Profile {
    std::string kernel;
    std::uint64_t seed = 1;
    int cases = 100;
    std::string isa;                    // the ISA path it was recorded on (cpu::isa_name())
    std::uint64_t max_ulp = 0;
    std::vector<double> case_log_util;  // per case: log of its worst utilization, NaN if none (Stats::case_log_utils)
    std::vector<double> case_misrounded;  // per case: the fraction not correctly rounded, NaN if none
};
inline constexpr int kProfileVersion = 3;
inline constexpr std::uint64_t kProfileSeed = 1;
inline constexpr int kProfileCases = 100;
inline constexpr double kUtilDriftRatio = 1.25;
inline constexpr double kMisroundedDrift = 0.01;
// Utilizations below this count as this (their logarithms are not compared
// beyond it: a case whose worst error is 1e-70 of its bound says nothing).
inline constexpr double kUtilFloor = 1e-12;

// Runs within_budget at `cases` cases under `seed`.
Profile record_profile(const KernelInfo& k, int cases = kProfileCases, std::uint64_t seed = kProfileSeed);
void write_profile(const std::filesystem::path& file, const Profile& p);
// nullopt when there is none; std::runtime_error naming the file and field when malformed.
std::optional<Profile> read_profile(const std::filesystem::path& file);
std::filesystem::path profile_file(const std::filesystem::path& dir, const std::string& kernel);  // dir/profiles/<kernel>.json
std::filesystem::path profile_path(const std::filesystem::path& profiles_dir, const std::string& kernel);  // profiles_dir/<kernel>.json
// Empty when `now` (within_budget statistics of kernel k on the recorded
// seed and case count) shows no drift from `recorded`; otherwise what got
// worse, with the numbers.
std::string drift(const Profile& recorded, const KernelInfo& k, const props::Stats& now);
// The run's profile check (props::RunConfig::profile_check) for the profiles
// under `dir`: kernels without a recorded profile are not checked.  A run
// at the recorded seed and case count is compared as it is; any other run
// re-runs within_budget on the recorded cases for the comparison.
std::function<std::string(const KernelInfo&, const props::RunConfig&, const props::Stats&)> profile_checker(
    const std::filesystem::path& dir);
// The same for profiles kept directly in profiles_dir (check-plugin --against-profile).
std::function<std::string(const KernelInfo&, const props::RunConfig&, const props::Stats&)> profiles_checker(
    const std::filesystem::path& profiles_dir);

}  // namespace conform::golden
