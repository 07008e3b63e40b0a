// The two parameterized tests every family instantiates (CONFORM_FAMILY_SUITES
// in kernel_suite.hpp): defined once for the test executable, whose family
// files each add their kernels and mutants as parameters.
#include "kernel_suite.hpp"

namespace conform::testing {

TEST_P(KernelSuite, AllPropertiesPass) { expect_all_properties_pass(GetParam()); }
TEST_P(MutantSuite, IsKilled) { expect_killed(GetParam()); }
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MutantSuite);

}  // namespace conform::testing
