// The bf16-math pieces of the wide (prefill) driver (flash_wide<Arch, E, true>): per row block, Qᵀ
// is packed into bf16 pairs once; per key tile, K is rounded into bf16 rows and scored with
// vdpbf16ps, and on tiles without masked keys P and V are packed into pairs along the keys for a
// vdpbf16ps P·V. The online softmax between them is the f32 code of flash_wide. Only the
// avx512_bf16 table includes this (built with -mavx512bf16).
//
// K rows and V pairs are kept packed across a (batch, kv head)'s row blocks on one thread when the
// runtime gives the thread a buffer (FlashWork::packed_k), unit by unit as a block first needs each:
// the same code, so the same bits, as packing per tile. Zen 5, two threads, alternated in one
// process (medians of 21), per tile → kept per thread: 8 heads, D 64, 512² 0.86 → 0.84 ms (P1),
// 2048² 12.92 / 12.50 → 11.97 / 11.61 (P2), causal 2048² 7.10 / 6.93 → 6.74 / 6.62 (P3); 32 heads,
// D 128, causal 2048² 51.9 → 48.8 / 48.5 (P4); causal 512² unchanged. One buffer per kv head shared
// by both threads (a ring of heads, each unit packed by the first block to need it, the other
// packing the next unit meanwhile) measured −5 to −8% on P1–P5 at one time and +9% (P1) / −3% (P3)
// at another: the lines one core packed are read by the other, at whatever the two cores' cache
// distance is that day; not kept. Nor: a pass packing every head before the row blocks (P1 0.845 →
// 0.891: its reads overlap no compute); requesting the kept K rows of the next call (no change).
#pragma once

#if defined(__AVX512BF16__)

#include "flash_wide.hpp"
#include "ukernel/amx_tiles.hpp"
#include "ukernel/bf16_dot_tiles.hpp"

namespace attend::kernels {
namespace {

// Scratch past the f32 layout, in 32-bit words (each part 64-byte aligned): Qᵀ pairs
// [depth pairs][rows], K rows in bf16 [keys][depth rounded to 32], V pairs [key pairs][Dv], P pairs
// [key pairs][rows].
struct Bf16Extra {
  int64_t qt2, k2, v2, p2, total;
};

template <class Arch>
Bf16Extra bf16_extra(int64_t head_dim, int64_t value_dim, int64_t rows, int64_t base) {
  using T = Tiles<Arch>;
  const int64_t rows_p = round_up(max64(rows, 1), T::W);
  const int64_t kd = round_up(head_dim, 32);  // bf16 elements per K row
  const int64_t key_pairs = (T::kBlockKeys + 1) / 2;
  const int64_t dvp = round_up(value_dim, T::W);
  Bf16Extra e{};
  int64_t at = base;
  auto take = [&](int64_t n) {
    const int64_t here = at;
    at += round_up(n, 16);
    return here;
  };
  e.qt2 = take(kd / 2 * rows_p);
  e.k2 = take(T::kBlockKeys * kd / 2);
  e.v2 = take(key_pairs * dvp);
  e.p2 = take(key_pairs * rows_p);
  e.total = at;
  return e;
}

template <class Arch>
size_t scratch_floats_bf16(int64_t head_dim, int64_t value_dim, int64_t rows) {
  return static_cast<size_t>(
      bf16_extra<Arch>(head_dim, value_dim, rows, make_layout<Arch>(head_dim, value_dim, rows).total).total);
}

// The first n (≤ 16) elements at p as f32, the rest zero.
template <class Arch, class E>
inline __m512 load_f32_upto(const E* p, int64_t n) {
  if (n >= 16) return load_float<Arch>(p);
  if constexpr (std::is_same_v<E, float>) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  } else {
    alignas(64) float tmp[16] = {};
    for (int64_t i = 0; i < n; ++i) tmp[i] = to_float(p[i]);
    return _mm512_load_ps(tmp);
  }
}

// K rows [j0, j0 + nk) rounded to bf16, `kd` elements per row (zero-padded past the depth), at
// `out`; a row-major f32 K is read in place, other types and blocked K widened into `kpanel` first.
template <class Arch, class E>
void round_key_rows(const FlashWork& w, const KvSource<E>& src, int64_t j0, int64_t nk, int64_t kd, float* kpanel,
                    uint16_t* out) {
  const int64_t depth = w.head_dim;
  auto k_row = [&](const float* in, uint16_t* row) {
    for (int64_t d = 0; d < kd; d += 32)
      store_bf16x32(row + d, load_f32_upto<Arch>(in + d, max64(0, min64(16, depth - d))),
                    load_f32_upto<Arch>(in + d + 16, max64(0, min64(16, depth - d - 16))));
  };
  if (std::is_same_v<E, float> && !w.k_blocked) {
    for (int64_t j = 0; j < nk; ++j) k_row(reinterpret_cast<const float*>(src.key_row(j0 + j)), out + j * kd);
  } else {  // widen (and un-block) into the f32 panel first
    if (w.k_blocked)
      blocked_to_f32_panel(src, j0, nk, depth, kpanel);
    else
      to_f32_panel(src.key_row(j0), w.k_row_stride, nk, depth, depth, kpanel);
    for (int64_t j = 0; j < nk; ++j) k_row(kpanel + j * depth, out + j * kd);
  }
}

// The V rows of keys [j0, j0 + nk) (i8: times their scales) as bf16 pairs of consecutive keys,
// `dvp` words per pair (zero-padded; an odd last key pairs with zero), at `out`. Returns the lanes
// that saw a NaN or an infinity.
template <class Arch, class E>
__mmask16 pack_value_pairs(const FlashWork& w, const KvSource<E>& src, int64_t j0, int64_t nk, int64_t dvp,
                           uint32_t* out) {
  const int64_t dv = w.value_dim;
  __mmask16 special = 0;
  for (int64_t j = 0; j < nk; j += 2) {
    const E* va = src.value(j0 + j);
    const E* vb = j + 1 < nk ? src.value(j0 + j + 1) : nullptr;
    for (int64_t c = 0; c < dvp; c += 16) {
      const int64_t n = min64(16, dv - c);
      __m512 a = load_f32_upto<Arch>(va + c, n);
      __m512 b = vb ? load_f32_upto<Arch>(vb + c, n) : _mm512_setzero_ps();
      if constexpr (KvSource<E>::kScaled) {  // i8: V rows times their scales
        a = _mm512_mul_ps(a, _mm512_set1_ps(src.value_scale(j0 + j)));
        if (vb) b = _mm512_mul_ps(b, _mm512_set1_ps(src.value_scale(j0 + j + 1)));
      }
      special |= _mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(b, 0x99);  // QNaN, ±inf, SNaN
      _mm512_store_si512(out + j / 2 * dvp + c, pack_bf16_pairs(a, b));
    }
  }
  return special;
}

template <class Arch, class E>
struct Bf16Wide {
  using T = Tiles<Arch>;
  static_assert(T::W == 16, "the bf16 microkernels are AVX-512");
  const FlashWork& w;
  float* kpanel;
  uint32_t *qt2, *k2, *v2, *p2;
  int64_t ldr, nvr, depth, pairs, kd, dvp;

  Bf16Wide(const FlashWork& work, float* scratch, const Layout& L, const float* qt, int64_t ld)
      : w(work), kpanel(scratch + L.kpanel), ldr(ld), nvr(ld / 16), depth(work.head_dim) {
    const Bf16Extra e = bf16_extra<Arch>(work.head_dim, work.value_dim, work.row_count, L.total);
    qt2 = reinterpret_cast<uint32_t*>(scratch + e.qt2);
    k2 = reinterpret_cast<uint32_t*>(scratch + e.k2);
    v2 = reinterpret_cast<uint32_t*>(scratch + e.v2);
    p2 = reinterpret_cast<uint32_t*>(scratch + e.p2);
    pairs = (depth + 1) / 2;
    kd = round_up(depth, 32);
    dvp = round_up(work.value_dim, 16);
    // Qᵀ rows d ≥ depth were never written: a missing odd row pairs with zero.
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t n = 0; n < nvr; ++n) {
        const __m512 a = _mm512_load_ps(qt + 2 * p * ldr + n * 16);
        const __m512 b = 2 * p + 1 < depth ? _mm512_load_ps(qt + (2 * p + 1) * ldr + n * 16) : _mm512_setzero_ps();
        _mm512_store_si512(qt2 + p * ldr + n * 16, pack_bf16_pairs(a, b));
      }
  }

  // Packing kept across row blocks (FlashWork::packed_k): the units holding keys [j0, j0 + nk)
  // packed into the thread's buffer unless an earlier block of this kv head on this thread did.
  // Whether the tile reads V there too: its units' V finite, and the tile starting at an even key.
  bool vkept = false;
  void keep_units(const KvSource<E>& src, int64_t j0, int64_t nk) {
    vkept = keep_units_upto(src, j0, j0 + nk,
                            [&](int64_t k0, int64_t n) {
                              return pack_value_pairs<Arch>(w, src, k0, n, dvp, w.packed_v + k0 / 2 * dvp);
                            }) &&
            j0 % 2 == 0;
  }

  // The units holding keys [j0, end) packed unless done (K rows, and V by pack_v(first key, keys),
  // which returns whether it met a NaN or an infinity); whether all their V are finite.
  template <class PackV>
  bool keep_units_upto(const KvSource<E>& src, int64_t j0, int64_t end, PackV pack_v) {
    bool finite = true;
    for (int64_t u = j0 / kPackUnitKeys; u * kPackUnitKeys < end; ++u) {
      int32_t& state = w.packed_state[u];
      if (state == 0) {
        const int64_t k0 = u * kPackUnitKeys, n = min64(kPackUnitKeys, w.valid_keys - k0);
        round_key_rows<Arch>(w, src, k0, n, kd, kpanel, reinterpret_cast<uint16_t*>(w.packed_k) + k0 * kd);
        state = pack_v(k0, n) ? 3 : 2;
      }
      finite = finite && state == 2;
    }
    return finite;
  }

  // Sᵀ = K·Qᵀ for keys [j0, j0 + nk), K rounded to bf16 rows first (or already, FlashWork::packed_k).
  // Row vectors [nv0, nv1) only.
  void scores(const KvSource<E>& src, int64_t j0, int64_t nk, int nv0, int nv1, float* st, float* colmax) {
    if (w.packed_k)
      keep_units(src, j0, nk);
    else
      round_key_rows<Arch>(w, src, j0, nk, kd, kpanel, reinterpret_cast<uint16_t*>(k2));
    const uint32_t* kbase = w.packed_k ? w.packed_k + j0 * (kd / 2) : k2;
    const uint32_t* krow[kBf16MaxR];
    for (int64_t jj = 0; jj < nk; jj += T::kScoreKeys) {
      const int R = static_cast<int>(min64(T::kScoreKeys, nk - jj));
      // The V rows of these keys, for pv() after the scores: without the requests the packing of V
      // waited on its loads from L2 (perf: ~1/3 of the driver's own samples). Zen 5, two threads,
      // alternated in one process, medians of 30: causal 2048², 8 heads, D 64 7.18/7.05 → 6.91/6.80
      // ms, D 80 9.10/9.09 → 8.77/8.77; 512² unchanged (K's next tile requested too: no better; the
      // f32 path, whose P·V reads V in place, unchanged by the same requests). Kept V pairs
      // (FlashWork::packed_v): the same requests for them changed nothing.
      if (!vkept)
        for (int r = 0; r < R; ++r) prefetch_rows(src.value(j0 + jj + r), 0, 1, w.value_dim);
      for (int r = 0; r < R; ++r) krow[r] = kbase + (jj + r) * (kd / 2);
      for (int64_t n0 = nv0; n0 < nv1; n0 += kBf16MaxNV) {  // up to 8 row vectors, 4 per call
        const ScoreBf16Args a{
            krow, qt2 + n0 * 16, ldr, pairs, st + jj * ldr + n0 * 16, ldr, colmax ? colmax + n0 * 16 : nullptr};
        score_bf16_dispatch(R, static_cast<int>(min64(kBf16MaxNV, nv1 - n0)), a);
      }
    }
  }

  // Sᵀ ← its exponentials (exp_columns, the cubic 2^x) for row vectors [nv0, nv1), which also go
  // into bf16 pairs of keys for pv() as they are computed (P packed from registers; pv() reloaded
  // Sᵀ for it, ~half of the driver's own samples on P1). Same bits. Zen 5, two threads, processes
  // alternated, medians of 21, three rounds: 8 heads, D 64, 512² 0.811 / 0.851 / 0.797 → 0.746 /
  // 0.789 / 0.767 ms, causal 2048² 6.51 / 6.69 / 6.49 → 6.37 / 6.44 / 6.24; 32 heads, D 128, causal
  // 2048² 46.9 / 47.8 / 47.8 → 46.7 / 46.8 / 46.6.
  template <class B>
  void exponentials(float* st, int64_t nk, int nv0, int nv1, const B* ref, B* sum) {
    for (int n0 = nv0; n0 < nv1; n0 += 4) {
      uint32_t* p = p2 + n0 * 16;
      const int64_t ld = ldr;
      auto pairs = [p, ld](int64_t jp, int n, B a, B b) {
        _mm512_store_si512(p + jp * ld + n * 16, pack_bf16_pairs(a, b));
      };
      float* s = st + n0 * 16;
      switch (nv1 - n0) {
        case 1: exp_columns<Arch, 1, true>(s, ldr, nk, ref + n0, sum + n0, pairs); break;
        case 2: exp_columns<Arch, 2, true>(s, ldr, nk, ref + n0, sum + n0, pairs); break;
        case 3: exp_columns<Arch, 3, true>(s, ldr, nk, ref + n0, sum + n0, pairs); break;
        default: exp_columns<Arch, 4, true>(s, ldr, nk, ref + n0, sum + n0, pairs); break;
      }
    }
  }

  // O = alpha·O + P·V over keys [j0, j0 + nk): P (packed by exponentials()) and V in bf16 pairs of
  // consecutive keys. Returns false, computing nothing, when the tile has masked keys
  // (`masked`) and V holds a NaN or an infinity: a masked key's weight is exactly 0, but 0·inf in a
  // pair's product would reach rows that never saw the key — the f32 P·V skips zero weights.
  // Rows of the row vectors [nv0, nv1) only.
  bool pv(const KvSource<E>& src, float* oacc, int64_t ldo, const float* alpha, int64_t j0, int64_t nk, int nv0,
          int nv1, bool masked) {
    const int64_t key_pairs = (nk + 1) / 2;
    const __mmask16 special = vkept ? 0 : pack_value_pairs<Arch>(w, src, j0, nk, dvp, v2);
    const uint32_t* vsrc = vkept ? w.packed_v + j0 / 2 * dvp : v2;
    if (masked && special) return false;
    const int64_t rows = min64(w.row_count, int64_t{nv1} * 16), vectors = dvp / 16;
    for (int64_t r0 = int64_t{nv0} * 16; r0 < rows; r0 += T::kPvRows) {
      const int R = static_cast<int>(min64(T::kPvRows, rows - r0));
      // (balanced passes: causal 2048², D 80 8.28/8.46 → 7.99/8.13 ms on Zen 5, D 96 −1%)
      const int nv_max = balanced_pass_width(vectors, min64(kBf16MaxNV, T::kAccRegs / R));
      for (int64_t c = 0; c < vectors; c += nv_max) {
        const int nv = static_cast<int>(min64(nv_max, vectors - c));
        const PvBf16Args a{oacc + r0 * ldo + c * 16, ldo, alpha + r0, p2 + r0, ldr, vsrc + c * 16, dvp, key_pairs};
        pv_bf16_dispatch(R, nv, a);
      }
    }
    return true;
  }
};

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
// The V rows of keys [j0, j0 + n) (i8: times their scales) rounded to bf16 and transposed, Vᵀ:
// out[d·ld + j] = V[j0 + j][d] for j < n, zero for j in [n, 32·groups) and for d in [value_dim,
// dvp): the A operand of Oᵀ += Vᵀ·Pᵀ on AMX tiles (16 value columns × 32 keys). Pairs of keys are
// packed as for vdpbf16ps, then each 16 × 16 block of pair words is transposed in registers.
// Returns the lanes that saw a NaN or an infinity.
template <class Arch, class E>
__mmask16 pack_value_columns(const FlashWork& w, const KvSource<E>& src, int64_t j0, int64_t n, int64_t groups,
                             int64_t dvp, uint16_t* out, int64_t ld) {
  const int64_t dv = w.value_dim;
  __mmask16 special = 0;
  for (int64_t c = 0; c < dvp; c += 16) {
    const int64_t nc = min64(16, dv - c);
    for (int64_t g = 0; g < groups; ++g) {
      __m512i r[16];
      for (int q = 0; q < 16; ++q) {
        const int64_t j = g * 32 + 2 * q;
        __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
        if (j < n) a = load_f32_upto<Arch>(src.value(j0 + j) + c, nc);
        if (j + 1 < n) b = load_f32_upto<Arch>(src.value(j0 + j + 1) + c, nc);
        if constexpr (KvSource<E>::kScaled) {  // i8: V rows times their scales
          if (j < n) a = _mm512_mul_ps(a, _mm512_set1_ps(src.value_scale(j0 + j)));
          if (j + 1 < n) b = _mm512_mul_ps(b, _mm512_set1_ps(src.value_scale(j0 + j + 1)));
        }
        special |= _mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(b, 0x99);  // QNaN, ±inf, SNaN
        r[q] = pack_bf16_pairs(a, b);
      }
      transpose_words_16x16(r);  // r[d]: value column c + d, keys g·32 … g·32 + 31
      for (int d = 0; d < 16; ++d) _mm512_storeu_si512(out + (c + d) * ld + g * 32, r[d]);
    }
  }
  return special;
}

// The bf16-math pieces on AMX tiles: Sᵀ = K·Qᵀ with A = K rows (bf16, 16 keys × 32 depth) and B =
// the Qᵀ pairs; Oᵀ += Vᵀ·Pᵀ with A = Vᵀ (16 value columns × 32 keys) and B = the P pairs that
// exponentials() packs. The same roundings as the vdpbf16ps pieces (Bf16Wide), summed in another
// order. Kept across row blocks (FlashWork::packed_k): K rows as there, V transposed per unit,
// [dvp][kPackUnitKeys] bf16 (the same words per unit as the pairs).
template <class Arch, class E>
struct AmxWide : Bf16Wide<Arch, E> {
  using Base = Bf16Wide<Arch, E>;
  using Base::dvp;
  using Base::k2;
  using Base::kd;
  using Base::kpanel;
  using Base::ldr;
  using Base::p2;
  using Base::pairs;
  using Base::qt2;
  using Base::v2;
  using Base::vkept;
  using Base::w;

  AmxWide(const FlashWork& work, float* scratch, const Layout& L, const float* qt, int64_t ld)
      : Base(work, scratch, L, qt, ld) {
    // Qᵀ pairs past the depth's, up to whole chunks of 32: zero (K rows are zero there; a stale
    // word could be a NaN).
    for (int64_t p = pairs; p < kd / 2; ++p)
      for (int64_t r = 0; r < ldr; r += 16) _mm512_store_si512(qt2 + p * ldr + r, _mm512_setzero_si512());
    amx_configure();
  }
  ~AmxWide() { _tile_release(); }
  AmxWide(const AmxWide&) = delete;
  AmxWide& operator=(const AmxWide&) = delete;

  // Both products' operands: A rows of `a_elems` bf16, B a pairs panel and C an f32 panel whose
  // rows are ldr query rows wide (16 of them per tile, 64 bytes apart).
  AmxOperands row_operands(int64_t a_elems, const uint32_t* b, float* c, int64_t chunks, bool load_c) const {
    AmxOperands o{};
    o.lda = a_elems * 2;
    o.a_group = 16 * a_elems * 2;
    o.b = reinterpret_cast<const char*>(b);
    o.ldb = ldr * 4;
    o.b_group = 64;
    o.b_chunk = 16 * ldr * 4;
    o.chunks = chunks;
    o.c = reinterpret_cast<char*>(c);
    o.ldc = ldr * 4;
    o.c_mgroup = 16 * ldr * 4;
    o.c_ngroup = 64;
    o.load_c = load_c;
    return o;
  }

  uint16_t* unit_v(int64_t u) const { return reinterpret_cast<uint16_t*>(w.packed_v) + u * dvp * kPackUnitKeys; }

  // As Bf16Wide::keep_units, with V transposed; a tile reads its V there when the units up to its
  // last chunk's end are finite and it starts at a multiple of 32 keys (its chunks then lie in
  // single units).
  void keep_units(const KvSource<E>& src, int64_t j0, int64_t nk) {
    vkept = this->keep_units_upto(src, j0, min64(w.valid_keys, j0 + round_up(nk, 32)), [&](int64_t k0, int64_t n) {
      return pack_value_columns<Arch>(w, src, k0, n, kPackUnitKeys / 32, dvp, unit_v(k0 / kPackUnitKeys),
                                      kPackUnitKeys);
    }) && j0 % 32 == 0;
  }

  // Sᵀ for keys [j0, j0 + nk), row vectors [nv0, nv1): 16-key tiles of K rows against 16-row tiles
  // of Qᵀ pairs (rows of Sᵀ past nk are written and never read: st holds whole tiles).
  void scores(const KvSource<E>& src, int64_t j0, int64_t nk, int nv0, int nv1, float* st, float* colmax) {
    if (w.packed_k)
      keep_units(src, j0, nk);
    else
      round_key_rows<Arch>(w, src, j0, nk, kd, kpanel, reinterpret_cast<uint16_t*>(k2));
    const char* kbase = w.packed_k
                            ? reinterpret_cast<const char*>(reinterpret_cast<const uint16_t*>(w.packed_k) + j0 * kd)
                            : reinterpret_cast<const char*>(k2);
    const AmxOperands o = row_operands(kd, qt2 + nv0 * 16, st + nv0 * 16, kd / 32, false);
    const int64_t a_group = o.a_group;
    amx_product(o, (nk + 15) / 16, nv1 - nv0,
                [kbase, a_group](int64_t i, int64_t ch) { return kbase + i * a_group + ch * 64; });
    if (colmax)
      for (int n = nv0; n < nv1; ++n) {
        __m512 mx = _mm512_load_ps(st + n * 16);
        for (int64_t jj = 1; jj < nk; ++jj) mx = _mm512_max_ps(mx, _mm512_load_ps(st + jj * ldr + n * 16));
        _mm512_store_ps(colmax + n * 16, mx);
      }
  }

  // Oᵀ = alpha·Oᵀ + Vᵀ·Pᵀ over keys [j0, j0 + nk), in chunks of 32 keys (P pairs past nk zeroed,
  // V columns past them zero or finite). false, computing nothing, as Bf16Wide::pv.
  bool pv(const KvSource<E>& src, float* oacc, int64_t /*ldo*/, const float* alpha, int64_t j0, int64_t nk, int nv0,
          int nv1, bool masked) {
    const int64_t chunks = (nk + 31) / 32, ldk = chunks * 32;
    __mmask16 special = 0;
    if (!vkept) special = pack_value_columns<Arch>(w, src, j0, nk, chunks, dvp, reinterpret_cast<uint16_t*>(v2), ldk);
    if (masked && special) return false;
    for (int64_t jp = (nk + 1) / 2; jp < ldk / 2; ++jp)
      for (int n = nv0; n < nv1; ++n) _mm512_store_si512(p2 + jp * ldr + n * 16, _mm512_setzero_si512());
    for (int64_t d = 0; d < dvp; ++d)
      for (int n = nv0; n < nv1; ++n) {
        float* o = oacc + d * ldr + n * 16;
        _mm512_store_ps(o, _mm512_mul_ps(_mm512_load_ps(o), _mm512_load_ps(alpha + n * 16)));
      }
    const int64_t ldv = vkept ? kPackUnitKeys : ldk;  // bf16 per Vᵀ row
    const AmxOperands o = row_operands(ldv, p2 + nv0 * 16, oacc + nv0 * 16, chunks, true);
    const uint16_t* tile_v = reinterpret_cast<const uint16_t*>(v2);
    const bool kept = vkept;
    amx_product(o, dvp / 16, nv1 - nv0, [&](int64_t i, int64_t ch) -> const char* {
      if (kept) {
        const int64_t j = j0 + 32 * ch;
        return reinterpret_cast<const char*>(unit_v(j / kPackUnitKeys) + i * 16 * kPackUnitKeys + j % kPackUnitKeys);
      }
      return reinterpret_cast<const char*>(tile_v + i * 16 * ldk + 32 * ch);
    });
    return true;
  }
};
#endif  // __AMX_TILE__ && __AMX_BF16__

}  // namespace
}  // namespace attend::kernels

#endif  // __AVX512BF16__
