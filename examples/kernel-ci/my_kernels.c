/*
 * A kernel repository's plug-in, as the conform CI gate checks it
 * (docs/plugins.md, "A CI gate for a kernel repository"): RMSNorm on FP32
 * rows, the sum of squares and the scaling in double (no overflow for any
 * float row), one rounding to float.  It is within conform's derived budget
 * for FP32 accumulation, far below it; the gate
 * fails it when a change makes its error profile materially worse even
 * while it stays within that budget (MY_KERNELS_SLOPPY: the reciprocal
 * root off by two float ulps, half of the budget's allowance for the
 * final roundings).
 */
#include <conform/plugin.h>
#include <conform/plugin_tensor.h>

#include <math.h>

static int rms_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (n_in != 2 || n_out != 1) return 1;
    const double eps = conform_param(params, "eps", 1e-6);
    const int zc = conform_param(params, "zero_centered", 0) != 0;
    const int64_t n = cols(&in[0]);
    for (int64_t r = 0; r < rows(&in[0]); ++r) {
        const float* x = (const float*)in[0].data + row_offset(&in[0], r);
        float* y = (float*)out[0].data + row_offset(&out[0], r);
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += (double)x[i] * x[i];
        double q = 1.0 / sqrt(s / (double)n + eps);
#ifdef MY_KERNELS_SLOPPY
        q *= 1.0 + 0x1p-23; /* a regression that stays within the budget: two float ulps */
#endif
        for (int64_t i = 0; i < n; ++i) {
            const double w = ((const float*)in[1].data)[i * in[1].strides[0]];
            y[i] = (float)((zc ? 1.0 + w : w) * x[i] * q);
        }
    }
    return 0;
}

static const int32_t f32x2[] = {CONFORM_F32, CONFORM_F32};
static const int32_t f32[] = {CONFORM_F32};

static const conform_kernel_v2 kernels[] = {
    {sizeof(conform_kernel_v2), "rms_norm", "my_kernels.rms_norm.fp32", "double accumulation, one rounding", 2, f32x2, 1, f32,
     CONFORM_F32, 0, NULL, NULL, NULL, NULL, rms_norm},
};

static const conform_plugin_table_v2 table = {CONFORM_PLUGIN_ABI_VERSION_2, 1, kernels};

const conform_plugin_table_v2* conform_plugin_v2(void) { return &table; }
