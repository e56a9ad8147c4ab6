// Tile geometry per architecture, derived from the vector width and the register count. Every
// kernel and the microkernel tester take their tile constants from here.
#pragma once

#include <cstdint>

#include "simd/arch.hpp"

namespace attend::kernels {
namespace {

template <class Arch>
struct Tiles {
  static constexpr int W = vfloat<Arch>::size;
  static constexpr int kRegisters = vector_registers(Arch{});
  /// 32 registers (AVX-512, NEON): up to 24 accumulators per microkernel; 16 registers: 12.
  static constexpr bool kManyRegs = kRegisters >= 32;
  static constexpr int kMaxRowVectors = 4;               // Sᵀ tile: ≤ 4 vectors of query rows
  static constexpr int kBlockRows = kMaxRowVectors * W;  // query rows per wide block
  static constexpr int kScoreKeys = kManyRegs ? 6 : 3;   // keys per score microkernel call
  /// Keys per wide tile: a whole number of score-microkernel calls, so no tile ends in a short
  /// remainder call (16 or 24 calls).
  static constexpr int kBlockKeys = kScoreKeys * (kManyRegs ? 16 : 24);
  static constexpr int kAccRegs = kManyRegs ? 24 : 12;  // accumulator budget of the P·V microkernel
  /// Rows per P·V microkernel call. 16 registers: 4 rows × 3 vectors, so a GQA group of four
  /// (decode) is one block instead of 3 + 1 (Zen 3, AVX2, L3-resident decode: 30 → 24–28 ns per
  /// kv head and key for f32 K/V, 31 → 25 i8, 26 → 21 bf16; prefill unchanged).
  static constexpr int kPvRows = kManyRegs ? 6 : 4;
  /// Decode's P·V sub-tile (pv_sub_keys), in bytes of V: 16 KB, half of a 32 KB L1, leaves room
  /// for the next sub-tile's lines as they arrive. 0 (32 registers): a tile's keys in one run.
  static constexpr int64_t kPvSubTileBytes = kManyRegs ? 0 : 16384;
  /// The narrow path's row pack (its score microkernels' rows), and the most rows it takes, in
  /// packs: 32 registers one pack; 16 registers two (a GQA group of 8 on AVX2: 43 → 55% of a
  /// read for sdpa, 47 → 63% for the f32 cache on Zen 3 against the wide path, alternated in one
  /// process). Not more: with 16 rows MLA decode (D 576) ran 1.48× slower narrow than wide, a
  /// group of 16 at D 128 the same either way.
  static constexpr int kNarrowMaxRows = W / 2 > 1 ? W / 2 : 1;
  static constexpr int kNarrowRows = kManyRegs ? kNarrowMaxRows : 2 * kNarrowMaxRows;
  /// The narrow path's tiles: kNarrowBlockKeys keys over a blocked f32 or 16-bit K (a cache's), the
  /// most a tile holds (the score rows' stride); kNarrowTileKeys over a row-major K (sdpa) and an
  /// 8-bit cache (whose integer P·V sums bound a tile to 512 keys: 32767·127·512 < 2³¹). A Zen 4
  /// streams a cache's K/V from its hardware prefetchers alone (FlashWork::hardware_stream), and
  /// each switch between a tile's K and its V starts a stream anew: 512-key tiles there read the
  /// f32 cache's D1 at 93–97% of a read against 85–92% with 256, D4 94–96 against 88–94, the bf16
  /// cache's D1 91–93 against 79–90 (attend-bench alternated, 4 rounds, session 52). A row-major K
  /// keeps 256: sdpa's D1 and its GQA group of 8 (D7) read 5–15 points less with 512 there.
  static constexpr int kNarrowBlockKeys = 512;
  static constexpr int kNarrowTileKeys = 256;
  static_assert(kNarrowBlockKeys % kNarrowTileKeys == 0, "a row-major tile fits the score rows");
  static_assert(kBlockKeys % kScoreKeys == 0, "a wide tile is a whole number of score calls");
  static_assert(kScoreKeys * kMaxRowVectors <= kAccRegs, "score accumulators fit the register budget");
  static_assert(kNarrowRows <= 16, "narrow path keeps per-row ranges in arrays of 16");
};

// The page-start requests of FlashWork::l2_pages: the first line of each 4 KiB page that begins
// inside [p, p + bytes), with prefetch hint H (a request per page: walking a stream's pages with these
// moves each page's address translation and the hardware prefetchers' start ahead of the reads).
constexpr uintptr_t kRequestPage = 4096;
template <int H>
[[gnu::always_inline]] inline void request_page_starts(const void* p, int64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t page = (at + kRequestPage - 1) & ~(kRequestPage - 1); page < at + bytes; page += kRequestPage)
    __builtin_prefetch(reinterpret_cast<const void*>(page), 0, H);
}
// The page-start requests for one row of a run of rows `stride` bytes apart: the pages beginning
// within its stride (rows walked in order request each page once), or, rows a page or more apart,
// the row's own first line.
template <int H>
[[gnu::always_inline]] inline void request_row_pages(const void* row, int64_t stride) {
  if (stride >= static_cast<int64_t>(kRequestPage)) return __builtin_prefetch(row, 0, H);
  request_page_starts<H>(row, stride);
}
// Whether the line at p starts a page (FlashWork::l2_pages: the lines of a request stream that remain).
[[gnu::always_inline]] inline bool starts_page(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & (kRequestPage - 1)) == 0;
}

}  // namespace
}  // namespace attend::kernels
