#include "impls/registry.hpp"
namespace conform {
void register_cpu_activation(Registry&) {}  // placeholder until the kernels land
}
