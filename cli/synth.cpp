// conform synth: a model dump of the synthetic model (docs/diverge.md).
#include "cli/common.hpp"

namespace conform::cli {

Subcommand add_synth(CLI::App& app) {
    auto* cmd = app.add_subcommand("synth", "write a model dump of the synthetic block stack run by the built-in kernels");
    return {cmd, []() -> int { throw UsageError("synth: not implemented yet"); }};
}

}  // namespace conform::cli
