// Where the probabilistic tier's model fails (docs/numerics.md): repeated
// values, absorbed terms and clustered terms make rounding errors systematic.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "oracle/attention_bound.hpp"
#include "oracle/bound.hpp"
#include "oracle/dsa.hpp"
#include "properties/verdict.hpp"

namespace conform::props {
namespace {

constexpr std::int64_t kMinRow = 8;  // shorter rows: no accumulation the tiers tell apart

bool is_data_input(const std::string& name) { return name != "mask" && name != "cu_seqlens"; }

// The first row of a data input with fewer distinct finite values than half its length.
std::string repeated_values(const OpSpec& op, const std::vector<TensorView>& in) {
    for (std::size_t k = 0; k < in.size() && k < op.inputs.size(); ++k) {
        const TensorView& t = in[k];
        if (!is_data_input(op.inputs[k]) || !is_float(t.format) || t.cols() < kMinRow) continue;
        if (op.kind == OpKind::row && k > 0) continue;  // weights and biases multiply, they are not summed
        for (std::int64_t r = 0; r < t.rows(); ++r) {
            std::unordered_set<std::uint64_t> seen;
            std::int64_t finite = 0;
            for (std::int64_t j = 0; j < t.cols(); ++j) {
                const double v = t.value(r * t.cols() + j);
                if (!std::isfinite(v)) continue;
                ++finite;
                seen.insert(t.bits(r * t.cols() + j));
            }
            if (finite >= kMinRow && 2 * static_cast<std::int64_t>(seen.size()) < finite)
                return "input '" + op.inputs[k] + "' row " + std::to_string(r) + " holds " + std::to_string(seen.size()) +
                       " distinct values among " + std::to_string(finite) + " (repeated values round alike)";
        }
    }
    return "";
}

// Terms at most u A of a sum of nonnegative terms adding up to more than u A
// (A the total): they may all be absorbed, errors of one sign.
bool absorbs(const std::vector<double>& terms, double u) {
    if (static_cast<std::int64_t>(terms.size()) < kMinRow) return false;
    double total = 0;
    for (double t : terms)
        if (std::isfinite(t)) total += t;
    if (!(total > 0) || !std::isfinite(total)) return false;
    double small = 0;
    for (double t : terms)
        if (std::isfinite(t) && t <= u * total) small += t;
    return small > u * total;
}

// Terms that land on the running sum's grid alike (A the total): were every
// addition to find the sum on the grid g of A's binade (spacing 2u 2^e,
// 2^e <= A), or of the binade below, term t would err by RN_g(t) - t.  For
// terms spread over many grid steps these errors have every offset and
// cancel like a random walk (about sqrt(n) g / 3.5); nearly equal terms
// (the 1 - d_i of a softmax row of tiny logits, repeated attention weights,
// several such clusters) share their offsets and add up.  The case breaches
// when that drift exceeds half the probabilistic constant, lambda sqrt(n) u A / 2.
bool clusters(const std::vector<double>& terms, double u) {
    double total = 0, n = 0;
    for (double t : terms)
        if (std::isfinite(t)) total += t, n += 1;
    if (!(total > 0) || !std::isfinite(total) || n < kMinRow) return false;
    const double limit = oracle::kLambda * std::sqrt(n) * u * total / 2;
    for (double g : {2 * u * std::exp2(std::floor(std::log2(total))), u * std::exp2(std::floor(std::log2(total)))}) {
        double drift = 0;
        for (double t : terms)
            if (std::isfinite(t)) drift += std::nearbyint(t / g) * g - t;
        if (std::fabs(drift) > limit) return true;
    }
    return false;
}

// Why the terms of one row's sum round alike, or "".
std::string alike(const std::string& what, const std::vector<double>& terms, double u, std::size_t row) {
    const std::string where = what + " of row " + std::to_string(row) + ": ";
    if (absorbs(terms, u)) return where + "terms below one rounding of the sum add up to more than one rounding (absorbed alike)";
    if (clusters(terms, u))
        return where + "the terms share their offsets from the sum's grid (rounded alike)";
    return "";
}

// The nonnegative terms each row op sums: x^2 (rms, l2), (x - mean)^2
// (layer_norm), exp(x - max) (softmax).
std::string row_absorption(const OpSpec& op, const TensorView& x, double u) {
    const std::int64_t n = x.cols();
    for (std::int64_t r = 0; r < x.rows(); ++r) {
        std::vector<double> row(static_cast<std::size_t>(n)), terms;
        for (std::int64_t j = 0; j < n; ++j) row[static_cast<std::size_t>(j)] = x.value(r * n + j);
        if (op.name == "softmax") {
            const double m = *std::max_element(row.begin(), row.end());
            if (!std::isfinite(m)) continue;
            for (double v : row) terms.push_back(std::exp(v - m));
        } else {
            double mean = 0;
            if (op.name == "layer_norm") {
                for (double v : row) mean += v / static_cast<double>(n);
            }
            for (double v : row) terms.push_back((v - mean) * (v - mean));
        }
        const std::string what = op.name == "softmax" ? "the exponentials" : "the squares";
        if (std::string why = alike(what, terms, u, static_cast<std::size_t>(r)); !why.empty()) return why;
    }
    return "";
}

// Rows whose largest magnitude exceeds 2^(p/2) times their median.
std::string dominant_outlier(const OpSpec& op, const std::vector<TensorView>& in, Format acc) {
    const double ratio = std::ldexp(1.0, info(acc).precision / 2);
    for (std::size_t k = 0; k < in.size() && k < op.inputs.size(); ++k) {
        const TensorView& t = in[k];
        if (!is_data_input(op.inputs[k]) || !is_float(t.format) || t.cols() < kMinRow) continue;
        for (std::int64_t r = 0; r < t.rows(); ++r) {
            std::vector<double> mag;
            for (std::int64_t j = 0; j < t.cols(); ++j) {
                const double v = std::fabs(t.value(r * t.cols() + j));
                if (std::isfinite(v)) mag.push_back(v);
            }
            if (static_cast<std::int64_t>(mag.size()) < kMinRow) continue;
            std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(mag.size() / 2), mag.end());
            const double median = mag[mag.size() / 2], big = *std::max_element(mag.begin(), mag.end());
            if (big > ratio * median)
                return "input '" + op.inputs[k] + "' row " + std::to_string(r) + ": largest magnitude above 2^" +
                       std::to_string(info(acc).precision / 2) + " times the median (absorbed terms)";
        }
    }
    return "";
}

}  // namespace

std::string probabilistic_model_breach(const OpSpec& op, const Params& p, const std::vector<TensorView>& in, Format acc) {
    if (!is_float(acc)) return "";
    if (std::string why = repeated_values(op, in); !why.empty()) return why;
    const double u = unit_roundoff(acc);
    if (op.kind == OpKind::row) return row_absorption(op, in.at(0), u);
    if (softmax_attention_op(op.name)) {
        std::vector<TensorView> attn{in.at(0), in.at(1), in.at(2)};  // gated_attention's g, sink_attention's sinks left out
        if (in.size() > attention_mask_input(op.name)) attn.push_back(in[attention_mask_input(op.name)]);
        const auto weights = oracle::attention_weights(p, attn);
        for (std::size_t r = 0; r < weights.size(); ++r)
            if (std::string why = alike("the attention weights", weights[r], u, r); !why.empty()) return why;
        return "";
    }
    if (op.name == "dsa_attention") {  // attention over the oracle's selection (docs/dsa_attention.md)
        const Tensor mask = oracle::dsa_exact_mask(p, in);
        Params ap = p;
        ap.set("causal", 0);
        const auto weights = oracle::attention_weights(ap, {in.at(3), in.at(4), in.at(5), mask.view()});
        for (std::size_t r = 0; r < weights.size(); ++r)
            if (std::string why = alike("the attention weights", weights[r], u, r); !why.empty()) return why;
    }
    return dominant_outlier(op, in, acc);
}

}  // namespace conform::props
