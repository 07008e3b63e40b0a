#include "impls/cpu/isa.hpp"

#include <cstdlib>
#include <cstring>

namespace conform::cpu {

bool has_avx2() {
    static const bool yes = [] {
        const char* force = std::getenv("CONFORM_ISA");
        if (force && std::strcmp(force, "scalar") == 0) return false;
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }();
    return yes;
}

const char* isa_name() { return has_avx2() ? "avx2" : "scalar"; }

}  // namespace conform::cpu
