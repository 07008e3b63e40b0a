#include "numerics/moe_slots.hpp"

#include <algorithm>
#include <stdexcept>

#include "numerics/shape_check.hpp"

namespace conform::moe_slots {
namespace {

// A candidate's outputs are three rank-2 tensors; no input after the
// required ones has rank 2 (the shared experts have rank 3, the rest 1).
bool staged_list(const std::vector<TensorView>& in, std::size_t required) {
    if (in.size() < required + n_outputs) return false;
    for (std::size_t i = in.size() - n_outputs; i < in.size(); ++i)
        if (in[i].rank != 2) return false;
    return true;
}

void check_expert(const std::string& op, const char* gu_name, const char* dn_name, const TensorView& gu,
                  const TensorView& dn, std::int64_t width, const char* why) {
    require_rank(op, gu_name, gu, 3);
    require_rank(op, dn_name, dn, 3);
    require_dim(op, gu_name, gu, 1, width, why);
    if (gu.shape[2] < 2 || gu.shape[2] % 2 != 0)
        throw std::invalid_argument(op + ": input '" + gu_name + "' dimension 2 is " + std::to_string(gu.shape[2]) +
                                    ", expected an even 2F >= 2 (gate columns, then up columns)");
    require_dim(op, dn_name, dn, 0, gu.shape[0], std::string("experts of ") + gu_name);
    require_dim(op, dn_name, dn, 1, gu.shape[2] / 2, std::string("F: half the columns of ") + gu_name);
    require_dim(op, dn_name, dn, 2, width, why);
}

}  // namespace

const std::vector<Slot>& slots_of(bool latent) {
    static const std::vector<Slot> moe{x, router, gate_up, down, shared_gate_up, shared_down, bias};
    static const std::vector<Slot> lat{x,         router,         latent_down, latent_up, gate_up,
                                       down,      shared_gate_up, shared_down, norm_weight, bias};
    return latent ? lat : moe;
}

Layer read_layer(const std::string& op, const Params& p, const std::vector<TensorView>& in) {
    Layer l;
    l.latent = op == "latent_moe";
    const std::vector<Slot>& order = slots_of(l.latent);
    const std::size_t required = l.latent ? 6 : 4;
    l.staged = staged_list(in, required);
    const std::size_t given = in.size() - (l.staged ? n_outputs : 0);
    if (given < required || given > order.size())
        throw std::invalid_argument(op + ": expects " + std::to_string(required) + " to " + std::to_string(order.size()) +
                                    " inputs, got " + std::to_string(given));
    l.at.fill(-1);
    const std::vector<std::string>& names = find_op(op)->inputs;  // in the order of `order`
    for (std::size_t i = 0; i < given; ++i)
        if (!(optional_input(names[i]) && in[i].numel() == 0)) l.at[order[i]] = static_cast<int>(i);
    l.outputs_at = given;
    l.act_unit = p.get("declared.act_unit", 0), l.act_eta = p.get("declared.act_eta", 0);
    l.exp_ulps = std::max(1.0, p.get("declared.exp_ulps", 1));
    const TensorView& xv = l.in(in, x);
    require_rank(op, "x", xv, 2);
    l.t = xv.shape[0], l.c = xv.shape[1];
    require_rank(op, "router", l.in(in, router), 2);
    require_dim(op, "router", l.in(in, router), 0, l.c, "C of x");
    l.e = l.in(in, router).shape[1];
    l.w = l.c;
    if (l.latent) {
        const TensorView &ld = l.in(in, latent_down), &lu = l.in(in, latent_up);
        require_rank(op, "latent_down", ld, 2);
        require_dim(op, "latent_down", ld, 0, l.c, "C of x");
        l.w = ld.shape[1];
        require_rank(op, "latent_up", lu, 2);
        require_dim(op, "latent_up", lu, 0, l.w, "the latent width of latent_down");
        require_dim(op, "latent_up", lu, 1, l.c, "C of x");
    }
    check_expert(op, "gate_up", "down", l.in(in, gate_up), l.in(in, down), l.w, l.latent ? "the latent width" : "C of x");
    require_dim(op, "gate_up", l.in(in, gate_up), 0, l.e, "E: the router's columns");
    l.f = l.in(in, gate_up).shape[2] / 2;
    if (l.has(shared_gate_up) != l.has(shared_down))
        throw std::invalid_argument(op + ": inputs 'shared_gate_up' and 'shared_down' come together");
    l.shared = l.has(shared_gate_up);
    if (l.shared) {
        check_expert(op, "shared_gate_up", "shared_down", l.in(in, shared_gate_up), l.in(in, shared_down), l.c, "C of x");
        l.s = l.in(in, shared_gate_up).shape[0], l.g = l.in(in, shared_gate_up).shape[2] / 2;
    }
    if (l.has(norm_weight)) {
        require_rank(op, "norm_weight", l.in(in, norm_weight), 1);
        require_dim(op, "norm_weight", l.in(in, norm_weight), 0, l.w, "the latent width");
    }
    if (l.has(bias)) {
        require_rank(op, "selection_bias", l.in(in, bias), 1);
        require_dim(op, "selection_bias", l.in(in, bias), 0, l.e, "E: the router's columns");
    }
    l.k = static_cast<std::int64_t>(p.get("k", 2));
    if (l.k < 1 || l.k > l.e)
        throw std::invalid_argument(op + ": parameter k = " + std::to_string(l.k) + " outside [1, E = " + std::to_string(l.e) + "]");
    l.normalized = l.latent && p.get("normalized", 1) != 0;
    l.eps = p.get("eps", 1e-6);
    // FP32's eps must stay a normal number: below 2^-126 a kernel's float(eps)
    // may be 0 and RMSNorm(0) = 0 / 0.
    if (l.normalized && !(l.eps >= 0x1p-126 && l.eps <= 0x1.fffffep+127))
        throw std::invalid_argument(op + ": parameter eps must lie in [2^-126, FP32's max] (it keeps RMSNorm(u) "
                                         "defined at u = 0 in FP32)");
    if (l.staged) {
        const std::int64_t want[n_outputs][2] = {{l.t, l.c}, {l.t, l.k}, {l.t, l.k}};
        static const char* out_names[] = {"y", "indices", "weights"};
        for (int o = 0; o < n_outputs; ++o)
            for (int d = 0; d < 2; ++d)
                require_dim(op, std::string("candidate output ") + out_names[o], in[l.outputs_at + static_cast<std::size_t>(o)], d,
                            want[o][d], d == 0 ? "T" : o == 0 ? "C" : "k");
    }
    return l;
}

std::vector<TensorView> router_inputs(const Layer& l, const std::vector<TensorView>& in) {
    std::vector<TensorView> r{l.in(in, x), l.in(in, router)};
    if (l.has(bias)) r.push_back(l.in(in, bias));
    return r;
}

}  // namespace conform::moe_slots
