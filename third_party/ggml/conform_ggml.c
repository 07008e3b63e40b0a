/*
 * ggml's CPU kernels as a conform plug-in (ABI v2, docs/plugins.md): each
 * kernel builds the one-op graph a llama.cpp model builds (ggml_rms_norm then
 * ggml_mul by the weight, ggml_flash_attn_ext with an F16 KV cache and an F16
 * mask, ...), computes it on the CPU backend with one thread, and copies the
 * result out.  What ggml computes is judged, not what it should compute: the
 * verdicts are in docs/third_party.md, "ggml (CPU)".
 *
 * Build and run: bash scripts/ggml-check (it fetches ggml, builds it and
 * this file, and runs conform check-plugin on the library).
 */
#include <conform/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <conform/plugin_tensor.h>

#include "ggml-cpu.h"
#include "ggml.h"

/* ---- one graph per call ------------------------------------------------- */

/* A context holding every tensor of one small graph: mem_size covers the
 * tensors' data (the bytes given) with room for the graph and headers. */
static struct ggml_context* context(size_t bytes) {
    struct ggml_init_params p = {bytes + 16 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20), NULL, 0};
    return ggml_init(p);
}

static int compute(struct ggml_context* ctx, struct ggml_tensor* out) {
    struct ggml_cgraph* gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    return ggml_graph_compute_with_ctx(ctx, gf, 1) == GGML_STATUS_SUCCESS ? 0 : 3;
}

/* A dense [rows, cols] F32 tensor from a conform view (ne0 = cols). */
static struct ggml_tensor* load_rows(struct ggml_context* ctx, const conform_tensor* t) {
    const int64_t n = cols(t), r = rows(t);
    struct ggml_tensor* g = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, r);
    for (int64_t i = 0; i < r; ++i)
        memcpy((float*)g->data + i * n, (const float*)t->data + row_offset(t, i), (size_t)n * sizeof(float));
    return g;
}

static void store_rows(const struct ggml_tensor* g, conform_tensor* t) {
    const int64_t n = cols(t), r = rows(t);
    for (int64_t i = 0; i < r; ++i)
        memcpy((float*)t->data + row_offset(t, i), (const float*)g->data + i * n, (size_t)n * sizeof(float));
}

/* A weight vector; `plus_one`: stored as 1 + w, as llama.cpp's converter
 * stores a zero-centred (Gemma) norm weight in the GGUF file. */
static struct ggml_tensor* load_vector(struct ggml_context* ctx, const conform_tensor* t, int plus_one) {
    struct ggml_tensor* g = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, t->shape[0]);
    for (int64_t i = 0; i < t->shape[0]; ++i)
        ((float*)g->data)[i] = (float)plus_one + ((const float*)t->data)[i * t->strides[0]];
    return g;
}

static size_t bytes_of(const conform_tensor* in, int n_in) {
    size_t b = 0;
    for (int i = 0; i < n_in; ++i) b += (size_t)numel(&in[i]) * sizeof(float);
    return 4 * b;
}

/* ---- row ops: norms, softmax, activations, GLUs ------------------------- */

/* rms_norm: ggml_rms_norm (x / sqrt(mean x^2 + eps)), then ggml_mul by w (by
 * 1 + w, formed in F32 beforehand, for zero_centered). */
static int rms_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_out;
    struct ggml_context* ctx = context(bytes_of(in, n_in));
    struct ggml_tensor* x = load_rows(ctx, &in[0]);
    const int plus_one = conform_param(params, "zero_centered", 0) != 0;
    struct ggml_tensor* y = ggml_mul(ctx, ggml_rms_norm(ctx, x, (float)conform_param(params, "eps", 1e-6)),
                                     load_vector(ctx, &in[1], plus_one));
    const int rc = compute(ctx, y);
    if (rc == 0) store_rows(y, &out[0]);
    ggml_free(ctx);
    return rc;
}

/* layer_norm: ggml_norm ((x - mean) / sqrt(var + eps)), ggml_mul by w, ggml_add b. */
static int layer_norm(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_out;
    struct ggml_context* ctx = context(bytes_of(in, n_in));
    struct ggml_tensor* y = ggml_norm(ctx, load_rows(ctx, &in[0]), (float)conform_param(params, "eps", 1e-5));
    y = ggml_add(ctx, ggml_mul(ctx, y, load_vector(ctx, &in[1], 0)), load_vector(ctx, &in[2], 0));
    const int rc = compute(ctx, y);
    if (rc == 0) store_rows(y, &out[0]);
    ggml_free(ctx);
    return rc;
}

/* softcap: llama.cpp's final logit softcapping (Gemma 2), ggml_scale by
 * 1/c, ggml_tanh, ggml_scale by c. */
static int softcap(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_out;
    struct ggml_context* ctx = context(bytes_of(in, n_in));
    const float c = (float)conform_param(params, "beta", 30);
    struct ggml_tensor* y = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, load_rows(ctx, &in[0]), 1.0f / c)), c);
    const int rc = compute(ctx, y);
    if (rc == 0) store_rows(y, &out[0]);
    ggml_free(ctx);
    return rc;
}

typedef struct ggml_tensor* (*unary_fn)(struct ggml_context*, struct ggml_tensor*);
typedef struct ggml_tensor* (*binary_fn)(struct ggml_context*, struct ggml_tensor*, struct ggml_tensor*);

static int unary(unary_fn f, const conform_tensor* in, int n_in, conform_tensor* out) {
    struct ggml_context* ctx = context(bytes_of(in, n_in));
    struct ggml_tensor* y = f(ctx, load_rows(ctx, &in[0]));
    const int rc = compute(ctx, y);
    if (rc == 0) store_rows(y, &out[0]);
    ggml_free(ctx);
    return rc;
}

static int binary(binary_fn f, const conform_tensor* in, int n_in, conform_tensor* out) {
    struct ggml_context* ctx = context(bytes_of(in, n_in));
    struct ggml_tensor* y = f(ctx, load_rows(ctx, &in[0]), load_rows(ctx, &in[1]));
    const int rc = compute(ctx, y);
    if (rc == 0) store_rows(y, &out[0]);
    ggml_free(ctx);
    return rc;
}

#define UNARY(name, f)                                                                                     \
    static int name(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) { \
        (void)p, (void)n_out;                                                                              \
        return unary(f, in, n_in, out);                                                                    \
    }
#define BINARY(name, f)                                                                                    \
    static int name(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) { \
        (void)p, (void)n_out;                                                                              \
        return binary(f, in, n_in, out);                                                                   \
    }
UNARY(softmax, ggml_soft_max)
UNARY(silu, ggml_silu)
UNARY(gelu_tanh, ggml_gelu)
UNARY(gelu_erf, ggml_gelu_erf)
UNARY(softplus, ggml_softplus)
BINARY(swiglu, ggml_swiglu_split)
BINARY(geglu_tanh, ggml_geglu_split)
BINARY(geglu_erf, ggml_geglu_erf_split)

/* ---- rope ---------------------------------------------------------------- */

/* x [H, L, D] -> ggml's [D, H, L] (ne0 = D, ne1 = H, ne2 = L), positions
 * offset + l (I32), GGML_ROPE_TYPE_NORMAL for interleaved pairs, NEOX for
 * the half split; freq_base = b s (conform's NTK scale), freq_scale = 1 /
 * factor under linear scaling (the domain allows none and linear). */
static int rope(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_in, (void)n_out;
    const conform_tensor* x = &in[0];
    const int64_t H = x->shape[0], L = x->shape[1], D = x->shape[2];
    const int64_t r = (int64_t)conform_param(params, "rotary_dim", 0) ? (int64_t)conform_param(params, "rotary_dim", 0) : D;
    const int mode = conform_param(params, "pairing", 0) != 0 ? GGML_ROPE_TYPE_NEOX : 0;
    const double offset = conform_param(params, "offset", 0);
    const float base = (float)(conform_param(params, "base", 10000) * conform_param(params, "ntk_scale", 1));
    const float scale = conform_param(params, "scaling", 0) == 1 ? (float)(1 / conform_param(params, "factor", 1)) : 1.0f;
    struct ggml_context* ctx = context((size_t)(4 * H * L * D + L) * sizeof(float));
    struct ggml_tensor* a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, H, L);
    struct ggml_tensor* pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, L);
    for (int64_t l = 0; l < L; ++l) ((int32_t*)pos->data)[l] = (int32_t)(offset + (double)l);
    for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
            for (int64_t d = 0; d < D; ++d)
                ((float*)a->data)[(l * H + h) * D + d] =
                    ((const float*)x->data)[h * x->strides[0] + l * x->strides[1] + d * x->strides[2]];
    struct ggml_tensor* y = ggml_rope_ext(ctx, a, pos, NULL, (int)r, mode, 0, base, scale, 0.0f,
                                          (float)conform_param(params, "attention_factor", 1), 0.0f, 0.0f);
    const int rc = compute(ctx, y);
    if (rc == 0)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t l = 0; l < L; ++l)
                for (int64_t d = 0; d < D; ++d)
                    ((float*)out[0].data)[h * out[0].strides[0] + l * out[0].strides[1] + d * out[0].strides[2]] =
                        ((const float*)y->data)[(l * H + h) * D + d];
    ggml_free(ctx);
    return rc;
}

/* ---- attention: ggml_flash_attn_ext ------------------------------------- */

/* q [Hq, Lq, D] F32 -> [D, Lq, Hq]; k, v [Hkv, Lk, .] in `kv` (F16 as
 * llama.cpp's default KV cache, or F32) -> [., Lk, Hkv]; the mask F16
 * [Lk, Lq] as llama.cpp builds it: -inf where the causal or window
 * structure hides a key, plus the case's additive mask; o from the permuted
 * result [Dv, Hq, Lq]; lse is not written (ggml returns none). */
/* One element of an F32 or F16 view. */
static float element(const conform_tensor* t, int64_t off) {
    return t->dtype == CONFORM_F16 ? ggml_fp16_to_fp32(((const ggml_fp16_t*)t->data)[off]) : ((const float*)t->data)[off];
}

static float mask_value(const char* params, const conform_tensor* mask, int64_t i, int64_t j, int64_t lq, int64_t lk) {
    const int64_t pos = i + lk - lq, window = (int64_t)conform_param(params, "window", 0);
    if ((conform_param(params, "causal", 0) != 0 || window > 0) && j > pos) return -INFINITY;
    if (window > 0 && j <= pos - window) return -INFINITY;
    return mask && mask->data ? element(mask, i * mask->strides[0] + j * mask->strides[1]) : 0.0f;
}

static void load_heads(struct ggml_tensor* g, const conform_tensor* t) {
    const int64_t H = t->shape[0], L = t->shape[1], D = t->shape[2];
    for (int64_t h = 0; h < H; ++h)
        for (int64_t l = 0; l < L; ++l)
            for (int64_t d = 0; d < D; ++d) {
                const float v = element(t, h * t->strides[0] + l * t->strides[1] + d * t->strides[2]);
                const int64_t at = (h * L + l) * D + d;
                if (g->type == GGML_TYPE_F16) ((ggml_fp16_t*)g->data)[at] = ggml_fp32_to_fp16(v);
                else ((float*)g->data)[at] = v;
            }
}

static int attention_kv(enum ggml_type kv, const char* params, const conform_tensor* in, conform_tensor* out) {
    const conform_tensor *q = &in[0], *k = &in[1], *v = &in[2], *mask = &in[3];
    const int64_t Hq = q->shape[0], Lq = q->shape[1], D = q->shape[2], Hkv = k->shape[0], Lk = k->shape[1], Dv = v->shape[2];
    double scale = conform_param(params, "scale", 0);
    if (scale == 0) scale = 1 / sqrt((double)D);
    struct ggml_context* ctx = context((size_t)(4 * (Hq * Lq * (D + Dv) + Hkv * Lk * (D + Dv) + Lq * Lk)) * sizeof(float));
    struct ggml_tensor* gq = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, Lq, Hq);
    struct ggml_tensor* gk = ggml_new_tensor_3d(ctx, kv, D, Lk, Hkv);
    struct ggml_tensor* gv = ggml_new_tensor_3d(ctx, kv, Dv, Lk, Hkv);
    struct ggml_tensor* gm = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, Lk, Lq);
    load_heads(gq, q), load_heads(gk, k), load_heads(gv, v);
    for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < Lk; ++j) ((ggml_fp16_t*)gm->data)[i * Lk + j] = ggml_fp32_to_fp16(mask_value(params, mask, i, j, Lq, Lk));
    struct ggml_tensor* o = ggml_flash_attn_ext(ctx, gq, gk, gv, gm, (float)scale, 0.0f,
                                                (float)conform_param(params, "softcap", 0));
    const int rc = compute(ctx, o);
    if (rc == 0)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Lq; ++i)
                for (int64_t d = 0; d < Dv; ++d)
                    ((float*)out[0].data)[h * out[0].strides[0] + i * out[0].strides[1] + d * out[0].strides[2]] =
                        ((const float*)o->data)[(i * Hq + h) * Dv + d];
    ggml_free(ctx);
    return rc;
}

static int attention_f16kv(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_in, (void)n_out;
    return attention_kv(GGML_TYPE_F16, p, in, out);
}

static int attention_f32kv(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)n_in, (void)n_out;
    return attention_kv(GGML_TYPE_F32, p, in, out);
}

/* ---- the table ------------------------------------------------------------ */

static const int32_t F32x1[] = {CONFORM_F32}, F32x2[] = {CONFORM_F32, CONFORM_F32},
                     F32x3[] = {CONFORM_F32, CONFORM_F32, CONFORM_F32};
/* attention: q F32, k and v F16 (llama.cpp's KV cache), the mask F16; o F32, no lse. */
static const int32_t ATT_IN_F16KV[] = {CONFORM_F32, CONFORM_F16, CONFORM_F16, CONFORM_F16},
                     ATT_IN_F32KV[] = {CONFORM_F32, CONFORM_F32, CONFORM_F32, CONFORM_F16},
                     ATT_OUT[] = {CONFORM_F32, 0};

#define ROW_KERNEL(op_, name_, nin, ins, fn_, conv, dom, desc)                                                       \
    {sizeof(conform_kernel_v2), op_, name_, desc, nin, ins, 1, F32x1, CONFORM_F32, 0, conv, dom, NULL, NULL, fn_}

static const conform_kernel_v2 kernels[] = {
    ROW_KERNEL("rms_norm", "ggml.rms_norm.fp32", 2, F32x2, rms_norm, NULL, NULL,
               "ggml_rms_norm, then ggml_mul by the weight"),
    ROW_KERNEL("layer_norm", "ggml.layer_norm.fp32", 3, F32x3, layer_norm, NULL, NULL,
               "ggml_norm, ggml_mul by the weight, ggml_add of the bias"),
    ROW_KERNEL("softmax", "ggml.softmax.fp32", 1, F32x1, softmax, NULL, NULL, "ggml_soft_max"),
    ROW_KERNEL("silu", "ggml.silu.fp32", 1, F32x1, silu, NULL, NULL, "ggml_silu"),
    ROW_KERNEL("gelu_tanh", "ggml.gelu_tanh.fp32", 1, F32x1, gelu_tanh, NULL, NULL, "ggml_gelu (tanh form)"),
    ROW_KERNEL("gelu_erf", "ggml.gelu_erf.fp32", 1, F32x1, gelu_erf, NULL, NULL, "ggml_gelu_erf"),
    ROW_KERNEL("softplus", "ggml.softplus.fp32", 1, F32x1, softplus, NULL, NULL, "ggml_softplus"),
    ROW_KERNEL("softcap", "ggml.softcap.fp32", 1, F32x1, softcap, NULL, NULL,
               "ggml_scale(1/c), ggml_tanh, ggml_scale(c): llama.cpp's final logit softcap"),
    ROW_KERNEL("swiglu", "ggml.swiglu.fp32", 2, F32x2, swiglu, NULL, NULL, "ggml_swiglu_split(gate, up)"),
    ROW_KERNEL("geglu", "ggml.geglu_tanh.fp32", 2, F32x2, geglu_tanh, "{\"gelu\":\"tanh\"}", NULL,
               "ggml_geglu_split(gate, up): the tanh GELU"),
    ROW_KERNEL("geglu", "ggml.geglu_erf.fp32", 2, F32x2, geglu_erf, NULL, NULL, "ggml_geglu_erf_split(gate, up)"),
    ROW_KERNEL("rope", "ggml.rope.fp32", 1, F32x1, rope, NULL, "{\"scaling\":[0,1]}",
               "ggml_rope_ext (NORMAL or NEOX by the pairing; linear scaling by freq_scale)"),
    {sizeof(conform_kernel_v2), "attention", "ggml.attention.f16kv", "ggml_flash_attn_ext, K/V and mask in F16", 4,
     ATT_IN_F16KV, 2, ATT_OUT, CONFORM_F32, 0, NULL, NULL, NULL, NULL, attention_f16kv},
    {sizeof(conform_kernel_v2), "attention", "ggml.attention.f32kv", "ggml_flash_attn_ext, K/V in F32, mask in F16", 4,
     ATT_IN_F32KV, 2, ATT_OUT, CONFORM_F32, 0, NULL, NULL, NULL, NULL, attention_f32kv},
};

static const conform_plugin_table_v2 table = {CONFORM_PLUGIN_ABI_VERSION_2, (int32_t)(sizeof kernels / sizeof kernels[0]),
                                              kernels};

CONFORM_PLUGIN_EXPORT const conform_plugin_table_v2* conform_plugin_v2(void) { return &table; }
