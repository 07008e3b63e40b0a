// Throughput of the gated kernels against the machine's copy bandwidth.
// bytes/s counts bytes read + bytes written (gate and up in, h out), as copy_bandwidth
// does; rows x hidden 64x4096 and 32x8192 (cache resident), 4096x4096 and
// 2048x8192 (out of cache).  Run: ./build/bench/gated_bench --benchmark_min_time=0.2
#include "bench/bench_util.hpp"

static const int registered =
    (conform::bench::elementwise::register_family({"swiglu", "geglu", "situ_glu", "swiglu_clamp"}, "swiglu"), 0);
