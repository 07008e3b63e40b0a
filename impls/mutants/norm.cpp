#include "impls/registry.hpp"
namespace conform {
void register_mutants_norm(Registry&) {}  // placeholder until the mutants land
}
