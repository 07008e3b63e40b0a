/*
 * Broken plug-ins for tests/plugin_test.cpp: compiled once per defect
 * (BAD_ABI, BAD_OP, BAD_DTYPE, NULL_FN, NO_ENTRY), each must make
 * `conform check-plugin` exit 2 with a message naming the file and field.
 */
#include <conform/plugin.h>

#include <stddef.h>

static int copy(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)p, (void)in, (void)n_in, (void)out, (void)n_out;
    return 0;
}

#if defined(BAD_OP)
#define OP "no_such_op"
#else
#define OP "silu"
#endif
#if defined(BAD_DTYPE)
#define IN_DTYPE 42
#else
#define IN_DTYPE CONFORM_F32
#endif
#if defined(NULL_FN)
#define FN NULL
#else
#define FN copy
#endif
#if defined(BAD_ABI)
#define ABI 99
#else
#define ABI CONFORM_PLUGIN_ABI_VERSION
#endif

static const conform_kernel kernels[] = {
    {"silu", "fine.silu", CONFORM_F32, CONFORM_F32, CONFORM_F32, 0, NULL, NULL, NULL, copy},
    {OP, "broken.kernel", IN_DTYPE, CONFORM_F32, CONFORM_F32, 0, NULL, NULL, NULL, FN},
};

static const conform_plugin table = {ABI, 2, kernels};

#if defined(NO_ENTRY)
const conform_plugin* conform_plugin_v3(void) { return &table; }  /* the wrong symbol */
#else
const conform_plugin* conform_plugin_v1(void) { return &table; }
#endif
