// Generators and properties of block_sparse_attention
// (docs/block_sparse_attention.md, "Properties").
#include <algorithm>
#include <cmath>
#include <set>

#include "oracle/attention.hpp"
#include "oracle/attention_bound.hpp"
#include "oracle/block_sparse.hpp"
#include "properties/common.hpp"

namespace conform::props {

// dims = {Hq, G, L, D, Gi, Di, ties}; Dv = D.  families = {q, k and v's: the
// attention op's, whose logits stay moderate; the index inputs': every
// family, the budget leaving what may overflow undefined}.  MSA takes Gi = G.  ties: MSA
// index keys repeat block 0's in every block (every block scores alike);
// QSA index queries are 0 at even positions (every score 0).
rc::Gen<CaseSpec> gen_block_sparse_spec(Format fmt, GenOptions opt) {
    return rc::gen::apply(
        [fmt](int mode, std::int64_t g, std::int64_t per, std::int64_t l, std::int64_t d, std::int64_t gi, std::int64_t di,
              std::int64_t r, std::int64_t k, int ties, double scale, std::int64_t rope_dim, double base, double eps,
              Family fam, Family index_fam, int scale_exp, std::uint64_t seed, int specials) {
            if (mode == 0) gi = g;
            rope_dim = std::min(rope_dim, di);
            Params p({{"mode", static_cast<double>(mode)},
                      {"block", static_cast<double>(r)},
                      {"k", static_cast<double>(k)},
                      {"scale", scale},
                      {"rope_dim", static_cast<double>(rope_dim)},
                      {"rope_base", base},
                      {"eps", eps}});
            CaseSpec spec = structured_spec("block_sparse_attention", fmt, {g * per, g, l, d, gi, di, ties}, p, fam,
                                            scale_exp, seed, specials);
            spec.families = {fam, index_fam};
            return spec;
        },
        rc::gen::inRange(0, 2), rc::gen::element<std::int64_t>(1, 2), rc::gen::element<std::int64_t>(1, 2),
        rc::gen::element<std::int64_t>(1, 5, 9, 16, 23), rc::gen::element<std::int64_t>(2, 4),
        rc::gen::element<std::int64_t>(1, 2, 3), rc::gen::element<std::int64_t>(4, 8),
        rc::gen::element<std::int64_t>(1, 2, 3, 4), rc::gen::element<std::int64_t>(1, 2, 3, 8), rc::gen::element(0, 0, 1),
        rc::gen::element(0.0, 0.0, 0.7), rc::gen::element<std::int64_t>(0, 2, 4, 8), rc::gen::element(10000.0, 100.0),
        rc::gen::element(1e-6, 0.0, 1e-3), rc::gen::elementOf(attention_families()),
        rc::gen::elementOf(value_families()), rc::gen::inRange(-3, 2),
        rc::gen::arbitrary<std::uint64_t>(), opt.specials ? rc::gen::inRange(1, 3) : rc::gen::just(0));
}

Case build_block_sparse_case(const CaseSpec& spec) {
    Case c = start_case(spec);
    std::mt19937_64 rng(spec.seed);
    const auto& dm = spec.dims;
    const std::int64_t hq = dm.at(0), g = dm.at(1), l = dm.at(2), d = dm.at(3), gi = dm.at(4), di = dm.at(5);
    const bool ties = dm.at(6) != 0;
    const Format f = spec.format;
    const Family fam = spec.families.at(0), index_fam = spec.families.size() > 1 ? spec.families[1] : fam;
    const std::vector<std::vector<std::int64_t>> shapes{{hq, l, d}, {g, l, d}, {g, l, d}, {gi, l, di}, {l, di}};
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        Tensor t(f, shapes[i]);
        fill_values(t, i < 3 ? fam : index_fam, spec, i, rng);
        c.inputs.push_back(std::move(t));
    }
    const auto r = static_cast<std::int64_t>(spec.params.get("block", 4));
    if (ties && spec.params.get("mode", 0) == 0)
        for (std::int64_t j = r; j < l; ++j)
            for (std::int64_t i = 0; i < di; ++i) c.inputs[4].set_bits(j * di + i, c.inputs[4].bits((j % r) * di + i));
    if (ties && spec.params.get("mode", 0) == 1)
        for (std::int64_t h = 0; h < gi; ++h)
            for (std::int64_t t = 0; t < l; t += 2)
                for (std::int64_t i = 0; i < di; ++i) c.inputs[3].set_value((h * l + t) * di + i, 0.0);
    // Special values: NaNs in q, k, v (as the attention op's generators: an
    // infinity there makes FP32 logits whose overflow the attention bound
    // does not model), every class in the index inputs.
    for (std::size_t i = 0; i < c.inputs.size(); ++i) {
        Tensor& t = c.inputs[i];
        if (i >= 3) inject_specials(t, spec.specials, rng);
        else
            for (int n = 0; n < spec.specials && t.numel(); ++n) t.set_value(static_cast<std::int64_t>(rng() % t.numel()), NAN);
    }
    // The zero-centred norm weights: within [-1/2, 1/2] (1 + w of order one).
    CaseSpec unit = spec;
    unit.scale_exp = -1;
    for (std::size_t i = 5; i < 7; ++i) {
        Tensor w(f, {di});
        fill_values(w, Family::uniform, unit, i, rng);
        c.inputs.push_back(std::move(w));
    }
    return c;
}

namespace {

Case bsa_plain_case(const KernelInfo& k) { return build_case(in_domain(*gen_block_sparse_spec(k.in, GenOptions{}))); }

std::string bsa_id(double v) { return std::isnan(v) ? "NaN" : std::to_string(static_cast<long long>(v)); }

// Every selected id is the query's own block (in slot 0) or a block its
// causal limit allows (MSA: started before the query; QSA: fully observed).
Testable bsa_never_looks_ahead(const KernelInfo& k) {
    return [&k] {
        const Case c = bsa_plain_case(k);
        const oracle::BlockSparseSetup s = oracle::block_sparse_setup(c.params, c.views());
        const Tensor idx = run_kernel(k, c.params, c.views()).at(1);
        const std::int64_t slots = s.select.slots;
        for (std::int64_t g = 0; g < s.sel_groups; ++g)
            for (std::int64_t t = 0; t < s.len; ++t)
                for (std::int64_t j = 0; j < slots; ++j) {
                    const double id = idx.value((g * s.len + t) * slots + j);
                    if (std::isnan(id) || id == -1) continue;
                    const auto b = static_cast<std::int64_t>(id);
                    const bool forced = j == 0 && b == oracle::forced_block(s.select, t);
                    if (!forced && !(id == std::floor(id) && b >= 0 && b < s.blocks && b != t / s.block &&
                                     oracle::select_eligible(s.select, t, b)))
                        RC_FAIL("group " + std::to_string(g) + ", query " + std::to_string(t) + " slot " + std::to_string(j) +
                                ": block " + bsa_id(id) + " is past its causal limit");
                }
    };
}

// Slot 0 holds the query's own block floor(t / block) (MSA's forced local
// block in its k slots; QSA's partial block before them).
Testable bsa_own_block_first(const KernelInfo& k) {
    return [&k] {
        const Case c = bsa_plain_case(k);
        const oracle::BlockSparseSetup s = oracle::block_sparse_setup(c.params, c.views());
        const Tensor idx = run_kernel(k, c.params, c.views()).at(1);
        for (std::int64_t g = 0; g < s.sel_groups; ++g)
            for (std::int64_t t = 0; t < s.len; ++t) {
                const double id = idx.value((g * s.len + t) * s.select.slots);
                if (std::isnan(id)) continue;
                if (id != static_cast<double>(t / s.block))
                    RC_FAIL("group " + std::to_string(g) + ", query " + std::to_string(t) + ": slot 0 holds " + bsa_id(id) +
                            ", its own block is " + std::to_string(t / s.block));
            }
    };
}

// With k above the number of blocks every visible token is attended: o is
// dense causal attention, within the attention op's bound of its oracle.
Testable bsa_dense_when_k_covers(const KernelInfo& k) {
    return [&k] {
        Case c = bsa_plain_case(k);
        const oracle::BlockSparseSetup s0 = oracle::block_sparse_setup(c.params, c.views());
        c.params.set("k", static_cast<double>(s0.blocks + 1));
        const std::vector<Tensor> got = run_kernel(k, c.params, c.views());
        const std::int64_t slots = got[1].shape()[2];
        Params ap;
        ap.set("scale", c.params.get("scale", 0));
        ap.set("causal", 1);
        const std::vector<TensorView> in{c.inputs[0].view(), c.inputs[1].view(), c.inputs[2].view()};
        const oracle::OpOutputs dense = oracle::eval_attention(ap, in);
        const std::vector<double> b =
            oracle::attention_bound(ap, in, dense, oracle::declared_flash_model(Params{}, {k.out, Format::fp32}));
        const std::int64_t per = s0.hq / s0.groups;
        std::int64_t judged = 0;
        for (std::int64_t h = 0; h < s0.hq; ++h)
            for (std::int64_t t = 0; t < s0.len; ++t) {
                const std::int64_t g = s0.mode == 0 ? h / per : 0;
                if (std::isnan(got[1].value((g * s0.len + t) * slots))) continue;  // a NaN score: no selection
                for (std::int64_t d = 0; d < s0.dv; ++d) {
                    const std::int64_t e = (h * s0.len + t) * s0.dv + d;
                    const double want = oracle::to_double(dense.values[0][static_cast<std::size_t>(e)]), bound = b[static_cast<std::size_t>(e)];
                    const double x = got[0].value(e);
                    if (!std::isfinite(want) || !std::isfinite(bound) || !std::isfinite(x)) continue;
                    ++judged;
                    if (!(std::fabs(x - want) <= bound))
                        RC_FAIL("head " + std::to_string(h) + ", query " + std::to_string(t) + ", o[" + std::to_string(d) +
                                "] = " + hexfloat(x) + ": dense causal attention gives " + hexfloat(want) +
                                ", beyond its bound " + hexfloat(bound) + "\n" + show_inputs(*c.op, c.params, c.views()));
                }
            }
        RC_PRE(judged > 0);
    };
}

// The first L' tokens alone select as the first L' rows of the whole call:
// appending tokens never changes an earlier query's blocks.
Tensor bsa_prefix(const Tensor& t, int axis, std::int64_t n) {
    std::vector<std::int64_t> shape = t.shape();
    const std::int64_t outer = axis == 0 ? 1 : shape[0], inner = t.numel() / (outer * shape[static_cast<std::size_t>(axis)]);
    const std::int64_t full = shape[static_cast<std::size_t>(axis)];
    shape[static_cast<std::size_t>(axis)] = n;
    Tensor out(t.format(), shape);
    for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t i = 0; i < n * inner; ++i) out.set_bits(o * n * inner + i, t.bits(o * full * inner + i));
    return out;
}

Testable bsa_decode_equals_prefill(const KernelInfo& k) {
    return [&k] {
        const Case c = bsa_plain_case(k);
        const std::int64_t l = c.inputs[0].shape()[1];
        const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, l + 1);
        const Tensor all = run_kernel(k, c.params, c.views()).at(1);
        std::vector<Tensor> part;
        for (int i = 0; i < 4; ++i) part.push_back(bsa_prefix(c.inputs[static_cast<std::size_t>(i)], 1, n));
        part.push_back(bsa_prefix(c.inputs[4], 0, n));
        part.push_back(c.inputs[5]), part.push_back(c.inputs[6]);
        std::vector<TensorView> views;
        for (const Tensor& t : part) views.push_back(t.view());
        const Tensor few = run_kernel(k, c.params, views).at(1);
        const std::int64_t groups = all.shape()[0], slots = all.shape()[2];
        for (std::int64_t g = 0; g < groups; ++g)
            for (std::int64_t t = 0; t < n; ++t)
                for (std::int64_t j = 0; j < slots; ++j)
                    if (few.bits((g * n + t) * slots + j) != all.bits((g * l + t) * slots + j))
                        RC_FAIL("group " + std::to_string(g) + ", query " + std::to_string(t) + " slot " + std::to_string(j) +
                                ": " + bsa_id(all.value((g * l + t) * slots + j)) + " with " + std::to_string(l) +
                                " tokens, " + bsa_id(few.value((g * n + t) * slots + j)) + " with the first " +
                                std::to_string(n));
    };
}

// Heads share their group's selection: swapping two query heads of one
// group swaps their o rows bit for bit and leaves the indices unchanged.
Testable bsa_group_shares_selection(const KernelInfo& k) {
    return [&k] {
        Case c = bsa_plain_case(k);
        const std::int64_t hq = c.inputs[0].shape()[0], g = c.inputs[1].shape()[0], per = hq / g;
        RC_PRE(per > 1);
        const std::int64_t grp = *rc::gen::inRange<std::int64_t>(0, g);
        const std::int64_t a = grp * per, b = a + *rc::gen::inRange<std::int64_t>(1, per);
        const std::vector<Tensor> before = run_kernel(k, c.params, c.views());
        const std::int64_t row = c.inputs[0].numel() / hq, orow = before[0].numel() / hq;
        for (std::int64_t i = 0; i < row; ++i) {
            const std::uint64_t x = c.inputs[0].bits(a * row + i);
            c.inputs[0].set_bits(a * row + i, c.inputs[0].bits(b * row + i));
            c.inputs[0].set_bits(b * row + i, x);
        }
        const std::vector<Tensor> after = run_kernel(k, c.params, c.views());
        for (std::int64_t i = 0; i < before[1].numel(); ++i)
            if (before[1].bits(i) != after[1].bits(i)) RC_FAIL("indices[" + std::to_string(i) + "] changed when heads were swapped");
        for (std::int64_t i = 0; i < orow; ++i)
            if (before[0].bits(a * orow + i) != after[0].bits(b * orow + i) || before[0].bits(b * orow + i) != after[0].bits(a * orow + i))
                RC_FAIL("o of heads " + std::to_string(a) + " and " + std::to_string(b) + " did not swap (element " +
                        std::to_string(i) + ")");
    };
}

}  // namespace

void add_block_sparse_properties(std::vector<PropertyDef>& v) {
    auto bsa = [](const OpSpec& op) { return op.name == "block_sparse_attention"; };
    auto gated = [](const KernelInfo& k) { return k.role != Role::baseline; };
    v.push_back({"never_looks_ahead",
                 "every selected block is the query's own (slot 0) or one its causal limit allows (MSA: started, QSA: "
                 "fully observed)",
                 bsa, of_kernel(bsa_never_looks_ahead), 1, {}, {"indices"}});
    v.push_back({"own_block_first", "slot 0 holds the query's own block floor(t / block) (MSA's forced local block, "
                                    "QSA's partial block)",
                 bsa, of_kernel(bsa_own_block_first), 1, {}, {"indices"}});
    v.push_back({"dense_when_k_covers",
                 "with k above the number of blocks o is dense causal attention (within the attention op's bound of "
                 "its oracle)",
                 bsa, of_kernel(bsa_dense_when_k_covers), 2, gated});
    v.push_back({"selection_decode_equals_prefill", "the first L' tokens alone select as the first L' rows of the whole call", bsa,
                 of_kernel(bsa_decode_equals_prefill), 1, {}, {"indices"}});
    v.push_back({"group_shares_selection",
                 "swapping two query heads of a group swaps their o rows bit for bit and leaves the indices unchanged",
                 bsa, of_kernel(bsa_group_shares_selection), 1, {}, {"indices"}});
}

}  // namespace conform::props
