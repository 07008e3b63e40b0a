#include "model/layout.hpp"

#include <cstring>
#include <deque>
#include <limits>
#include <stdexcept>

#include "model/moe_steps.hpp"

namespace conform::model {

// ---- Values and tensors ------------------------------------------------------

namespace {

// Every fp16 or bf16 value by bit pattern (decode() is exact but slow, and
// model weights are hundreds of millions of elements).
const std::vector<double>& table16(Format f) {
    static const auto make = [](Format g) {
        std::vector<double> t(65536);
        for (std::uint32_t b = 0; b < 65536; ++b) t[b] = decode(g, b);
        return t;
    };
    static const std::vector<double> fp16 = make(Format::fp16), bf16 = make(Format::bf16);
    return f == Format::fp16 ? fp16 : bf16;
}

bool dense(const TensorView& t) {
    return t.rank == 0 || TensorView::contiguous(t.data, t.format, shape_of(t)).strides == t.strides;
}

}  // namespace

Values values_of(const TensorView& t) { return values_of(t, {}); }

Values values_of(const TensorView& t, std::vector<double> storage) {
    Values v;
    v.shape = shape_of(t);
    const auto n = static_cast<std::size_t>(t.numel());
    v.v = std::move(storage);
    v.v.resize(n);  // a buffer of n already: kept as it is (every element is written below)
    if (dense(t) && (t.format == Format::fp16 || t.format == Format::bf16)) {
        const std::vector<double>& table = table16(t.format);
        const auto* p = static_cast<const std::uint16_t*>(t.data);
        for (std::size_t i = 0; i < n; ++i) v.v[i] = table[p[i]];
    } else if (dense(t) && t.format == Format::fp32) {
        const auto* p = static_cast<const float*>(t.data);
        for (std::size_t i = 0; i < n; ++i) v.v[i] = p[i];
    } else if (dense(t) && t.format == Format::fp64) {
        std::memcpy(v.v.data(), t.data, n * sizeof(double));
    } else {
        for (std::size_t i = 0; i < n; ++i) v.v[i] = t.value(static_cast<std::int64_t>(i));
    }
    return v;
}

std::vector<std::int64_t> shape_of(const TensorView& t) { return {t.shape.begin(), t.shape.begin() + t.rank}; }

Tensor to_tensor(const Values& v) {
    Tensor t(Format::fp64, v.shape);
    std::memcpy(t.data(), v.v.data(), v.v.size() * sizeof(double));
    return t;
}

Tensor to_tensor(const Values& v, Format f) {
    Tensor t(f, v.shape);
    for (std::int64_t i = 0; i < v.numel(); ++i) t.set_value(i, v.v[static_cast<std::size_t>(i)]);
    return t;
}

namespace {

// A dense tensor of x's format whose element i is x's element src_of(i),
// copied as bits (a layout change never rounds).
template <class E, class Index>
void gather(const TensorView& x, const TensorView& out, std::int64_t n, Index src_of) {
    const E* in = static_cast<const E*>(x.data);
    E* o = static_cast<E*>(out.data);
    for (std::int64_t i = 0; i < n; ++i) o[i] = in[src_of(i)];
}

template <class Index>
Tensor permuted(const TensorView& x, std::vector<std::int64_t> shape, Index src_of) {
    Tensor t(x.format, std::move(shape));
    const TensorView out = t.view();
    const std::int64_t n = t.numel();
    if (dense(x)) {  // element i of a dense view is at offset i: no per-element stride walk
        switch (info(x.format).bytes) {
            case 1: gather<std::uint8_t>(x, out, n, src_of); break;
            case 2: gather<std::uint16_t>(x, out, n, src_of); break;
            case 4: gather<std::uint32_t>(x, out, n, src_of); break;
            default: gather<std::uint64_t>(x, out, n, src_of); break;
        }
        return t;
    }
    for (std::int64_t i = 0; i < n; ++i) out.set_bits(i, x.bits(src_of(i)));
    return t;
}

void require_rank(const char* what, const std::vector<std::int64_t>& shape, std::size_t rank) {
    if (shape.size() != rank)
        throw std::invalid_argument(std::string(what) + ": expected rank " + std::to_string(rank) + ", got " +
                                    shape_string(shape));
}

}  // namespace

Tensor copy_tensor(const TensorView& t) {
    return permuted(t, shape_of(t), [](std::int64_t i) { return i; });
}

namespace {

// [A, B, D] -> [B, A, D] by rows of D: the transposition heads_major and
// tokens_major make, as block copies when x is dense.
Tensor swap_leading(const TensorView& x, std::int64_t a, std::int64_t b, std::int64_t d, std::vector<std::int64_t> shape) {
    if (!dense(x))
        return permuted(x, std::move(shape), [=](std::int64_t i) {
            const std::int64_t j = i / (a * d), k = i / d % a, e = i % d;
            return (k * b + j) * d + e;
        });
    Tensor t(x.format, std::move(shape));
    const std::size_t bytes = static_cast<std::size_t>(info(x.format).bytes), row = static_cast<std::size_t>(d) * bytes;
    const char* in = static_cast<const char*>(x.data);
    char* out = static_cast<char*>(t.data());
    for (std::int64_t j = 0; j < b; ++j)
        for (std::int64_t k = 0; k < a; ++k)
            std::memcpy(out + static_cast<std::size_t>(j * a + k) * row, in + static_cast<std::size_t>(k * b + j) * row, row);
    return t;
}

}  // namespace

Tensor heads_major(const TensorView& x, std::int64_t heads) {
    require_rank("heads_major", shape_of(x), 2);
    const std::int64_t T = x.shape[0], D = x.shape[1] / heads;
    if (D * heads != x.shape[1]) throw std::invalid_argument("heads_major: features not divisible by heads");
    return swap_leading(x, T, heads, D, {heads, T, D});  // [T, H, D] -> [H, T, D]
}

Tensor tokens_major(const TensorView& x) {
    require_rank("tokens_major", shape_of(x), 3);
    const std::int64_t H = x.shape[0], T = x.shape[1], D = x.shape[2];
    return swap_leading(x, H, T, D, {T, H * D});  // [H, T, D] -> [T, H, D]
}

Tensor concat_first(const TensorView& a, const TensorView& b) {
    std::vector<std::int64_t> shape = shape_of(a);
    if (shape.empty() || shape_of(b).size() != shape.size() || a.numel() / a.shape[0] != b.numel() / b.shape[0] ||
        a.format != b.format)
        throw std::invalid_argument("concat_first: tensors of different row shapes or formats");
    shape[0] += b.shape[0];
    const std::int64_t na = a.numel();
    Tensor t(a.format, shape);
    const TensorView out = t.view();
    if (dense(a) && dense(b)) {  // two block copies
        const std::size_t e = static_cast<std::size_t>(info(a.format).bytes);
        std::memcpy(out.data, a.data, static_cast<std::size_t>(na) * e);
        std::memcpy(static_cast<char*>(out.data) + static_cast<std::size_t>(na) * e, b.data, static_cast<std::size_t>(b.numel()) * e);
        return t;
    }
    for (std::int64_t i = 0; i < t.numel(); ++i) out.set_bits(i, i < na ? a.bits(i) : b.bits(i - na));
    return t;
}

Tensor reshaped(const TensorView& x, const std::vector<std::int64_t>& shape) {
    return permuted(x, shape, [](std::int64_t i) { return i; });
}

// The Values forms go through fp64 tensors: a double holds every value exactly.
Values heads_major(const Values& x, std::int64_t heads) { return values_of(heads_major(to_tensor(x).view(), heads).view()); }
Values tokens_major(const Values& x) { return values_of(tokens_major(to_tensor(x).view()).view()); }
Values concat_first(const Values& a, const Values& b) {
    return values_of(concat_first(to_tensor(a).view(), to_tensor(b).view()).view());
}
Values reshaped(Values x, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    if (n != x.numel()) throw std::invalid_argument("reshaped: " + shape_string(shape) + " does not hold " + shape_string(x.shape));
    x.shape = std::move(shape);
    return x;
}

// ---- op calls ---------------------------------------------------------------------

namespace {

constexpr double kL2Eps = 1e-6;  // the delta rule's q/k L2 norm (FLA's l2norm)
constexpr int kSinkhornIters = 20;

using ViewLookup = std::function<TensorView(const std::string&)>;

const std::string& convention(const Conventions& conv, const std::string& key) {
    static const Conventions defaults = default_conventions();
    auto it = conv.find(key);
    return it != conv.end() ? it->second : defaults.at(key);
}

// Conventions of the norm steps that no registry parameter carries.
std::vector<std::string> norm_unexpressed(const Conventions& conv) {
    std::vector<std::string> u;
    for (const char* k : {"eps_placement", "norm_cast"})
        if (convention(conv, k) != default_conventions().at(k)) u.push_back(std::string(k) + "=" + convention(conv, k));
    return u;
}

// Whether the model computes a step in its own narrower format under the
// convention `key` = dtype (rope_arith, attention_probs, attention_logits,
// router_arith).
bool narrow_arith(const ModelContract& c, const Conventions& conv, const std::string& key) {
    return convention(conv, key) == "dtype" && info(c.dtype).precision < info(Format::fp32).precision;
}

// A rounding into format f declared to a bound (params declared.<what>_unit
// and declared.<what>_eta): f's unit roundoff and half its smallest
// subnormal spacing.
void declare_rounding(Params& p, const std::string& what, Format f) {
    p.set("declared." + what + "_unit", unit_roundoff(f));
    p.set("declared." + what + "_eta", min_subnormal(f) / 2);
}

// The additive mask [Lq, Lk] of queries at key positions `pos`: query i
// sees keys j <= pos[i] (and j > pos[i] - window with a sliding window).
Tensor position_mask(Format f, const std::vector<std::int64_t>& pos, std::int64_t lk, std::int64_t window) {
    const auto lq = static_cast<std::int64_t>(pos.size());
    Tensor m(f, {lq, lk});
    for (std::int64_t i = 0; i < lq; ++i)
        for (std::int64_t j = 0; j < lk; ++j) {
            const std::int64_t p = pos[static_cast<std::size_t>(i)];
            const bool seen = j <= p && (window <= 0 || j > p - window);
            m.set_value(i * lk + j, seen ? 0.0 : -std::numeric_limits<double>::infinity());
        }
    return m;
}

// Halves [T, 2F] -> (first, second) as dense [T, F] tensors.
// The [T, C] tensors `parts` stacked as [N, T, C] (fp32 when their formats
// differ: exact); a single [T, C] part standing for n copies (an mHC-style
// stream input: the model input) is repeated n times.
Tensor stacked(const std::vector<TensorView>& parts, std::int64_t n) {
    if (parts.size() == 1 && parts[0].rank == 3) return copy_tensor(parts[0]);
    Format f = parts.at(0).format;
    for (const TensorView& t : parts) f = t.format == f ? f : Format::fp32;
    const std::int64_t count = parts.size() == 1 ? n : static_cast<std::int64_t>(parts.size());
    const std::int64_t m = parts[0].numel();
    Tensor out(f, {count, parts[0].shape[0], parts[0].shape[1]});
    for (std::int64_t i = 0; i < count; ++i) {
        const TensorView& t = parts[parts.size() == 1 ? 0 : static_cast<std::size_t>(i)];
        for (std::int64_t e = 0; e < m; ++e) out.set_value(i * m + e, t.value(e));
    }
    return out;
}

std::pair<Tensor, Tensor> halves(const TensorView& x) {
    const std::int64_t T = x.shape[0], F = x.shape[1] / 2;
    auto half = [&](std::int64_t off) {
        return permuted(x, {T, F}, [=](std::int64_t i) { return i / F * 2 * F + off + i % F; });
    };
    return {half(0), half(F)};
}

// A layer's KV cache in position order.  A rolling cache (kv_cache
// rolling, a local layer) that has wrapped holds position p in slot p mod W:
// unrolled, its oldest entry (slot P mod W) comes first -- unless the
// candidate reads the slots as stored (rolling_order slots, a port that
// never unrolls the ring).
Tensor cache_in_order(const TensorView& cache, const ModelContract& c, const Step& s, const Conventions& conv) {
    const std::int64_t W = c.layer_window(s.layer), R = cache.shape[0], F = R > 0 ? cache.numel() / R : 0;
    const std::int64_t start = c.kv_cache == "rolling" && W > 0 && c.cache_tokens >= W ? c.cache_tokens % W : 0;
    if (start == 0 || convention(conv, "rolling_order") == "slots") return copy_tensor(cache);
    return permuted(cache, {R, F}, [=](std::int64_t i) { return ((i / F + start) % R) * F + i % F; });
}

// Columns [off, off + w) of each of the `groups` equal column groups of
// x [T, groups * g] as a dense [T, groups * w] (exact copies).
Tensor group_columns(const TensorView& x, std::int64_t groups, std::int64_t off, std::int64_t w) {
    require_rank("group_columns", shape_of(x), 2);
    const std::int64_t T = x.shape[0], g = x.shape[1] / groups;
    if (g * groups != x.shape[1] || off < 0 || off + w > g)
        throw std::invalid_argument("group_columns: columns [" + std::to_string(off) + ", " + std::to_string(off + w) +
                                    ") of groups of " + std::to_string(g) + " of " + shape_string(shape_of(x)));
    if (off == 0 && w == g) return copy_tensor(x);
    return permuted(x, {T, groups * w}, [=](std::int64_t i) { return (i / w) * g + off + i % w; });
}

// The columns of input 0 that step s reads (Step::in_offset: a head_norm's
// or rope's part of a wider point, as MLA's kv_a and q), held in `held`; x
// itself when the step reads every column.
TensorView step_columns(const TensorView& x, const Step& s, Tensor& held) {
    if (x.shape[1] == s.shape.back()) return x;
    held = group_columns(x, s.heads, s.in_offset, s.shape.back() / s.heads);
    return held.view();
}

// DeepSeek's MLA attention (is_mla_split_attention): inputs q [T, H (dn + dr)],
// q_rope [T, H dr], kv_b [T, H (dn + dv)], k_rope [T, dr][, kv_b_cache
// [P, H (dn + dv)], cache.k_r [P, dr]] -> the attention op's Q [H, T, dn + dr]
// = [q_nope | q_rope], K [H, P + T, dn + dr] = [k_nope | k_rope] (the one
// rope key of every head; the cached rows first), V [H, P + T, dv].  Exact copies.
void mla_split_views(OpCall& call, const ModelContract& c, const Step& s, const ViewLookup& get) {
    const std::int64_t H = s.heads, dn = c.mla_nope_dim, dr = c.mla_rope_dim, dv = c.mla_v_dim, dq = dn + dr;
    const TensorView q = get(s.inputs.at(0)), qr = get(s.inputs.at(1));
    Tensor kvb_all, kr_all;
    if (s.inputs.size() > 4) {
        kvb_all = concat_first(get(s.inputs[4]), get(s.inputs[2]));
        kr_all = concat_first(get(s.inputs[5]), get(s.inputs[3]));
    }
    const TensorView kvb = s.inputs.size() > 4 ? kvb_all.view() : get(s.inputs.at(2));
    const TensorView kr = s.inputs.size() > 4 ? kr_all.view() : get(s.inputs.at(3));
    const std::int64_t T = q.shape[0], Lk = kvb.shape[0];
    if (q.format != qr.format || kvb.format != kr.format)
        throw std::invalid_argument("mla attention: the query (key) parts are stored in different formats");
    Tensor Q(q.format, {H, T, dq}), K(kvb.format, {H, Lk, dq});
    const TensorView qv = Q.view(), kv = K.view();
    for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t t = 0; t < T; ++t)
            for (std::int64_t d = 0; d < dq; ++d)
                qv.set_bits((h * T + t) * dq + d, d < dn ? q.bits(t * H * dq + h * dq + d) : qr.bits(t * H * dr + h * dr + d - dn));
        for (std::int64_t j = 0; j < Lk; ++j)
            for (std::int64_t d = 0; d < dq; ++d)
                kv.set_bits((h * Lk + j) * dq + d, d < dn ? kvb.bits(j * H * (dn + dv) + h * (dn + dv) + d) : kr.bits(j * dr + d - dn));
    }
    call.in.push_back(std::move(Q));
    call.in.push_back(std::move(K));
    call.in.push_back(heads_major(group_columns(kvb, H, dn, dv).view(), H));
}

void attention_call(OpCall& call, const ModelContract& c, const Step& s, const ViewLookup& get, const Conventions& conv) {
    const std::int64_t G = c.kv_heads, P = c.cache_tokens;
    if (is_mla_split_attention(c, s)) {
        mla_split_views(call, c, s, get);
    } else {
        call.in.push_back(heads_major(get(s.inputs[0]), s.heads));
        for (std::size_t i : {1u, 2u}) {  // k, v: cached keys first (oldest first), then the new ones
            const TensorView x = get(s.inputs[i]);
            call.in.push_back(
                heads_major(P > 0 ? concat_first(cache_in_order(get(s.inputs[i + 2]), c, s, conv).view(), x).view() : x, G));
        }
    }
    // The query positions an explicit mask states: top-left alignment (query
    // i at key i), or the sampled queries of a step restated over rows
    // (docs/diverge.md, "Scale"); none: the op's bottom-right causal mask.
    std::vector<std::int64_t> positions = c.query_positions;
    if (convention(conv, "causal") == "top_left" && P > 0)
        for (std::int64_t i = 0; i < c.tokens; ++i) positions.push_back(i);
    // The op's window counts the keys seen, the query's own included.
    std::int64_t w = c.layer_window(s.layer);
    if (w > 0 && convention(conv, "window_keys") == "w_plus_one") ++w;
    const bool masked = !positions.empty();
    call.params = Params({{"scale", c.attention_scale}, {"causal", masked ? 0.0 : 1.0}, {"window", masked ? 0.0 : static_cast<double>(w)},
                          {"softcap", c.attention_softcap}});
    // attention_probs = dtype: the weights P rounded to the model's format
    // before P V (PyTorch's CPU flash attention in bf16/fp16): the bound's
    // declared p_unit / p_eta (oracle/attention_bound.hpp), as the CUDA
    // kernels declare theirs.  No built-in kernel rounds P: run_kernels refuses.
    if (narrow_arith(c, conv, "attention_probs")) {
        declare_rounding(call.params, "p", c.dtype);
        call.unexpressed.push_back("attention_probs=dtype");
    }
    // attention_logits = dtype: the logits rounded to it after every stage
    // (PyTorch's eager attention): declared s_unit / s_eta.
    if (narrow_arith(c, conv, "attention_logits")) {
        declare_rounding(call.params, "s", c.dtype);
        call.unexpressed.push_back("attention_logits=dtype");
    }
    if (masked) call.in.push_back(position_mask(call.in[0].format(), positions, call.in[1].shape()[1], w));
    call.out_heads = s.heads;
}

// q, k [T, H, d] repeated to the value heads Hv (head h of the result is
// head h / (Hv / H): repeat_interleave), as the op takes one head count.
Tensor value_headed(const TensorView& x, std::int64_t T, std::int64_t H, std::int64_t Hv, std::int64_t d) {
    if (H == Hv) return reshaped(x, {T, H, d});
    const std::int64_t r = Hv / H;
    return permuted(x, {T, Hv, d}, [=](std::int64_t i) { return (i / (Hv * d)) * H * d + ((i / d) % Hv) / r * d + i % d; });
}

void delta_call(OpCall& call, const ModelContract& c, const Step& s, const ViewLookup& get) {
    const std::int64_t T = c.tokens, H = c.linear_heads, Hv = c.value_heads(), d = c.linear_head_dim;
    for (std::size_t i = 0; i < 2; ++i) call.in.push_back(value_headed(get(s.inputs[i]), T, H, Hv, d));
    call.in.push_back(reshaped(get(s.inputs[2]), {T, Hv, d}));
    if (s.kind == StepKind::kda) call.in.push_back(reshaped(get(s.inputs[3]), {T, Hv, d}));
    else call.in.push_back(copy_tensor(get(s.inputs[3])));
    call.in.push_back(copy_tensor(get(s.inputs[4])));
    if (s.inputs.size() > 5) call.in.push_back(copy_tensor(get(s.inputs[5])));
    call.params = Params({{"l2norm", 0}, {"l2_eps", kL2Eps}, {"scale", 0}, {"chunk", 64}});
}

void norm_call(OpCall& call, const ModelContract& c, const Step& s, const ViewLookup& get, const Conventions& conv) {
    const TensorView x = get(s.inputs[0]);
    if (s.kind == StepKind::l2_head) {
        call.params = Params({{"eps", kL2Eps}});
        call.in.push_back(reshaped(x, {x.numel() / (x.shape[1] / s.heads), x.shape[1] / s.heads}));
        return;
    }
    const bool rms = s.kind == StepKind::head_norm || c.norm == NormKind::rms_norm;
    call.params = rms ? Params({{"eps", c.eps}, {"zero_centered", norm_offset(c, s) ? 1.0 : 0.0}}) : Params({{"eps", c.eps}});
    if (s.kind == StepKind::head_norm) {
        Tensor held;
        call.in.push_back(reshaped(step_columns(x, s, held), {x.shape[0] * s.heads, s.shape.back() / s.heads}));
    } else {
        call.in.push_back(copy_tensor(x));
    }
    for (const auto& w : s.weights) call.in.push_back(copy_tensor(get(w)));
    call.unexpressed = norm_unexpressed(conv);
}

// A weight of step s by the end of its name, copied; an empty tensor (an
// absent optional input of the op) when the step has none.
Tensor weight_or_empty(const Step& s, const ViewLookup& get, const std::string& tail) {
    for (const std::string& w : s.weights)
        if (w.size() > tail.size() && w.compare(w.size() - tail.size(), tail.size(), tail) == 0) return copy_tensor(get(w));
    return Tensor(Format::fp32, {0});
}

// router: moe_router's x, w [C, E][, bias]; moe: the layer op's inputs in
// its order (numerics/moe_slots.hpp), absent optional ones empty in place.
void moe_call(OpCall& call, const ModelContract& c, const Step& s, const ViewLookup& get, const Conventions& conv) {
    call.in.push_back(copy_tensor(get(s.inputs[0])));
    if (s.kind == StepKind::router) {
        call.params = router_params(c);
        // router_arith = dtype, the router in the model's format (Hugging
        // Face's gate, an nn.Linear in the hidden dtype): the logits rounded
        // to it before the FP32 scores (the score budget widens by half an
        // ulp of each), the weights possibly returned rounded to it (Qwen3-MoE;
        // half an ulp more on each, router_step_bound).  The built-in router
        // forms FP32 logits: run_kernels refuses.
        if (narrow_arith(c, conv, "router_arith")) {
            declare_rounding(call.params, "logit", c.dtype);
            declare_rounding(call.params, "weight", c.dtype);
            call.unexpressed.push_back("router_arith=dtype");
        }
        for (const auto& w : s.weights) call.in.push_back(copy_tensor(get(w)));
        return;
    }
    call.params = moe_layer_params(c);
    // glu_arith = separate in a bf16/fp16 model: each expert's SiLU stored in
    // the model's format before the product (Hugging Face's act_fn(gate) *
    // up); the built-in kernels keep it FP32: run_kernels refuses.
    if (convention(conv, "glu_arith") == "separate" && info(c.dtype).precision < info(Format::fp32).precision) {
        declare_rounding(call.params, "act", c.dtype);
        call.unexpressed.push_back("glu_arith=separate");
    }
    const bool latent = c.mlp == MlpKind::latent_moe;
    std::vector<std::string> tails{".router.weight"};
    if (latent) tails.insert(tails.end(), {".latent.down.weight", ".latent.up.weight"});
    tails.insert(tails.end(), {".experts.gate_up.weight", ".experts.down.weight", ".shared.gate_up.weight", ".shared.down.weight"});
    if (latent) tails.push_back(".latent_norm.weight");
    tails.push_back(".router.bias");
    for (const std::string& t : tails) call.in.push_back(weight_or_empty(s, get, t));
}

}  // namespace

Values step_input0(const Values& x, const Step& s) {
    if (s.heads <= 0 || x.shape.size() != 2 || s.shape.empty() || x.shape[1] == s.shape.back()) return x;
    return values_of(group_columns(to_tensor(x).view(), s.heads, s.in_offset, s.shape.back() / s.heads).view());
}

const std::string& convention_value(const Conventions& conv, const std::string& key) { return convention(conv, key); }

std::string matmul_weight(const Step& s, const Conventions& conv) {
    const std::string& w = s.weights.at(0);
    return w == "lm_head.weight" && convention(conv, "lm_head") == "embed" ? "embed.weight" : w;
}

std::string step_op(const ModelContract& c, const Step& s, const Conventions& conv) {
    switch (s.kind) {
        case StepKind::norm: return c.norm == NormKind::rms_norm ? "rms_norm" : "layer_norm";
        case StepKind::head_norm: return "rms_norm";
        case StepKind::l2_head: return "l2_norm";
        case StepKind::rope: return "rope";
        case StepKind::attention: return "attention";
        case StepKind::sigmoid: return "sigmoid";
        case StepKind::silu: return "silu";
        case StepKind::log_decay: return "softplus";
        case StepKind::glu:
            switch (c.mlp) {
                case MlpKind::situ_glu: return "situ_glu";
                case MlpKind::geglu: return "geglu";  // tanh: the convention (eval and kernels read it)
                case MlpKind::swiglu_clamp: return "swiglu_clamp";
                default: return "swiglu";
            }
        case StepKind::gelu: return convention(conv, "gelu") == "tanh" ? "gelu_tanh" : "gelu_erf";
        case StepKind::gdn: return "gdn";
        case StepKind::kda: return "kda";
        case StepKind::sinkhorn: return "sinkhorn";
        case StepKind::softcap: return "softcap";
        case StepKind::mla: return "mla";
        case StepKind::int8_matmul: return "int8_gemm";  // a mutant of it can be substituted
        case StepKind::attn_res: return "block_attn_res";
        case StepKind::gated_read: return "gated_residual";
        case StepKind::router: return "moe_router";
        case StepKind::moe:
        case StepKind::latent_out: return c.mlp == MlpKind::latent_moe ? "latent_moe" : "moe";
        default: return "";
    }
}

namespace {

// The contract's frequency scaling as the rope op's parameters (docs/rope.md).
void add_rope_scaling(Params& p, const ModelContract& c) {
    static const std::map<std::string, double> kinds{{"none", 0}, {"linear", 1}, {"llama3", 2}, {"yarn", 3}};
    p.set("scaling", kinds.at(c.rope_scaling));
    if (c.rope_scaling == "none") return;
    p.set("factor", c.rope_factor);
    p.set("low_freq_factor", c.rope_low_freq_factor);
    p.set("high_freq_factor", c.rope_high_freq_factor);
    p.set("original_max_pos", c.rope_original_max_pos);
    p.set("beta_fast", c.rope_beta_fast);
    p.set("beta_slow", c.rope_beta_slow);
    p.set("truncate", c.rope_truncate ? 1 : 0);
    p.set("attention_factor", c.rope_attention_factor);
}

OpCall make_call(const ModelContract& c, const Step& s, const ViewLookup& get, const Conventions& conv) {
    OpCall call;
    call.op = step_op(c, s, conv);
    switch (s.kind) {
        case StepKind::norm:
        case StepKind::head_norm:
        case StepKind::l2_head: norm_call(call, c, s, get, conv); break;
        case StepKind::rope: {
            const bool interleaved = convention(conv, "rope_pairing") == "interleaved";
            // Gemma 3: local (sliding-window) layers rotate with their own base, unscaled.
            const bool local = c.rope_local_base > 0 && c.layer_window(s.layer) > 0;
            call.params = Params({{"pairing", interleaved ? 0.0 : 1.0},
                                  {"base", local ? c.rope_local_base : c.rope_base},
                                  {"ntk_scale", 1},
                                  // an MLA layer rotates all of its d_r rope dims
                                  {"rotary_dim", c.layer_kind(s.layer) == AttentionKind::mla ? 0.0 : static_cast<double>(c.rotary_dim)},
                                  {"offset", static_cast<double>(c.cache_tokens)}});
            if (!local) add_rope_scaling(call.params, c);
            Tensor held;  // the rope parts of MLA's q and kv_a: input 0's columns
            call.in.push_back(heads_major(step_columns(get(s.inputs[0]), s, held), s.heads));
            call.out_heads = s.heads;
            // rope_arith = dtype or fp32_angles: only the budget differs
            // (step_bound_structured.cpp), in fp32 too (FP32 angles, where the
            // default's are double); no built-in kernel rotates that way:
            // run_kernels refuses.
            if (convention(conv, "rope_arith") != "fp32") call.unexpressed.push_back("rope_arith=" + convention(conv, "rope_arith"));
            break;
        }
        case StepKind::attention: attention_call(call, c, s, get, conv); break;
        case StepKind::mla:
            call.in.push_back(copy_tensor(get(s.inputs[0])));
            for (const auto& w : s.weights) call.in.push_back(copy_tensor(get(w)));
            for (std::size_t i = 1; i < s.inputs.size(); ++i) call.in.push_back(copy_tensor(get(s.inputs[i])));
            call.params = Params({{"form", c.mla_form == "absorbed" ? 1.0 : 0.0},
                                  {"causal", 1},
                                  {"scale", c.attention_scale},
                                  {"base", c.rope_base},
                                  {"pairing", convention(conv, "rope_pairing") == "interleaved" ? 0.0 : 1.0},
                                  {"offset", static_cast<double>(c.cache_tokens)},
                                  {"cache_rotated", 1}});
            call.out_heads = s.heads;
            break;
        case StepKind::sigmoid:
        case StepKind::silu:
        case StepKind::log_decay:
        case StepKind::softcap:
            call.negate = s.kind == StepKind::log_decay;
            if (s.kind == StepKind::softcap) call.params = Params({{"beta", c.logit_softcap}});
            call.in.push_back(copy_tensor(get(s.inputs[0])));
            break;
        case StepKind::glu: {
            auto [first, second] = halves(get(s.inputs[0]));
            const bool gate_first = convention(conv, "gate_order") == "gate_up";
            if (c.mlp == MlpKind::situ_glu) call.params = Params({{"beta1", c.situ_beta1}, {"beta2", c.situ_beta2}});
            if (c.mlp == MlpKind::swiglu_clamp) call.params = Params({{"limit", c.swiglu_limit}});
            if (c.mlp == MlpKind::geglu && convention(conv, "gelu") == "tanh") call.unexpressed.push_back("gelu=tanh");
            call.in.push_back(gate_first ? std::move(first) : std::move(second));
            call.in.push_back(gate_first ? std::move(second) : std::move(first));
            break;
        }
        case StepKind::gelu:
            call.in.push_back(copy_tensor(get(s.inputs[0])));
            break;
        case StepKind::gdn:
        case StepKind::kda: delta_call(call, c, s, get); break;
        case StepKind::sinkhorn:
            call.params = Params({{"iters", kSinkhornIters}});
            call.in.push_back(copy_tensor(get(s.weights[0])));
            break;
        case StepKind::router:
        case StepKind::moe:
        case StepKind::latent_out: moe_call(call, c, s, get, conv); break;
        case StepKind::attn_res:
        case StepKind::gated_read: {  // the sources (streams) stacked [N, T, C], then the weights
            std::vector<TensorView> parts;
            for (const auto& in : s.inputs) parts.push_back(get(in));
            call.in.push_back(stacked(parts, c.hc_streams));
            for (const auto& w : s.weights) call.in.push_back(copy_tensor(get(w)));
            call.params = Params({{"eps", c.eps}});
            break;
        }
        case StepKind::embed:
        case StepKind::matmul:
        case StepKind::mul:
        case StepKind::add:
        case StepKind::hc_mix:
        case StepKind::hc_update:
        case StepKind::short_conv:
        case StepKind::bounded_decay:
        case StepKind::softplus_decay:
        case StepKind::gated_write:
        case StepKind::int8_matmul: break;  // computed by the model code (no registry op call)
    }
    return call;
}

}  // namespace

OpCall op_call(const ModelContract& c, const Step& s, const TensorLookup& get, const Conventions& all) {
    const Conventions conv = step_conventions(all, s);
    return make_call(c, s, [&](const std::string& n) { return get(n).view(); }, conv);
}

OpCall op_call(const ModelContract& c, const Step& s, const Lookup& get, const Conventions& all) {
    const Conventions conv = step_conventions(all, s);
    std::deque<Tensor> held;  // fp64 copies alive for the duration of the call
    return make_call(
        c, s,
        [&](const std::string& n) {
            held.push_back(to_tensor(get(n)));
            return held.back().view();
        },
        conv);
}

Tensor point_from_op(const OpCall& call, const Step& s, const TensorView& out0) {
    Tensor t = call.out_heads > 0 ? tokens_major(out0) : reshaped(out0, s.shape);
    if (call.negate) {
        const TensorView v = t.view();
        const int sign_bit = info(t.format()).bytes * 8 - 1;
        for (std::int64_t i = 0; i < v.numel(); ++i) v.set_bits(i, v.bits(i) ^ (std::uint64_t{1} << sign_bit));
    }
    return t;
}

Values point_from_op(const OpCall& call, const Step& s, const Values& out0) {
    return values_of(point_from_op(call, s, to_tensor(out0).view()).view());
}

}  // namespace conform::model
