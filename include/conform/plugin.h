/*
 * conform plug-in ABI, versions 1 and 2 (docs/plugins.md).
 *
 * A shared library exports compiled kernels to conform through this header:
 * it defines one function, conform_plugin_v2() (or, in a version 1 plug-in,
 * conform_plugin_v1()), that returns a table of kernel descriptors.  Write
 * new plug-ins against version 2; version 1 plug-ins are still loaded and
 * judged as before.  `conform check-plugin LIB.so` loads the library with
 * dlopen, validates the table and runs the full property suite against every
 * kernel, each in a child process with a time limit.
 *
 * Plain C (C99 and C++), no conform headers or libraries needed: the library
 * depends on nothing but this file.  All integers have fixed widths so the
 * layout is the same for every compiler on a platform.
 */
#ifndef CONFORM_PLUGIN_H
#define CONFORM_PLUGIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version 1: conform_plugin_v1() returns a conform_plugin whose abi_version
 * is CONFORM_PLUGIN_ABI_VERSION (1).  A table of another version is refused
 * with exit status 2. */
#define CONFORM_PLUGIN_ABI_VERSION 1
#define CONFORM_PLUGIN_ENTRY "conform_plugin_v1"

/* Version 2: conform_plugin_v2() returns a conform_plugin_table_v2 whose
 * abi_version is CONFORM_PLUGIN_ABI_VERSION_2.  conform looks for the v2
 * entry first. */
#define CONFORM_PLUGIN_ABI_VERSION_2 2
#define CONFORM_PLUGIN_ENTRY_V2 "conform_plugin_v2"

/* Highest tensor rank passed to a kernel. */
#define CONFORM_MAX_RANK 4

/* Element types.  Values start at 1 so that a zero-initialized field is
 * reported as unset rather than read as a type.  Storage is native
 * little-endian: F16 and BF16 as 16-bit patterns, I8/I32 as two's complement. */
typedef enum conform_dtype {
    CONFORM_F64 = 1,
    CONFORM_F32 = 2,
    CONFORM_F16 = 3,
    CONFORM_BF16 = 4,
    CONFORM_I8 = 5,
    CONFORM_I32 = 6, /* v1: only as an output dtype (int8_gemm's "acc"); v2: also integer inputs (cu_seqlens) */
    CONFORM_F8_E4M3 = 7, /* OCP FP8 E4M3 ("E4M3FN": no infinity, NaN = S.1111.111), one byte */
    CONFORM_F8_E5M2 = 8  /* OCP FP8 E5M2 (IEEE-like), one byte */
} conform_dtype;

/* A strided view of a tensor owned by conform.
 *
 * Element (i0, i1, ...) lives at data + sum_k(i_k * strides[k]) elements.
 * The last dimension of row-wise ops is contiguous (strides[rank-1] == 1);
 * other strides may exceed the dense ones (padded rows): read and write only
 * the elements the view names.  Views are valid for the duration of one call
 * only; the kernel must not keep the pointers. */
typedef struct conform_tensor {
    int32_t dtype;                      /* a conform_dtype */
    int32_t rank;                       /* 0 .. CONFORM_MAX_RANK */
    int64_t shape[CONFORM_MAX_RANK];    /* entries past rank are 0 */
    int64_t strides[CONFORM_MAX_RANK];  /* in elements, not bytes; entries past rank are 0 */
    void* data;                         /* inputs: read-only (writes are detected and fail the kernel) */
} conform_tensor;

/* A kernel call.
 *
 * params_json: a JSON object holding every parameter of the op by the
 *   formula's symbol, as numbers, defaults filled in, e.g. {"eps":1e-06,
 *   "zero_centered":0} for rms_norm (docs/ops.md lists each op's parameters).
 *   NUL-terminated, owned by conform, valid during the call.
 * in, n_in: the op's inputs in docs/ops.md order.  An optional input the
 *   case does not use (attention's mask, the delta rule's initial_state) is
 *   left out: n_in is then one less.
 * out, n_out: the op's outputs in order, allocated by conform with the shapes
 *   the op defines and the dtypes the descriptor declares.  The kernel writes
 *   every element of every output and nothing else.
 * Returns 0 on success; any other value is reported as the kernel's failure
 * (for example unsupported shapes).  The function may be called from any
 * thread but never concurrently on the same outputs. */
typedef int (*conform_kernel_fn)(const char* params_json, const conform_tensor* in, int n_in, conform_tensor* out,
                                 int n_out);

/* One exported kernel.  Every string is NUL-terminated UTF-8 with static
 * storage duration (it must stay valid while the library is loaded). */
typedef struct conform_kernel {
    const char* op;        /* registry op name, e.g. "rms_norm" (conform ops) */
    const char* name;      /* unique within the library, e.g. "mylib.rms_norm.fp32" */
    int32_t in_dtype;      /* storage dtype of the floating inputs */
    int32_t out_dtype;     /* storage dtype of the outputs (unless out_dtypes says otherwise) */
    int32_t acc_dtype;     /* accumulation precision the derived budget assumes: F64, F32, F16 or BF16 (not
                              I8/I32).  A narrower format widens the budget (2^16 for BF16 against F32) on the
                              kernel's word: declare what it really accumulates in */
    int32_t n_out_dtypes;  /* 0, or the op's number of outputs when out_dtypes is given */
    const int32_t* out_dtypes;     /* optional per-output dtypes (attention's lse in F32, int8_gemm's acc in I32); NULL: all out_dtype */
    const char* conventions_json;  /* optional (NULL or ""): declared conventions as a JSON object of strings,
                                      e.g. {"masked_row":"nan"} (docs/ops.md lists each op's conventions) */
    const char* description;       /* optional (NULL): one line, shown in check-plugin's reports */
    conform_kernel_fn fn;          /* the kernel; must not be NULL */
} conform_kernel;

/* The table a plug-in exports.  It and everything it points to must stay
 * valid, unchanged, while the library is loaded; conform never frees it. */
typedef struct conform_plugin {
    uint32_t abi_version;            /* CONFORM_PLUGIN_ABI_VERSION */
    int32_t n_kernels;               /* number of entries in kernels (>= 1) */
    const conform_kernel* kernels;   /* n_kernels descriptors */
} conform_plugin;

/* ---- version 2 ------------------------------------------------------------
 *
 * What version 2 adds to a descriptor (docs/plugins.md, "Version 2"):
 *
 * in_dtypes: one dtype per op input, in docs/ops.md order, optional inputs
 *   included (Q in F32 with K/V and the mask in F16; cu_seqlens in I32; an
 *   int8_gemm's codes in I8).  conform converts each input to its dtype
 *   exactly (cases are generated in the narrowest declared floating dtype,
 *   so every value is representable in the others; mixing F16 and BF16
 *   inputs is refused).  `in` always has one entry per op input (n_in is the
 *   op's input count): an optional input the case does not use has
 *   data == NULL (and rank 0), never an empty tensor.
 * out_dtypes: one per op output; 0 marks an output the kernel does not
 *   write (an attention kernel that returns o but not lse): it is passed
 *   with its shape, dtype 0 and data == NULL, and it is not judged, nor is
 *   any property that needs it run.  The first output must be written.
 * domain_json: the inputs the kernel supports, by dimension name
 *   (docs/plugins.md lists each op's: rows, cols, head_dim, q_len, ...) and
 *   by parameter: a list of allowed values or an object with "min", "max",
 *   "multiple_of", e.g. {"head_dim":[64,128],"rows":{"multiple_of":8}}.
 *   Generated cases are projected into it; the report prints it.
 * tunables_json: parameters that choose how, not what, the kernel
 *   computes, which the suite varies within the given values (attention's
 *   key tile: {"block":[16,64]}); tile_invariance then compares them.
 * profile: the accuracy profile the kernel is judged by ("strict",
 *   "ulp:4+ftz", ...; NULL or "": strict).  An acc_dtype narrower than F32
 *   widens the derived budget, and is accepted only with a profile set:
 *   reports print both.
 * conventions_json: every declarable convention (docs/ops.md), not only
 *   masked_row: {"eps_placement":"outside","l2_form":"max"}.
 */

typedef struct conform_kernel_v2 {
    uint32_t struct_size;           /* sizeof(conform_kernel_v2): lets later minor versions append fields */
    const char* op;                 /* registry op name */
    const char* name;               /* unique within the library */
    const char* description;        /* optional (NULL): one line for reports */
    int32_t n_in_dtypes;            /* the op's number of inputs */
    const int32_t* in_dtypes;       /* n_in_dtypes dtypes, one per op input */
    int32_t n_out_dtypes;           /* the op's number of outputs */
    const int32_t* out_dtypes;      /* n_out_dtypes dtypes; 0: the kernel does not write that output */
    int32_t acc_dtype;              /* accumulation precision the derived budget assumes */
    int32_t reserved;               /* 0 */
    const char* conventions_json;   /* optional: {"eps_placement":"outside"} */
    const char* domain_json;        /* optional: {"head_dim":[64,128],"rows":{"multiple_of":8}} */
    const char* tunables_json;      /* optional: {"block":[16,64]} */
    const char* profile;            /* optional: "strict" (default), "ulp:4+ftz", ... */
    conform_kernel_fn fn;           /* the kernel; must not be NULL */
} conform_kernel_v2;

typedef struct conform_plugin_table_v2 {
    uint32_t abi_version;              /* CONFORM_PLUGIN_ABI_VERSION_2 */
    int32_t n_kernels;                 /* >= 1 */
    const conform_kernel_v2* kernels;  /* n_kernels descriptors */
} conform_plugin_table_v2;

/* The entry points (a plug-in defines one of them, with default visibility). */
#if defined(_WIN32)
#define CONFORM_PLUGIN_EXPORT __declspec(dllexport)
#else
#define CONFORM_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
CONFORM_PLUGIN_EXPORT const conform_plugin* conform_plugin_v1(void);
CONFORM_PLUGIN_EXPORT const conform_plugin_table_v2* conform_plugin_v2(void);

#ifdef __cplusplus
}
#endif

#endif /* CONFORM_PLUGIN_H */
