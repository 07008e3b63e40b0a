/* Optional indexing helpers over conform_tensor views for plug-in authors
 * (docs/plugins.md): element offsets from shape and strides (in elements).
 * Installed beside plugin.h; plain C99, static inline, no symbols exported. */
#ifndef CONFORM_PLUGIN_TENSOR_H
#define CONFORM_PLUGIN_TENSOR_H

#include <conform/plugin.h>

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

#endif /* CONFORM_PLUGIN_TENSOR_H */
