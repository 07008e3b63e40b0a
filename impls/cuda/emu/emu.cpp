// The emulated launch: blocks in turn, threads as fibers, synchronization
// points as the only places where one thread's values reach another.
#include "impls/cuda/emu/emu.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>

#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "impls/cuda/emu/mma_model.hpp"
#include "numerics/format.hpp"

namespace conform::cuda_emu {
namespace ctx = boost::context;

namespace {

// Kernels keep a few registers' worth of locals; sanitizers need more room.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kStackBytes = 256 * 1024;
#else
constexpr std::size_t kStackBytes = 64 * 1024;
#endif

// Stacks are reused from launch to launch: a block of 1024 threads would
// otherwise map and unmap 64 MiB per block.
class StackPool {
public:
    ctx::stack_context allocate() {
        void* p;
        if (!free_.empty()) {
            p = free_.back();
            free_.pop_back();
        } else {
            p = std::aligned_alloc(64, kStackBytes);
            if (!p) throw std::bad_alloc();
        }
        ctx::stack_context sc;
        sc.size = kStackBytes;
        sc.sp = static_cast<char*>(p) + kStackBytes;
        return sc;
    }
    void deallocate(ctx::stack_context& sc) { free_.push_back(static_cast<char*>(sc.sp) - sc.size); }
    ~StackPool() {
        for (void* p : free_) std::free(p);
    }

private:
    std::vector<void*> free_;
};

// Stack allocator handle (Boost.Context copies it into the fiber).
struct PooledStack {
    StackPool* pool;
    ctx::stack_context allocate() { return pool->allocate(); }
    void deallocate(ctx::stack_context& sc) { pool->deallocate(sc); }
};

enum class Wait { none, barrier, warp, done };

// One cp.async: its destination and the 16 bytes it will write there.
struct AsyncCopy {
    void* dst;
    unsigned char bytes[16];
};

struct Thread {
    Coords coords;
    ctx::fiber fiber;   // the thread, suspended
    ctx::fiber sink;    // the scheduler, while the thread runs
    Wait wait = Wait::none;
    unsigned warp_mask = 0;
    std::uint64_t warp_ops = 0;  // warp synchronization points passed (parity picks the buffer)
    std::vector<AsyncCopy> open_copies;                // cp.async since the last commit
    std::deque<std::vector<AsyncCopy>> copy_groups;   // committed and not yet waited for, oldest first
};

// One lane's operands of an mma.sync.
struct MmaFragments {
    std::uint32_t a[4], b[2];
};

struct Warp {
    std::uint64_t slot[2][warpSize] = {};  // deposited values, double-buffered by op parity
    MmaFragments mma[2][warpSize] = {};    // deposited mma operands, likewise
    unsigned arrived[2] = {};              // the lanes that took part in the op of that parity
};

struct BlockState {
    std::vector<Thread> threads;
    std::vector<Warp> warps;
    std::vector<std::max_align_t> shared;  // dynamic shared memory
    Thread* running = nullptr;
    std::exception_ptr error;
};

thread_local BlockState* g_block = nullptr;
thread_local StackPool g_stacks;
thread_local std::string g_launch_error;

Thread& me() { return *g_block->running; }

void suspend(Wait w) {
    Thread& t = me();
    t.wait = w;
    t.sink = std::move(t.sink).resume();
}

std::string where(const Coords& c) {
    return "block (" + std::to_string(c.block.x) + "," + std::to_string(c.block.y) + "," + std::to_string(c.block.z) +
           ") thread (" + std::to_string(c.thread.x) + "," + std::to_string(c.thread.y) + "," +
           std::to_string(c.thread.z) + ")";
}

// Releases what can proceed: the whole block at a barrier every live
// thread reached, or else the first warp whose live lanes all reached a
// warp point.  One warp at a time: the first warp runs from one block
// barrier to the next before the second starts -- a schedule the device
// may choose, and the one where a missing barrier between warps shows (a
// warp overwriting shared memory the next has yet to read).  False when
// nothing can proceed (a divergent synchronization).
bool release(BlockState& b) {
    bool any_live = false, all_barrier = true;
    for (const Thread& t : b.threads)
        if (t.wait != Wait::done) any_live = true, all_barrier &= t.wait == Wait::barrier;
    if (!any_live) return true;
    if (all_barrier) {
        for (Thread& t : b.threads)
            if (t.wait == Wait::barrier) t.wait = Wait::none;
        return true;
    }
    for (std::size_t w = 0; w < b.warps.size(); ++w) {
        const std::size_t lo = w * warpSize, hi = std::min(b.threads.size(), lo + warpSize);
        const Thread* first = nullptr;
        bool ready = true;
        for (std::size_t i = lo; i < hi; ++i) {
            const Thread& t = b.threads[i];
            if (t.wait == Wait::done) continue;
            if (!first) first = &t;
            ready &= t.wait == Wait::warp && t.warp_ops == first->warp_ops;
        }
        if (!first || !ready) continue;
        unsigned arrived = 0;
        for (std::size_t i = lo; i < hi; ++i)
            if (b.threads[i].wait == Wait::warp) b.threads[i].wait = Wait::none, arrived |= 1u << (i - lo);
        b.warps[w].arrived[first->warp_ops & 1] = arrived;
        return true;
    }
    return false;
}

std::string deadlock(const BlockState& b) {
    std::string s = "divergent synchronization: ";
    for (const Thread& t : b.threads) {
        if (t.wait == Wait::done) continue;
        s += where(t.coords) + (t.wait == Wait::barrier ? " waits at __syncthreads" : " waits at a warp operation");
        break;
    }
    for (const Thread& t : b.threads)
        if (t.wait != Wait::done && t.wait != b.threads.front().wait) {
            s += ", " + where(t.coords) + (t.wait == Wait::barrier ? " at __syncthreads" : " at a warp operation");
            break;
        }
    return s + " (every live thread of a block must reach the same barrier, every live lane of a warp the same "
               "warp operation)";
}

void run_block(BlockState& b, const std::function<void()>& body) {
    for (Thread& t : b.threads) {
        t.fiber = ctx::fiber(std::allocator_arg, PooledStack{&g_stacks}, [&b, &t, &body](ctx::fiber&& sink) {
            t.sink = std::move(sink);
            try {
                body();
            } catch (const ctx::detail::forced_unwind&) {
                throw;  // Boost.Context unwinding an abandoned thread
            } catch (...) {
                if (!b.error) b.error = std::current_exception();
            }
            t.wait = Wait::done;
            return std::move(t.sink);
        });
    }
    for (;;) {
        bool ran = false;
        for (Thread& t : b.threads) {
            if (t.wait != Wait::none) continue;
            b.running = &t;
            t.fiber = std::move(t.fiber).resume();
            b.running = nullptr;
            ran = true;
        }
        if (b.error) break;
        bool live = false;
        for (const Thread& t : b.threads) live |= t.wait != Wait::done;
        if (!live) return;
        if (!release(b) && !ran) throw std::runtime_error(deadlock(b));
    }
    // Unwind the fibers still suspended (their destructors run them to the end).
    for (Thread& t : b.threads) t.fiber = ctx::fiber();
    std::rethrow_exception(b.error);
}

}  // namespace

const Coords& coords() { return me().coords; }

void launch(dim3 grid, dim3 block, std::size_t shared, const std::function<void()>& body) {
    const std::size_t n = static_cast<std::size_t>(block.x) * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0)
        throw std::runtime_error("invalid launch configuration: " + std::to_string(n) + " threads per block");
    BlockState b;
    BlockState* outer = g_block;
    g_block = &b;
    struct Restore {
        BlockState* outer;
        ~Restore() { g_block = outer; }
    } restore{outer};
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                b.threads.clear();
                b.threads.resize(n);
                b.shared.assign((shared + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t), std::max_align_t{});
                if (shared) std::memset(b.shared.data(), 0xff, b.shared.size() * sizeof(std::max_align_t));
                b.warps.assign((n + warpSize - 1) / warpSize, Warp{});
                std::size_t i = 0;
                for (unsigned tz = 0; tz < block.z; ++tz)
                    for (unsigned ty = 0; ty < block.y; ++ty)
                        for (unsigned tx = 0; tx < block.x; ++tx)
                            b.threads[i++].coords = Coords{{tx, ty, tz}, {bx, by, bz}, block, grid};
                run_block(b, body);
            }
}

void* dynamic_shared() { return g_block->shared.empty() ? nullptr : g_block->shared.data(); }

void syncthreads() { suspend(Wait::barrier); }

void syncwarp(unsigned mask) {
    Thread& t = me();
    t.warp_mask = mask;
    ++t.warp_ops;
    suspend(Wait::warp);
}

namespace {

Warp& my_warp() { return g_block->warps[static_cast<std::size_t>(linear_thread() / warpSize)]; }

}  // namespace

std::uint64_t warp_exchange(unsigned mask, std::uint64_t bits, int src) {
    Warp& w = my_warp();
    const std::size_t parity = (me().warp_ops + 1) & 1;  // the op this call is about to pass
    w.slot[parity][lane_id()] = bits;
    syncwarp(mask);
    const bool took_part = src >= 0 && src < warpSize && (w.arrived[parity] >> src & 1u);
    return took_part ? w.slot[parity][src] : bits;
}

unsigned warp_ballot(unsigned mask, bool predicate) {
    Warp& w = my_warp();
    const std::size_t parity = (me().warp_ops + 1) & 1;
    w.slot[parity][lane_id()] = predicate;
    syncwarp(mask);
    unsigned ballot = 0;
    for (int l = 0; l < warpSize; ++l)
        if ((mask >> l & 1u) && (w.arrived[parity] >> l & 1u) && w.slot[parity][l]) ballot |= 1u << l;
    return ballot;
}

namespace {

// Element e (0 or 1) of a register of two 16-bit values, decoded.
double half_of(std::uint32_t reg, int e, bool bf16) {
    const auto bits = static_cast<std::uint16_t>(reg >> (16 * e));
    return bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

// The warp synchronizes at an .aligned op (`what`), which demands every lane.
void sync_whole_warp(const Warp& w, std::size_t parity, const char* what) {
    syncwarp(0xffffffffu);
    if (w.arrived[parity] != 0xffffffffu)
        throw std::runtime_error(std::string(what) + " with lanes missing (arrived 0x" +
                                 std::to_string(w.arrived[parity]) + "): every lane of the warp must execute it");
}

// Every lane deposits its mma operands and, once the whole warp has, reads
// all 32 lanes' (the returned array).
const MmaFragments* exchange_fragments(const std::uint32_t a[4], const std::uint32_t b[2]) {
    Warp& w = my_warp();
    const std::size_t parity = (me().warp_ops + 1) & 1;
    MmaFragments& mine = w.mma[parity][lane_id()];
    std::memcpy(mine.a, a, sizeof mine.a), std::memcpy(mine.b, b, sizeof mine.b);
    sync_whole_warp(w, parity, "mma.sync");
    return w.mma[parity];
}

// Every lane deposits 64 bits and, once the whole warp has, reads all 32
// lanes' deposits (the returned array).
const std::uint64_t* exchange_all(std::uint64_t bits, const char* what) {
    Warp& w = my_warp();
    const std::size_t parity = (me().warp_ops + 1) & 1;
    w.slot[parity][lane_id()] = bits;
    sync_whole_warp(w, parity, what);
    return w.slot[parity];
}

}  // namespace

void cp_async16(void* dst, const void* src, int src_bytes) {
    if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 || reinterpret_cast<std::uintptr_t>(src) % 16 != 0)
        throw std::runtime_error("cp.async: a 16-byte copy from or to an address that is not 16-byte aligned");
    AsyncCopy c{dst, {}};
    std::memcpy(c.bytes, src, static_cast<std::size_t>(std::clamp(src_bytes, 0, 16)));
    std::memset(dst, 0xff, sizeof c.bytes);  // undefined until the wait: what a reader would see there now
    me().open_copies.push_back(c);
}

void cp_async_commit() {
    Thread& t = me();
    t.copy_groups.push_back(std::move(t.open_copies));
    t.open_copies.clear();
}

void cp_async_wait(int newest_pending) {
    Thread& t = me();
    while (t.copy_groups.size() > static_cast<std::size_t>(std::max(newest_pending, 0))) {
        for (const AsyncCopy& c : t.copy_groups.front()) std::memcpy(c.dst, c.bytes, sizeof c.bytes);
        t.copy_groups.pop_front();
    }
}

void ldmatrix_x4(std::uint32_t r[4], const unsigned short* row, bool trans) {
    if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0)
        throw std::runtime_error("ldmatrix: lane " + std::to_string(lane_id()) + "'s row address is not 16-byte aligned");
    const std::uint64_t* rows = exchange_all(reinterpret_cast<std::uintptr_t>(row), "ldmatrix.sync");
    const int lane = lane_id(), group = lane / 4, t = lane % 4;
    // Matrix i's row k: lane 8 i + k's address.
    auto at = [&](int i, int k, int col) { return reinterpret_cast<const unsigned short*>(rows[8 * i + k])[col]; };
    for (int i = 0; i < 4; ++i) {
        const std::uint32_t lo = trans ? at(i, 2 * t, group) : at(i, group, 2 * t);
        const std::uint32_t hi = trans ? at(i, 2 * t + 1, group) : at(i, group, 2 * t + 1);
        r[i] = lo | hi << 16;
    }
}

void mma_m16n8k16(float d[4], const std::uint32_t a[4], const std::uint32_t b[2], const float c[4], bool bf16) {
    const MmaFragments* lanes = exchange_fragments(a, b);
    const int lane = lane_id();
    // A[r][k] and B[k][n] from the lanes that hold them (the layout above).
    auto a_at = [&](int r, int k) {
        const MmaFragments& f = lanes[(r % 8) * 4 + (k % 8) / 2];
        return half_of(f.a[(r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1, bf16);
    };
    auto b_at = [&](int k, int n) {
        const MmaFragments& f = lanes[n * 4 + (k % 8) / 2];
        return half_of(f.b[k >= 8 ? 1 : 0], k & 1, bf16);
    };
    const int group = lane / 4, t = lane % 4;
    // This lane's outputs are rows group and group + 8 by columns 2t and
    // 2t + 1: each of those rows and columns decoded once.
    double rows[2][16], cols[2][16];
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 16; ++k) rows[h][k] = a_at(group + 8 * h, k), cols[h][k] = b_at(k, 2 * t + h);
    for (int i = 0; i < 4; ++i) d[i] = block_fma(c[i], rows[i >> 1], cols[i & 1], 16, bf16 ? -126 : -14);
}

void mma_m16n8k32_s8(std::int32_t d[4], const std::uint32_t a[4], const std::uint32_t b[2], const std::int32_t c[4],
                     bool a_unsigned) {
    const MmaFragments* lanes = exchange_fragments(a, b);
    const int lane = lane_id();
    auto byte_of = [](std::uint32_t reg, int e) { return static_cast<std::uint8_t>(reg >> (8 * e)); };
    // A[r][k] and B[k][n] from the lanes that hold them (the layout above).
    auto a_at = [&](int r, int k) -> std::int64_t {
        const MmaFragments& f = lanes[(r % 8) * 4 + (k % 16) / 4];
        const std::uint8_t v = byte_of(f.a[(r >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0)], k % 4);
        return a_unsigned ? static_cast<std::int64_t>(v) : static_cast<std::int64_t>(static_cast<std::int8_t>(v));
    };
    auto b_at = [&](int k, int n) -> std::int64_t {
        const MmaFragments& f = lanes[n * 4 + (k % 16) / 4];
        return static_cast<std::int8_t>(byte_of(f.b[k >= 16 ? 1 : 0], k % 4));
    };
    const int group = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int r = group + (i >= 2 ? 8 : 0), n = 2 * t + (i & 1);
        std::int64_t s = c[i];
        for (int k = 0; k < 32; ++k) s += a_at(r, k) * b_at(k, n);
        d[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(s));  // modulo 2^32
    }
}

// ---- runtime API ----

cudaError_t cudaMalloc(void** p, std::size_t bytes) {
    *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
    if (bytes) std::memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind k, cudaStream_t) {
    return cudaMemcpy(dst, src, bytes, k);
}
cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
    std::memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
struct EmuStream {};
cudaError_t cudaStreamCreate(cudaStream_t* s) {
    *s = new EmuStream;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
cudaError_t cudaDeviceSynchronize() { return g_launch_error.empty() ? cudaSuccess : cudaErrorLaunchFailure; }
cudaError_t cudaGetLastError() {
    const cudaError_t e = g_launch_error.empty() ? cudaSuccess : cudaErrorLaunchFailure;
    g_launch_error.clear();
    return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorLaunchFailure: return g_launch_error.empty() ? "unspecified launch failure" : g_launch_error.c_str();
    }
    return "unknown error";
}
void set_launch_error(const char* what) { g_launch_error = what; }

namespace {

// Each kernel's dynamic shared memory limit raised by cudaFuncSetAttribute
// (shared by the host threads, as the device's attribute is per function).
std::mutex g_optin_mutex;
std::map<AnyKernel, std::size_t> g_optin;

std::size_t max_dynamic_shared(AnyKernel kernel) {
    const std::lock_guard<std::mutex> lock(g_optin_mutex);
    const auto it = g_optin.find(kernel);
    return it == g_optin.end() ? kEmuSharedDefault : std::max(it->second, kEmuSharedDefault);
}

}  // namespace

void set_max_dynamic_shared(AnyKernel kernel, int bytes) {
    const std::lock_guard<std::mutex> lock(g_optin_mutex);
    g_optin[kernel] = static_cast<std::size_t>(bytes);
}

void check_launch_resources(AnyKernel kernel, dim3 block, std::size_t shared) {
    const std::size_t threads = static_cast<std::size_t>(block.x) * block.y * block.z;
    if (threads > kEmuMaxThreads)
        throw std::runtime_error("a block of " + std::to_string(threads) + " threads: the emulation allows " +
                                 std::to_string(kEmuMaxThreads) +
                                 ", the most that fits any register count ptxas may give a kernel "
                                 "(docs/cuda.md, \"Launch resources\")");
    const std::size_t limit = max_dynamic_shared(kernel);
    if (shared > limit)
        throw std::runtime_error(std::to_string(shared) + " bytes of dynamic shared memory: the kernel's limit is " +
                                 std::to_string(limit) +
                                 (limit == kEmuSharedDefault ? " (48 KiB; cudaFuncSetAttribute raises it)" : "") +
                                 ", and the device refuses the launch");
}

// ---- 16-bit formats ----

float __half2float(__half h) { return fp16_to_float(h.x); }
__half __float2half_rn(float f) { return {static_cast<std::uint16_t>(encode(Format::fp16, f))}; }
__half __double2half(double d) { return {static_cast<std::uint16_t>(encode(Format::fp16, d))}; }
float __bfloat162float(__nv_bfloat16 h) { return bf16_to_float(h.x); }
__nv_bfloat16 __float2bfloat16(float f) { return {static_cast<std::uint16_t>(encode(Format::bf16, f))}; }
__nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
__nv_bfloat16 __float2bfloat16_rz(float f) {
    const std::uint32_t b = float_bits(f);
    if (std::isnan(f)) return {static_cast<std::uint16_t>((b >> 16) | 0x40)};  // stays a quiet NaN
    return {static_cast<std::uint16_t>(b >> 16)};
}
__nv_bfloat16 __double2bfloat16(double d) { return {static_cast<std::uint16_t>(encode(Format::bf16, d))}; }

}  // namespace conform::cuda_emu
