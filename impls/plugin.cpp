#include "impls/plugin.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "conform/plugin.h"
#include "numerics/conventions.hpp"
#include "numerics/domain.hpp"
#include "numerics/format.hpp"
#include "numerics/profile.hpp"

// docs/plugins.md states these layouts; a change is an ABI version bump.
static_assert(sizeof(void*) != 8 || (sizeof(conform_tensor) == 80 && sizeof(conform_kernel) == 64 &&
                                     sizeof(conform_plugin) == 16),
              "plug-in ABI layout changed: bump CONFORM_PLUGIN_ABI_VERSION and docs/plugins.md");
static_assert(sizeof(void*) != 8 || (sizeof(conform_kernel_v2) == 112 && sizeof(conform_plugin_table_v2) == 16),
              "plug-in ABI v2 layout changed: docs/plugins.md states it");

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

// Stores v at `at` in dtype d; false when d cannot hold it exactly.
bool store_exact(std::int32_t d, double v, unsigned char* at) {
    if (d == CONFORM_I32) {
        if (!(v == std::floor(v) && v >= -2147483648.0 && v <= 2147483647.0)) return false;
        const auto i = static_cast<std::int32_t>(v);
        std::memcpy(at, &i, 4);
        return true;
    }
    const auto f = format_of(d);
    if (!f) return false;
    const std::uint64_t bits = encode(*f, v);
    const double back = decode(*f, bits);
    if (!(back == v || (std::isnan(back) && std::isnan(v))) || std::signbit(back) != std::signbit(v)) return false;
    std::memcpy(at, &bits, dtype_bytes(d));  // little-endian: the low bytes are the pattern
    return true;
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
    // pad > 0: the kernel gets rows `pad` elements apart beyond dense (the
    // last dimension stays contiguous), input padding filled with 0xFF bytes
    // (NaN, or -1), so a kernel that ignores strides reads garbage, and
    // output padding checked for writes.
    Guarded(const TensorView& v, std::int32_t dtype, bool input, const std::string& name, std::int64_t pad = 0)
        : view_(v), dtype_(dtype), input_(input), name_(name) {
        converted_ = dtype != dtype_of(v.format);
        restrided_ = converted_ || (pad > 0 && v.rank >= 2);
        esize_ = dtype_bytes(dtype);
        strides_ = v.strides;
        if (restrided_) dense_strides(restrided_ && v.rank >= 2 ? pad : 0);
        const auto [lo, hi] = span_of();
        lo_ = lo;
        span_bytes_ = static_cast<std::size_t>(hi - lo) * esize_;
        map();
        if (!restrided_ && span_bytes_) std::memcpy(data_, suite_span(), span_bytes_);
        if (restrided_ && input_) std::memset(data_, 0xFF, span_bytes_);
        if (converted_ && input_) convert_in();
        if (restrided_ && !converted_) copy_elements_in();
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
        if (!restrided_) {
            if (span_bytes_) std::memcpy(suite_span(), data_, span_bytes_);
            return;
        }
        if (!converted_) {
            const TensorView mine = c_as_view();
            for (std::int64_t i = 0; i < view_.numel(); ++i) view_.set_bits(i, mine.bits(i));
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
    // An input the descriptor declares in another dtype than the suite's
    // (ABI v2): every element stored exactly in that dtype, densely.
    void convert_in() {
        const TensorView dense = c_as_view();
        for (std::int64_t i = 0; i < view_.numel(); ++i) {
            const double v = view_.value(i);
            unsigned char* at = static_cast<unsigned char*>(dense.data) + dense.offset(i) * static_cast<std::int64_t>(esize_);
            if (!store_exact(dtype_, v, at))
                throw std::logic_error("plug-in call: input '" + name_ + "' element " + std::to_string(i) + " = " +
                                       hexfloat(v) + " is not representable in its declared dtype " +
                                       std::to_string(dtype_) + " (the suite generated it in " + name(view_.format) + ")");
        }
    }
    // The suite's elements, bit for bit, into the restrided layout.
    void copy_elements_in() {
        const TensorView mine = c_as_view();
        for (std::int64_t i = 0; i < view_.numel(); ++i) mine.set_bits(i, view_.bits(i));
    }
    // Dense row-major strides, with rows (the second-to-last dimension) `pad`
    // elements further apart.
    void dense_strides(std::int64_t pad) {
        std::int64_t s = 1;
        for (int d = view_.rank - 1; d >= 0; --d) {
            strides_[d] = s;
            s *= view_.shape[d];
            if (d == view_.rank - 1) s += pad;
        }
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
        TensorView mine = view_;
        mine.strides = strides_;
        for (std::int64_t i = 0; i < view_.numel(); ++i) {
            const std::size_t at = static_cast<std::size_t>(mine.offset(i) - lo_) * esize_;
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
    bool input_, converted_ = false, restrided_ = false;
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
    std::vector<std::int32_t> out_dtypes;  // one per op output; v2: 0 for an output the kernel does not write
    std::shared_ptr<Handle> handle;        // keeps the library loaded
    std::vector<std::int32_t> in_dtypes;   // v2: one per op input (empty: v1, the suite's formats)
    std::vector<std::string> tunables;     // v2: tunable parameters passed in params_json
};

// A view with the shape and no data: an absent optional input or an output
// the kernel does not write (ABI v2).
conform_tensor absent_view(const TensorView* v, std::int32_t dtype) {
    conform_tensor t{};
    t.dtype = dtype;
    if (v) {
        t.rank = v->rank;
        for (int d = 0; d < v->rank; ++d) t.shape[d] = v->shape[d];
    }
    return t;
}

// Every parameter of the op by its symbol, defaults filled in, and the
// tunables the kernel declares (ABI v2) when the case sets them.
std::string params_json(const OpSpec& op, const Params& p, const std::vector<std::string>& tunables) {
    nlohmann::json j = nlohmann::json::object();
    for (const ParamSpec& s : op.params) j[s.name] = p.get(s.name, s.default_value);
    for (const std::string& t : tunables)
        if (p.values().count(t)) j[t] = p.values().at(t);
    return j.dump();
}

// Half the cases, chosen by their content (so a replayed case gets the same
// layout), give the kernel padded rows: a kernel that ignores strides reads
// the 0xFF padding of its inputs, one that writes past a row's end writes
// into an output's padding (docs/plugins.md, "Strided views").
std::int64_t row_padding(const KernelCall& c) {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (const TensorView& t : c.in) {
        for (int d = 0; d < t.rank; ++d) mix(static_cast<std::uint64_t>(t.shape[d]));
        for (std::int64_t i = 0; i < std::min<std::int64_t>(t.numel(), 8); ++i) mix(t.bits(i));
    }
    return (h >> 17) & 1 ? 3 : 0;
}

void call(const Bound& b, const KernelCall& c) {
    const std::string params = params_json(*b.op, c.params, b.tunables);
    std::vector<std::unique_ptr<Guarded>> bufs;
    std::vector<Guarded*> out_bufs;  // per output; null for one the kernel does not write
    std::vector<conform_tensor> in, out;
    const bool v2 = !b.in_dtypes.empty();
    const std::int64_t pad = row_padding(c);
    const std::size_t n_in = v2 ? b.op->inputs.size() : c.in.size();
    for (std::size_t i = 0; i < n_in; ++i) {
        const std::string& name = i < b.op->inputs.size() ? b.op->inputs[i] : "input " + std::to_string(i);
        const bool absent = i >= c.in.size() || (v2 && c.in[i].numel() == 0 && optional_input(name));
        if (absent) {
            in.push_back(absent_view(nullptr, b.in_dtypes[i]));
            continue;
        }
        bufs.push_back(std::make_unique<Guarded>(c.in[i], v2 ? b.in_dtypes[i] : dtype_of(c.in[i].format), true, name, pad));
        in.push_back(bufs.back()->c_view());
    }
    for (std::size_t o = 0; o < c.out.size(); ++o) {
        const std::string& name = o < b.op->outputs.size() ? b.op->outputs[o] : "output " + std::to_string(o);
        const std::int32_t dtype = o < b.out_dtypes.size() ? b.out_dtypes[o] : dtype_of(c.out[o].format);
        if (dtype == 0) {  // v2: not written, not judged
            out.push_back(absent_view(&c.out[o], 0));
            out_bufs.push_back(nullptr);
            continue;
        }
        bufs.push_back(std::make_unique<Guarded>(c.out[o], dtype, false, name, pad));
        out.push_back(bufs.back()->c_view());
        out_bufs.push_back(bufs.back().get());
    }
    int rc;
    {
        ActiveRegions active(bufs);
        rc = b.fn(params.c_str(), in.data(), static_cast<int>(in.size()), out.data(), static_cast<int>(out.size()));
    }
    for (const auto& g : bufs)
        if (std::string d = g->damage(); !d.empty()) throw PluginViolation("plug-in kernel " + b.kernel + " " + d);
    if (rc != 0) throw KernelError("plug-in kernel " + b.kernel + " returned error status " + std::to_string(rc));
    for (Guarded* g : out_bufs)
        if (g) g->copy_out();
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

// The fields both ABI versions share: name, op and accumulation format, with
// `where` set to the descriptor's prefix for later messages.
KernelInfo start_kernel(const char* name, const char* op_name, std::int32_t acc, const std::string& where0,
                        std::string& where, const OpSpec*& op) {
    if (!name || !*name) bad(where0 + ": name", name ? "empty" : "NULL");
    where = where0 + " \"" + name + "\": ";
    if (!op_name) bad(where + "op", "NULL");
    op = find_op(op_name);
    if (!op) bad(where + "op", "unknown op '" + std::string(op_name) + "' (known: see conform ops)");
    KernelInfo k;
    k.name = name;
    k.op = op->name;
    k.variant = "plugin";
    k.backend = "plugin";
    k.acc = checked_format(acc, where + "acc_dtype", false);
    if (k.acc == Format::int8) bad(where + "acc_dtype", "CONFORM_I8 is not an accumulation format");
    return k;
}

KernelInfo wrap(const conform_kernel& d, const std::string& where0, const std::shared_ptr<Handle>& handle) {
    std::string where;
    const OpSpec* op = nullptr;
    KernelInfo k = start_kernel(d.name, d.op, d.acc_dtype, where0, where, op);
    k.in = checked_format(d.in_dtype, where + "in_dtype", false);
    const std::vector<std::int32_t> outs = output_dtypes(d, *op, where);
    for (std::int32_t o : outs) k.out_formats.push_back(*format_of(o));
    k.out = k.out_formats.at(0);
    k.conventions = checked_conventions(d.conventions_json, where + "conventions_json", op->name);
    k.description = d.description ? d.description : "";
    if (!d.fn) bad(where + "fn", "NULL");
    Bound b{d.fn, k.name, op, outs, handle, {}, {}};
    k.fn = [b](const KernelCall& c) { call(b, c); };
    return k;
}

// ---- version 2 ----------------------------------------------------------------------

bool is_float(std::int32_t d) { return d == CONFORM_F64 || d == CONFORM_F32 || d == CONFORM_F16 || d == CONFORM_BF16; }

// The format cases are generated in: the narrowest declared floating input
// dtype, so every generated value converts exactly to each declared one.
Format generation_format(const std::vector<std::int32_t>& in, const std::string& where) {
    const bool f16 = std::count(in.begin(), in.end(), CONFORM_F16) > 0, bf16 = std::count(in.begin(), in.end(), CONFORM_BF16) > 0;
    if (f16 && bf16)
        bad(where, "F16 and BF16 inputs together: no generated value set is exact in both (declare one of them F32)");
    if (f16) return Format::fp16;
    if (bf16) return Format::bf16;
    if (std::count(in.begin(), in.end(), CONFORM_F32)) return Format::fp32;
    if (std::count(in.begin(), in.end(), CONFORM_F64)) return Format::fp64;
    bad(where, "no floating input: the op's data inputs must be F64, F32, F16 or BF16");
}

// A v2 dtype array: exactly one entry per op input (names: op.inputs) or
// output, `field` "in_dtypes" or "out_dtypes", counted by "n_" + field.
std::vector<std::int32_t> dtype_array(const std::int32_t* a, std::int32_t n, const std::vector<std::string>& names,
                                      const std::string& field, const std::string& of, const std::string& where) {
    if (!a || n != static_cast<std::int32_t>(names.size()))
        bad(where + "n_" + field, std::to_string(n) + " with " + field + " " + (a ? "set" : "NULL") + " (expected " +
                                      std::to_string(names.size()) + ", one per " + of + ")");
    return std::vector<std::int32_t>(a, a + n);
}

std::vector<std::int32_t> input_dtypes_v2(const conform_kernel_v2& d, const OpSpec& op, const std::string& where) {
    const std::vector<std::int32_t> v = dtype_array(d.in_dtypes, d.n_in_dtypes, op.inputs, "in_dtypes", "input of " + op.name, where);
    for (std::size_t i = 0; i < v.size(); ++i) checked_format(v[i], where + "in_dtypes[" + std::to_string(i) + "] (" + op.inputs[i] + ")", true);
    return v;
}

std::vector<std::int32_t> output_dtypes_v2(const conform_kernel_v2& d, const OpSpec& op, const std::string& where) {
    const std::vector<std::int32_t> v =
        dtype_array(d.out_dtypes, d.n_out_dtypes, op.outputs, "out_dtypes", "output of " + op.name, where);
    for (std::size_t o = 0; o < v.size(); ++o) {
        const std::string field = where + "out_dtypes[" + std::to_string(o) + "] (" + op.outputs[o] + ")";
        if (v[o] == 0 && o == 0) bad(field, "0, but the first output must be written");
        if (v[o] != 0) checked_format(v[o], field, true);
    }
    return v;
}

// domain_json and tunables_json merged into one domain object (tunables are
// tunable parameters only; a key in both is an error); `tunables` gets
// their names (passed to the kernel in params_json).
std::string domain_of(const conform_kernel_v2& d, const OpSpec& op, const std::string& where,
                      std::vector<std::string>& tunables) {
    auto parsed = [&](const char* text, const std::string& field, bool params_only) {
        nlohmann::json j = nlohmann::json::object();
        if (!text || !*text) return j;
        try {
            parse_domain(text, op.name, params_only);
        } catch (const std::invalid_argument& e) {
            bad(where + field, e.what());
        }
        return nlohmann::json::parse(text);
    };
    nlohmann::json dom = parsed(d.domain_json, "domain_json", false);
    const nlohmann::json tun = parsed(d.tunables_json, "tunables_json", true);
    for (const auto& [key, value] : tun.items()) {
        if (dom.contains(key)) bad(where + "tunables_json", "\"" + key + "\" is also in domain_json");
        dom[key] = value;
        tunables.push_back(key);
    }
    return dom.empty() ? "" : dom.dump();
}

std::string profile_of(const conform_kernel_v2& d, Format acc, const std::string& where) {
    const std::string profile = d.profile ? d.profile : "";
    try {
        props::parse_profile(profile);
    } catch (const std::invalid_argument& e) {
        bad(where + "profile", e.what());
    }
    if ((acc == Format::fp16 || acc == Format::bf16) && profile.empty())
        bad(where + "acc_dtype", std::string(name(acc)) + " accumulation widens the derived budget on the kernel's word: "
                                 "set `profile` too, so that the report states the standard it is judged by");
    return profile;
}

KernelInfo wrap_v2(const conform_kernel_v2& d, const std::string& where0, const std::shared_ptr<Handle>& handle) {
    std::string where;
    const OpSpec* op = nullptr;
    KernelInfo k = start_kernel(d.name, d.op, d.acc_dtype, where0, where, op);
    const std::vector<std::int32_t> ins = input_dtypes_v2(d, *op, where);
    std::vector<std::int32_t> floats;
    for (std::size_t i = 0; i < ins.size(); ++i)
        if (is_float(ins[i]) && !optional_input(op->inputs[i])) floats.push_back(ins[i]);
    k.in = generation_format(floats.empty() ? ins : floats, where + "in_dtypes");
    for (std::size_t i = 0; i < ins.size(); ++i)
        if (is_float(ins[i]) && *format_of(ins[i]) != k.in) k.input_formats[op->inputs[i]] = *format_of(ins[i]);
    const std::vector<std::int32_t> outs = output_dtypes_v2(d, *op, where);
    const std::int32_t first = outs.at(0);
    for (std::size_t o = 0; o < outs.size(); ++o) {
        k.out_formats.push_back(*format_of(outs[o] ? outs[o] : first));
        if (!outs[o]) k.unwritten.push_back(op->outputs[o]);
    }
    k.out = k.out_formats.at(0);
    k.conventions = checked_conventions(d.conventions_json, where + "conventions_json", op->name);
    std::vector<std::string> tunables;
    k.domain = domain_of(d, *op, where, tunables);
    k.profile = profile_of(d, k.acc, where);
    k.description = d.description ? d.description : "";
    if (!d.fn) bad(where + "fn", "NULL");
    const Bound b{d.fn, k.name, op, outs, handle, ins, tunables};
    k.fn = [b](const KernelCall& c) { call(b, c); };
    return k;
}

// The v2 table's descriptors, stepping by the plug-in's struct_size (a later
// minor version may append fields).
std::vector<KernelInfo> load_v2(const std::string& path, const conform_plugin_table_v2* t, const std::shared_ptr<Handle>& handle) {
    if (t->abi_version != CONFORM_PLUGIN_ABI_VERSION_2)
        bad(path, "abi_version: " + std::to_string(t->abi_version) + " from " CONFORM_PLUGIN_ENTRY_V2 "(), expected " +
                      std::to_string(CONFORM_PLUGIN_ABI_VERSION_2));
    if (t->n_kernels < 1 || t->n_kernels > kMaxKernels)
        bad(path, "n_kernels: " + std::to_string(t->n_kernels) + " (expected 1.." + std::to_string(kMaxKernels) + ")");
    if (!t->kernels) bad(path, "kernels: NULL");
    const std::uint32_t stride = t->kernels[0].struct_size;
    if (stride < sizeof(conform_kernel_v2))
        bad(path + ": kernels[0]: struct_size", std::to_string(stride) + " (expected at least sizeof(conform_kernel_v2) = " +
                                                    std::to_string(sizeof(conform_kernel_v2)) + ")");
    std::vector<KernelInfo> ks;
    const auto* base = reinterpret_cast<const unsigned char*>(t->kernels);
    for (std::int32_t i = 0; i < t->n_kernels; ++i) {
        const auto& d = *reinterpret_cast<const conform_kernel_v2*>(base + static_cast<std::size_t>(i) * stride);
        const std::string where = path + ": kernels[" + std::to_string(i) + "]";
        if (d.struct_size != stride) bad(where + ": struct_size", std::to_string(d.struct_size) + " differs from kernels[0]'s " + std::to_string(stride));
        ks.push_back(wrap_v2(d, where, handle));
    }
    return ks;
}

const conform_plugin* table_of(const std::string& path, void* h) {
    dlerror();
    void* sym = dlsym(h, CONFORM_PLUGIN_ENTRY);
    if (!sym) bad(path, "no symbol " CONFORM_PLUGIN_ENTRY_V2 " or " CONFORM_PLUGIN_ENTRY " (not a conform plug-in? see docs/plugins.md)");
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
        case CONFORM_F8_E4M3: return Format::fp8_e4m3;
        case CONFORM_F8_E5M2: return Format::fp8_e5m2;
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
        case Format::fp8_e4m3: return CONFORM_F8_E4M3;
        case Format::fp8_e5m2: return CONFORM_F8_E5M2;
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
    Library lib{path_arg, {}, 1};
    dlerror();
    if (void* v2 = dlsym(h, CONFORM_PLUGIN_ENTRY_V2)) {  // version 2 first
        const auto entry = reinterpret_cast<const conform_plugin_table_v2* (*)()>(v2);
        const conform_plugin_table_v2* t = entry();
        if (!t) bad(path_arg, CONFORM_PLUGIN_ENTRY_V2 "() returned NULL");
        lib.kernels = load_v2(path_arg, t, handle);
        lib.abi_version = 2;
    } else {
        const conform_plugin* t = table_of(path_arg, h);
        for (std::int32_t i = 0; i < t->n_kernels; ++i)
            lib.kernels.push_back(wrap(t->kernels[i], path_arg + ": kernels[" + std::to_string(i) + "]", handle));
    }
    std::set<std::string> names;
    for (std::size_t i = 0; i < lib.kernels.size(); ++i)
        if (!names.insert(lib.kernels[i].name).second)
            bad(path_arg + ": kernels[" + std::to_string(i) + "]: name", "'" + lib.kernels[i].name + "' repeats an earlier kernel");
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
