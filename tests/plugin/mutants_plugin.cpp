// The project's own mutants (builtin_registry(), role mutant) exported as a
// plug-in through include/conform/plugin.h, so that tests/plugin_test.cpp can
// check that the suite kills every one of them through the plug-in path too:
// C views and parameter JSON in, guarded copies, a forked child per kernel.
//
// The ABI's kernel function carries no context pointer, so each exported
// kernel gets its own trampoline, trampoline<I>, calling mutant I.
#include <array>
#include <cstddef>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "conform/plugin.h"
#include "impls/plugin.hpp"
#include "impls/registry.hpp"

namespace {

using conform::Format;

constexpr std::size_t kMaxMutants = 512;

const std::vector<const conform::KernelInfo*>& mutants() {
    static const std::vector<const conform::KernelInfo*> v = [] {
        std::vector<const conform::KernelInfo*> m;
        for (const auto& k : conform::builtin_registry().all())
            if (k.role == conform::Role::mutant) m.push_back(&k);
        return m;
    }();
    return v;
}

using conform::plugin::dtype_of;

conform::TensorView view_of(const conform_tensor& t) {
    conform::TensorView v;
    v.data = t.data;
    v.format = conform::plugin::format_of(t.dtype).value_or(Format::fp32);  // the loader passes valid dtypes only
    v.rank = t.rank;
    for (int d = 0; d < t.rank && d < conform::kMaxRank; ++d) v.shape[d] = t.shape[d], v.strides[d] = t.strides[d];
    return v;
}

int call_mutant(std::size_t i, const char* params_json, const conform_tensor* in, int n_in, conform_tensor* out,
                int n_out) {
    try {
        conform::Params params;
        const nlohmann::json j = nlohmann::json::parse(params_json);  // named: items() refers to it
        for (const auto& [key, value] : j.items()) params.set(key, value.get<double>());
        std::vector<conform::TensorView> ins, outs;
        for (int k = 0; k < n_in; ++k) ins.push_back(view_of(in[k]));
        for (int k = 0; k < n_out; ++k) outs.push_back(view_of(out[k]));
        mutants().at(i)->fn(conform::KernelCall{params, ins, outs});
        return 0;
    } catch (const std::exception&) {
        return 1;  // the kernel rejected the call (shapes it does not take)
    }
}

template <std::size_t I>
int trampoline(const char* params, const conform_tensor* in, int n_in, conform_tensor* out, int n_out) {
    return call_mutant(I, params, in, n_in, out, n_out);
}

template <std::size_t... I>
constexpr std::array<conform_kernel_fn, sizeof...(I)> trampolines(std::index_sequence<I...>) {
    return {&trampoline<I>...};
}

struct Table {
    std::deque<std::string> text;  // conventions JSON and descriptions (stable addresses)
    std::deque<std::vector<std::int32_t>> out_dtypes;
    std::vector<conform_kernel> kernels;
    conform_plugin plugin{};
};

conform_kernel describe(std::size_t i, const conform::KernelInfo& k, Table& t) {
    conform_kernel d{};
    d.op = k.op.c_str();
    d.name = k.name.c_str();
    d.in_dtype = dtype_of(k.in);
    d.out_dtype = dtype_of(k.out);
    d.acc_dtype = dtype_of(k.acc);
    if (!k.out_formats.empty()) {
        auto& v = t.out_dtypes.emplace_back();
        for (Format f : k.out_formats) v.push_back(dtype_of(f));
        d.out_dtypes = v.data();
        d.n_out_dtypes = static_cast<std::int32_t>(v.size());
    }
    if (!k.conventions.empty()) d.conventions_json = t.text.emplace_back(nlohmann::json(k.conventions).dump()).c_str();
    d.description = t.text.emplace_back(k.bug_class + ": " + k.description).c_str();
    static constexpr auto fns = trampolines(std::make_index_sequence<kMaxMutants>{});
    d.fn = fns[i];
    return d;
}

const Table& table() {
    static const Table t = [] {
        Table t;
        const auto& ms = mutants();
        for (std::size_t i = 0; i < ms.size() && i < kMaxMutants; ++i) t.kernels.push_back(describe(i, *ms[i], t));
        // More mutants than trampolines: an invalid count, so the loader refuses the table loudly.
        t.plugin = {CONFORM_PLUGIN_ABI_VERSION, ms.size() > kMaxMutants ? -1 : static_cast<std::int32_t>(ms.size()),
                    t.kernels.data()};
        return t;
    }();
    return t;
}

}  // namespace

extern "C" const conform_plugin* conform_plugin_v1(void) { return &table().plugin; }
