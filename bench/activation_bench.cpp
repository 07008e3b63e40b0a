// Throughput of the activation kernels against the machine's copy bandwidth.
// bytes/s counts bytes read + bytes written (x in, y out), as copy_bandwidth
// does; rows x hidden 64x4096 and 32x8192 (cache resident), 4096x4096 and
// 2048x8192 (out of cache).  Run: ./build/bench/activation_bench --benchmark_min_time=0.2
#include "bench/bench_util.hpp"

static const int registered = (conform::bench::elementwise::register_family(
                                   {"sigmoid", "silu", "gelu_erf", "gelu_tanh", "softplus", "softcap"}, "silu"),
                               0);
