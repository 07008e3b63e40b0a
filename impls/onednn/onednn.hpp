// oneDNN as a validated third-party library (docs/onednn.md): its primitives
// wrapped as registry kernels of backend "onednn", and the (op, format) pairs
// it was asked for but cannot run on this machine, each with the reason.
// Kept out of builtin_registry(): the built-in CI gate does not depend on
// whether oneDNN is installed or what this CPU supports.
#pragma once
#include <string>
#include <vector>

#include "impls/registry.hpp"

namespace conform {

// An (op, format) a backend cannot run here.  The report says "not provided"
// with the reason: never a pass, never a failure of the suite.
struct NotProvided {
    std::string kernel;  // the name it would have, e.g. "onednn.softmax.bf16"
    std::string op;      // a registry op
    std::string format;
    std::string reason;
};

struct BackendRegistry {
    std::string backend;  // "onednn"
    std::string library;  // "oneDNN 2.6.3 (cpu ISA avx2)" or why it is absent
    Registry kernels;
    std::vector<NotProvided> not_provided;
};

// oneDNN's kernels on this machine, probed once: each candidate primitive is
// created on a small shape, and one the library refuses (no implementation
// for the format on this ISA) becomes a NotProvided entry.  Built without
// oneDNN (CONFORM_WITH_ONEDNN off): no kernels, every candidate not provided.
const BackendRegistry& onednn_registry();

}  // namespace conform

namespace conform::onednn {

// One (op, format) the issue asks of oneDNN.  `absent`: oneDNN 2.6 has no
// primitive for it at all (no probe), with the reason.
struct Wanted {
    std::string op;
    Format format;
    std::string absent;
};
std::vector<Wanted> wanted();

// Implemented by impls/onednn/adapter.cpp (built with oneDNN) or
// impls/onednn/absent.cpp: the library's description, and one wanted entry
// turned into a kernel of r.kernels or an entry of r.not_provided.
std::string library_text();
void provide(const Wanted& w, BackendRegistry& r);

std::string kernel_name(const std::string& op, Format f);  // "onednn.<op>.<format>"

}  // namespace conform::onednn
