// Golden data: vectors of each op (inputs and correctly rounded outputs, as
// hex floats and bit patterns) and the recorded error profile of each
// kernel.  `conform golden --regenerate` rewrites both; the tests check that
// the oracle reproduces every vector bit for bit and that no kernel's
// profile got materially worse.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "reports/model.hpp"

namespace conform::golden {

std::filesystem::path default_dir();  // <source>/golden

struct Vector {
    std::string op;
    Format format;
    Params params;
    std::vector<Tensor> inputs;
    Tensor expected;  // correctly rounded output
};

// The deterministic vector set of one op and format (inputs only; outputs by the oracle).
std::vector<Vector> make_vectors(const std::string& op, Format f);
void write_vectors(const std::filesystem::path& file, const std::vector<Vector>& v);
std::vector<Vector> read_vectors(const std::filesystem::path& file);  // throws naming file and field
std::filesystem::path vector_file(const std::filesystem::path& dir, const std::string& op, Format f);

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
