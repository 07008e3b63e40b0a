/*
 * Broken ABI v2 plug-ins for tests/plugin_test.cpp: compiled once per defect
 * (V2_F16_BF16, V2_NARROW_ACC, V2_BAD_DOMAIN, V2_FIRST_UNWRITTEN, V2_N_IN,
 * V2_BAD_TUNABLE); each must make `conform check-plugin` exit 2 naming the
 * file and the field.
 */
#include <conform/plugin.h>

#include <stddef.h>

static int nothing(const char* p, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    (void)p, (void)in, (void)n_in, (void)out, (void)n_out;
    return 0;
}

static const int32_t f32[] = {CONFORM_F32, CONFORM_F32};
#if defined(V2_F16_BF16)
static const int32_t mixed[] = {CONFORM_F16, CONFORM_BF16};
#elif defined(V2_BAD_DOMAIN) || defined(V2_FIRST_UNWRITTEN) || defined(V2_N_IN) || defined(V2_BAD_TUNABLE)
static const int32_t attention_in[] = {CONFORM_F32, CONFORM_F32, CONFORM_F32, CONFORM_F32};
#endif
#if defined(V2_FIRST_UNWRITTEN)
static const int32_t lse_only[] = {0, CONFORM_F32};
#endif

static const conform_kernel_v2 kernels[] = {
    {sizeof(conform_kernel_v2), "silu", "fine.silu", NULL, 1, f32, 1, f32, CONFORM_F32, 0, NULL, NULL, NULL, NULL, nothing},
#if defined(V2_F16_BF16)
    {sizeof(conform_kernel_v2), "swiglu", "broken.kernel", NULL, 2, mixed, 1, f32, CONFORM_F32, 0, NULL, NULL, NULL, NULL, nothing},
#elif defined(V2_NARROW_ACC)
    {sizeof(conform_kernel_v2), "rms_norm", "broken.kernel", NULL, 2, f32, 1, f32, CONFORM_BF16, 0, NULL, NULL, NULL, NULL, nothing},
#elif defined(V2_BAD_DOMAIN)
    {sizeof(conform_kernel_v2), "attention", "broken.kernel", NULL, 4, attention_in, 2, f32, CONFORM_F32, 0, NULL,
     "{\"head_size\":[64]}", NULL, NULL, nothing},
#elif defined(V2_FIRST_UNWRITTEN)
    {sizeof(conform_kernel_v2), "attention", "broken.kernel", NULL, 4, attention_in, 2, lse_only, CONFORM_F32, 0, NULL,
     NULL, NULL, NULL, nothing},
#elif defined(V2_N_IN)
    {sizeof(conform_kernel_v2), "attention", "broken.kernel", NULL, 3, attention_in, 2, f32, CONFORM_F32, 0, NULL, NULL,
     NULL, NULL, nothing},
#elif defined(V2_BAD_TUNABLE)
    {sizeof(conform_kernel_v2), "attention", "broken.kernel", NULL, 4, attention_in, 2, f32, CONFORM_F32, 0, NULL, NULL,
     "{\"causal\":[1]}", NULL, nothing},
#endif
};

static const conform_plugin_table_v2 table = {CONFORM_PLUGIN_ABI_VERSION_2, 2, kernels};

const conform_plugin_table_v2* conform_plugin_v2(void) { return &table; }
