#include "golden/golden.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "oracle/eval.hpp"
#include "properties/generators.hpp"
#include "reports/atomic_file.hpp"

namespace conform::golden {
namespace {

using nlohmann::json;

// A fixed spread of families and shapes per op: the vectors never change
// unless this list does.
const props::Family kVectorFamilies[] = {props::Family::normal, props::Family::outlier, props::Family::near_eps,
                                         props::Family::bit_patterns, props::Family::around_cap,
                                         props::Family::subnormal};

std::string hex_bits(std::uint64_t b) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(b));
    return buf;
}

json tensor_json(const Tensor& t) {
    json j;
    j["shape"] = t.shape();
    j["bits"] = json::array();
    j["hex"] = json::array();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        j["bits"].push_back(hex_bits(t.bits(i)));
        j["hex"].push_back(hexfloat(t.value(i)));
    }
    return j;
}

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& field, const std::string& why) {
    throw std::runtime_error(file.string() + ": field '" + field + "': " + why);
}

Tensor tensor_from(const json& j, Format f, const std::filesystem::path& file, const std::string& field) {
    if (!j.is_object() || !j.contains("shape") || !j.contains("bits")) bad(file, field, "expected {shape, bits}");
    Tensor t(f, j.at("shape").get<std::vector<std::int64_t>>());
    const auto& bits = j.at("bits");
    if (!bits.is_array() || static_cast<std::int64_t>(bits.size()) != t.numel())
        bad(file, field + ".bits", "expected " + std::to_string(t.numel()) + " bit patterns");
    for (std::int64_t i = 0; i < t.numel(); ++i) {
        const std::string text = bits[i].is_string() ? bits[i].get<std::string>() : "";
        char* end = nullptr;
        const unsigned long long b = std::strtoull(text.c_str(), &end, 16);
        if (text.empty() || *end) bad(file, field + ".bits[" + std::to_string(i) + "]", "expected a hex bit pattern");
        t.set_bits(i, b);
    }
    return t;
}

Vector parse_vector(const json& j, const std::filesystem::path& file, const std::string& at) {
    if (!j.is_object()) bad(file, at, "expected an object");
    const OpSpec* op = find_op(j.value("op", ""));
    if (!op) bad(file, at + ".op", "unknown op");
    auto f = parse_format(j.value("format", ""));
    if (!f) bad(file, at + ".format", "unknown format");
    Vector v{op->name, *f, Params(j.at("params").get<std::map<std::string, double>>()), {}, {}};
    const json inputs = j.value("inputs", json::object());
    for (const auto& in_name : op->inputs) {
        if (!inputs.contains(in_name) && optional_input(in_name)) break;  // trailing optional inputs left out
        if (!inputs.contains(in_name)) bad(file, at + ".inputs." + in_name, "missing tensor");
        v.inputs.push_back(tensor_from(inputs[in_name], *f, file, at + ".inputs." + in_name));
    }
    const json expected = j.value("expected", json::object());
    if (!expected.contains(op->outputs[0])) bad(file, at + ".expected." + op->outputs[0], "missing tensor");
    v.expected = tensor_from(expected[op->outputs[0]], *f, file, at + ".expected");
    return v;
}

}  // namespace

std::filesystem::path default_dir() { return std::filesystem::path(CONFORM_SOURCE_DIR) / "golden"; }

std::filesystem::path vector_file(const std::filesystem::path& dir, const std::string& op, Format f) {
    return dir / "vectors" / (op + "." + name(f) + ".json");
}

std::filesystem::path profile_file(const std::filesystem::path& dir, const std::string& kernel) {
    return dir / "profiles" / (kernel + ".json");
}

std::vector<Vector> make_vectors(const std::string& op_name, Format f) {
    const OpSpec& op = *find_op(op_name);
    std::vector<Vector> out;
    int i = 0;
    for (props::Family fam : kVectorFamilies) {
        props::CaseSpec s;
        s.op = op_name;
        s.format = f;
        s.params = Params::defaults(op);
        s.rows = 1;
        s.n = op.kind == OpKind::row ? 7 : 16;
        if (op_name == "rope") {  // [H, L, D]: both halves of a pair, two heads, three positions
            s.dims = {2, 3, 8};
            s.params.set("offset", 1000);
        }
        if (op_name == "lse_merge") s.dims = {4, 3};
        if (op_name == "sinkhorn") s.dims = {3, 4};  // three 4x4 matrices (n_hc = 4), 20 iterations
        if (op_name == "hc_residual" || op_name == "mhc_residual") s.dims = {2, 4, 9};  // n_hc = 4, a SIMD tail
        if (op_name == "quantize") s.dims = {3, 5};   // per tensor (axis 0)
        if (op_name == "int8_gemm") s.dims = {3, 5, 4, 1, 1};  // codes and scales stored in the vector's format
        if (op_name == "dequantize") s.dims = {3, 5};          // per tensor (axis 0), codes stored as floats
        if (op_name == "smooth_quant") s.dims = {3, 4, 5};     // x [3, 4], w [4, 5], alpha 0.5
        if (op_name == "int8_block") {  // T 3, d 8, 2 heads, ffn 8: the all-real block's out
            s.dims = {3, 8, 2, 8};
            s.params.set("heads", 2);
        }
        if (op_name == "attention") {  // GQA 2:1, Lq < Lk (bottom-right causal), small dims
            s.dims = {2, 1, 3, 5, 4, 4, 1};  // with the additive mask (every op input present)
            s.params.set("causal", 1);
        }
        s.families = {fam, fam};
        s.seed = 1000 + i++;
        const props::Case c = props::build_case(s);
        Vector v{op_name, f, c.params, c.inputs, {}};
        std::vector<TensorView> views;
        for (const auto& t : v.inputs) views.push_back(t.view());
        v.expected = oracle::evaluate(op, v.params, views, f).rounded;
        out.push_back(std::move(v));
    }
    return out;
}

void write_vectors(const std::filesystem::path& file, const std::vector<Vector>& vs) {
    json arr = json::array();
    for (const auto& v : vs) {
        const OpSpec& op = *find_op(v.op);
        json j{{"op", v.op}, {"format", name(v.format)}, {"params", v.params.values()}};
        for (std::size_t k = 0; k < v.inputs.size(); ++k) j["inputs"][op.inputs[k]] = tensor_json(v.inputs[k]);
        j["expected"][op.outputs[0]] = tensor_json(v.expected);
        arr.push_back(j);
    }
    std::filesystem::create_directories(file.parent_path());
    report::write_file_atomic(file, arr.dump(1) + "\n");
}

std::vector<Vector> read_vectors(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) throw std::runtime_error(file.string() + ": cannot open");
    json arr;
    try {
        arr = json::parse(in);
    } catch (const json::exception& e) {
        throw std::runtime_error(file.string() + ": not valid JSON: " + e.what());
    }
    std::vector<Vector> out;
    if (!arr.is_array()) bad(file, "(root)", "expected an array of vectors");
    for (std::size_t i = 0; i < arr.size(); ++i) {
        const std::string at = "[" + std::to_string(i) + "]";
        try {
            out.push_back(parse_vector(arr[i], file, at));
        } catch (const json::exception& e) {
            bad(file, at, e.what());
        }
    }
    return out;
}

Profile profile_of(const report::KernelReport& r, std::uint64_t seed, int cases) {
    return {r.kernel, seed, cases, r.stats.max_ulp, r.stats.util_quantiles};
}

void write_profile(const std::filesystem::path& file, const Profile& p) {
    json j{{"kernel", p.kernel}, {"seed", p.seed}, {"cases", p.cases}, {"max_ulp", p.max_ulp},
           {"util_quantiles", p.util_quantiles}};
    std::filesystem::create_directories(file.parent_path());
    report::write_file_atomic(file, j.dump(1) + "\n");
}

std::optional<Profile> read_profile(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) return std::nullopt;
    try {
        json j = json::parse(in);
        return Profile{j.at("kernel"), j.at("seed"), j.at("cases"), j.at("max_ulp"),
                       j.at("util_quantiles").get<std::vector<double>>()};
    } catch (const json::exception& e) {
        throw std::runtime_error(file.string() + ": malformed profile: " + e.what());
    }
}

std::string compare_profiles(const Profile& rec, const Profile& now) {
    std::string why;
    if (now.max_ulp > rec.max_ulp)
        why += "max ulp " + std::to_string(rec.max_ulp) + " -> " + std::to_string(now.max_ulp) + "; ";
    static const char* q[] = {"p50", "p90", "p99", "p99.9", "max"};
    for (std::size_t i = 0; i < rec.util_quantiles.size() && i < now.util_quantiles.size(); ++i)
        if (now.util_quantiles[i] > rec.util_quantiles[i] + kUtilSlack)
            why += std::string("utilization ") + q[i] + " " + std::to_string(rec.util_quantiles[i]) + " -> " +
                   std::to_string(now.util_quantiles[i]) + "; ";
    return why;
}

}  // namespace conform::golden
