/* Optional helpers for plug-in authors (docs/plugins.md): element offsets
 * of conform_tensor views from shape and strides (in elements), and one
 * number read from a call's params_json.  Installed beside plugin.h; plain
 * C99, static inline, no symbols exported. */
#ifndef CONFORM_PLUGIN_TENSOR_H
#define CONFORM_PLUGIN_TENSOR_H

#include <conform/plugin.h>

#include <stdlib.h>
#include <string.h>

static inline int64_t numel(const conform_tensor* t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; ++d) n *= t->shape[d];
    return n;
}

/* Offset of element `flat` (row-major index) of t. */
static inline int64_t elem_offset(const conform_tensor* t, int64_t flat) {
    int64_t off = 0;
    for (int d = t->rank - 1; d >= 0; --d) {
        off += (flat % t->shape[d]) * t->strides[d];
        flat /= t->shape[d];
    }
    return off;
}

/* Rows are every index of the leading dimensions in row-major order; the
 * last dimension is the row. */
static inline int64_t cols(const conform_tensor* t) { return t->rank ? t->shape[t->rank - 1] : 1; }

static inline int64_t rows(const conform_tensor* t) {
    int64_t n = 1;
    for (int d = 0; d + 1 < t->rank; ++d) n *= t->shape[d];
    return n;
}

/* Element 0 of row r is element r * cols of the whole tensor. */
static inline int64_t row_offset(const conform_tensor* t, int64_t r) { return elem_offset(t, r * cols(t)); }

/* Parameter `key` of params_json ({"eps":1e-06,...}) as a number, or
 * fallback when absent.  conform passes every parameter of the op as a
 * number in a flat object, which this scan reads; a plug-in may use any JSON
 * parser it already has instead. */
static inline double conform_param(const char* params_json, const char* key, double fallback) {
    char pattern[64];
    const size_t n = strlen(key);
    if (n + 3 > sizeof pattern) return fallback;
    pattern[0] = '"';
    memcpy(pattern + 1, key, n);
    pattern[n + 1] = '"';
    pattern[n + 2] = 0;
    const char* at = strstr(params_json, pattern);
    if (!at) return fallback;
    at = strchr(at + n + 2, ':');
    return at ? strtod(at + 1, NULL) : fallback;
}

#endif /* CONFORM_PLUGIN_TENSOR_H */
