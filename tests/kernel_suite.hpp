// The property suite instantiated for every registered kernel of a family:
// kernels must pass every property, mutants must fail at least one.
// CONFORM_CASES (cases per property, default 100) and CONFORM_SEED (default 1;
// scripts/test sets it from the commit) come from the environment so that CI
// searches new inputs on every commit and a matrix can widen the search; long sweeps
// shard with GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "golden/golden.hpp"
#include "impls/registry.hpp"
#include "properties/suite.hpp"

namespace conform::testing {

// A whole decimal number from the environment, or `fallback` when unset;
// anything else is an error naming the variable.
inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
    const char* s = std::getenv(name);
    if (!s) return fallback;
    char* end = nullptr;
    const std::uint64_t v = std::strtoull(s, &end, 10);
    if (!*s || *end) throw std::invalid_argument(std::string(name) + "=\"" + s + "\" is not a whole number");
    return v;
}

inline props::RunConfig env_config() {
    props::RunConfig cfg;
    cfg.seed = env_number("CONFORM_SEED", 1);
    cfg.cases = static_cast<int>(env_number("CONFORM_CASES", 100));
    return cfg;
}

inline std::vector<std::string> kernels_of(const std::string& family, Role role) {
    std::vector<std::string> v;
    for (const auto& k : builtin_registry().all())
        if (k.role == role && find_op(k.op)->family == family) v.push_back(k.name);
    return v;
}

inline std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

// A kernel that breaks exact ties another legitimate way (its own `fn` on
// `base`'s registration): every property passes, and the verdict counted
// accepted selections under a note containing `note`.
inline void expect_other_tie_rule_passes(const std::string& base, KernelFn fn, const std::string& note) {
    KernelInfo k = *builtin_registry().find(base);
    k.name = "test.other_tie_rule." + base;
    k.fn = std::move(fn);
    const auto r = props::run_suite(k, env_config());
    for (const auto& p : r.properties) EXPECT_TRUE(p.passed) << p.name << ": " << p.message << "\n" << p.counterexample;
    std::int64_t accepted = 0;
    for (const auto& [what, n] : r.stats.notes)
        if (what.find(note) != std::string::npos) accepted += n;
    EXPECT_GT(accepted, 0) << "no tie was broken the other way: the generators lost their exact ties";
}

// An FP32 tensor of any shape holding `v` (row-major): hand-made cases.
inline Tensor fp32_tensor(std::vector<std::int64_t> shape, const std::vector<double>& v) {
    Tensor t(Format::fp32, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set_value(i, v.at(static_cast<std::size_t>(i)));
    return t;
}
inline Tensor fp32_matrix(std::int64_t rows, std::int64_t cols, const std::vector<double>& v) { return fp32_tensor({rows, cols}, v); }

class KernelSuite : public ::testing::TestWithParam<std::string> {};
class MutantSuite : public ::testing::TestWithParam<std::string> {};

// Every property passes, the rounding-direction statistics are symmetric and
// the kernel has not drifted from its recorded error profile (golden/profiles/,
// the property "error_profile"), whatever the seed.
inline void expect_all_properties_pass(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    ASSERT_NE(k, nullptr);
    ASSERT_TRUE(golden::read_profile(golden::profile_file(golden::default_dir(), name)).has_value())
        << "no recorded profile for " << name << "; run 'conform golden --record-profiles --kernel " << name << "'";
    props::RunConfig cfg = env_config();
    cfg.profile_check = golden::profile_checker(golden::default_dir());
    const auto r = props::run_suite(*k, cfg);
    ASSERT_FALSE(r.properties.empty());
    // A statistic of the whole sample (rounding_bias, error_profile) has no
    // case to replay: the run itself reproduces it.
    const std::string rerun = "conform run --kernel " + name + " --seed " + std::to_string(cfg.seed) + " --cases " +
                              std::to_string(cfg.cases) + " --no-baselines";
    for (const auto& p : r.properties)
        EXPECT_TRUE(p.passed) << name << " / " << p.name << " (seed " << cfg.seed << "): " << p.message << "\n"
                              << p.counterexample << "\nreproduce: "
                              << (p.reproduce.empty() ? rerun : "conform run --kernel " + name + " --reproduce '" +
                                                                    p.reproduce + "'");
}

// Killed is one failing property: the suite stops there (conform mutate
// runs every property, for the report).  First with the run's own case
// count; a survivor is searched again with twice the cases, so that a
// mutant only rare shapes expose is not passed by the luck of a seed (the
// CUDA FP16 P V accumulator survived 100 cases at one seed in 13).  The two
// passes, not one doubled search: RapidCheck's last cases are its largest
// and slowest (under the CUDA emulation one doubled attention search took
// six minutes for a mutant the first hundred cases kill).
inline bool killed(const KernelInfo& k) {
    props::RunConfig cfg = env_config();
    cfg.fail_fast = true;
    cfg.shrink = false;  // the verdict is all a kill needs; shrinking a failure took up to 20 s
    if (!props::run_suite(k, cfg).passed) return true;
    cfg.cases *= 2;
    return !props::run_suite(k, cfg).passed;
}

inline void expect_killed(const std::string& name) {
    const KernelInfo* k = builtin_registry().find(name);
    ASSERT_NE(k, nullptr);
    ASSERT_EQ(k->role, Role::mutant);
    EXPECT_TRUE(killed(*k)) << "mutant " << name << " (" << k->description << ") survived every property";
}

}  // namespace conform::testing

// Instantiates the kernel and mutant suites of one op family (the tests
// themselves, KernelSuite.AllPropertiesPass and MutantSuite.IsKilled, are
// defined once, in kernel_suite.cpp).
#define CONFORM_FAMILY_SUITES(Family, family_name)                                                          \
    INSTANTIATE_TEST_SUITE_P(Family, KernelSuite,                                                           \
                             ::testing::ValuesIn(conform::testing::kernels_of(family_name, conform::Role::kernel)), \
                             conform::testing::test_name);                                                  \
    INSTANTIATE_TEST_SUITE_P(Family, MutantSuite,                                                           \
                             ::testing::ValuesIn(conform::testing::kernels_of(family_name, conform::Role::mutant)), \
                             conform::testing::test_name)
