// The cuda and cuda-emu backend registries (impls/cuda/cuda.hpp).
#include "impls/cuda/cuda.hpp"

namespace conform {
namespace {

// Every family's registration hook, for one build.
#define CONFORM_CUDA_CALL_EMU_HOOK(family) cuda_emu_kernels::register_##family(r);
#define CONFORM_CUDA_CALL_DEVICE_HOOK(family) cuda_kernels::register_##family(r);
Registry emu_kernels() {
    Registry r;
    CONFORM_CUDA_FAMILIES(CONFORM_CUDA_CALL_EMU_HOOK)
    return r;
}
#if defined(CONFORM_WITH_CUDA)
Registry device_kernels() {
    Registry r;
    CONFORM_CUDA_FAMILIES(CONFORM_CUDA_CALL_DEVICE_HOOK)
    return r;
}
#endif

}  // namespace

const BackendRegistry& cuda_registry() {
    static const BackendRegistry reg = [] {
        BackendRegistry b;
        b.backend = "cuda";
        // The kernel list is the emulation's: the same sources, the same names.
        const Registry names = emu_kernels();
#if defined(CONFORM_WITH_CUDA)
        const std::string why = cuda_kernels::probe(&b.library);
        if (why.empty()) {
            b.kernels = device_kernels();
            return b;
        }
#else
        const std::string why = "built without CUDA (nvcc was not found, or CONFORM_WITH_CUDA=OFF)";
        b.library = "none";
#endif
        for (const KernelInfo& k : names.all())
            b.not_provided.push_back({k.name, k.op, name(k.in), why});
        return b;
    }();
    return reg;
}

const BackendRegistry& cuda_emu_registry() {
    static const BackendRegistry reg = [] {
        BackendRegistry b;
        b.backend = "cuda-emu";
        b.library = "CUDA emulated on the CPU (impls/cuda/emu: blocks in turn, threads as fibers)";
        b.kernels = emu_kernels();
        return b;
    }();
    return reg;
}

std::string cuda_benchmarks(std::string* why) {
    const BackendRegistry& b = cuda_registry();
    if (b.kernels.all().empty()) {
        *why = b.not_provided.empty() ? "no cuda kernels" : b.not_provided.front().reason;
        return "";
    }
#if defined(CONFORM_WITH_CUDA)
    return cuda_kernels::benchmark_json();
#else
    *why = "built without CUDA";
    return "";
#endif
}

}  // namespace conform
