// Whether this machine can run the cuda backend, and what it runs on
// (compiled with nvcc only: the emulation needs no probe).
#include <cuda_runtime.h>

#include <string>

#include "impls/cuda/cuda.hpp"

namespace conform::cuda_kernels {

std::string probe(std::string* library) {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    *library = "CUDA runtime " + version(runtime) + (driver ? ", driver API " + version(driver) : ", no driver");
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear it: later calls must not report it again
        return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    }
    if (n == 0) return "no CUDA device";
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        *library += std::string(", device 0: ") + p.name + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) +
                    ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB)";
    return "";
}

}  // namespace conform::cuda_kernels
