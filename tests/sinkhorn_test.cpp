// The property suite over every registered sinkhorn kernel and mutant
// (docs/sinkhorn.md "Properties" and "Mutants").
#include "kernel_suite.hpp"

namespace sinkhorn_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Sinkhorn, "sinkhorn");

}  // namespace sinkhorn_test
