// The norm family's kernel and host call (norm.cu registers them; the GPU
// mutants of impls/mutants/cuda_norm.cu instantiate them with one bug).
#pragma once
#include <algorithm>

#include "impls/cuda/elementwise.cuh"
#include "impls/cuda/reduce.cuh"

namespace conform::CONFORM_CUDA_NS {


enum class Norm { rms, layer, l2 };

struct RowArgs {
    long long rows = 0;
    int n = 0;
    double eps = 0;
    bool zero_centered = false;
};

template <Norm Op, class S, class Bug = NoBug>
__global__ void norm_rows(const S* __restrict__ x, const S* __restrict__ w, const S* __restrict__ b, S* __restrict__ y,
                          RowArgs a) {
    for (long long r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const S* xr = x + r * a.n;
        S* yr = y + r * a.n;
        // BF16 rows are read again in each pass: held in registers they ran
        // slower on the H200 (rms_norm 0.58 of the copy against 0.76; cause
        // not established), FP32 and FP16 rows faster (docs/cuda.md).
        RowRegs<S, 8, !std::is_same_v<S, __nv_bfloat16>> row;
        row.load_row(xr, a.n);
        double q, mu = 0;
        if (Op == Norm::layer) {
            double s = 0;
            row.read(xr, a.n, [&](int, double v) { s += v; });
            mu = block_reduce<Bug>(s, Add{}, 0.0) / a.n;
            double v2 = 0;
            row.read(xr, a.n, [&](int, double v) { v2 += (v - mu) * (v - mu); });
            q = 1.0 / sqrt(block_reduce<Bug>(v2, Add{}, 0.0) / a.n + a.eps);
        } else {
            double s = 0;
            row.read(xr, a.n, [&](int, double v) {
                s += v * v;
                if (Bug::kFp16Sum) s = load(store<__half>(s));
            });
            const double t = block_reduce<Bug>(s, Add{}, 0.0);
            q = 1.0 / sqrt((Op == Norm::rms ? t / a.n : t) + a.eps);
        }
        row.map(xr, yr, a.n, [&](int i, double v) {
            if (Op == Norm::l2) return v * q;
            if (Op == Norm::rms) return v * q * (a.zero_centered && !Bug::kPlainWeight ? 1.0 + load(w[i]) : load(w[i]));
            return (v - mu) * q * load(w[i]) + load(b[i]);
        });
    }
}

// Threads per block: the row length rounded up to a warp, at most the launch's.
inline unsigned threads_for(int n, const Launch& l) {
    return static_cast<unsigned>(std::clamp((n + 31) / 32 * 32, 32, static_cast<int>(l.threads)));
}

template <Norm Op, class S, class Bug = NoBug>
void launch_norm(const S* x, const S* w, const S* b, S* y, const RowArgs& a, const Launch& l, cudaStream_t s) {
    auto* kernel_fn = norm_rows<Op, S, Bug>;
    const unsigned blocks = static_cast<unsigned>(std::min<long long>(a.rows, l.max_blocks));
    CONFORM_LAUNCH(kernel_fn, dim3(blocks), dim3(threads_for(a.n, l)), 0, s)(x, w, b, y, a);
}

template <Norm Op, class S, class Bug = NoBug>
void run_norm_as(const KernelCall& c, const char* kernel, const Launch& l) {
    const TensorView& xv = c.in[0];
    RowArgs a;
    a.n = static_cast<int>(xv.cols());
    a.rows = xv.rows();
    a.eps = c.params.get("eps", Op == Norm::layer ? 1e-5 : 1e-6);
    a.zero_centered = c.params.get("zero_centered", 0) != 0;
    const std::size_t bytes = static_cast<std::size_t>(xv.numel()) * sizeof(S);
    const std::size_t row_bytes = static_cast<std::size_t>(a.n) * sizeof(S);
    Stream s(kernel);
    DeviceBuffer x(bytes, kernel), y(bytes, kernel), w(row_bytes, kernel), b(row_bytes, kernel);
    poison(y, s.get(), kernel);
    upload(xv, x, s.get(), kernel);
    if (Op != Norm::l2) upload(c.in[1], w, s.get(), kernel);
    if (Op == Norm::layer) upload(c.in[2], b, s.get(), kernel);
    if (a.rows > 0 && a.n > 0) {
        launch_norm<Op, S, Bug>(x.as<S>(), w.as<S>(), b.as<S>(), y.as<S>(), a, l, s.get());
        check_launch(s.get(), kernel);
    }
    download(y, c.out[0], s.get(), kernel);
}

template <Norm Op, class Bug = NoBug>
void run_norm(const KernelCall& c, Format f, const char* kernel, const Launch& l = {}) {
    by_storage(f, [&](auto s) { run_norm_as<Op, decltype(s), Bug>(c, kernel, l); });
}

}  // namespace conform::CONFORM_CUDA_NS
