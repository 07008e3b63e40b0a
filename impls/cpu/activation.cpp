// CPU kernels of the activation family (sigmoid, silu, gelu_erf, gelu_tanh,
// softplus, softcap): cpu.simd / cpu.scalar (<= 1 ulp, internal double) and
// the cpu.naive baselines, for fp32, fp16 and bf16.  The math lives in
// simd_math.hpp, the loops in elementwise.hpp.
#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform {
namespace {

using cpu::NaiveMath;

// Naive baselines: the plain formula through NaiveMath.
struct NaiveSigmoid {
    NaiveMath m;
    NaiveSigmoid(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return m.sigmoid(x); }
};
struct NaiveSilu {
    NaiveMath m;
    NaiveSilu(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return m.silu(x); }
};
struct NaiveGeluErf {
    NaiveMath m;
    NaiveGeluErf(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return m.gelu_erf(x); }
};
struct NaiveGeluTanh {
    NaiveMath m;
    NaiveGeluTanh(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return m.gelu_tanh(x); }
};
struct NaiveSoftplus {
    NaiveMath m;
    NaiveSoftplus(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return m.softplus(x); }
};
struct NaiveSoftcap {
    NaiveMath m;
    double beta;
    NaiveSoftcap(const Params& p, Format f) : m{f}, beta(p.get("beta", 30)) {}
    double scalar(double x) const { return m.softcap(x, beta); }
};

}  // namespace

void register_cpu_activation(Registry& r) {
    using namespace cpu;
    register_op<1, SigmoidFn, NaiveSigmoid>(r, "sigmoid");
    register_op<1, SiluFn, NaiveSilu>(r, "silu");
    register_op<1, GeluErfFn, NaiveGeluErf>(r, "gelu_erf");
    register_op<1, GeluTanhFn, NaiveGeluTanh>(r, "gelu_tanh");
    register_op<1, SoftplusFn, NaiveSoftplus>(r, "softplus");
    register_op<1, SoftcapFn, NaiveSoftcap>(r, "softcap");
}

}  // namespace conform
