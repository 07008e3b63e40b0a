// rope kernels through the suite: every registered kernel passes every
// property (derived bound of docs/rope.md, offset consistency, pass-through,
// parameter sensitivity) and every mutant is killed.
#include <gtest/gtest.h>

#include "kernel_suite.hpp"

namespace rope_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Rope, "rope");

}  // namespace rope_test
