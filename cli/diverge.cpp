// conform diverge: divergence report by first failing layer (docs/diverge.md).
#include "cli/common.hpp"

namespace conform::cli {

Subcommand add_diverge(CLI::App& app) {
    auto* cmd = app.add_subcommand("diverge", "report where a model dump diverges from the oracle or another dump");
    return {cmd, []() -> int { throw UsageError("diverge: not implemented yet"); }};
}

}  // namespace conform::cli
