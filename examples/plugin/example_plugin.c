/*
 * An example conform plug-in (docs/plugins.md): rms_norm, silu and softmax
 * on FP32 tensors.  Each element is computed in double and rounded to float
 * once, which is well within the suite's budgets, and the special values
 * follow the oracle's tables (docs/norm.md, docs/activation.md,
 * docs/softmax.md).
 *
 * Build: cc -std=c99 -shared -fPIC -I<conform>/include example_plugin.c -lm
 * Check: conform check-plugin ./libconform_example_plugin.so
 */
#include <conform/plugin.h>

#include <math.h>

#include <conform/plugin_tensor.h>

static int same_rows(const conform_tensor* a, const conform_tensor* b) {
    if (a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; ++d)
        if (a->shape[d] != b->shape[d]) return 0;
    return a->rank == 0 || (a->strides[a->rank - 1] == 1 && b->strides[b->rank - 1] == 1);
}

static int f32_only(const conform_tensor* in, int n_in, const conform_tensor* out, int n_out) {
    for (int i = 0; i < n_in; ++i)
        if (in[i].dtype != CONFORM_F32) return 0;
    for (int i = 0; i < n_out; ++i)
        if (out[i].dtype != CONFORM_F32) return 0;
    return 1;
}

/* y = w * x / sqrt(mean(x^2) + eps); zero_centered: (1 + w). */
static int rms_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (n_in != 2 || n_out != 1 || !f32_only(in, n_in, out, n_out) || !same_rows(&in[0], &out[0])) return 1;
    const double eps = conform_param(params, "eps", 1e-6);
    const int zero_centered = conform_param(params, "zero_centered", 0) != 0;
    const int64_t n = cols(&in[0]);
    if (in[1].rank != 1 || in[1].shape[0] != n) return 2;
    const float* w = (const float*)in[1].data;
    for (int64_t r = 0; r < rows(&in[0]); ++r) {
        const float* x = (const float*)in[0].data + row_offset(&in[0], r);
        float* y = (float*)out[0].data + row_offset(&out[0], r);
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += (double)x[i] * x[i];
        const double root = sqrt(s / (double)n + eps);
        for (int64_t i = 0; i < n; ++i) {
            const double wi = zero_centered ? 1.0 + w[i * in[1].strides[0]] : w[i * in[1].strides[0]];
            y[i] = (float)(wi * x[i] / root);
        }
    }
    return 0;
}

/* y = x * sigmoid(x) = x / (1 + exp(-x)); the limit at -Inf is -0. */
static int silu(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)params;
    if (n_in != 1 || n_out != 1 || !f32_only(in, n_in, out, n_out) || numel(&in[0]) != numel(&out[0])) return 1;
    for (int64_t i = 0; i < numel(&in[0]); ++i) {
        const double x = ((const float*)in[0].data)[elem_offset(&in[0], i)];
        ((float*)out[0].data)[elem_offset(&out[0], i)] = (float)(x == -INFINITY ? -0.0 : x / (1.0 + exp(-x)));
    }
    return 0;
}

/* y = exp(x - max) / sum(exp(x - max)) per row.  A NaN or +Inf makes the row
 * NaN; a row of only -Inf is the empty distribution: 0 everywhere. */
static int softmax(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)params;
    if (n_in != 1 || n_out != 1 || !f32_only(in, n_in, out, n_out) || !same_rows(&in[0], &out[0])) return 1;
    const int64_t n = cols(&in[0]);
    for (int64_t r = 0; r < rows(&in[0]); ++r) {
        const float* x = (const float*)in[0].data + row_offset(&in[0], r);
        float* y = (float*)out[0].data + row_offset(&out[0], r);
        double m = -INFINITY, sum = 0;
        int nan = 0;
        for (int64_t i = 0; i < n; ++i) {
            nan |= isnan(x[i]) || x[i] == INFINITY;
            if (x[i] > m) m = x[i];
        }
        for (int64_t i = 0; i < n && !nan && m > -INFINITY; ++i) sum += exp(x[i] - m);
        for (int64_t i = 0; i < n; ++i)
            y[i] = nan ? NAN : m == -INFINITY ? 0.0f : (float)(exp(x[i] - m) / sum);
    }
    return 0;
}

static const conform_kernel kernels[] = {
    {"rms_norm", "example.rms_norm.fp32", CONFORM_F32, CONFORM_F32, CONFORM_F32, 0, NULL, NULL,
     "double accumulation, one rounding", rms_norm},
    {"silu", "example.silu.fp32", CONFORM_F32, CONFORM_F32, CONFORM_F32, 0, NULL, NULL,
     "x / (1 + exp(-x)) in double", silu},
    {"softmax", "example.softmax.fp32", CONFORM_F32, CONFORM_F32, CONFORM_F32, 0, NULL, NULL,
     "max-shifted exp in double", softmax},
};

static const conform_plugin table = {CONFORM_PLUGIN_ABI_VERSION, sizeof kernels / sizeof kernels[0], kernels};

const conform_plugin* conform_plugin_v1(void) { return &table; }
