// The property suite over every registered int8 kernel and mutant
// (docs/int8.md "Properties" and "Mutants").
#include "kernel_suite.hpp"

using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Int8, "int8");
