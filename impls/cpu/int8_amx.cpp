// The INT8 GEMM on AMX-INT8 (Sapphire Rapids and later; docs/int8.md
// "Kernels"): tdpbssd multiplies SIGNED by signed bytes, so neither shift nor
// compensation is needed.  One logic, two sets of tile operations:
//   * Hardware: the tile instructions (ldtilecfg, tileloadd, tdpbssd,
//     tilestored), for CPUs with AMX-TILE and AMX-INT8 whose OS granted the
//     tile data state (arch_prctl ARCH_REQ_XCOMP_PERM);
//   * Emulated: the same operations on byte arrays, by the instruction's
//     definition in the Intel SDM (TDPBSSD: for each row m, column n and
//     quad k, C[m][n] += sum_t A[m][4k+t] B[k][4n+t], the four products of
//     signed bytes added into the INT32 accumulator with wraparound), so that
//     the tiling, packing and edges are tested on every CPU.
// Every tile is 16 rows x 64 bytes: C tiles 16 x 16 INT32, A tiles 16 rows
// x 64 k, B tiles 16 quads x 16 columns (row q: the quads of k 4q..4q+3 of
// 16 columns, the layout of the VNNI panels).  A 32 x 32 block of acc is
// four C tiles (0-3) fed by two A tiles (4, 5) and two B tiles (6, 7).
#include "impls/cpu/x86_intrinsics.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "impls/cpu/int8_gemm.hpp"
#include "impls/cpu/int8_pack.hpp"
#include "impls/cpu/isa.hpp"

namespace conform::cpu {
namespace {

constexpr std::int64_t kTileRows = 16, kTileBytes = 64;
constexpr std::int64_t kBlock = 32;          // rows and columns of acc per block of four C tiles
constexpr std::int64_t kKcQuads = 512;       // quads per packed block of b (2048 k)

struct Emulated {
    alignas(64) std::uint8_t t[8][kTileRows * kTileBytes] = {};
    void configure() {}
    void release() {}
    template <int T>
    void zero() {
        std::memset(t[T], 0, sizeof t[T]);
    }
    template <int T>
    void load(const void* p, std::int64_t stride) {
        for (std::int64_t r = 0; r < kTileRows; ++r)
            std::memcpy(t[T] + r * kTileBytes, static_cast<const std::uint8_t*>(p) + r * stride, kTileBytes);
    }
    template <int T>
    void store(void* p, std::int64_t stride) const {
        for (std::int64_t r = 0; r < kTileRows; ++r)
            std::memcpy(static_cast<std::uint8_t*>(p) + r * stride, t[T] + r * kTileBytes, kTileBytes);
    }
    template <int C, int A, int B>
    void dpbssd() {
        for (std::int64_t m = 0; m < kTileRows; ++m)
            for (std::int64_t n = 0; n < kTileBytes / 4; ++n) {
                std::int32_t c;
                std::memcpy(&c, t[C] + m * kTileBytes + 4 * n, 4);
                std::uint32_t sum = static_cast<std::uint32_t>(c);  // wraps, as the instruction does
                for (std::int64_t q = 0; q < kTileRows; ++q)
                    for (std::int64_t s = 0; s < 4; ++s)
                        sum += static_cast<std::uint32_t>(static_cast<std::int8_t>(t[A][m * kTileBytes + 4 * q + s]) *
                                                          static_cast<std::int8_t>(t[B][q * kTileBytes + 4 * n + s]));
                c = static_cast<std::int32_t>(sum);
                std::memcpy(t[C] + m * kTileBytes + 4 * n, &c, 4);
            }
    }
};

#define CONFORM_AMX __attribute__((target("amx-tile,amx-int8")))

struct Hardware {
    // The tile configuration: palette 1, eight tiles of 16 rows x 64 bytes.
    struct alignas(64) Config {
        std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
        std::uint16_t colsb[16] = {};
        std::uint8_t rows[16] = {};
    };
    CONFORM_AMX void configure() {
        Config cfg;
        for (int i = 0; i < 8; ++i) cfg.colsb[i] = kTileBytes, cfg.rows[i] = kTileRows;
        _tile_loadconfig(&cfg);
    }
    CONFORM_AMX void release() { _tile_release(); }
    // The intrinsics paste the tile number into the instruction's text, so
    // it must be a literal: one branch per tile (or per product) used.
    template <int T>
    CONFORM_AMX void zero() {
        if constexpr (T == 0) _tile_zero(0);
        else if constexpr (T == 1) _tile_zero(1);
        else if constexpr (T == 2) _tile_zero(2);
        else _tile_zero(3);
    }
    template <int T>
    CONFORM_AMX void load(const void* p, std::int64_t stride) {
        if constexpr (T == 0) _tile_loadd(0, p, stride);
        else if constexpr (T == 1) _tile_loadd(1, p, stride);
        else if constexpr (T == 2) _tile_loadd(2, p, stride);
        else if constexpr (T == 3) _tile_loadd(3, p, stride);
        else if constexpr (T == 4) _tile_loadd(4, p, stride);
        else if constexpr (T == 5) _tile_loadd(5, p, stride);
        else if constexpr (T == 6) _tile_loadd(6, p, stride);
        else _tile_loadd(7, p, stride);
    }
    template <int T>
    CONFORM_AMX void store(void* p, std::int64_t stride) const {
        if constexpr (T == 0) _tile_stored(0, p, stride);
        else if constexpr (T == 1) _tile_stored(1, p, stride);
        else if constexpr (T == 2) _tile_stored(2, p, stride);
        else _tile_stored(3, p, stride);
    }
    template <int C, int A, int B>
    CONFORM_AMX void dpbssd() {
        static_assert(A == 4 + C / 2 && B == 6 + C % 2, "the block's four products");
        if constexpr (C == 0) _tile_dpbssd(0, 4, 6);
        else if constexpr (C == 1) _tile_dpbssd(1, 4, 7);
        else if constexpr (C == 2) _tile_dpbssd(2, 5, 6);
        else _tile_dpbssd(3, 5, 7);
    }
};

// One 32 x 32 block of the padded acc c (row stride np) over quads [0, quads)
// of the packed block: a at row i0 (row stride kp, already at the block's
// first k), the two 16-column panels of b at p0 and p1.
template <class Ops>
void block(Ops& ops, const std::int8_t* a, std::int64_t kp, const std::int8_t* p0, const std::int8_t* p1,
           std::int64_t quads, std::int32_t* c, std::int64_t np, bool first) {
    const std::int64_t cs = np * 4;  // bytes per row of c
    if (first) {
        ops.template zero<0>(), ops.template zero<1>(), ops.template zero<2>(), ops.template zero<3>();
    } else {
        ops.template load<0>(c, cs), ops.template load<1>(c + 16, cs);
        ops.template load<2>(c + 16 * np, cs), ops.template load<3>(c + 16 * np + 16, cs);
    }
    for (std::int64_t q = 0; q < quads; q += kTileRows) {
        ops.template load<4>(a + 4 * q, kp);
        ops.template load<5>(a + 16 * kp + 4 * q, kp);
        ops.template load<6>(p0 + q * kTileBytes, kTileBytes);
        ops.template load<7>(p1 + q * kTileBytes, kTileBytes);
        ops.template dpbssd<0, 4, 6>(), ops.template dpbssd<1, 4, 7>();
        ops.template dpbssd<2, 5, 6>(), ops.template dpbssd<3, 5, 7>();
    }
    ops.template store<0>(c, cs), ops.template store<1>(c + 16, cs);
    ops.template store<2>(c + 16 * np, cs), ops.template store<3>(c + 16 * np + 16, cs);
}

// acc [m, n] = a [m, k] b [k, n]: a copied with rows and k padded to 32 and
// 64 by zeros, b packed by blocks of kKcQuads quads into 16-column panels
// (zeros past K and N), the padded product accumulated in c between blocks.
template <class Ops>
void matmul(Ops& ops, const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
            std::int64_t n) {
    const std::int64_t mp = (m + kBlock - 1) / kBlock * kBlock, np = (n + kBlock - 1) / kBlock * kBlock;
    const std::int64_t kp = std::max<std::int64_t>(kTileBytes, (k + kTileBytes - 1) / kTileBytes * kTileBytes), kq = kp / 4;
    std::vector<std::int8_t> ap(static_cast<std::size_t>(mp * kp), 0);
    for (std::int64_t i = 0; i < m; ++i) std::copy(a + i * k, a + i * k + k, ap.data() + i * kp);
    std::vector<std::int32_t> c(static_cast<std::size_t>(mp * np));
    std::vector<std::int8_t> bp(static_cast<std::size_t>(std::min(kq, kKcQuads) * 4 * np));
    ops.configure();
    for (std::int64_t q0 = 0; q0 < kq; q0 += kKcQuads) {
        const std::int64_t q1 = std::min(kq, q0 + kKcQuads), quads = q1 - q0;
        pack_quads<16>(b, k, n, q0, q1, np, 16, reinterpret_cast<std::uint8_t*>(bp.data()),
                       [](const std::int8_t* src, std::int64_t stride, auto at, std::int64_t c, std::int64_t) {
                           pack16(src, stride, at(c), 0);  // signed: tdpbssd needs no shift
                       });
        for (std::int64_t j = 0; j < np; j += kBlock) {
            const std::int8_t* p0 = bp.data() + j / 16 * quads * kTileBytes;
            for (std::int64_t i = 0; i < mp; i += kBlock)
                block(ops, ap.data() + i * kp + 4 * q0, kp, p0, p0 + quads * kTileBytes, quads, c.data() + i * np + j, np,
                      q0 == 0);
        }
    }
    ops.release();
    for (std::int64_t i = 0; i < m; ++i) std::copy(c.data() + i * np, c.data() + i * np + n, acc + i * n);
}

}  // namespace

void int8_matmul_amx(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m, std::int64_t k,
                     std::int64_t n) {
    Hardware ops;
    matmul(ops, a, b, acc, m, k, n);
}

void int8_matmul_amx_emulated(const std::int8_t* a, const std::int8_t* b, std::int32_t* acc, std::int64_t m,
                              std::int64_t k, std::int64_t n) {
    Emulated ops;
    matmul(ops, a, b, acc, m, k, n);
}

}  // namespace conform::cpu
