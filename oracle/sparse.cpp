#include "oracle/sparse.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "numerics/shape_check.hpp"

namespace conform::oracle {

namespace {

constexpr double kSelectNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

SelectSetup select_setup(const Params& p, const std::vector<TensorView>& in) {
    const std::string op = "topk_select";
    if (in.size() != 1 && in.size() != 2) throw std::invalid_argument(op + ": expects scores [Lq, N]");
    require_rank(op, "scores", in[0], 2);
    SelectSetup s;
    s.queries = in[0].shape[0], s.candidates = in[0].shape[1];
    if (s.candidates > (std::int64_t{1} << 24))
        throw std::invalid_argument(op + ": at most 2^24 candidates (ids are stored as exact FP32 values), got " +
                                    std::to_string(s.candidates));
    constexpr double kBig = 0x1p40;
    s.k = integer_param(op, p, "k", 4, 1, kBig);
    s.block = integer_param(op, p, "block", 1, 1, kBig);
    s.causal = integer_param(op, p, "causal", 1, 0, 2);
    s.offset = integer_param(op, p, "offset", 0, 0, kBig);
    s.force_local = integer_param(op, p, "force_local", 0, 0, 2);
    s.slots = s.k + (s.force_local == 2 ? 1 : 0);
    s.staged = in.size() == 2;
    if (s.staged) {
        require_rank(op, "a candidate's indices", in[1], 2);
        require_dim(op, "a candidate's indices", in[1], 0, s.queries, "Lq");
        require_dim(op, "a candidate's indices", in[1], 1, s.slots, "the op's slots (k, +1 with force_local = 2)");
    }
    return s;
}

bool select_eligible(const SelectSetup& s, std::int64_t i, std::int64_t n) {
    const std::int64_t pos = s.offset + i;
    if (s.causal == 1) return n * s.block + s.block - 1 <= pos;  // fully observed
    if (s.causal == 2) return n * s.block <= pos;                // started
    return true;
}

std::int64_t forced_block(const SelectSetup& s, std::int64_t i) {
    if (s.force_local == 0) return -1;
    const std::int64_t b = (s.offset + i) / s.block;
    return b < s.candidates ? b : -1;
}

namespace {

// The eligible candidates of row i other than the forced one, in index order.
std::vector<std::int64_t> pool(const SelectSetup& s, std::int64_t i) {
    std::vector<std::int64_t> v;
    const std::int64_t f = forced_block(s, i);
    for (std::int64_t n = 0; n < s.candidates; ++n)
        if (n != f && select_eligible(s, i, n)) v.push_back(n);
    return v;
}

// Slots left after the forced block.
std::int64_t free_slots(const SelectSetup& s, std::int64_t i) {
    return forced_block(s, i) >= 0 && s.force_local == 1 ? s.k - 1 : s.k;
}

}  // namespace

std::vector<double> select_row(const SelectSetup& s, const std::vector<double>& scores, std::int64_t i) {
    std::vector<double> row(static_cast<std::size_t>(s.slots), -1.0);
    std::vector<std::int64_t> c = pool(s, i);
    for (std::int64_t n : c)
        if (std::isnan(scores[static_cast<std::size_t>(n)])) return std::vector<double>(row.size(), kSelectNaN);
    std::stable_sort(c.begin(), c.end(), [&](std::int64_t a, std::int64_t b) {
        return scores[static_cast<std::size_t>(a)] > scores[static_cast<std::size_t>(b)];
    });
    std::size_t at = 0;
    if (const std::int64_t f = forced_block(s, i); f >= 0) row[at++] = static_cast<double>(f);
    const auto take = std::min<std::size_t>(c.size(), static_cast<std::size_t>(free_slots(s, i)));
    for (std::size_t j = 0; j < take; ++j) row[at++] = static_cast<double>(c[j]);
    return row;
}

bool selection_admissible(const SelectSetup& s, const std::vector<double>& scores, const std::vector<double>& delta,
                          std::int64_t i, const std::vector<double>& chosen) {
    std::size_t at = 0;
    if (const std::int64_t f = forced_block(s, i); f >= 0 && chosen.at(at++) != static_cast<double>(f)) return false;
    const std::vector<std::int64_t> c = pool(s, i);
    const auto take = std::min<std::size_t>(c.size(), static_cast<std::size_t>(free_slots(s, i)));
    // The pool as router_admissible's experts: its position is the id.
    TokenBudget b;
    for (std::int64_t n : c) b.score.push_back(scores[static_cast<std::size_t>(n)]), b.delta.push_back(delta[static_cast<std::size_t>(n)]);
    std::vector<double> mapped;
    for (std::size_t j = 0; j < take; ++j, ++at) {
        const double id = chosen.at(at);
        if (!(id >= 0 && id < static_cast<double>(s.candidates) && id == std::floor(id))) return false;  // not an id
        const auto it = std::find(c.begin(), c.end(), static_cast<std::int64_t>(id));
        if (it == c.end()) return false;  // ineligible, or the forced block again
        mapped.push_back(static_cast<double>(it - c.begin()));
    }
    for (; at < chosen.size(); ++at)
        if (chosen[at] != -1) return false;  // more than the pool holds
    return router_admissible(b, mapped);
}

OpOutputs eval_topk_select(const Params& params, const std::vector<TensorView>& in) {
    const SelectSetup s = select_setup(params, in);
    OpOutputs out{{"indices"}, {{s.queries, s.slots}}, {{}}};
    const std::vector<double> zero(static_cast<std::size_t>(s.candidates), 0.0);
    for (std::int64_t i = 0; i < s.queries; ++i) {
        std::vector<double> sc(static_cast<std::size_t>(s.candidates));
        for (std::int64_t n = 0; n < s.candidates; ++n) sc[static_cast<std::size_t>(n)] = in[0].value(i * s.candidates + n);
        std::vector<double> row = select_row(s, sc, i);
        if (s.staged && !std::isnan(row[0])) {
            std::vector<double> theirs(static_cast<std::size_t>(s.slots));
            for (std::int64_t j = 0; j < s.slots; ++j) theirs[static_cast<std::size_t>(j)] = in[1].value(i * s.slots + j);
            if (theirs != row && selection_admissible(s, sc, zero, i, theirs)) {
                row = theirs;
                ++out.notes["indices: exact ties broken other than to the lower index (accepted)"];
            }
        }
        for (double v : row) out.values[0].push_back(from_double(v));
    }
    return out;
}

std::vector<std::vector<double>> topk_select_bound(const Params&, const std::vector<TensorView>&,
                                                   const std::vector<std::vector<double>>& exact, Format,
                                                   const std::vector<Format>&) {
    std::vector<double> b(exact.at(0).size(), 0.0);
    for (std::size_t i = 0; i < b.size(); ++i)
        if (std::isnan(exact[0][i])) b[i] = kSelectNaN;
    return {b};
}

}  // namespace conform::oracle
