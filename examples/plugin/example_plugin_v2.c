/*
 * An example conform plug-in of ABI version 2 (docs/plugins.md, "Version 2"):
 *
 *   example2.attention.o_only  attention with Q in F32, K, V and the mask in
 *       F16, returning o only (lse is declared unwritten), for head
 *       dimensions 4 and 8 only (a domain), key tiles of 4 or 16 (a tunable)
 *   example2.attention.f16_mask  the same with Q, K, V in F32 and the mask
 *       alone in F16 (cases are then generated in F32, the mask kept exact
 *       in F16)
 *   example2.rms_norm.bf16     x and y in BF16, weight in F32, eps outside the
 *       root (a declared convention), an even number of rows (a domain)
 *   example2.l2_norm.fp32      x / max(||x||, eps) (torch's normalize)
 *
 * Each computes in double and rounds once.  A shape outside the declared
 * domain returns an error: conform never calls it with one.
 *
 * Build: cc -std=c99 -shared -fPIC -I<conform>/include example_plugin_v2.c -lm
 * Check: conform check-plugin ./libconform_example_plugin_v2.so
 */
#include <conform/plugin.h>
#include <conform/plugin_tensor.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Element i of a tensor by its dtype, as double. */
static double get(const conform_tensor* t, int64_t i) {
    const int64_t at = elem_offset(t, i);
    switch (t->dtype) {
        case CONFORM_F32: return ((const float*)t->data)[at];
        case CONFORM_F16: {
            const uint16_t h = ((const uint16_t*)t->data)[at];
            const int e = (h >> 10) & 31, m = h & 1023;
            const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
            return (h & 0x8000) ? -v : v;
        }
        case CONFORM_BF16: {
            const uint32_t b = (uint32_t)((const uint16_t*)t->data)[at] << 16;
            float f;
            memcpy(&f, &b, 4);
            return f;
        }
        default: return NAN;
    }
}

/* double -> BF16 pattern, round to nearest even (through float: exact for
 * values a kernel rounds once from double only when float rounding does not
 * double-round; the rounding from double is done here directly). */
static uint16_t to_bf16(double v) {
    if (isnan(v)) return 0x7fc0;
    float f = (float)v; /* nearest float */
    uint32_t b;
    memcpy(&b, &f, 4);
    /* correct a double rounding: decide from v itself at the bf16 midpoint */
    uint32_t lo = b & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    if (isinf(flo)) return (uint16_t)(lo >> 16);
    const double dlo = fabs(v - (double)flo), dhi = fabs((double)fhi - v);
    if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

/* o = softmax(scale q k^T [capped] + mask) v per head; a row that sees no key is 0. */
static int attention(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (n_in != 4 || n_out != 2 || out[1].data != NULL) return 1;
    const conform_tensor *q = &in[0], *k = &in[1], *v = &in[2], *mask = in[3].data ? &in[3] : NULL;
    const int64_t hq = q->shape[0], lq = q->shape[1], d = q->shape[2], hkv = k->shape[0], lk = k->shape[1], dv = v->shape[2];
    if (d != 4 && d != 8) return 3; /* outside the declared domain */
    const double block = conform_param(params, "block", 0);
    if (block != 4 && block != 16) return 4; /* a tile it does not have */
    const double scale0 = conform_param(params, "scale", 0), cap = conform_param(params, "softcap", 0);
    const double scale = scale0 != 0 ? scale0 : 1 / sqrt((double)d);
    const int causal = conform_param(params, "causal", 0) != 0;
    const int64_t window = (int64_t)conform_param(params, "window", 0);
    double* s = malloc(sizeof(double) * (size_t)(lk ? lk : 1));
    if (!s) return 5;
    for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < lq; ++i) {
            const int64_t g = h / (hq / hkv), pos = i + lk - lq;
            double m = -INFINITY;
            int nan = 0;
            for (int64_t j = 0; j < lk; ++j) {
                s[j] = -INFINITY;
                if ((causal || window > 0) && j > pos) continue;
                if (window > 0 && j <= pos - window) continue;
                const double mk = mask ? get(mask, i * lk + j) : 0;
                if (isinf(mk) && mk < 0) continue; /* hidden like a structural mask */
                double dot = 0;
                for (int64_t e = 0; e < d; ++e) dot += get(q, (h * lq + i) * d + e) * get(k, (g * lk + j) * d + e);
                double x = scale * dot;
                if (cap > 0) x = cap * tanh(x / cap);
                s[j] = x + mk;
                if (isnan(s[j])) nan = 1;
                else if (s[j] > m) m = s[j];
            }
            for (int64_t e = 0; e < dv; ++e) {
                double num = 0, den = 0;
                for (int64_t j = 0; j < lk && !nan && m > -INFINITY; ++j) {
                    if (s[j] == -INFINITY) continue;
                    const double w = exp(s[j] - m);
                    den += w;
                    num += w * get(v, (g * lk + j) * dv + e);
                }
                const double o = nan ? NAN : m == -INFINITY ? 0.0 : num / den;
                ((float*)out[0].data)[elem_offset(&out[0], (h * lq + i) * dv + e)] = (float)o;
            }
        }
    free(s);
    return 0;
}

/* y = w x / (sqrt(mean x^2) + eps), rows of BF16, weight F32. */
static int rms_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (n_in != 2 || n_out != 1) return 1;
    if (rows(&in[0]) % 2 != 0) return 3; /* outside the declared domain */
    const double eps = conform_param(params, "eps", 1e-6);
    const int zc = conform_param(params, "zero_centered", 0) != 0;
    const int64_t n = cols(&in[0]);
    for (int64_t r = 0; r < rows(&in[0]); ++r) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += get(&in[0], r * n + i) * get(&in[0], r * n + i);
        const double root = sqrt(s / (double)n) + eps;
        for (int64_t i = 0; i < n; ++i) {
            const double w = get(&in[1], i);
            const double y = (zc ? 1 + w : w) * get(&in[0], r * n + i) / root;
            ((uint16_t*)out[0].data)[elem_offset(&out[0], r * n + i)] = to_bf16(y);
        }
    }
    return 0;
}

/* y = x / max(||x||, eps) per row. */
static int l2_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (n_in != 1 || n_out != 1) return 1;
    const double eps = conform_param(params, "eps", 1e-6);
    const int64_t n = cols(&in[0]);
    for (int64_t r = 0; r < rows(&in[0]); ++r) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += get(&in[0], r * n + i) * get(&in[0], r * n + i);
        const double root = sqrt(s), d = root < eps ? eps : root;
        for (int64_t i = 0; i < n; ++i)
            ((float*)out[0].data)[elem_offset(&out[0], r * n + i)] = (float)(get(&in[0], r * n + i) / d);
    }
    return 0;
}

static const int32_t attention_in[] = {CONFORM_F32, CONFORM_F16, CONFORM_F16, CONFORM_F16};
static const int32_t attention_mask_in[] = {CONFORM_F32, CONFORM_F32, CONFORM_F32, CONFORM_F16};
static const int32_t attention_out[] = {CONFORM_F32, 0}; /* o written, lse not */
static const int32_t rms_in[] = {CONFORM_BF16, CONFORM_F32};
static const int32_t bf16_out[] = {CONFORM_BF16};
static const int32_t f32_in[] = {CONFORM_F32};
static const int32_t f32_out[] = {CONFORM_F32};

static const conform_kernel_v2 kernels[] = {
    {sizeof(conform_kernel_v2), "attention", "example2.attention.o_only", "q F32, k/v/mask F16, o only, in double",
     4, attention_in, 2, attention_out, CONFORM_F64, 0, NULL, "{\"head_dim\":[4,8]}", "{\"block\":[4,16]}", NULL,
     attention},
    {sizeof(conform_kernel_v2), "attention", "example2.attention.f16_mask", "q, k, v F32, mask F16, o only, in double",
     4, attention_mask_in, 2, attention_out, CONFORM_F64, 0, NULL, "{\"head_dim\":[4,8]}", "{\"block\":[4,16]}", NULL,
     attention},
    {sizeof(conform_kernel_v2), "rms_norm", "example2.rms_norm.bf16", "eps outside the root, in double", 2, rms_in, 1,
     bf16_out, CONFORM_F32, 0, "{\"eps_placement\":\"outside\"}", "{\"rows\":{\"multiple_of\":2}}", NULL, NULL,
     rms_norm},
    {sizeof(conform_kernel_v2), "l2_norm", "example2.l2_norm.fp32", "x / max(||x||, eps), in double", 1, f32_in, 1,
     f32_out, CONFORM_F32, 0, "{\"l2_form\":\"max\"}", NULL, NULL, NULL, l2_norm},
};

static const conform_plugin_table_v2 table = {CONFORM_PLUGIN_ABI_VERSION_2, sizeof kernels / sizeof kernels[0], kernels};

const conform_plugin_table_v2* conform_plugin_v2(void) { return &table; }
