// Microkernel: decode scores against a blocked K (a KV cache's layout, [D][kKeyBlock] per block of
// kKeyBlock keys), S[NR rows][G·kKeyBlock keys]: keys sit in vector lanes, so every FMA scores W
// keys and nothing is reduced across lanes. K of f32, bf16 or f16.
#pragma once

#include <bit>
#include <type_traits>

#include "../kernel_table.hpp"
#include "../simd/convert.hpp"
#include "../tile_traits.hpp"

namespace attend::kernels {
namespace {

// Whether blocked_scores<Arch, …, E> with U depth steps per iteration takes the bf16 pairs kernel
// (given qq).
template <class Arch, class E, int U>
constexpr bool blocked_pairs() {
#if defined(__AVX512BW__)
  return bf16_pairs_on<Arch, E>() && kKeyBlock == 16 && U == 2;
#else
  return false;
#endif
}

#if defined(__AVX512BW__)
// rows queries of depth floats as the pairs kernel reads them: (q[d] ×8, q[d + 1] ×8) per even d,
// row r's pairs at qq + r·depth·8.
inline void bf16_query_pairs(const float* q, int64_t rows, int64_t depth, float* qq) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < depth; d += 2) {
      const __m512 lo = _mm512_set1_ps(q[r * depth + d]), hi = _mm512_set1_ps(q[r * depth + d + 1]);
      _mm512_store_ps(qq + (r * depth + d) * 8, _mm512_mask_blend_ps(0xff00, lo, hi));
    }
}
#endif
/// The most floats of query pairs blocked_scores_run builds on its stack (rows·depth ≤ 1024).
constexpr int64_t kMaxQueryPairFloats = 8 * 1024;

// S[NR][G·kKeyBlock] for G key blocks (blk[g] each [D][kKeyBlock]; a paged cache scatters them)
// and NR query rows (q: NR rows of depth floats, pre-scaled; a pack's padding rows have zero
// queries). pf: null, or the G blocks the next call reads, fetched a slice per depth step so the
// requests are spread over the FMAs instead of stalling the core in a burst.
//
// Not inlined: inside flash_narrow the compiler ran out of registers for the loop's addresses and
// reloaded the query rows' stride from the stack every depth step. One Zen 3 thread, L2-resident
// decode (4 rows, D 128, 384 keys), whole call, alternated in one process: f32 cache 24.8 ->
// 23.1 us, i8 27.1 -> 25.2, bf16 22.2 -> 22.0; cold i8 (D2's shape) 32–36 -> 38–40% of a read.
// (Row-major K's narrow_scores measured 2–5% slower when not inlined: it stays inlined.)
// l2: null, or G blocks further ahead (FlashWork::l2_ahead_bytes), requested into L2 (prefetcht1)
// at the same pace; with l2_pages (FlashWork::l2_pages) only the lines that start a 4 KiB page.
//
// UG: the group whose depth steps per iteration (U, below) this call takes — G itself, or, for a
// group's blocks scored one at a time in address order (FlashWork::hardware_stream), the group's
// G: each block's sums then add the same products in the same order, so the order changes no bit.
//
// qq (a bf16 K on AVX-512, two depth steps per iteration: blocked_pairs): null, or the rows' queries
// in depth pairs (bf16_query_pairs), which take the pairs kernel below.
template <class Arch, int NR, int G, class E, int UG = G>
[[gnu::noinline]] void blocked_scores(const E* const* blk, int64_t depth, const float* q, float* s, int64_t lds,
                                      const E* const* pf, const E* const* l2 = nullptr, bool l2_pages = false,
                                      [[maybe_unused]] const float* qq = nullptr) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  static_assert(kKeyBlock % W == 0, "a key block is a whole number of vectors");
  constexpr int KV = static_cast<int>(kKeyBlock / W), NV = G * KV, UNV = UG * KV;
  // Depth steps per iteration: enough for 8 accumulators, and (1-byte i8) for a whole cache line of
  // the G blocks per step, so the loop and prefetch bookkeeping is not paid per 32 bytes. A power
  // of two ≤ 8: divides W, hence D on the narrow path.
  // The line-per-step rule yields to the register budget: U·NR·NV accumulators beyond it spill to
  // the stack (16 registers, four rows of an i8 or bf16 K: 32 or 16 accumulators, every FMA a
  // load and a store). Zen 3, GQA i8 decode: L2-resident 45–52 → 33 µs per 1024 keys on one
  // thread, L3-resident (D3-like, 8 kv heads × 2048 keys) 0.40–0.49 → 0.30–0.38 ms on two; cold
  // (the bench) within ±2 points of a read, bf16 within noise.
  constexpr int U0 = NR * UNV >= 8 ? 1 : 8 / (NR * UNV);
  constexpr int U1 = static_cast<int>(64 / (UG * kKeyBlock * static_cast<int64_t>(sizeof(E))));
  constexpr int U2 = std::bit_floor(static_cast<unsigned>(Tiles<Arch>::kAccRegs / (NR * UNV) > 0
                                                              ? Tiles<Arch>::kAccRegs / (NR * UNV)
                                                              : 1));  // (a power of two, as U0 and U1)
  constexpr int U1c = U1 < U2 ? U1 : U2;
  // And two steps wherever the budget holds them (f32 and 16-bit K, four rows of two blocks: 16
  // accumulators): the bookkeeping per step is paid once per 16 FMAs instead of 8.
  constexpr int U3 = U2 < 2 ? U2 : 2;
  constexpr int U01 = U0 > U1c ? U0 : U1c;
  constexpr int U = U01 > U3 ? U01 : U3;
  static_assert((U & (U - 1)) == 0 && U <= 8, "U divides W, hence the depth");
  static_assert(G == 1 || G * U <= W, "G·U divides W, hence the depth (request_slice's slices)");
  B acc[U][NR][NV];
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < NR; ++r)
      for (int v = 0; v < NV; ++v) acc[u][r][v] = B(0.0f);
  const E* b[G];
  for (int g = 0; g < G; ++g) b[g] = blk[g];
  // The next call's G blocks are fetched in address order, a slice of kSlice bytes per depth step
  // (the same requests as for one contiguous run of G blocks when they are adjacent).
  constexpr int64_t kSlice = G * kKeyBlock * U * static_cast<int64_t>(sizeof(E));
  const int64_t block_bytes = kKeyBlock * depth * static_cast<int64_t>(sizeof(E));
  // A stream of requests over blocks[0, G), kSlice bytes per depth step, with prefetch hint H
  // (pages: the lines that start a page only): a pointer walked through each block, one
  // (predictable) branch per step (G·U divides the depth, a multiple of W: no slice straddles two
  // blocks). The per-line walk it replaces (an offset and a block index, a compare per line)
  // was most of the instructions of a depth step of four f32 rows (perf annotate: ~40 for 8 FMAs).
  // Emerald Rapids, one thread, a GQA group of four over an f32 cache (2 kv heads × 512 keys,
  // L2-resident), whole step: 29.7 → 25.8 µs, and with the two depth steps above ~25; two
  // threads, attend-bench alternated (4 rounds), cache/attend-f32/D2 90.5–91.5 → 92.2–93.3% of a
  // read, the paged cache's D2 90.7–92.1 → 91.1–93.5%, D3 +1–2 points, D1/D4 and bf16 unchanged.
  struct Stream {
    const E* const* blocks = nullptr;
    const char* at = nullptr;
    const char* end = nullptr;
    int next = 0;
  };
  auto start = [&](const E* const* blocks) {
    Stream st;
    if (blocks) {
      st.blocks = blocks;
      st.at = reinterpret_cast<const char*>(blocks[0]);
      st.end = st.at + block_bytes;
      st.next = 1;
    }
    return st;
  };
  auto request_slice = [&](Stream& st, auto hint, bool pages) {
    constexpr int H = decltype(hint)::value;
    auto request = [&](const char* line) {
      if (!pages || starts_page(line)) __builtin_prefetch(line, 0, H);
    };
    if constexpr (kSlice < 64) {  // a slice smaller than a line: a request when a line begins
      if (((st.at - reinterpret_cast<const char*>(st.blocks[st.next - 1])) & 63) == 0) request(st.at);
      st.at += kSlice;
    } else {
      ATTEND_UNROLL
      for (int64_t o = 0; o < kSlice; o += 64) request(st.at + o);
      st.at += kSlice;
    }
    if (st.at >= st.end && st.next < G) {
      st.at = reinterpret_cast<const char*>(st.blocks[st.next++]);
      st.end = st.at + block_bytes;
    }
  };
  Stream pfs = start(pf), l2s = start(l2);
#if defined(__AVX512BW__)
  // A bf16 K, two depth steps per iteration: a block's 64-byte line holds depths d and d + 1 of its
  // 16 keys, whose even keys widen by one shift and odd keys by one masked move (bf16_even,
  // bf16_odd: no cross-lane shuffle, where load_float takes vpmovzxwd and vpslld per depth), each
  // with d in lanes 0–7 and d + 1 in lanes 8–15, against qq's (q[d] ×8, q[d + 1] ×8). ae then holds
  // the even keys' sums over the even depths (lanes 0–7) and the odd depths (8–15), ao the odd
  // keys'; put in key order they are acc[0] and acc[1] of the loop below, added the same way: the
  // same bits.
  if constexpr (blocked_pairs<Arch, E, U>()) {
    if (qq) {
      __m512 ae[NR][G], ao[NR][G];  // (acc's two halves, in registers of their own)
      ATTEND_UNROLL
      for (int r = 0; r < NR; ++r)
        for (int g = 0; g < G; ++g) ae[r][g] = ao[r][g] = _mm512_setzero_ps();
      for (int64_t d = 0; d < depth; d += U) {
        if (pf) request_slice(pfs, std::integral_constant<int, 3>{}, false);
        if (l2) request_slice(l2s, std::integral_constant<int, 2>{}, l2_pages);
        __m512 ve[G], vo[G];
        ATTEND_UNROLL
        for (int g = 0; g < G; ++g) {
          ve[g] = bf16_even(b[g] + d * kKeyBlock);
          vo[g] = bf16_odd(b[g] + d * kKeyBlock);
        }
        ATTEND_UNROLL
        for (int r = 0; r < NR; ++r) {
          const __m512 qv = _mm512_load_ps(qq + (r * depth + d) * 8);
          ATTEND_UNROLL
          for (int g = 0; g < G; ++g) {
            ae[r][g] = fma_as_xsimd(qv, ve[g], ae[r][g]);
            ao[r][g] = fma_as_xsimd(qv, vo[g], ao[r][g]);
          }
        }
      }
      ATTEND_UNROLL
      for (int r = 0; r < NR; ++r)
        for (int g = 0; g < G; ++g) {
          const __m512 even_depths = interleave_low(ae[r][g], ao[r][g]);
          const __m512 odd_depths = interleave_high(ae[r][g], ao[r][g]);
          _mm512_store_ps(s + r * lds + g * W, _mm512_add_ps(even_depths, odd_depths));
        }
      return;
    }
  }
#endif
  for (int64_t d = 0; d < depth; d += U) {
    if (pf) request_slice(pfs, std::integral_constant<int, 3>{}, false);
    if (l2) request_slice(l2s, std::integral_constant<int, 2>{}, l2_pages);
    for (int u = 0; u < U; ++u) {
      B kv[NV];
      for (int g = 0; g < G; ++g)
        for (int v = 0; v < KV; ++v) kv[g * KV + v] = load_float<Arch>(b[g] + (d + u) * kKeyBlock + v * W);
      for (int r = 0; r < NR; ++r) {
        const B qb(q[r * depth + d + u]);
        for (int v = 0; v < NV; ++v) acc[u][r][v] = xsimd::fma(qb, kv[v], acc[u][r][v]);
      }
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) {
      B sum = acc[0][r][v];
      for (int u = 1; u < U; ++u) sum += acc[u][r][v];
      sum.store_aligned(s + r * lds + v * W);
    }
}

// Blocks scored per call for a pack of NR rows: with 16-lane vectors and 32 registers (AVX-512)
// each broadcast is shared across two or four blocks; other targets score one (a 4-lane NEON block
// is already 4 vectors per row).
template <class Arch>
constexpr int blocked_group(int nr) {
  return Tiles<Arch>::W == 16 && Tiles<Arch>::kManyRegs ? (nr == 1 ? 4 : 2) : 1;
}

/// The most blocks a call reads (and prefetches) past the ones it scores.
constexpr int kMaxBlockedGroup = 4;
/// The most blocks ahead a call requests into L2 (FlashWork::l2_ahead_bytes).
constexpr int kMaxL2AheadBlocks = 16;

// Scores `blocks` key blocks (G at a time, then one at a time) for `packs` packs of NR rows (pack p's
// queries at q + p·NR·depth, its scores at s + p·NR·lds); blk[b] is block b's address for b <
// `known` (known ≥ blocks; the blocks after the scored ones are the next call's, prefetched as the
// first pack's scoring goes; nothing past them is touched). The packs take each group of blocks in
// turn, so the later packs read it from L1.
// l2_blocks > 0: the first pack also requests, into L2, the group l2_blocks blocks on (when known).
// l1_requests false: the next group is left to the hardware prefetchers (FlashWork::no_k_l1_requests).
// l2_pages: the L2 requests are page starts only (FlashWork::l2_pages).
// in_order (FlashWork::hardware_stream, FlashWork::one_block_scores): the groups' blocks one at a
// time, in address order, each with its group's depth steps (the same bits as in groups): one K
// stream instead of G blocks read a line of each at a time. With the requests the calls make (none
// under hardware_stream: the executor sets l1_requests false and l2_blocks 0 with it): the next
// block into L1, the block l2_blocks on into L2.
template <class Arch, int NR, class E>
void blocked_scores_run(const E* const* blk, int64_t blocks, int64_t known, int64_t depth, const float* q, float* s,
                        int64_t lds, int packs, int64_t l2_blocks, bool l1_requests, bool l2_pages,
                        bool in_order = false) {
  constexpr int G = blocked_group<Arch>(NR);
  // A bf16 K's pairs kernel (blocked_scores' qq), when the rows' query pairs fit the stack buffer:
  // built once per call (a tile), 4 rows at D 128 256 stores against a 512-key tile's 16,384 FMAs.
  const float* qq = nullptr;
#if defined(__AVX512BW__)
  alignas(64) float pairs[bf16_pairs_on<Arch, E>() ? kMaxQueryPairFloats : 1];
  if constexpr (bf16_pairs_on<Arch, E>()) {
    if (packs * NR * depth * 8 <= kMaxQueryPairFloats) {
      bf16_query_pairs(q, packs * NR, depth, pairs);
      qq = pairs;
    }
  }
#endif
  auto pack_pairs = [&](int p) { return qq ? qq + p * NR * depth * 8 : nullptr; };
  int64_t b = 0;
  if (G > 1 && in_order) {
    for (; b + G <= blocks; b += G)
      for (int64_t i = b; i < b + G; ++i)
        for (int p = 0; p < packs; ++p)
          blocked_scores<Arch, NR, 1, E, G>(
              blk + i, depth, q + p * NR * depth, s + p * NR * lds + i * kKeyBlock, lds,
              p == 0 && l1_requests && i + 1 < known ? blk + i + 1 : nullptr,
              p == 0 && l2_blocks > 0 && i + l2_blocks < known ? blk + i + l2_blocks : nullptr, l2_pages,
              pack_pairs(p));
  }
  for (; b + G <= blocks; b += G)  // (a partial last group ahead is left to the hardware)
    for (int p = 0; p < packs; ++p)
      blocked_scores<Arch, NR, G, E>(
          blk + b, depth, q + p * NR * depth, s + p * NR * lds + b * kKeyBlock, lds,
          p == 0 && l1_requests && b + 2 * G <= known ? blk + b + G : nullptr,
          p == 0 && l2_blocks > 0 && b + l2_blocks + G <= known ? blk + b + l2_blocks : nullptr, l2_pages,
          pack_pairs(p));
  for (; b < blocks; ++b)
    for (int p = 0; p < packs; ++p)
      blocked_scores<Arch, NR, 1, E>(blk + b, depth, q + p * NR * depth, s + p * NR * lds + b * kKeyBlock, lds,
                                     p == 0 && l1_requests && b + 1 < known ? blk + b + 1 : nullptr,
                                     p == 0 && l2_blocks > 0 && b + l2_blocks < known ? blk + b + l2_blocks : nullptr,
                                     l2_pages, pack_pairs(p));
}

template <class Arch, class E>
void blocked_scores_dispatch(int row_pack, const E* const* blk, int64_t blocks, int64_t known, int64_t depth,
                             const float* q, float* s, int64_t lds, int packs = 1, int64_t l2_blocks = 0,
                             bool l1_requests = true, bool l2_pages = false, bool in_order = false) {
  constexpr int kMax = Tiles<Arch>::kNarrowMaxRows;
  switch (row_pack) {
    case 1:
      return blocked_scores_run<Arch, 1, E>(blk, blocks, known, depth, q, s, lds, packs, l2_blocks, l1_requests,
                                            l2_pages, in_order);
    case 2:
      if constexpr (kMax >= 2)
        return blocked_scores_run<Arch, 2, E>(blk, blocks, known, depth, q, s, lds, packs, l2_blocks, l1_requests,
                                              l2_pages, in_order);
      break;
    case 4:
      if constexpr (kMax >= 4)
        return blocked_scores_run<Arch, 4, E>(blk, blocks, known, depth, q, s, lds, packs, l2_blocks, l1_requests,
                                              l2_pages, in_order);
      break;
    case 8:
      if constexpr (kMax >= 8)
        return blocked_scores_run<Arch, 8, E>(blk, blocks, known, depth, q, s, lds, packs, l2_blocks, l1_requests,
                                              l2_pages, in_order);
      break;
  }
}

}  // namespace
}  // namespace attend::kernels
