#include "impls/registry.hpp"
namespace conform {
void register_cpu_gated(Registry&) {}  // placeholder until the kernels land
}
