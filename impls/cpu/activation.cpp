// CPU kernels of the activation family (sigmoid, silu, gelu_erf, gelu_tanh,
// softplus, softcap): cpu.simd / cpu.scalar (<= 1 ulp, internal double) and
// the cpu.naive baselines, for fp32, fp16 and bf16.  The math lives in
// simd_math.hpp, the loops in elementwise.hpp.
#include "impls/cpu/elementwise.hpp"
#include "impls/cpu/simd_math.hpp"

namespace conform {
namespace {

using cpu::NaiveMath;

// Naive baselines: the plain formula through NaiveMath, one template for
// the parameterless activations.
template <double (NaiveMath::*Fn)(double) const>
struct NaiveUnary {
    NaiveMath m;
    NaiveUnary(const Params&, Format f) : m{f} {}
    double scalar(double x) const { return (m.*Fn)(x); }
};
using NaiveSigmoid = NaiveUnary<&NaiveMath::sigmoid>;
using NaiveSilu = NaiveUnary<&NaiveMath::silu>;
using NaiveGeluErf = NaiveUnary<&NaiveMath::gelu_erf>;
using NaiveGeluTanh = NaiveUnary<&NaiveMath::gelu_tanh>;
using NaiveSoftplus = NaiveUnary<&NaiveMath::softplus>;
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
