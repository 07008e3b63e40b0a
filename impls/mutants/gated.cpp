#include "impls/registry.hpp"
namespace conform {
void register_mutants_gated(Registry&) {}  // placeholder until the mutants land
}
