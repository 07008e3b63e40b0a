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
// The GPU benchmarks (docs/cuda.md, "Performance") as JSON, or empty with
// *why set when this build or machine cannot run them.
std::string cuda_benchmarks(std::string* why);

// Registration hooks, one per family file (register_<family>), in each
// build's namespace.
#define CONFORM_CUDA_FAMILIES(X) X(activation) X(gated) X(norm) X(softmax) X(rope) X(attention) X(sinkhorn) \
    X(hc_residual) X(int8) X(int8_quant) X(int8_block) X(gdn) X(matmul) X(fp8_gemm) X(fp8_quantize) X(moe) X(sparse) X(residual) X(dsa) X(mla) X(block_sparse) X(nsa) X(compressed_attention) X(moe_layer) X(mutants_activation) X(mutants_norm) X(mutants_softmax) X(mutants_rope)                  \
    X(mutants_attention) X(mutants_sinkhorn) X(mutants_hc_residual) X(mutants_int8) X(mutants_gdn) X(mutants_matmul) X(mutants_fp8) X(mutants_moe) X(mutants_sparse) X(mutants_residual) X(mutants_dsa) X(mutants_mla) X(mutants_block_sparse) X(mutants_nsa) X(mutants_compressed_attention) X(mutants_moe_layer)
#define CONFORM_CUDA_DECLARE_HOOK(family) void register_##family(Registry& r);
namespace cuda_kernels {
CONFORM_CUDA_FAMILIES(CONFORM_CUDA_DECLARE_HOOK)
// Empty when a device is usable; otherwise why not.  library: the device and driver.
std::string probe(std::string* library);
// The GPU benchmarks (bench.cu) as a JSON array; progress on stderr.
std::string benchmark_json();
}  // namespace cuda_kernels
namespace cuda_emu_kernels {
CONFORM_CUDA_FAMILIES(CONFORM_CUDA_DECLARE_HOOK)
}  // namespace cuda_emu_kernels

}  // namespace conform
