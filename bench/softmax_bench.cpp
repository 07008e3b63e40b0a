// Throughput of the softmax kernels (rows of the hidden size) against the
// machine's copy bandwidth; bytes/s counts x read + y written, as
// copy_bandwidth does.  Shapes as in activation_bench (bench_util.hpp).
// Run: ./build/bench/softmax_bench --benchmark_min_time=0.2
#include "bench/bench_util.hpp"

static const int registered = (conform::bench::elementwise::register_family({"softmax"}, "softmax"), 0);
