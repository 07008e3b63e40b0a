// Precompiled for every test executable (tests/CMakeLists.txt): the heavy
// headers most tests include, parsed once instead of once per test.
#pragma once
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>

#include "impls/registry.hpp"
#include "oracle/real.hpp"
#include "properties/generators.hpp"
