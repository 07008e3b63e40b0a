#include "model/dense_gemm.hpp"

#include <string>

#include "impls/cpu/isa.hpp"

namespace conform::model {

// The three builds (model/gemm/dense_gemm_*.cpp).
#define CONFORM_GEMM_DECLARE(ns)                                                                          \
    namespace ns {                                                                                        \
    void gemm_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N); \
    void gemm_xwt(const float* x, const float* w, float* y, std::int64_t T, std::int64_t K, std::int64_t N);    \
    void gemm_abs_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N); \
    }
CONFORM_GEMM_DECLARE(baseline)
CONFORM_GEMM_DECLARE(avx2)
CONFORM_GEMM_DECLARE(avx512)
#undef CONFORM_GEMM_DECLARE

namespace {

enum class Isa { baseline, avx2, avx512 };
constexpr const char* kIsaNames[] = {"baseline", "avx2", "avx512"};  // by Isa

Isa isa() {
    static const Isa i = cpu::has_avx512() ? Isa::avx512 : cpu::has_avx2() ? Isa::avx2 : Isa::baseline;
    return i;
}

template <class T>
void dispatch(Isa i, const T* x, const T* w, T* y, std::int64_t rows, std::int64_t k, std::int64_t n) {
    switch (i) {
        case Isa::avx512: return avx512::gemm_xwt(x, w, y, rows, k, n);
        case Isa::avx2: return avx2::gemm_xwt(x, w, y, rows, k, n);
        case Isa::baseline: return baseline::gemm_xwt(x, w, y, rows, k, n);
    }
}

}  // namespace

void gemm_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N) {
    dispatch(isa(), x, w, y, T, K, N);
}
void gemm_xwt(const float* x, const float* w, float* y, std::int64_t T, std::int64_t K, std::int64_t N) {
    dispatch(isa(), x, w, y, T, K, N);
}
void gemm_abs_xwt(const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N) {
    switch (isa()) {
        case Isa::avx512: return avx512::gemm_abs_xwt(x, w, y, T, K, N);
        case Isa::avx2: return avx2::gemm_abs_xwt(x, w, y, T, K, N);
        case Isa::baseline: return baseline::gemm_abs_xwt(x, w, y, T, K, N);
    }
}

void gemm_xwt(const char* name, const double* x, const double* w, double* y, std::int64_t T, std::int64_t K, std::int64_t N) {
    const std::string n = name;
    dispatch(n == "avx512" ? Isa::avx512 : n == "avx2" ? Isa::avx2 : Isa::baseline, x, w, y, T, K, N);
}

const char* gemm_isa() { return kIsaNames[static_cast<int>(isa())]; }

}  // namespace conform::model
