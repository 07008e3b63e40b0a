// What conform asks of oneDNN (issue 6): softmax, layer normalization, the
// eltwise activations, float and INT8 matmul; plus RMSNorm, which oneDNN 2.6
// lacks.  Every entry ends up a kernel or a "not provided" line.
#include "impls/onednn/onednn.hpp"

namespace conform::onednn {

std::string kernel_name(const std::string& op, Format f) { return "onednn." + op + "." + name(f); }

std::vector<Wanted> wanted() {
    std::vector<Wanted> w;
    const Format floats[] = {Format::fp32, Format::fp16, Format::bf16};
    for (const char* op : {"softmax", "layer_norm", "silu", "gelu_erf", "gelu_tanh", "sigmoid", "softplus"})
        for (Format f : floats) w.push_back({op, f, ""});
    for (Format f : floats)
        w.push_back({"rms_norm", f,
                     "oneDNN 2.6 has no RMS normalization: layer normalization always subtracts the mean (no "
                     "flag skips it)"});
    w.push_back({"int8_gemm", Format::fp32, ""});  // named by y's format, as cpu.*.int8_gemm.<out>
    w.push_back({"int8_gemm", Format::fp16, ""});
    for (Format f : floats) w.push_back({"matmul", f, ""});
    return w;
}

}  // namespace conform::onednn

namespace conform {

const BackendRegistry& onednn_registry() {
    static const BackendRegistry reg = [] {
        BackendRegistry r;
        r.backend = "onednn";
        r.library = onednn::library_text();
        for (const auto& w : onednn::wanted()) onednn::provide(w, r);
        return r;
    }();
    return reg;
}

}  // namespace conform
