// conform cuda-bench: the GPU benchmarks (docs/cuda.md, "Performance").
#include <fstream>
#include <iostream>

#include "cli/common.hpp"
#include "impls/cuda/cuda.hpp"
#include "reports/atomic_file.hpp"

namespace conform::cli {

Subcommand add_cuda_bench(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "cuda-bench",
        "bytes/s of every cuda kernel on 4096x8192 rows or 2^26 elements beside a device-to-device copy of the same "
        "bytes (needs a GPU; docs/cuda.md)");
    auto out = std::make_shared<std::string>();
    cmd->add_option("--out", *out, "write the JSON here (default: standard output)");
    return {cmd, [out] {
                std::string why;
                const std::string json = cuda_benchmarks(&why);
                if (json.empty()) {
                    std::cerr << "conform: cuda-bench cannot run here: " << why << "\n";
                    return 1;
                }
                if (out->empty()) std::cout << json;
                else report::write_file_atomic(*out, json);
                return 0;
            }};
}

}  // namespace conform::cli
