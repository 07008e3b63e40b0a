// The CUDA backends (docs/cuda.md): the kernels of impls/cuda/*.cu, built
// once with nvcc (backend "cuda", when the toolkit is found) and once as
// C++ against the CPU emulation (backend "cuda-emu", always).  Kept out of
// builtin_registry(), as oneDNN is: the built-in CPU gate does not change
// with whether a GPU is present.
#pragma once
#include <string>

#include "impls/onednn/onednn.hpp"  // BackendRegistry, NotProvided
#include "impls/registry.hpp"

namespace conform {

// The cuda backend: its kernels when a device is usable here, otherwise
// every one of them not provided, with the reason (the cudaGetDeviceCount
// error, no device, or a build without CUDA).
const BackendRegistry& cuda_registry();
// The same kernels under the CPU emulation.
const BackendRegistry& cuda_emu_registry();

// Registration hooks, one per family file, in each build's namespace.
namespace cuda_kernels {
void register_activation(Registry& r);
void register_gated(Registry& r);
// Empty when a device is usable; otherwise why not.  library: the device and driver.
std::string probe(std::string* library);
}  // namespace cuda_kernels
namespace cuda_emu_kernels {
void register_activation(Registry& r);
void register_gated(Registry& r);
}  // namespace cuda_emu_kernels

}  // namespace conform
