#include "impls/plugin.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "conform/plugin.h"
#include "numerics/conventions.hpp"

// docs/plugins.md states these layouts; a change is an ABI version bump.
static_assert(sizeof(void*) != 8 || (sizeof(conform_tensor) == 80 && sizeof(conform_kernel) == 64 &&
                                     sizeof(conform_plugin) == 16),
              "plug-in ABI layout changed: bump CONFORM_PLUGIN_ABI_VERSION and docs/plugins.md");

namespace conform::plugin {

class Handle {
public:
    explicit Handle(void* h) : h_(h) {}
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() { dlclose(h_); }
    void* get() const { return h_; }

private:
    void* h_;
};

namespace {

// ---- dtypes -------------------------------------------------------------------

std::size_t dtype_bytes(std::int32_t d) {
    switch (d) {
        case CONFORM_F64: return 8;
        case CONFORM_F32: case CONFORM_I32: return 4;
        case CONFORM_F16: case CONFORM_BF16: return 2;
        default: return 1;
    }
}

// ---- fault regions --------------------------------------------------------------

// The mappings of the call in progress, for describe_fault() in a signal
// handler: plain data in a fixed array, published with a signal fence.
struct Region {
    std::uintptr_t map_lo = 0, map_hi = 0;    // the whole mapping, guard pages included
    std::uintptr_t data_lo = 0, data_hi = 0;  // the bytes the view spans
    bool input = false;
    char name[40] = {};
};
constexpr int kMaxRegions = 32;
Region g_regions[kMaxRegions];
volatile std::sig_atomic_t g_region_count = 0;

// ---- guarded copies ---------------------------------------------------------------

constexpr unsigned char kCanary = 0xCB;
constexpr std::size_t kAlign = 64;  // data start alignment (SIMD loads), and the least canary before it

std::size_t round_up(std::size_t n, std::size_t m) { return (n + m - 1) / m * m; }

// Element offsets (relative to element 0) of the first and one past the last
// element a view can address; {0, 0} when it has no elements.
std::pair<std::int64_t, std::int64_t> element_span(const TensorView& v) {
    if (v.numel() == 0) return {0, 0};
    std::int64_t lo = 0, hi = 0;
    for (int d = 0; d < v.rank; ++d) (v.strides[d] < 0 ? lo : hi) += (v.shape[d] - 1) * v.strides[d];
    return {lo, hi + 1};
}

// One tensor of a plug-in call, copied into its own mapping:
//   [guard page][canary ... data span ... canary][guard page]
// with the span ending as close to the trailing guard page as the 64-byte
// alignment allows, so a write past the end hits canaries or the guard.
// Inputs are then made read-only.  Outputs the plug-in stores as I32 get a
// dense int32 span, converted to the suite's FP64 afterwards.
class Guarded {
public:
    Guarded(const TensorView& v, std::int32_t dtype, bool input, const std::string& name)
        : view_(v), dtype_(dtype), input_(input), name_(name) {
        converted_ = dtype != dtype_of(v.format);
        esize_ = dtype_bytes(dtype);
        strides_ = v.strides;
        if (converted_) dense_strides();
        const auto [lo, hi] = span_of();
        lo_ = lo;
        span_bytes_ = static_cast<std::size_t>(hi - lo) * esize_;
        map();
        if (!converted_ && span_bytes_) std::memcpy(data_, suite_span(), span_bytes_);
        if (!input_ && !converted_) before_.assign(data_, data_ + span_bytes_);
        if (input_ && mprotect(map_ + page_, map_bytes_ - 2 * page_, PROT_READ) != 0)
            throw std::runtime_error("plug-in call: mprotect failed");
    }
    Guarded(const Guarded&) = delete;
    Guarded& operator=(const Guarded&) = delete;
    ~Guarded() { munmap(map_, map_bytes_); }

    conform_tensor c_view() const {
        conform_tensor t{};
        t.dtype = dtype_;
        t.rank = view_.rank;
        for (int d = 0; d < view_.rank; ++d) t.shape[d] = view_.shape[d], t.strides[d] = strides_[d];
        t.data = data_ - lo_ * static_cast<std::int64_t>(esize_);
        return t;
    }

    Region region() const {
        Region r;
        r.map_lo = reinterpret_cast<std::uintptr_t>(map_);
        r.map_hi = r.map_lo + map_bytes_;
        r.data_lo = reinterpret_cast<std::uintptr_t>(data_);
        r.data_hi = r.data_lo + span_bytes_;
        r.input = input_;
        std::strncpy(r.name, name_.c_str(), sizeof r.name - 1);
        return r;
    }

    // What the kernel changed outside this output's elements ("" when nothing).
    std::string damage() const {
        if (input_) return "";  // read-only pages: a write faults instead
        const unsigned char* inner = map_ + page_;
        for (const unsigned char* p = inner; p < data_; ++p)
            if (*p != kCanary) return describe("wrote " + std::to_string(data_ - p) + " bytes before the start of");
        const unsigned char* end = map_ + map_bytes_ - page_;
        for (const unsigned char* p = end - 1; p >= data_ + span_bytes_; --p)
            if (*p != kCanary) return describe("wrote " + std::to_string(p - (data_ + span_bytes_) + 1) + " bytes past the end of");
        return converted_ ? "" : gap_damage();
    }

    void copy_out() const {
        if (!converted_) {
            if (span_bytes_) std::memcpy(suite_span(), data_, span_bytes_);
            return;
        }
        const TensorView dense = c_as_view();
        for (std::int64_t i = 0; i < view_.numel(); ++i) {
            std::int32_t v;
            std::memcpy(&v, static_cast<const unsigned char*>(dense.data) + dense.offset(i) * 4, 4);
            view_.set_bits(i, encode(view_.format, v));
        }
    }

private:
    void dense_strides() {
        std::int64_t s = 1;
        for (int d = view_.rank - 1; d >= 0; --d) strides_[d] = s, s *= view_.shape[d];
    }
    std::pair<std::int64_t, std::int64_t> span_of() const {
        TensorView v = view_;
        v.strides = strides_;
        return element_span(v);
    }
    void map() {
        page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        const std::size_t data_bytes = round_up(span_bytes_, kAlign);
        const std::size_t inner = round_up(kAlign + data_bytes, page_);
        map_bytes_ = inner + 2 * page_;
        void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) throw std::runtime_error("plug-in call: cannot map " + std::to_string(map_bytes_) + " bytes for '" + name_ + "'");
        map_ = static_cast<unsigned char*>(m);
        std::memset(map_ + page_, kCanary, inner);
        mprotect(map_, page_, PROT_NONE);
        mprotect(map_ + page_ + inner, page_, PROT_NONE);
        data_ = map_ + page_ + inner - data_bytes;
    }
    unsigned char* suite_span() const {
        return static_cast<unsigned char*>(view_.data) + lo_ * static_cast<std::int64_t>(esize_);
    }
    TensorView c_as_view() const {
        TensorView v = view_;
        v.strides = strides_;
        v.data = c_view().data;
        return v;
    }
    // Bytes of a strided output between its elements (padding) that changed.
    std::string gap_damage() const {
        if (span_bytes_ == static_cast<std::size_t>(view_.numel()) * esize_) return "";  // dense: no gaps
        std::vector<bool> element(span_bytes_, false);
        for (std::int64_t i = 0; i < view_.numel(); ++i) {
            const std::size_t at = static_cast<std::size_t>(view_.offset(i) - lo_) * esize_;
            std::fill_n(element.begin() + static_cast<std::ptrdiff_t>(at), esize_, true);
        }
        for (std::size_t b = 0; b < span_bytes_; ++b)
            if (!element[b] && data_[b] != before_[b])
                return describe("wrote into the padding between elements (at element offset " +
                                std::to_string(static_cast<std::int64_t>(b / esize_) + lo_) + ") of");
        return "";
    }
    std::string describe(const std::string& what) const { return what + " output '" + name_ + "'"; }

    TensorView view_;
    std::int32_t dtype_;
    bool input_, converted_ = false;
    std::string name_;
    std::size_t esize_ = 1, span_bytes_ = 0, page_ = 4096, map_bytes_ = 0;
    std::array<std::int64_t, kMaxRank> strides_{};
    std::int64_t lo_ = 0;
    unsigned char *map_ = nullptr, *data_ = nullptr;
    std::vector<unsigned char> before_;
};

// Publishes the call's mappings to describe_fault() for the call's duration.
class ActiveRegions {
public:
    explicit ActiveRegions(const std::vector<std::unique_ptr<Guarded>>& bufs) {
        const int n = std::min<int>(static_cast<int>(bufs.size()), kMaxRegions);
        for (int i = 0; i < n; ++i) g_regions[i] = bufs[static_cast<std::size_t>(i)]->region();
        std::atomic_signal_fence(std::memory_order_seq_cst);
        g_region_count = n;
    }
    ~ActiveRegions() {
        g_region_count = 0;
        std::atomic_signal_fence(std::memory_order_seq_cst);
    }
};

// ---- the call ---------------------------------------------------------------------

struct Bound {
    conform_kernel_fn fn;
    std::string kernel;
    const OpSpec* op;
    std::vector<std::int32_t> out_dtypes;  // one per op output
    std::shared_ptr<Handle> handle;        // keeps the library loaded
};

// Every parameter of the op by its symbol, defaults filled in.
std::string params_json(const OpSpec& op, const Params& p) {
    nlohmann::json j = nlohmann::json::object();
    for (const ParamSpec& s : op.params) j[s.name] = p.get(s.name, s.default_value);
    return j.dump();
}

void call(const Bound& b, const KernelCall& c) {
    const std::string params = params_json(*b.op, c.params);
    std::vector<std::unique_ptr<Guarded>> bufs;
    std::vector<conform_tensor> in, out;
    for (std::size_t i = 0; i < c.in.size(); ++i) {
        const std::string& name = i < b.op->inputs.size() ? b.op->inputs[i] : "input " + std::to_string(i);
        bufs.push_back(std::make_unique<Guarded>(c.in[i], dtype_of(c.in[i].format), true, name));
        in.push_back(bufs.back()->c_view());
    }
    for (std::size_t o = 0; o < c.out.size(); ++o) {
        const std::string& name = o < b.op->outputs.size() ? b.op->outputs[o] : "output " + std::to_string(o);
        const std::int32_t dtype = o < b.out_dtypes.size() ? b.out_dtypes[o] : dtype_of(c.out[o].format);
        bufs.push_back(std::make_unique<Guarded>(c.out[o], dtype, false, name));
        out.push_back(bufs.back()->c_view());
    }
    int rc;
    {
        ActiveRegions active(bufs);
        rc = b.fn(params.c_str(), in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()));
    }
    for (const auto& g : bufs)
        if (std::string d = g->damage(); !d.empty()) throw PluginViolation("plug-in kernel " + b.kernel + " " + d);
    if (rc != 0) throw KernelError("plug-in kernel " + b.kernel + " returned error status " + std::to_string(rc));
    for (std::size_t o = 0; o < c.out.size(); ++o) bufs[c.in.size() + o]->copy_out();
}

// ---- loading ----------------------------------------------------------------------

constexpr std::int32_t kMaxKernels = 65536;  // a larger count is a corrupt table

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw LoadError(where + ": " + what); }

std::string dtype_list() { return "1..6 (CONFORM_F64, F32, F16, BF16, I8, I32)"; }

Format checked_format(std::int32_t d, const std::string& where, bool allow_i32) {
    const auto f = format_of(d);
    if (!f) bad(where, "unknown dtype " + std::to_string(d) + " (expected " + dtype_list() + ")");
    if (d == CONFORM_I32 && !allow_i32) bad(where, "CONFORM_I32 is accepted only for outputs");
    return *f;
}

std::map<std::string, std::string> checked_conventions(const char* text, const std::string& where, const std::string& op) {
    std::map<std::string, std::string> c;
    if (!text || !*text) return c;
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) bad(where, "not a JSON object: " + std::string(text));
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string()) bad(where, "\"" + key + "\" must be a string");
        c[key] = value.get<std::string>();
    }
    try {
        check_conventions(c, op);
    } catch (const std::invalid_argument& e) {
        bad(where, e.what());
    }
    return c;
}

// The output dtypes of descriptor d, one per output of op.
std::vector<std::int32_t> output_dtypes(const conform_kernel& d, const OpSpec& op, const std::string& where) {
    checked_format(d.out_dtype, where + "out_dtype", true);
    if (d.n_out_dtypes == 0 && !d.out_dtypes) return std::vector<std::int32_t>(op.outputs.size(), d.out_dtype);
    if (!d.out_dtypes || d.n_out_dtypes != static_cast<std::int32_t>(op.outputs.size()))
        bad(where + "n_out_dtypes", std::to_string(d.n_out_dtypes) + " with out_dtypes " + (d.out_dtypes ? "set" : "NULL") +
                                        " (expected 0 and NULL, or " + std::to_string(op.outputs.size()) +
                                        ", one per output of " + op.name + ")");
    std::vector<std::int32_t> v(d.out_dtypes, d.out_dtypes + d.n_out_dtypes);
    for (std::size_t o = 0; o < v.size(); ++o) checked_format(v[o], where + "out_dtypes[" + std::to_string(o) + "]", true);
    return v;
}

KernelInfo wrap(const conform_kernel& d, const std::string& where0, const std::shared_ptr<Handle>& handle) {
    if (!d.name || !*d.name) bad(where0 + ": name", d.name ? "empty" : "NULL");
    const std::string where = where0 + " \"" + d.name + "\": ";
    if (!d.op) bad(where + "op", "NULL");
    const OpSpec* op = find_op(d.op);
    if (!op) bad(where + "op", "unknown op '" + std::string(d.op) + "' (known: see conform ops)");
    KernelInfo k;
    k.name = d.name;
    k.op = op->name;
    k.variant = "plugin";
    k.backend = "plugin";
    k.in = checked_format(d.in_dtype, where + "in_dtype", false);
    k.acc = checked_format(d.acc_dtype, where + "acc_dtype", false);
    if (k.acc == Format::int8) bad(where + "acc_dtype", "CONFORM_I8 is not an accumulation format");
    const std::vector<std::int32_t> outs = output_dtypes(d, *op, where);
    for (std::int32_t o : outs) k.out_formats.push_back(*format_of(o));
    k.out = k.out_formats.at(0);
    k.conventions = checked_conventions(d.conventions_json, where + "conventions_json", op->name);
    k.description = d.description ? d.description : "";
    if (!d.fn) bad(where + "fn", "NULL");
    Bound b{d.fn, k.name, op, outs, handle};
    k.fn = [b](const KernelCall& c) { call(b, c); };
    return k;
}

const conform_plugin* table_of(const std::string& path, void* h) {
    dlerror();
    void* sym = dlsym(h, CONFORM_PLUGIN_ENTRY);
    if (!sym) bad(path, "no symbol " CONFORM_PLUGIN_ENTRY " (not a conform plug-in? see docs/plugins.md)");
    const auto entry = reinterpret_cast<const conform_plugin* (*)()>(sym);
    const conform_plugin* t = entry();
    if (!t) bad(path, CONFORM_PLUGIN_ENTRY "() returned NULL");
    if (t->abi_version != CONFORM_PLUGIN_ABI_VERSION)
        bad(path, "abi_version: " + std::to_string(t->abi_version) + ", but this conform reads version " +
                      std::to_string(CONFORM_PLUGIN_ABI_VERSION) + " (rebuild against its include/conform/plugin.h)");
    if (t->n_kernels < 1 || t->n_kernels > kMaxKernels)
        bad(path, "n_kernels: " + std::to_string(t->n_kernels) + " (expected 1.." + std::to_string(kMaxKernels) + ")");
    if (!t->kernels) bad(path, "kernels: NULL");
    return t;
}

}  // namespace

std::optional<Format> format_of(std::int32_t d) {
    switch (d) {
        case CONFORM_F64: return Format::fp64;
        case CONFORM_F32: return Format::fp32;
        case CONFORM_F16: return Format::fp16;
        case CONFORM_BF16: return Format::bf16;
        case CONFORM_I8: return Format::int8;
        case CONFORM_I32: return Format::fp64;
        default: return std::nullopt;
    }
}

std::int32_t dtype_of(Format f) {
    switch (f) {
        case Format::fp64: return CONFORM_F64;
        case Format::fp32: return CONFORM_F32;
        case Format::fp16: return CONFORM_F16;
        case Format::bf16: return CONFORM_BF16;
        case Format::int8: return CONFORM_I8;
    }
    return 0;
}

Library load(const std::string& path_arg) {
    namespace fs = std::filesystem;
    // dlopen searches the library path for a name without a slash: name the file itself.
    const std::string path = fs::absolute(path_arg).string();
    if (!fs::exists(path)) bad(path_arg, "no such file");
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) bad(path_arg, std::string("cannot load: ") + dlerror());
    const auto handle = std::make_shared<Handle>(h);
    const conform_plugin* t = table_of(path_arg, h);
    Library lib{path_arg, {}};
    std::set<std::string> names;
    for (std::int32_t i = 0; i < t->n_kernels; ++i) {
        const std::string where = path_arg + ": kernels[" + std::to_string(i) + "]";
        lib.kernels.push_back(wrap(t->kernels[i], where, handle));
        if (!names.insert(lib.kernels.back().name).second) bad(where + ": name", "'" + lib.kernels.back().name + "' repeats an earlier kernel");
    }
    return lib;
}

// ---- fault description (async-signal-safe) ------------------------------------------

namespace {

struct Out {
    char* p;
    char* end;
    void put(const char* s) {
        while (*s && p + 1 < end) *p++ = *s++;
        *p = 0;
    }
    void put(std::uintptr_t n) {
        char digits[24];
        int k = 0;
        do digits[k++] = static_cast<char>('0' + n % 10), n /= 10;
        while (n && k < 24);
        while (k && p + 1 < end) *p++ = digits[--k];
        *p = 0;
    }
};

}  // namespace

bool describe_fault(const void* addr, char* buf, std::size_t size) {
    if (!size) return false;
    const auto a = reinterpret_cast<std::uintptr_t>(addr);
    for (int i = 0; i < g_region_count; ++i) {
        const Region& r = g_regions[i];
        if (a < r.map_lo || a >= r.map_hi) continue;
        Out o{buf, buf + size};
        *buf = 0;
        const char* kind = r.input ? "input '" : "output '";
        if (a >= r.data_lo && a < r.data_hi) {
            o.put("write to read-only ");
        } else if (a == r.data_hi) {
            o.put("access just past the end of ");
        } else if (a > r.data_hi) {
            o.put("access "), o.put(a - r.data_hi), o.put(" bytes past the end of ");
        } else {
            o.put("access "), o.put(r.data_lo - a), o.put(" bytes before the start of ");
        }
        o.put(kind), o.put(r.name), o.put("'");
        return true;
    }
    return false;
}

}  // namespace conform::plugin
