// Outputs of >= 16 MiB are written with streaming stores (impls/cpu/
// streaming.hpp): the values must not change, only how they are written.
//   * norm kernels: cpu.simd on a 1024 x 8192 tensor (16 MiB in 16-bit, 32 MiB
//     in fp32: streamed) is bit-identical to cpu.scalar, as docs/norm.md
//     promises for every size;
//   * elementwise kernels (activation, gated): cpu.simd on the whole tensor
//     (streamed, with the fp32 path's aligned head peeled off) is
//     bit-identical to the same kernel called row by row (32 KiB or less per
//     call: plain stores).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "impls/registry.hpp"
#include "impls/cpu/streaming.hpp"
#include "numerics/format.hpp"
#include "numerics/tensor.hpp"
#include "rows_testing.hpp"

namespace streaming_test {  // this file's own names: the tests build in unity batches (CMakeLists.txt)

using namespace conform;

namespace {

constexpr std::int64_t kRows = 1024, kCols = 8192;

// values in [lo, hi) (deterministic): in range of every float-float path,
// so the per-block path choice cannot depend on where the blocks start.
Tensor uniform(Format f, std::int64_t rows, std::int64_t cols, unsigned seed, double lo = -4, double hi = 4) {
    Tensor t(f, {rows, cols});
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    for (std::int64_t i = 0; i < rows * cols; ++i) t.set_value(i, d(gen));
    return t;
}

bool same_bits(const Tensor& a, const Tensor& b) { return std::memcmp(a.data(), b.data(), a.bytes()) == 0; }

// A one-row view of row r of t.
TensorView row_view(const Tensor& t, std::int64_t r) {
    TensorView v = t.view();
    v.data = static_cast<char*>(v.data) + r * kCols * static_cast<std::int64_t>(info(t.format()).bytes);
    v.shape[0] = 1;
    return v;
}

Tensor run_kernel(const std::string& name, const std::vector<Tensor>& in, const Params& p) {
    const KernelInfo& k = *builtin_registry().find(name);
    Tensor out(k.out, {kRows, kCols});
    KernelCall call{p, {}, {out.view()}};
    for (const Tensor& t : in) call.in.push_back(t.view());
    k.fn(call);
    return out;
}

TEST(Streaming, LargeOutputsAreStreamed) {
    for (Format f : {Format::fp32, Format::bf16, Format::fp16})
        EXPECT_TRUE(cpu::streaming_output(Tensor(f, {kRows, kCols}).view())) << name(f);
    EXPECT_FALSE(cpu::streaming_output(Tensor(Format::fp32, {1, kCols}).view()));
}

TEST(Streaming, NormSimdBitIdenticalToScalar) {
    for (const std::string op : {"rms_norm", "layer_norm", "l2_norm"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
            const KernelInfo& k = *builtin_registry().find("cpu.simd." + op + "." + name(f));
            const OpSpec& spec = *find_op(op);
            std::vector<Tensor> in;
            in.push_back(uniform(f, kRows, kCols, 1));
            for (std::size_t i = 1; i < spec.inputs.size(); ++i) in.push_back(uniform(f, 1, kCols, 1 + i));
            const Params p = Params::defaults(spec);
            const Tensor simd = run_kernel(k.name, in, p), scalar = run_kernel("cpu.scalar." + op + "." + name(f), in, p);
            EXPECT_TRUE(same_bits(simd, scalar)) << k.name;
        }
}

TEST(Streaming, ElementwiseWholeTensorEqualsRowByRow) {
    for (const std::string op : {"sigmoid", "silu", "gelu_tanh", "softcap", "swiglu", "swiglu_clamp"})
        for (Format f : {Format::fp32, Format::bf16}) {
            const std::string kernel = "cpu.simd." + op + "." + name(f);
            const KernelInfo& k = *builtin_registry().find(kernel);
            const OpSpec& spec = *find_op(op);
            const Params p = Params::defaults(spec);
            std::vector<Tensor> in;
            for (std::size_t i = 0; i < spec.inputs.size(); ++i) in.push_back(uniform(f, kRows, kCols, 7 + i));
            const Tensor whole = run_kernel(kernel, in, p);
            Tensor rows(k.out, {kRows, kCols});
            for (std::int64_t r = 0; r < kRows; ++r) {
                KernelCall call{p, {}, {row_view(rows, r)}};
                for (const Tensor& t : in) call.in.push_back(row_view(t, r));
                k.fn(call);
            }
            EXPECT_TRUE(same_bits(whole, rows)) << kernel;
        }
}

// The norm kernels take rows in groups and scale them block by block of
// columns, each row's blocks ending on its y's 64-byte lines (norm_rows.hpp);
// rows needing the rescue go whole.  None of that may change a value: a
// streamed tensor of rows 16400 bytes long (starting 0, 16, 32 and 48 bytes
// past a line in turn) equals the same rows run one by one, each a call of
// its own (not streamed, a group of one, written to a line-aligned row).
// Rows 5 and 6 hold tiny values (fp32/bf16: rescued) and a NaN, row 9 an
// Inf; columns 64-95 give subnormal outputs (rms_norm, layer_norm).
TEST(Streaming, NormGroupsEqualRowByRow) {
    constexpr std::int64_t rows = 1100, cols = 8200;
    for (const std::string op : {"rms_norm", "layer_norm", "l2_norm"})
        for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
            const std::string kernel = "cpu.simd." + op + "." + name(f);
            const KernelInfo& k = *builtin_registry().find(kernel);
            const OpSpec& spec = *find_op(op);
            const Params p = Params::defaults(spec);
            std::vector<Tensor> in{uniform(f, rows, cols, 11)};
            for (std::int64_t j = 0; j < cols; ++j) in[0].set_value(5 * cols + j, std::ldexp(1.0 + j % 7, -70));
            in[0].set_value(6 * cols + 3, std::nan(""));
            in[0].set_value(9 * cols, INFINITY);
            for (std::size_t i = 1; i < spec.inputs.size(); ++i) in.push_back(uniform(f, 1, cols, 12 + i));
            // Columns 64-95 of w are tiny (b zero there): rms_norm and
            // layer_norm give subnormal outputs, which bf16 must round by the
            // integer path (vcvtne2ps2bf16 reads them as zero).  Seen to fail
            // when that path swapped the halves of a 32-value step.
            for (std::int64_t j = 64; j < 96 && op != "l2_norm"; ++j) {
                in[1].set_value(j, std::ldexp(1.0, -130));
                if (op == "layer_norm") in[2].set_value(j, 0.0);
            }
            ASSERT_TRUE(cpu::streaming_output(in[0].view())) << kernel;  // the output has x's size and format
            EXPECT_EQ(conform::testing::rows_unlike_alone(k, in, p), std::vector<std::int64_t>{})
                << kernel << ": rows differing from the same row run alone";
        }
}

}  // namespace

}  // namespace streaming_test
