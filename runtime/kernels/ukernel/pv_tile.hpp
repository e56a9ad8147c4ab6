// Microkernel: O[R rows][NV·W] = α·O + P·V over a run of keys, for both paths. R ≤ 6 rows,
// NV ≤ 8 vectors of the value dimension, V of f32, bf16 or f16 (widened as loaded); pv_block
// covers any rows × value width with these register blocks.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../simd/convert.hpp"
#include "../tile_traits.hpp"

namespace attend::kernels {
namespace {

// O[R rows][NV·W] = alpha[r]·O + Σ_j P[r][j]·V[j]. P is addressed with two strides so the same
// kernel reads the wide path's Sᵀ (row stride 1) and the narrow path's S (key stride 1). The
// rescale by alpha is folded into the reload of O, so the online softmax costs no extra pass.
struct PvArgs {
  float* o;
  int64_t ldo;
  const float* alpha;
  const float* p;
  int64_t p_row_stride, p_key_stride;
  const void* v;  // elements of the kernel's T
  int64_t ldv;
  int64_t keys;
  // Optional software prefetch (decode): while key j is accumulated, the lines starting within the
  // first `pf_bytes` of V row j + pf_keys (from this call's column offset) are requested, for rows
  // below `pf_limit` (rows past `v` that exist). 0 = none.
  int64_t pf_keys = 0, pf_limit = 0, pf_bytes = 0;
  // Optional requests into L2 (prefetcht1), further ahead (FlashWork::l2_ahead_bytes): while key j <
  // l2_count is accumulated, the first pf_bytes of its "ahead" row are requested — row j of l2_v[0]
  // for j < l2_split, else row j − l2_split of l2_v[1] (the ahead rows may cross into the next page
  // of a paged cache). Null l2_v[0] = none.
  const void* l2_v[2] = {nullptr, nullptr};
  int64_t l2_split = 0, l2_count = 0;
  // FlashWork::l2_pages: of each ahead row's stride, only the starts of 4 KiB pages are requested.
  bool l2_pages = false;
  // The rows after the `pf_limit` rows at `v` (a paged cache's next page, rows ldv apart), where the
  // L1 requests continue past the run's end: pf_next_count of them. Null = none.
  const void* pf_next = nullptr;
  int64_t pf_next_count = 0;
};

/// Where a run of V rows' "ahead" rows are (PvArgs::l2_v): up to two segments.
struct PvAhead {
  const void* v[2] = {nullptr, nullptr};
  int64_t split = 0, count = 0;
  bool pages = false;          // PvArgs::l2_pages
  const void* next = nullptr;  // PvArgs::pf_next, pf_next_count
  int64_t next_count = 0;
  // Decode without any request of V (FlashWork::hardware_stream): the same kernels as with them
  // (pf_limit still marks decode), the hardware prefetchers alone.
  bool none = false;
};

// Requests the lines that start inside [at, at + bytes) (whole rows, or a pass's slice of them: each
// line is requested once, by the pass whose slice holds its first byte), with prefetch hint H.
template <int H>
[[gnu::always_inline]] inline void request_lines(const void* p, int64_t bytes) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = (at + 63) & ~uintptr_t{63}; line < at + bytes; line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, H);
}

// The same for exactly kBytes from a line boundary: kBytes / 64 requests at fixed offsets, no loop.
template <int H, int64_t kBytes>
[[gnu::always_inline]] inline void request_whole_lines(const void* p) {
  static_assert(kBytes % 64 == 0, "whole lines");
  ATTEND_UNROLL
  for (int64_t o = 0; o < kBytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o, 0, H);
}

// Whether rows of `ldv` elements from `v` on start on line boundaries.
template <class T>
inline bool rows_on_lines(const void* v, int64_t ldv) {
  return ((reinterpret_cast<uintptr_t>(v) | static_cast<uintptr_t>(ldv * static_cast<int64_t>(sizeof(T)))) & 63) == 0;
}

// A P·V kernel's requests of its V rows (PvArgs::pf_* into L1, PvArgs::l2_* into L2), copied out of
// the arguments (the kernels keep their arguments in locals: O's stores could alias them). When
// every requested row is kRowBytes (the kernel's own columns: 0 = unknown) from a line boundary,
// a row's requests are kRowBytes / 64 prefetches at fixed offsets; otherwise request_lines walks
// the lines. One thread, a GQA group of four over an f32 cache (D 128), L2-resident: the walk's
// address arithmetic and loop were about 80 of the ~130 instructions a key took in pv_tile_vmem.
template <class T, int64_t kRowBytesOf = 0>
struct RowRequests {
  static constexpr int64_t kRowBytes = kRowBytesOf % 64 == 0 ? kRowBytesOf : 0;  // (whole lines only)
  const T* v0;
  const T* v1;
  const T* next_v;  // PvArgs::pf_next
  int64_t split, count, ldv, bytes, pf_keys, pf_limit, next_count;
  bool fixed_next, fixed_ahead, pages;
  RowRequests(const PvArgs& a, const T* v)
      : v0(static_cast<const T*>(a.l2_v[0])),
        v1(static_cast<const T*>(a.l2_v[1])),
        next_v(static_cast<const T*>(a.pf_next)),
        split(a.l2_split),
        count(a.pf_bytes && a.l2_v[0] ? a.l2_count : 0),
        ldv(a.ldv),
        bytes(a.pf_bytes),
        pf_keys(a.pf_keys),
        pf_limit(a.pf_bytes ? a.pf_limit : 0),
        next_count(a.pf_bytes && a.pf_next ? a.pf_next_count : 0),
        pages(a.l2_pages) {
    const bool whole = kRowBytes > 0 && bytes == kRowBytes;
    fixed_next = whole && rows_on_lines<T>(v + pf_keys * ldv, ldv);
    fixed_ahead = whole && v0 && rows_on_lines<T>(v0, ldv) && (!v1 || rows_on_lines<T>(v1, ldv));
  }
  bool any() const { return pf_limit > 0 || count > 0; }
  // Row j + pf_keys into L1 (v: row j), below pf_limit; past it, the next run's rows (pf_next).
  [[gnu::always_inline]] void next(int64_t j, const T* v) const {
    if (j + pf_keys >= pf_limit) {
      const int64_t k = j + pf_keys - pf_limit;
      if (k < next_count) request_lines<3>(next_v + k * ldv, bytes);
      return;
    }
    if constexpr (kRowBytes > 0)
      if (fixed_next) return request_whole_lines<3, kRowBytes>(v + pf_keys * ldv);
    request_lines<3>(v + pf_keys * ldv, bytes);
  }
  // Key j's ahead row into L2, if it has one.
  [[gnu::always_inline]] void ahead(int64_t j) const {
    if (j >= count) return;
    const T* row = j < split ? v0 + j * ldv : v1 + (j - split) * ldv;
    if (pages) return request_row_pages<2>(row, ldv * static_cast<int64_t>(sizeof(T)));
    if constexpr (kRowBytes > 0)
      if (fixed_ahead) return request_whole_lines<2, kRowBytes>(row);
    request_lines<2>(row, bytes);
  }
};

// Masked: the tile had masked keys. Their p is exactly 0, but 0 · V is NaN where V holds NaN or
// inf, so a masked position would leak into rows that never saw it; the masked variant skips p == 0.
// acc[n] += pb·vv[n] except where pb == 0 (a NaN weight is live and poisons its row).
template <class Arch, int NV>
[[gnu::always_inline]] inline void fma_skip_zero(vfloat<Arch> pb, const vfloat<Arch>* vv, vfloat<Arch>* acc,
                                                 requires_arch<xsimd::generic>) {
  using B = vfloat<Arch>;
  const auto dead = pb == B(0.0f);  // ordered: NaN is not dead
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) acc[n] = xsimd::select(dead, acc[n], xsimd::fma(pb, vv[n], acc[n]));
}

#if defined(__AVX512F__)
// One write-masked FMA per accumulator (GCC turns the generic select into move, FMA, blend).
// Unordered ≠: a NaN weight is live, as in the generic version.
template <class Arch, int NV>
[[gnu::always_inline]] inline void fma_skip_zero(vfloat<Arch> pb, const vfloat<Arch>* vv, vfloat<Arch>* acc,
                                                 requires_arch<xsimd::avx512f>) {
  const __mmask16 live = _mm512_cmp_ps_mask(pb, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) acc[n] = _mm512_mask3_fmadd_ps(pb, vv[n], acc[n], live);
}
#endif

#if defined(__AVX512BW__)
// O[R rows][NV·16] = alpha·O + P·V for a bf16 V (NV even), unmasked: pv_tile's and pv_tile_vmem's
// kernel for this element type (pv_tile_bf16 below says when). Two value vectors per 64-byte line,
// each widened by one operation (bf16_even, bf16_odd) where load_float takes two: each 32-column
// chunk's accumulator pair holds its even and its odd columns, put so when O is loaded (even_lanes,
// odd_lanes) and back in order when it is stored (interleave_*). Every output element takes the
// same FMAs in the same order as pv_tile's other kernels: the same bits (tested). One thread, a
// GQA group of four over a bf16 cache (2 kv heads × 1024 keys, L2-resident), Emerald Rapids: P·V
// 38 → 33% of the step's samples (perf), 16 → 8 widening operations per key.
template <int R, int NV>
[[gnu::noinline]] void pv_tile_bf16_pairs(const PvArgs& a) {
  static_assert(NV % 2 == 0, "whole 32-column chunks");
  constexpr int C = NV / 2;
  float* const o = a.o;  // (the arguments in locals, as pv_tile_vmem)
  const int64_t ldo = a.ldo, ldv = a.ldv, keys = a.keys, prs = a.p_row_stride, pks = a.p_key_stride;
  __m512 even[R][C], odd[R][C];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(a.alpha[r]);
    ATTEND_UNROLL
    for (int c = 0; c < C; ++c) {
      const __m512 lo = _mm512_mul_ps(_mm512_load_ps(o + r * ldo + 32 * c), al);
      const __m512 hi = _mm512_mul_ps(_mm512_load_ps(o + r * ldo + 32 * c + 16), al);
      even[r][c] = even_lanes(lo, hi);
      odd[r][c] = odd_lanes(lo, hi);
    }
  }
  const Bf16* v = static_cast<const Bf16*>(a.v);
  const float* p = a.p;
  const RowRequests<Bf16, NV * 16 * static_cast<int64_t>(sizeof(Bf16))> req(a, v);
  for (int64_t j = 0; j < keys; ++j, v += ldv, p += pks) {
    if (req.any()) req.next(j, v), req.ahead(j);
    __m512 pb[R];
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) pb[r] = _mm512_set1_ps(p[r * prs]);
    ATTEND_UNROLL
    for (int c = 0; c < C; ++c) {
      const __m512 ve = bf16_even(v + 32 * c);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) even[r][c] = fma_as_xsimd(pb[r], ve, even[r][c]);
      const __m512 vo = bf16_odd(v + 32 * c);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) odd[r][c] = fma_as_xsimd(pb[r], vo, odd[r][c]);
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      _mm512_store_ps(o + r * ldo + 32 * c, interleave_low(even[r][c], odd[r][c]));
      _mm512_store_ps(o + r * ldo + 32 * c + 16, interleave_high(even[r][c], odd[r][c]));
    }
}
#endif

// Whether pv_tile and pv_tile_vmem take pv_tile_bf16_pairs for elements T, NV vectors.
template <class Arch, class T, int NV>
constexpr bool pv_tile_bf16() {
#if defined(__AVX512BW__)
  return bf16_pairs_on<Arch, T>() && NV % 2 == 0;
#else
  return false;
#endif
}

template <class Arch, int R, int NV, class T, bool Masked>
void pv_tile(const PvArgs& a) {
#if defined(__AVX512BW__)
  if constexpr (!Masked && pv_tile_bf16<Arch, T, NV>()) return pv_tile_bf16_pairs<R, NV>(a);
#endif
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) {
    const B al(a.alpha[r]);
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) acc[r][n] = B::load_aligned(a.o + r * a.ldo + n * W) * al;
  }
  const T* v = static_cast<const T*>(a.v);
  const float* p = a.p;
  const RowRequests<T, NV * W* static_cast<int64_t>(sizeof(T))> req(a, v);
  for (int64_t j = 0; j < a.keys; ++j, v += a.ldv, p += a.p_key_stride) {
    if (req.any()) req.next(j, v), req.ahead(j);
    if constexpr (R == 1 && !Masked) {
      // One row: each V vector is widened and used at once, so a widened (bf16, f16, i8) V needs
      // one temporary instead of NV (loading all NV first spilled an accumulator: 8 + 8 + 1 > 16).
      const B pb(p[0]);
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) acc[0][n] = xsimd::fma(pb, load_float<Arch>(v + n * W), acc[0][n]);
      continue;
    }
    B vv[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) vv[n] = load_float<Arch>(v + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B pb(p[r * a.p_row_stride]);
      if constexpr (Masked) {
        fma_skip_zero<Arch, NV>(pb, vv, acc[r], Arch{});
      } else {
        ATTEND_UNROLL
        for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::fma(pb, vv[n], acc[r][n]);
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(a.o + r * a.ldo + n * W);
}

// Decode on AVX-512: O[R rows][NV·W] = alpha·O + P·V with up to the whole register file as
// accumulators (a GQA group of four at D 128: 32), each FMA taking its f32 V vector from L1 as a
// memory operand instead of a register. A group of four then reads each V row once,
// in one pass, instead of two passes of two rows (pv_tile's 24 accumulators plus the row's 8
// vectors): the second pass's FMAs ran after the row's bytes had arrived, with no request in
// flight, and the call lost their whole time (Zen 4, D2's shape, LLC flushed: skipping that pass
// — wrong results, a measurement only — saved 54 µs of 1.08 ms, and the pass over a V row held
// in L1 cost the same as over the tile in L2). The compiler keeps one or two accumulators on the
// stack (32 plus the broadcast weight): a load and a store per key each. A 16-bit V (bf16, f16)
// cannot be a memory operand: each vector is widened once into a register for every row, the R
// weights broadcast first (a few more accumulators spill). The same FMAs in the same order as
// pv_tile: the same bits (tested). Unmasked tiles only (masked ones take pv_tile).
template <class Arch, int R, int NV, class T = float>
[[gnu::noinline]] void pv_tile_vmem(const PvArgs& a) {
#if defined(__AVX512BW__)
  if constexpr (pv_tile_bf16<Arch, T, NV>()) return pv_tile_bf16_pairs<R, NV>(a);
#endif
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  // The arguments in locals, as pv_rows_in_memory (O's stores could alias them).
  float* const o = a.o;
  const int64_t ldo = a.ldo, ldv = a.ldv, keys = a.keys, prs = a.p_row_stride, pks = a.p_key_stride;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) {
    const B al(a.alpha[r]);
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) acc[r][n] = B::load_aligned(o + r * ldo + n * W) * al;
  }
  const T* v = static_cast<const T*>(a.v);
  const float* p = a.p;
  const RowRequests<T, NV * W* static_cast<int64_t>(sizeof(T))> req(a, v);
  for (int64_t j = 0; j < keys; ++j, v += ldv, p += pks) {
    if (req.any()) req.next(j, v), req.ahead(j);
    if constexpr (std::is_same_v<T, float>) {
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) {
        const B pb(p[r * prs]);
        ATTEND_UNROLL
        for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::fma(pb, B::load_unaligned(v + n * W), acc[r][n]);
      }
    } else {  // 16-bit V: each vector widened once, for every row
      B pb[R];
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) pb[r] = B(p[r * prs]);
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) {
        const B vv = load_float<Arch>(v + n * W);
        ATTEND_UNROLL
        for (int r = 0; r < R; ++r) acc[r][n] = xsimd::fma(pb[r], vv, acc[r][n]);
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(o + r * ldo + n * W);
}

// Decode on 16-register targets: O[R ≤ 4 rows][value_vectors·W] = alpha·O + P·V with O in memory
// (L1) instead of registers, so V is read row after row, whole, in order. The register blocks
// cover D 128 for a GQA group of four in six column passes of 3 vectors, reading V in 96-byte
// slices of 512-byte rows that the hardware prefetchers do not follow (a synthetic read of that
// pattern: 8.4–9.9 GB/s against 15–17 in order, one Zen 3 thread). Here every V vector is loaded
// once; O costs a load and a store per two keys (4 rows: 2 loads, 1 store per 2 FMAs, within
// Zen 3's 3 loads + 1 store of 256 bits per cycle; unmasked, once per three keys). The same FMAs
// in the same order as pv_tile (the same bits: tested). Optional whole-row prefetch (PvArgs::pf_*),
// the rows of each step's keys.
template <class Arch, int R, class T, bool Masked>
[[gnu::noinline]] void pv_rows_in_memory(const PvArgs& a, int64_t value_vectors) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  // The arguments are copied to locals first: O's stores could otherwise alias the PvArgs
  // fields, and the compiler reloaded a.o and a.ldo after every store (one thread, L2-resident,
  // 4 rows, D 128: P·V took twice the score phase with the same FMAs).
  float* orow[R];
  for (int r = 0; r < R; ++r) orow[r] = a.o + r * a.ldo;
  const int64_t ldv = a.ldv, keys = a.keys, prs = a.p_row_stride, pks = a.p_key_stride;
  const RowRequests<T> req(a, static_cast<const T*>(a.v));
  for (int r = 0; r < R; ++r) {
    const B al(a.alpha[r]);
    for (int64_t n = 0; n < value_vectors; ++n) (B::load_aligned(orow[r] + n * W) * al).store_aligned(orow[r] + n * W);
  }
  const T* v = static_cast<const T*>(a.v);
  const float* p = a.p;
  int64_t j = 0;
  auto step = [&](const B& pb, const B& vv, B& o) {
    if constexpr (Masked) {
      fma_skip_zero<Arch, 1>(pb, &vv, &o, Arch{});
    } else {
      o = xsimd::fma(pb, vv, o);
    }
  };
  // K keys per load and store of O: every key's weights for the R rows (broadcast), its V vector
  // (widened), then per row O + the K products in key order.
  auto keys_per_access = [&](auto k_count) {
    constexpr int K = decltype(k_count)::value;
    for (; j + K <= keys; j += K, v += K * ldv, p += K * pks) {
      // Rows j + pf_keys on, whole; and the rows l2_* ahead into L2.
      if (req.any())
        for (int k = 0; k < K; ++k) req.next(j + k, v + k * ldv), req.ahead(j + k);
      B pk[K][R];
      ATTEND_UNROLL
      for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r) pk[k][r] = B(p[r * prs + k * pks]);
      for (int64_t n = 0; n < value_vectors; ++n) {
        B vk[K];
        ATTEND_UNROLL
        for (int k = 0; k < K; ++k) vk[k] = load_float<Arch>(v + k * ldv + n * W);
        ATTEND_UNROLL
        for (int r = 0; r < R; ++r) {
          B acc = B::load_aligned(orow[r] + n * W);
          ATTEND_UNROLL
          for (int k = 0; k < K; ++k) step(pk[k][r], vk[k], acc);
          acc.store_aligned(orow[r] + n * W);
        }
      }
    }
  };
  // Unmasked: three keys per O access — 12 broadcast weights for four rows, three V vectors and
  // the accumulator fill the 16 registers (the masked step needs more: it keeps two). Zen 3,
  // against two keys per O access, alternated in one process: L2-resident, one thread, 4 rows: i8
  // 26.0 → 23.4 µs, bf16 25.9 → 24.5, f32 13.0 → 12.5; cold, each after a read: i8 D2 32–33 →
  // 34–35%, bf16 D2 52 → 56%, bf16 D1 93 → 96% of a read, f32 within noise.
  if constexpr (!Masked) keys_per_access(std::integral_constant<int, 3>{});
  keys_per_access(std::integral_constant<int, 2>{});
  keys_per_access(std::integral_constant<int, 1>{});
}

template <class Arch, class T>
inline void pv_in_memory_dispatch(int r, bool masked, const PvArgs& a, int64_t value_vectors) {
  switch (r * 2 + (masked ? 1 : 0)) {
    case 2: return pv_rows_in_memory<Arch, 1, T, false>(a, value_vectors);
    case 3: return pv_rows_in_memory<Arch, 1, T, true>(a, value_vectors);
    case 4: return pv_rows_in_memory<Arch, 2, T, false>(a, value_vectors);
    case 5: return pv_rows_in_memory<Arch, 2, T, true>(a, value_vectors);
    case 6: return pv_rows_in_memory<Arch, 3, T, false>(a, value_vectors);
    case 7: return pv_rows_in_memory<Arch, 3, T, true>(a, value_vectors);
    case 8: return pv_rows_in_memory<Arch, 4, T, false>(a, value_vectors);
    default: return pv_rows_in_memory<Arch, 4, T, true>(a, value_vectors);
  }
}

// Function-pointer table so a runtime (rows, vectors) remainder picks the right specialisation.
constexpr int kMaxPvR = 6, kMaxPvNV = 8;

template <class Arch, class T, bool Masked, int... I>
constexpr auto make_pv_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const PvArgs&), sizeof...(I)>{
      &pv_tile<Arch, I / kMaxPvNV + 1, I % kMaxPvNV + 1, T, Masked>...};
}

// pv_tile_vmem's blocks: R·NV up to the register count (the entries past it are never called).
template <class Arch, class T, int... I>
constexpr auto make_pv_vmem_table(std::integer_sequence<int, I...>) {
  constexpr auto pick = [](int r, int nv) { return r * nv <= vector_registers(Arch{}) ? r : 1; };
  return std::array<void (*)(const PvArgs&), sizeof...(I)>{
      &pv_tile_vmem<Arch, pick(I / kMaxPvNV + 1, I % kMaxPvNV + 1), I % kMaxPvNV + 1, T>...};
}

template <class Arch, class T>
inline void pv_vmem_dispatch(int r, int nv, const PvArgs& a) {
  static constexpr auto table = make_pv_vmem_table<Arch, T>(std::make_integer_sequence<int, kMaxPvR * kMaxPvNV>{});
  table[(r - 1) * kMaxPvNV + (nv - 1)](a);
}

template <class Arch, class T>
inline void pv_dispatch(int r, int nv, bool masked, const PvArgs& a) {
  static constexpr auto plain = make_pv_table<Arch, T, false>(std::make_integer_sequence<int, kMaxPvR * kMaxPvNV>{});
  static constexpr auto guarded = make_pv_table<Arch, T, true>(std::make_integer_sequence<int, kMaxPvR * kMaxPvNV>{});
  (masked ? guarded : plain)[(r - 1) * kMaxPvNV + (nv - 1)](a);
}

// The wide path's P·V on 16-register targets, transposed: Oᵀ[R value columns][NV·W query rows] =
// alpha ⊙ Oᵀ + Σ_j V[j][R columns] ⊗ Pᵀ[j], the Sᵀ tile's rows loaded as vectors and V's elements
// broadcast — the score microkernel's shape (12 FMAs per 4 vector loads and 3 broadcasts for a
// full block of 32 rows). Row-major O blocks (pv_tile<4, 3>) take 12 FMAs per 3 loads and 4
// broadcasts too, but a value width of 8 vectors (D 64) splits into passes of 3 + 3 + 2, each call
// reloads and rescales its O block, and one Zen 3 thread ran them at ~72% of its FMA rate against
// the score microkernel's ~95% (P3, perf). Each output element takes the same FMAs in the same
// order as pv_tile (acc = O·alpha, then fma over the keys in order): the same bits (tested).
struct PvtArgs {
  float* ot;  // Oᵀ: value column r's NV·W rows at ot + r·ldot
  int64_t ldot;
  const float* alpha;  // NV·W rescale factors, one per query row (a vector)
  const float* pt;     // Pᵀ: key j's NV·W weights at pt + j·ldp (aligned)
  int64_t ldp;
  const float* v;  // V element (key j, value column r) at v[j·ldv + r]
  int64_t ldv;
  int64_t keys;
};

template <class Arch, int R, int NV, bool Masked>
void pvt_tile(const PvtArgs& a) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  float* const ot = a.ot;
  const int64_t ldot = a.ldot, ldp = a.ldp, ldv = a.ldv, keys = a.keys;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) {
    const B al = B::load_aligned(a.alpha + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) acc[r][n] = B::load_aligned(ot + r * ldot + n * W) * al;
  }
  const float* pt = a.pt;
  const float* v = a.v;
  for (int64_t j = 0; j < keys; ++j, pt += ldp, v += ldv) {
    B p[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) p[n] = B::load_aligned(pt + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B vb(v[r]);
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) {
        if constexpr (Masked) {
          // A masked key's weight is exactly 0; 0 · a NaN or infinite V must not reach the row
          // (as fma_skip_zero: ordered ==, a NaN weight is live).
          acc[r][n] = xsimd::select(p[n] == B(0.0f), acc[r][n], xsimd::fma(vb, p[n], acc[r][n]));
        } else {
          acc[r][n] = xsimd::fma(vb, p[n], acc[r][n]);
        }
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(ot + r * ldot + n * W);
}

// Register blocks of pvt_tile: R·NV ≤ 12 (16 registers: 12 accumulators, NV weights, a broadcast).
constexpr int kPvtAccRegs = 12, kMaxPvtNV = 4;

template <class Arch, bool Masked, int... I>
constexpr auto make_pvt_table(std::integer_sequence<int, I...>) {
  // Index (NV − 1)·kPvtAccRegs + (R − 1); entries with R·NV > kPvtAccRegs are never called.
  constexpr auto pick = [](int nv, int r) { return r * nv <= kPvtAccRegs ? r : 1; };
  return std::array<void (*)(const PvtArgs&), sizeof...(I)>{
      &pvt_tile<Arch, pick(I / kPvtAccRegs + 1, I % kPvtAccRegs + 1), I / kPvtAccRegs + 1, Masked>...};
}

// Oᵀ[value_dim][NV·W] = alpha ⊙ Oᵀ + Pᵀ-weighted V over `keys` keys of f32 V (any value_dim: V's
// elements are broadcast, so rows need no padding), in blocks of 12 / NV value columns.
template <class Arch>
void pvt_block(float* ot, int64_t ldot, const float* alpha, const float* pt, int64_t ldp, const float* v, int64_t ldv,
               int64_t value_dim, int nv, int64_t keys, bool masked) {
  static constexpr auto plain = make_pvt_table<Arch, false>(std::make_integer_sequence<int, kMaxPvtNV * kPvtAccRegs>{});
  static constexpr auto guarded =
      make_pvt_table<Arch, true>(std::make_integer_sequence<int, kMaxPvtNV * kPvtAccRegs>{});
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  const int r_max = kPvtAccRegs / nv;
  // A masked tile goes in runs of keys: those with a zero weight in some row take the guarded
  // kernel, the rest the plain one (a causal diagonal tile: the keys every row sees, then the
  // triangle). The first run rescales Oᵀ by alpha, the next by 1 (exact): each element gets the
  // same FMAs in the same order, the same bits as one guarded call.
  alignas(64) float ones[kMaxPvtNV * W];
  for (float& x : ones) x = 1.0f;
  auto has_zero = [&](int64_t j) {
    if (!masked) return false;
    auto dead = B::load_aligned(pt + j * ldp) == B(0.0f);
    for (int n = 1; n < nv; ++n) dead = dead | (B::load_aligned(pt + j * ldp + n * W) == B(0.0f));
    return xsimd::any(dead);
  };
  int64_t j = 0;
  do {  // (no keys: one call, the rescale alone)
    const bool guard = keys > 0 && has_zero(j);
    int64_t e = min64(j + 1, keys);
    while (e < keys && has_zero(e) == guard) ++e;
    const auto& table = guard ? guarded : plain;
    for (int64_t c = 0; c < value_dim; c += r_max) {
      const int r = static_cast<int>(min64(r_max, value_dim - c));
      const PvtArgs a{ot + c * ldot, ldot, j == 0 ? alpha : ones, pt + j * ldp, ldp, v + j * ldv + c, ldv, e - j};
      table[(nv - 1) * kPvtAccRegs + (r - 1)](a);
    }
    j = e;
  } while (j < keys);
}

inline void set_ahead(PvArgs& a, const PvAhead& ahead) {
  a.l2_v[0] = ahead.v[0];
  a.l2_v[1] = ahead.v[1];
  a.l2_split = ahead.split;
  a.l2_count = ahead.count;
  a.l2_pages = ahead.pages;
  a.pf_next = ahead.next;
  a.pf_next_count = ahead.next_count;
}

// How far ahead decode's P·V prefetches V, in bytes (the hardware prefetcher alone lags the V
// stream after each switch from scoring K). Measured on D1–D4 against a plain read of the same
// bytes, in one process: +5–10 points of stream for bf16/f16 and for f32 with several rows (GQA),
// sdpa and cache alike; 1–2 KB ahead were worse, 8 KB no better. One f32 row (MHA) lost 2–5 points
// on D1 (the extra requests, with 8 FMAs per 512-byte row to hide them), so it does not prefetch.
// (Measured on 32-register targets; 16-register targets request whole rows at the same distance
// from pv_rows_in_memory, f32 rows included: see pv_block.)
constexpr int64_t kVPrefetchBytes = 4096;

// Decode's P·V on 16-register targets runs in sub-tiles of at most Tiles::kPvSubTileBytes of V (a
// whole number of key blocks, at least one), so a group of more than four rows reads each
// sub-tile's V from memory once (pv_rows_in_memory, the first four rows) and from L1 for the rest
// (register blocks).
// (Session 14 introduced them for the register blocks' column passes: each pass then requested its
// own columns one sub-tile ahead, as they still do for one i8 row; pv_rows_in_memory replaced them
// for the rest of decode.) Other targets take a tile's keys in one run (unlimited).
template <class Arch, class E>
int64_t pv_sub_keys(int64_t value_vectors) {
  constexpr int64_t kBytes = Tiles<Arch>::kPvSubTileBytes;
  if (kBytes == 0) return INT64_MAX;
  const int64_t row_bytes = value_vectors * Tiles<Arch>::W * static_cast<int64_t>(sizeof(E));
  return max64(kKeyBlock, kBytes / row_bytes / kKeyBlock * kKeyBlock);
}

// The width of each column pass over `vectors` value vectors with at most `widest` per pass: as
// few passes as that allows, of balanced widths — Dv 80 on AVX-512 as 3 + 2 vectors rather than
// 4 + 1 (a one-vector pass has 6 FMA chains for 7 loads per key). Zen 5, two threads, causal
// 2048², 8 heads, alternated in one process: D 80 14.15/13.93 → 13.59/13.50 ms, D 96 (4 + 2 →
// 3 + 3) 16.01/15.97 → 15.93/15.84; AVX2 decode and prefill unchanged.
inline int balanced_pass_width(int64_t vectors, int64_t widest) {
  const int64_t passes = (vectors + widest - 1) / widest;
  return static_cast<int>((vectors + passes - 1) / passes);
}

// O[rows][Dvp] = alpha·O + P·V over one key tile, split into register blocks. V holds elements of E.
// `pf_limit` > 0 marks decode and turns on V prefetching: rows [0, pf_limit) from `v` exist. 16
// registers: the first four rows by pv_rows_in_memory, requesting whole rows kVPrefetchBytes
// ahead, any further rows by register blocks from L1 (one i8 row: register blocks, each pass
// requesting its columns a sub-tile ahead); 32 registers: register blocks, the first pass
// requesting whole rows kVPrefetchBytes ahead.
// Zen 3 (AVX2), decode, paired shares of a plain read, column passes (8a4efd4) → rows in memory,
// alternated runs, three rounds (docs/performance.md, session 15): sdpa D2/D3/D5 68–81/71–78/68–79
// → 78–85/83–91/77–80%, f32 cache D2/D3 70–79/69–73 → 77–87/84–88%, paged f32 67–74/66–69 →
// 78–82/78–82%, bf16 cache D1/D3/D4 78–85/49–50/83–88 → 88–96/53–60/88–94%, f16 D1/D4 77–83 →
// 88–94%, i8 D2/D3 22–27/31–33 → 29–30/33–37% (bound by its FMAs); f32 D1/D4 unchanged. Without
// the software prefetch the f32 cache lost 10 points instead; 2 or 8 KB ahead was no better.
template <class Arch, class E>
void pv_block(float* oacc, int64_t ldo, const float* alpha, const float* p, int64_t p_row_stride, int64_t p_key_stride,
              const E* v, int64_t ldv, int64_t rows, int64_t value_vectors, int64_t keys, bool masked,
              int64_t pf_limit = 0, const PvAhead& ahead = {}) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  const int64_t row_bytes = value_vectors * W * static_cast<int64_t>(sizeof(E));
  const int64_t pf_keys = max64(1, kVPrefetchBytes / row_bytes);
  // Decode's pass that reads V from memory requests whole rows kVPrefetchBytes ahead (and into L2,
  // the ahead rows).
  auto request_whole_rows = [&](PvArgs& a) {
    if (ahead.none) return;
    a.pf_keys = pf_keys;
    a.pf_limit = pf_limit;
    a.pf_bytes = row_bytes;
    set_ahead(a, ahead);
  };
  int64_t r_begin = 0;
  if constexpr (!T::kManyRegs) {
    static_assert(T::kPvRows <= 4, "pv_in_memory_dispatch takes up to four rows");
    // (One row of an i8 V stays in the register blocks, as in session 14: two passes of 64 bytes,
    // a line each, each prefetching its columns a sub-tile ahead; with O in memory D1/D4 of
    // cache/attend-i8 lost 4–12 points of a read.)
    // Only the first block of rows reads V from memory: a second (a GQA group of 8) finds the
    // sub-tile in L1 and takes the register blocks, whose column passes run at the FMA rate
    // (pv_rows_in_memory stores O every two keys). Zen 3, 2 threads, 8192 keys, D 128, alternated
    // in one process: group 8 sdpa 56 -> 59%, f32 cache 60 -> 64% of a read.
    if (pf_limit > 0 && !(std::is_same_v<E, I8> && rows == 1)) {
      PvArgs a{oacc, ldo, alpha, p, p_row_stride, p_key_stride, v, ldv, keys};
      request_whole_rows(a);
      pv_in_memory_dispatch<Arch, E>(static_cast<int>(min64(T::kPvRows, rows)), masked, a, value_vectors);
      r_begin = T::kPvRows;
      pf_limit = 0;
    }
  }
  // Decode over an f32 V on 32 registers: when every column of a few rows fits the accumulators,
  // the rows go in balanced passes of whole V rows (a GQA group of four at D 128: two passes of two
  // rows, the first reading V from memory row after row in address order, the second from L2)
  // instead of column passes over all the rows (at D 128 each reads 256 bytes of every 512-byte
  // row). Zen 4, share of a read: alternated in one process, sdpa D2's shape 77–87 → 87–91%, D3's
  // 81–83 → 89–92%, the f32 cache D3's 81–83 → 84–90% (three rows then one: the same within
  // noise); the bench (alternated processes, 3 rounds, slow-memory rounds) f32 cache D2 78 → 83%,
  // D3 81 → 83–85%, paged D2 79–80 → 82–83%, D3 79–80 → 82%, sdpa D2 74–79 → 79–81%. A bf16 V
  // (128-byte half rows, two lines each) measured 77–81 → 77–80%: left as it was.
  //
  // Unmasked tiles on AVX-512 go further: passes of whole rows with up to 32 accumulators, V as the
  // FMAs' memory operand (pv_tile_vmem), so a group of four at D 128 reads V in one pass; a 16-bit
  // V too (widened once per vector). Zen 4, share of a read, alternated in one process (LLC
  // flushed): the f32 cache D2's shape 84.7 / 84.8 → 87.2 / 88.5%, D3's 87.2 → 90.7%; the bf16
  // cache D2's 71.7 / 75.9 → 80.3 / 78.0%, D3's 84.6 / 85.9 → 94.0 / 95.1%.
  int64_t row_step = T::kPvRows;
  bool vmem = false;
  constexpr bool kVmem =
      T::kManyRegs && T::W == 16 && (std::is_same_v<E, float> || std::is_same_v<E, Bf16> || std::is_same_v<E, F16>);
  if constexpr (kVmem) {
    if (pf_limit > 0 && rows * value_vectors > T::kAccRegs) {
      // Balanced passes of whole rows with at most `regs` accumulators each.
      auto whole_rows = [&](int64_t regs) {
        const int64_t most = min64(T::kPvRows, regs / value_vectors);
        const int64_t passes = (rows + most - 1) / most;
        return (rows + passes - 1) / passes;
      };
      if (!masked && value_vectors <= kMaxPvNV) {
        row_step = whole_rows(T::kRegisters);
        vmem = row_step * value_vectors > T::kAccRegs;
      }
      if (!vmem && std::is_same_v<E, float> && value_vectors * 2 <= T::kAccRegs) row_step = whole_rows(T::kAccRegs);
    }
  }
  for (int64_t r0 = r_begin; r0 < rows; r0 += row_step) {
    const int R = static_cast<int>(min64(row_step, rows - r0));
    if constexpr (kVmem) {
      if (vmem) {
        PvArgs a{oacc + r0 * ldo, ldo, alpha + r0, p + r0 * p_row_stride, p_row_stride, p_key_stride, v, ldv, keys};
        if (r0 == 0) request_whole_rows(a);  // the first pass reads V from memory
        pv_vmem_dispatch<Arch, E>(R, static_cast<int>(value_vectors), a);
        continue;
      }
    }
    const int nv_max = balanced_pass_width(value_vectors, min64(kMaxPvNV, T::kAccRegs / R));
    for (int64_t c = 0; c < value_vectors; c += nv_max) {
      const int nv = static_cast<int>(min64(nv_max, value_vectors - c));
      PvArgs a{oacc + r0 * ldo + c * W,
               ldo,
               alpha + r0,
               p + r0 * p_row_stride,
               p_row_stride,
               p_key_stride,
               v + c * W,
               ldv,
               keys};
      if (!ahead.none && pf_limit > 0 && T::kPvSubTileBytes > 0 && r0 == 0) {
        // 16 registers (one i8 row): each pass fetches its columns one pv_sub_keys sub-tile ahead.
        a.pf_keys = keys;
        a.pf_limit = pf_limit;
        a.pf_bytes = nv * W * static_cast<int64_t>(sizeof(E));
      } else if (pf_limit > 0 && r0 == 0 && c == 0) {
        request_whole_rows(a);  // the first pass over the keys
      }
      pv_dispatch<Arch, E>(R, nv, masked, a);
    }
  }
}

}  // namespace
}  // namespace attend::kernels
