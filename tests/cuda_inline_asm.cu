// Every inline PTX instruction of impls/cuda/mma.cuh and cp_async.cuh in one kernel, compiled
// to PTX for the CTest check cuda.ptxas_inline_asm, which assembles it for
// sm_90 with ptxas.  Where no GPU is present the build emits PTX only
// (scripts/build: ptxas would make machine code nothing here can run), and
// nvcc's front end passes asm strings through unread: this check is what
// still finds a wrong mnemonic, operand count or type in them.
#include <cstdint>

#include "impls/cuda/cp_async.cuh"
#include "impls/cuda/mma.cuh"

namespace conform::cuda_kernels {

__global__ void every_inline_asm(const std::uint32_t* a, const std::uint32_t* b, float* d, int* di) {
    float c[4] = {d[0], d[1], d[2], d[3]};
    mma16816<__half>(c, a, b, c);
    mma16816<__nv_bfloat16>(c, a, b, c);
    int ci[4] = {di[0], di[1], di[2], di[3]};
    mma16832_s8<false>(ci, a, b, ci);
    mma16832_s8<true>(ci, a, b, ci);
    __shared__ __align__(16) unsigned short tile[32][8];
    if (threadIdx.x < 32) cp_async16(&tile[threadIdx.x][0], a + 4 * threadIdx.x, threadIdx.x < 16);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    std::uint32_t r[4], rt[4];
    ldmatrix_x4<false>(r, &tile[threadIdx.x % 32][0]);
    ldmatrix_x4<true>(rt, &tile[threadIdx.x % 32][0]);
    for (int i = 0; i < 4; ++i) d[i] = c[i] + static_cast<float>(r[i] ^ rt[i]), di[i] = ci[i];
}

}  // namespace conform::cuda_kernels
