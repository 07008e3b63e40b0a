#include "impls/registry.hpp"
namespace conform {
void register_mutants_activation(Registry&) {}  // placeholder until the mutants land
}
