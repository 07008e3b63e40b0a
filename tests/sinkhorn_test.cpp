// The property suite over every registered sinkhorn kernel and mutant
// (docs/sinkhorn.md "Properties" and "Mutants").
#include "kernel_suite.hpp"

using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Sinkhorn, "sinkhorn");
