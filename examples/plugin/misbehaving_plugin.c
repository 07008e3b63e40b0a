/*
 * A deliberately misbehaving conform plug-in, for the tests of
 * `conform check-plugin` (tests/plugin_test.cpp): every kernel is `silu` on
 * FP32, correct except for its one fault, which shows once the tensor has
 * more than kQuiet elements so that the earliest generated cases pass and
 * the reported case is one the property suite found.  The suite must report
 * each fault as that kernel's failure with the case that reproduces it, and
 * go on to the next kernel; `misbehaving.good` must pass.
 */
#include <conform/plugin.h>

#include <math.h>
#include <stddef.h>

#include <conform/plugin_tensor.h>

enum { kQuiet = 8 };

static void silu_f32(const conform_tensor* x, conform_tensor* y) {
    for (int64_t i = 0; i < numel(x); ++i) {
        const double v = ((const float*)x->data)[elem_offset(x, i)];
        ((float*)y->data)[elem_offset(y, i)] = (float)(v == -INFINITY ? -0.0 : v / (1.0 + exp(-v)));
    }
}

static int good(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)p, (void)n_in, (void)n_out;
    silu_f32(&in[0], &out[0]);
    return 0;
}

static int segfault(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (numel(&in[0]) > kQuiet) *(volatile int*)NULL = 1;  /* dereferences NULL: SIGSEGV */
    return good(p, in, n_in, out, n_out);
}

static int hang(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    for (volatile int spin = 1; spin && numel(&in[0]) > kQuiet;) {
    }
    return good(p, in, n_in, out, n_out);
}

/* One element past the end of y: lands in the canary bytes after it (or in
 * the guard page when y's size is a multiple of 64 bytes). */
static int overflow(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    const int rc = good(p, in, n_in, out, n_out);
    const int64_t n = numel(&out[0]);
    if (n > kQuiet) ((float*)out[0].data)[elem_offset(&out[0], n - 1) + 1] = 0.0f;
    return rc;
}

/* Writes the element after each row's last one before computing the rows:
 * harmless in a dense output (the next row overwrites it), a write into the
 * padding of one whose rows are strided apart. */
static int padding(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    for (int64_t r = 0; r + 1 < rows(&out[0]) && numel(&out[0]) > kQuiet; ++r)
        ((float*)out[0].data)[row_offset(&out[0], r) + cols(&out[0])] = 0.0f;
    return good(p, in, n_in, out, n_out);
}

/* Ignores the strides: reads and writes both tensors as dense arrays (right
 * only while conform passes dense views; padded rows hold 0xFF, NaN). */
static int ignores_strides(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)p, (void)n_in, (void)n_out;
    for (int64_t i = 0; i < numel(&in[0]); ++i) {
        const double v = ((const float*)in[0].data)[i];
        ((float*)out[0].data)[i] = (float)(v == -INFINITY ? -0.0 : v / (1.0 + exp(-v)));
    }
    return 0;
}

/* Scribbles on its input (inputs are read-only: this faults). */
static int writes_input(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    if (numel(&in[0]) > kQuiet) ((float*)in[0].data)[0] = 0.0f;
    return good(p, in, n_in, out, n_out);
}

static int error(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    return numel(&in[0]) > kQuiet ? 7 : good(p, in, n_in, out, n_out);
}

#define SILU(name, fn) {"silu", name, CONFORM_F32, CONFORM_F32, CONFORM_F32, 0, NULL, NULL, NULL, fn}

static const conform_kernel kernels[] = {
    SILU("misbehaving.segfault", segfault), SILU("misbehaving.hang", hang),
    SILU("misbehaving.overflow", overflow), SILU("misbehaving.writes_input", writes_input),
    SILU("misbehaving.error", error),       SILU("misbehaving.good", good),
    SILU("misbehaving.padding", padding),   SILU("misbehaving.ignores_strides", ignores_strides),
};

static const conform_plugin table = {CONFORM_PLUGIN_ABI_VERSION, sizeof kernels / sizeof kernels[0], kernels};

const conform_plugin* conform_plugin_v1(void) { return &table; }
