#include "impls/cpu/isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace conform::cpu {

namespace {

bool capped_at(const char* isa) {
    const char* force = std::getenv("CONFORM_ISA");
    return force && std::strcmp(force, isa) == 0;
}

std::atomic<int> avx2_only_depth{0};

}  // namespace

bool has_avx2() {
    static const bool yes = [] {
        if (capped_at("scalar")) return false;
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }();
    return yes;
}

bool has_avx512() {
    static const bool cpu = [] {
        if (!has_avx2() || capped_at("avx2")) return false;
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    }();
    return cpu && avx2_only_depth.load(std::memory_order_relaxed) == 0;
}

bool has_avx512_bf16() {
    static const bool cpu = [] {
        __builtin_cpu_init();  // in case this runs before libgcc's own initialisation
        return __builtin_cpu_supports("avx512bf16");
    }();
    return cpu && has_avx512();
}

bool has_avx512_vnni() {
    static const bool cpu = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vnni");
    }();
    return cpu && has_avx512();
}

bool has_avx_vnni() {
    static const bool cpu = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avxvnni");
    }();
    return cpu && has_avx2();
}

// AMX tile data is off until the process asks Linux for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); without the grant the
// first tile instruction faults.
bool has_amx_int8() {
    static const bool cpu = [] {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-int8")) return false;
#ifdef __linux__
        constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
        return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
#else
        return false;
#endif
    }();
    return cpu && has_avx512();
}

const char* isa_name() { return has_avx512() ? "avx512" : has_avx2() ? "avx2" : "scalar"; }

Avx2Only::Avx2Only() { avx2_only_depth.fetch_add(1); }
Avx2Only::~Avx2Only() { avx2_only_depth.fetch_sub(1); }

}  // namespace conform::cpu
