// CUDA softmax (docs/softmax.md for the formula, special values and the
// bound): cuda.softmax.<fmt> (an all −∞ row gives 0, the oracle's
// convention) and cuda.softmax.nan_rows.<fmt> (it gives NaN, torch's,
// declared masked_row = nan), for fp32, fp16 and bf16 storage; and
// cuda.lse_merge.<fmt> (softmax.cuh, "lse_merge").
//
// One block per row.  The statistics take one pass: each thread keeps a
// running maximum and sum over its strided entries (the online recurrence,
// the rescale skipped while the maximum is −∞), and the block merges the
// threads' pairs with the same rule through warp shuffles; the output pass
// is exp(x − m) · (1/l).  The terms by expf in float, the sums and rescales
// in double (declared acc fp32: docs/softmax.md's bound with u = 2^-24 and
// e_exp = 4u, CUDA's expf being within 2 ulps), one rounding into the
// storage format.
#include "impls/cuda/cuda.hpp"
#include "impls/cuda/softmax.cuh"

namespace conform::CONFORM_CUDA_NS {
namespace {

template <bool kNanRows>
void add_softmax(Registry& r) {
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = kernel_info("softmax", f, "");
        k.acc = Format::fp32;
        if (kNanRows) make_nan_rows(k, "softmax", f);
        k.description = std::string("online max and sum per thread, merged by warp shuffles; terms by expf, sums in double; "
                                    "exp(x - m) * (1/l) in float, one rounding into ") +
                        name(f) + (kNanRows ? "; an all -inf row gives NaN (masked_row = nan)" : "");
        with_launches(k, [f, kernel = k.name](Launch l) -> KernelFn {
            return [f, kernel, l](const KernelCall& c) { run_softmax<kNanRows>(c, f, kernel.c_str(), l); };
        });
        r.add(std::move(k));
    }
}

}  // namespace

void register_softmax(Registry& r) {
    add_softmax<false>(r);
    add_softmax<true>(r);
    for (Format f : {Format::fp32, Format::fp16, Format::bf16}) {
        KernelInfo k = lse_merge_info(kernel_info("lse_merge", f, ""), f);
        k.description = "a thread per element, grid-stride: lse = hi + log1pf(expf(lo - hi)), o = expf(lse_a - lse) o_a + "
                        "expf(lse_b - lse) o_b in FP32 (the CPU kernel's arithmetic); empty states copied bit for bit; "
                        "lse stored in fp32";
        r.add(std::move(k));
    }
}

}  // namespace conform::CONFORM_CUDA_NS
