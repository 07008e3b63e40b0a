// The cuda and cuda-emu backend registries (impls/cuda/cuda.hpp).
#include "impls/cuda/cuda.hpp"

namespace conform {
namespace {

// Every family's registration hook, for one build.
template <class Hooks>
Registry all_kernels() {
    Registry r;
    Hooks::activation(r);
    Hooks::gated(r);
    return r;
}

struct EmuHooks {
    static void activation(Registry& r) { cuda_emu_kernels::register_activation(r); }
    static void gated(Registry& r) { cuda_emu_kernels::register_gated(r); }
};
#if defined(CONFORM_WITH_CUDA)
struct CudaHooks {
    static void activation(Registry& r) { cuda_kernels::register_activation(r); }
    static void gated(Registry& r) { cuda_kernels::register_gated(r); }
};
#endif

}  // namespace

const BackendRegistry& cuda_registry() {
    static const BackendRegistry reg = [] {
        BackendRegistry b;
        b.backend = "cuda";
        // The kernel list is the emulation's: the same sources, the same names.
        const Registry names = all_kernels<EmuHooks>();
#if defined(CONFORM_WITH_CUDA)
        const std::string why = cuda_kernels::probe(&b.library);
        if (why.empty()) {
            b.kernels = all_kernels<CudaHooks>();
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
        b.kernels = all_kernels<EmuHooks>();
        return b;
    }();
    return reg;
}

}  // namespace conform
