#include "properties/domain.hpp"

#include <algorithm>
#include <numeric>

namespace conform::props {
namespace {

thread_local const Domain* tls_domain = nullptr;

const Domain& no_domain() {
    static const Domain d;
    return d;
}

}  // namespace

CaseSpec project(const CaseSpec& spec, const Domain& d) {
    if (d.empty()) return spec;
    CaseSpec s = spec;
    const std::vector<std::string> dims = domain_dims(s.op);
    for (const auto& [key, rule] : d.rules) {
        const auto at = std::find(dims.begin(), dims.end(), key);
        if (at == dims.end()) {
            const OpSpec* op = find_op(s.op);
            double def = 0;
            for (const ParamSpec& p : op->params)
                if (p.name == key) def = p.default_value;
            s.params.set(key, project(rule, s.params.get(key, def), false));
            continue;
        }
        const auto i = static_cast<std::size_t>(at - dims.begin());
        if (!s.dims.empty()) {
            if (i < s.dims.size()) s.dims[i] = static_cast<std::int64_t>(project(rule, static_cast<double>(s.dims[i]), true));
        } else if (key == "rows") {
            s.rows = static_cast<int>(project(rule, s.rows, true));
        } else if (key == "cols") {
            s.n = static_cast<int>(project(rule, s.n, true));
        }
    }
    // Ops whose builders read the row length from n as well as dims (rope).
    if (s.op == "rope" && s.dims.size() >= 3) s.n = static_cast<int>(s.dims[2]);
    // Attention: query heads a multiple of the KV heads, whichever the domain fixes.
    if (softmax_attention_op(s.op) && s.dims.size() >= 2 && s.dims[1] > 0 && s.dims[0] % s.dims[1] != 0) {
        if (d.rules.count("kv_heads") || !d.rules.count("heads"))
            s.dims[0] = s.dims[1] * std::max<std::int64_t>(1, (s.dims[0] + s.dims[1] - 1) / s.dims[1]);
        else
            s.dims[1] = std::gcd(s.dims[0], s.dims[1]);
    }
    return s;
}

CaseSpec in_domain(const CaseSpec& spec) { return project(spec, active_domain()); }

double in_domain_param(const std::string& name, double v) {
    const auto& rules = active_domain().rules;
    const auto it = rules.find(name);
    return it == rules.end() ? v : project(it->second, v, false);
}

const Domain& active_domain() { return tls_domain ? *tls_domain : no_domain(); }

DomainScope::DomainScope(const Domain& d) : saved_(tls_domain) { tls_domain = &d; }
DomainScope::~DomainScope() { tls_domain = saved_; }

}  // namespace conform::props
