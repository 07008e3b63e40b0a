// The gated delta-rule kernels (ops gdn and kda) through the property suite:
// within the derived bound of docs/gdn.md, special values (NaN) by class,
// chunk-size and split invariance, causality, finiteness for every allowed
// gate; every mutant killed.
#include <gtest/gtest.h>

#include "kernel_suite.hpp"

using conform::testing::KernelSuite;
using conform::testing::MutantSuite;

CONFORM_FAMILY_SUITES(Gdn, "gdn");
