// The wide (prefill) flash driver: a block of up to kBlockRows query rows against a key range,
// in tiles of kBlockKeys keys. Sᵀ = K·Qᵀ (keys × query rows): Q is transposed into a [D × rows]
// panel once per row block, K is read in place (its elements are broadcast), so nothing per key
// tile is packed; the online softmax then runs down columns, vectorised across query rows, and the
// output accumulator is rescaled by e^(m_old − m_new) as P·V reloads it.
#pragma once

#include "flash_common.hpp"
#include "score_terms.hpp"
#include "simd/exp2.hpp"
#include "simd/transpose.hpp"
#include "ukernel/pv_tile.hpp"
#include "ukernel/score_tile_kqt_f32.hpp"

namespace attend::kernels {
namespace {

// The bf16-math pieces of the wide path (flash_wide_bf16.hpp; defined only where AVX512_BF16 is
// compiled in, and only used there).
template <class Arch, class E>
struct Bf16Wide;
// …and on AMX tiles (flash_wide_bf16.hpp; defined only where AMX-BF16 is compiled in).
template <class Arch, class E>
struct AmxWide;

// Wide path: a block of up to kBlockRows query rows (twice that in the bf16-math table).

// Sᵀ ← 2^((Sᵀ − ref)·log2 e) over `nk` keys, NV vectors of query rows per key, and sum[n] = the
// column sums. The NV exponentials of a key are independent and Sᵀ is walked in memory order
// (+1% on P1–P3 over one column of vectors at a time). The argument is one FMA, Sᵀ·log2 e −
// ref·log2 e (unless that overflows); kBf16 (bf16 math, whose P·V rounds the weights to bf16
// next) takes the cubic 2^x. Zen 5, two threads, alternated in one process, medians of 21, bf16
// math: 8 heads, D 64, 512² 0.840 / 0.788 → 0.803 / 0.764 ms (the FMA alone 0.825 / 0.788),
// causal 2048² 6.83 / 6.85 → 6.65 / 6.62 (6.80); 32 heads, D 128, causal 2048² 49.7 / 48.9 → 48.8
// / 48.0 (49.2 / 48.4); f32 causal 2048² 11.52 / 11.35 → 11.46 / 11.24 (the FMA). With `pairs`,
// two keys at a time, each pair's weights also handed to pairs(pair, n, p0, p1) (bf16 math packs
// them for P·V).
template <class Arch, int NV, bool kBf16 = false, class Pairs = std::nullptr_t>
void exp_columns(float* st, int64_t ldr, int64_t nk, const vfloat<Arch>* ref, vfloat<Arch>* sum, Pairs pairs = {}) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[NV], r[NV];
  bool huge = false;  // ref·log2 e overflows (logits near FLT_MAX): subtract first
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) {
    acc[n] = B(0.0f);
    r[n] = -(ref[n] * B(kLog2e));
    huge = huge || xsimd::any(xsimd::abs(r[n]) == B(std::numeric_limits<float>::infinity()));
  }
  auto exp2 = [&](const float* at, int n) {
    const B s = B::load_aligned(at);
    const B x = huge ? (s - ref[n]) * B(kLog2e) : xsimd::fma(s, B(kLog2e), r[n]);
    return kBf16 ? exp2_nonpositive_bf16<Arch>(x) : exp2_nonpositive<Arch>(x);
  };
  if constexpr (std::is_same_v<Pairs, std::nullptr_t>) {
    for (int64_t jj = 0; jj < nk; ++jj, st += ldr) {
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) {
        const B p = exp2(st + n * W, n);
        p.store_aligned(st + n * W);
        acc[n] += p;
      }
    }
  } else {  // two keys at a time, each pair's weights handed to pairs(pair, n, p0, p1) too
    for (int64_t jj = 0; jj < nk; jj += 2, st += 2 * ldr) {
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) {
        const B p0 = exp2(st + n * W, n);
        p0.store_aligned(st + n * W);
        acc[n] += p0;
        B p1(0.0f);  // (an odd last key pairs with zero)
        if (jj + 1 < nk) {
          p1 = exp2(st + ldr + n * W, n);
          p1.store_aligned(st + ldr + n * W);
          acc[n] += p1;
        }
        pairs(jj / 2, n, p0, p1);
      }
    }
  }
  ATTEND_UNROLL
  for (int n = 0; n < NV; ++n) sum[n] = acc[n];
}

// Sᵀ = K·Qᵀ for keys [j0, j0 + nk) in f32. K is read in place (its elements broadcast); a bf16/f16
// or blocked tile is first widened into a row panel (`kpanel`).
// The score terms (softcap, ALiBi with the rows' slope and pos) are applied in the microkernel's
// epilogue, before the store and the column max.
template <class Arch, class E>
void wide_scores(const FlashWork& w, const KvSource<E>& src, float* kpanel, const float* qt, int64_t ldr, int nvr,
                 int64_t j0, int64_t nk, float* st, float* colmax, const float* slope, const float* pos) {
  using T = Tiles<Arch>;
  const int64_t depth = w.head_dim;
  const float* ktile = nullptr;
  int64_t ldk = depth;
  if (w.k_blocked) {
    // Blocked K (a cache) is read in place (f32) or widened block by block, never transposed: the
    // microkernel steps kKeyBlock floats per depth element. A scalar transpose into rows was a
    // quarter of a cached prefill's time (Zen 3, f32, 256-token chunk).
    if constexpr (!std::is_same_v<E, float>) widen_key_blocks<Arch>(src, j0, nk, kpanel);
  } else if (std::is_same_v<E, float>) {
    ktile = reinterpret_cast<const float*>(src.key_row(j0));
    ldk = w.k_row_stride;
  } else {
    to_f32_panel(src.key_row(j0), w.k_row_stride, nk, depth, depth, kpanel);
    ktile = kpanel;
  }
  // Key j0 + jj's first element (blocked: the block pointer is looked up once per block).
  int64_t block_at = -1;
  const float* block = nullptr;
  auto key_ptr = [&](int64_t jj) -> const float* {
    if (!w.k_blocked) return ktile + jj * ldk;
    if constexpr (std::is_same_v<E, float>) {
      const int64_t j = j0 + jj, b = j - j % kKeyBlock;
      if (b != block_at) {
        block_at = b;
        block = src.key_block(b);
      }
      return block + (j - b);
    } else {
      return blocked_panel_key(kpanel, depth, j0, jj);
    }
  };
  // One vector of query rows takes 2 · kScoreKeys keys per call (32 registers: 12 independent FMA
  // chains hide the FMA latency that 6 keys × 1 vector cannot; 16 registers: 6 — 12, bound by
  // their broadcasts, made a group-of-8 decode 4–6% slower on Zen 3). More vectors take as many
  // keys as the accumulator budget holds: 16 registers 3 keys × 4 vectors, 4 × 3, 6 × 2 (with 2
  // vectors, MLA decode's 16 heads, 3 keys left 6 chains and the score phase took 1.7× the P·V's
  // time: 1.16–1.21× faster in one process); 32 registers 6 keys.
  constexpr int kWideR = 2 * T::kScoreKeys;
  const int r_full = static_cast<int>(min64(kMaxScoreR, T::kAccRegs / nvr));
  static_assert(T::kBlockKeys % kWideR == 0 && T::kBlockKeys % 4 == 0, "no tile ends in a short call");
  const float* krow[kWideR];
  // f32 K/V streamed from memory, when the block holds all of its kv head's rows
  // (FlashWork::stream_keys: decode-shaped, a GQA group, MLA's heads): each call requests the next
  // call's K rows (row-major) as it reads its own (ScoreArgs::pf_ahead), and the V rows of its own
  // keys (ScoreArgs::pf_v) for the P·V after the tile's scores; the requests follow the reading,
  // spread over the FMAs. Two threads, LLC flushed, each variant right after a plain read,
  // alternated in one process. Zen 3 (16 registers), against one row vector fetching K 8 calls
  // ahead in a burst and nothing on more: a group of 16 at D 128 (2 row vectors) 1.17/1.14 →
  // 0.96/0.95 ms (V alone: 1.10/1.10), of 32 (4) 2.33/2.33 → 1.82/1.76, of 4 at D 100 (1) 2.14/2.11
  // → 1.57/1.59; MLA decode (2) 4.34/4.20 → 3.71/3.65; a blocked K (a cache; its next block
  // requested a line per depth step added nothing), V alone: the f32 cache, group of 16,
  // 1.03/0.96 → 0.94/0.91. Zen 5 (32 registers: one row vector for 16 rows), against that burst
  // (which had taken MLA decode from 2.25 to 1.8–1.95 ms): MLA decode 2.19/2.13 → 1.67/1.66 ms
  // (burst + these requests: 1.85/1.85), a group of 16 at D 128 1.72/1.64 → 1.03/0.95, of 32 (2 row
  // vectors, no burst before) 2.66/2.62 → 1.40/1.36, of 4 at D 100 1.06/1.04 → 0.68/0.66; the f32 cache's blocked K (V
  // requests only), group of 16 at D 128 1.54/1.52/1.58 → 1.14/1.15/1.15 ms. The next call's rows beat the one after on
  // Zen 3 (Zen 5: 1–4 calls ahead alike). Prefill (several row blocks share each key, from L2) is left alone.
  const bool ahead = w.stream_keys && std::is_same_v<E, float>;
  for (int64_t jj = 0; jj < nk;) {
    const bool wide_r = nvr == 1 && jj + kWideR <= nk;
    const int R = wide_r ? kWideR : static_cast<int>(min64(r_full, nk - jj));
    for (int r = 0; r < R; ++r) krow[r] = key_ptr(jj + r);
    ScoreArgs a{krow, qt, ldr, depth, st + jj * ldr, ldr, colmax};
    a.kstep = w.k_blocked ? kKeyBlock : 1;
    if (ahead && !w.k_blocked && w.key_end - (j0 + jj + R) > 0) {
      a.pf_ahead = R * ldk;
      a.pf_rows = static_cast<int>(min64(R, w.key_end - (j0 + jj + R)));
    }
    // (MLA's V inside K: its lines are K's; a paged call's V rows are evenly spaced within a page)
    if (ahead && w.v != w.k && (!w.pages || (j0 + jj) / w.page_tokens == (j0 + jj + R - 1) / w.page_tokens)) {
      a.pf_v = reinterpret_cast<const float*>(src.value(j0 + jj));
      a.pf_v_stride = w.v_row_stride;
      a.pf_v_floats = w.value_dim;
    }
    a.softcap = w.softcap;
    if (w.alibi) {
      a.slope = slope;
      a.pos = pos;
      a.key0 = static_cast<float>(j0 + jj);
    }
    jj += R;
    if (wide_r) {
      score_tile<Arch, kWideR, 1>(a);
      continue;
    }
    score_dispatch<Arch>(R, nvr, a);
  }
}

struct NoBf16 {
  template <class... A>
  explicit NoBf16(A&&...) {}
};

// kBf16Math: Sᵀ = K·Qᵀ and P·V round their operands to bf16 and run on vdpbf16ps (FpMath::bf16),
// or with kAmx on AMX tiles (tdpbf16ps; the output accumulator then kept transposed, Oᵀ, the tiles'
// orientation); the softmax, and P·V of a tile with masked keys whose V holds a NaN or an infinity,
// are the f32 path.
template <class Arch, class E, bool kBf16Math = false, bool kAmx = false>
void flash_wide(const FlashWork& w, float* scratch) {
  static_assert(kBf16Math || !kAmx, "AMX is a bf16-math path");
  using T = Tiles<Arch>;
  using B = vfloat<Arch>;
  constexpr int W = T::W;
  const RowMap rows{&w};
  const int64_t nr = w.row_count, depth = w.head_dim;
  const int64_t ldr = round_up(nr, W);  // padded rows: the leading dimension of Qᵀ and Sᵀ
  const int nvr = static_cast<int>(ldr / W);
  const int64_t dvp = round_up(w.value_dim, W);
  const Layout L = make_layout<Arch>(w.head_dim, w.value_dim, nr);
  float* qt = scratch + L.qt;
  float* st = scratch + L.st;
  float* oacc = scratch + L.oacc;
  float* m = scratch + L.m;
  float* l = scratch + L.l;
  float* alpha = scratch + L.alpha;
  float* lo = scratch + L.lo;
  float* hi = scratch + L.hi;
  float* colmax = scratch + L.colmax;
  float* slope = scratch + L.slope;
  float* pos = scratch + L.pos;
  const bool terms = w.softcap > 0.0f || w.alibi;
  // 16 registers: the output accumulator is kept transposed, Oᵀ[value_dim][ldr] (pvt_block: P·V in
  // the score microkernel's shape); 32 registers keep O[rows][dvp] (pv_tile's 6 × 4 blocks).
  // AMX: Oᵀ too (Oᵀ += Vᵀ·Pᵀ takes P as the pairs exp_columns packs, B's layout).
  constexpr bool kTransposedO = (!T::kManyRegs && !kBf16Math) || kAmx;

  // Qᵀ panel, pre-scaled; padded rows are zero and inherit the last row's mask so they never
  // widen the key range or force masking.
  int64_t key_lo = w.key_end, key_hi = w.key_begin, max_lo = 0, min_hi = w.key_end;
  for (int64_t r = 0; r < ldr; ++r) {
    const int64_t rr = min64(r, nr - 1);
    const int64_t rlo = max64(rows.lo(rr), w.key_begin), rhi = min64(rows.hi(rr), w.key_end);
    lo[r] = static_cast<float>(rlo);
    hi[r] = static_cast<float>(rhi);
    if (rlo < rhi) {
      key_lo = min64(key_lo, rlo);
      key_hi = max64(key_hi, rhi);
    }
    max_lo = max64(max_lo, rlo);
    // (a tree's chunk keys are masked per row: no tile holding them is whole)
    min_hi = min64(min_hi, w.tree ? min64(rhi, w.first_position) : rhi);
    slope[r] = rows.slope(rr);
    pos[r] = rows.key_position(rr);
    if (r < nr) {
      start_row_state(w, rows.head(r), m[r], l[r]);
    } else {
      m[r] = kNegInf;
      l[r] = 0.0f;
    }
  }
  // With a softcap the f32 score microkernel takes Q·Kᵀ already divided by the cap (ScoreArgs::
  // softcap): the division rides on Q's scale, one multiply per score fewer.
  const float q_scale = !kBf16Math && w.softcap > 0.0f ? w.scale / w.softcap : w.scale;
  for (int64_t r0 = 0; r0 < ldr; r0 += W) {
    const float* src[W];
    for (int i = 0; i < W; ++i) {
      src[i] = nullptr;
      if (r0 + i >= nr) continue;
      if (w.q_type == KvType::f32) {
        src[i] = static_cast<const float*>(rows.q(r0 + i));
      } else {  // 16-bit Q: W rows widened into the staging panel, then transposed like f32 rows
        float* staged = scratch + L.qstage + i * depth;
        row_to_f32<Arch>(rows.q(r0 + i), w.q_type, depth, 1.0f, staged);
        src[i] = staged;
      }
    }
    transpose_rows_scaled<Arch>(src, depth, q_scale, qt + r0, ldr);
  }
  std::memset(oacc, 0, sizeof(float) * ldr * dvp);
  // bf16 math: tiles start at an even key, so a tile's V pairs are those kept packed for the kv head
  // (FlashWork::packed_v; a window of 256 starts its rows' keys at odd ones).
  // AMX: at a multiple of 32 keys, each tile's chunks of 32 keys then lie within one kept unit.
  if (kAmx && key_lo % 32 && key_lo - key_lo % 32 >= w.key_begin && key_lo < key_hi) key_lo -= key_lo % 32;
  if (kBf16Math && key_lo % 2 && key_lo > w.key_begin && key_lo < key_hi) --key_lo;
  // bf16 math: Qᵀ packed once more into bf16 pairs; the panels live past the f32 layout.
  [[maybe_unused]] std::conditional_t<kBf16Math, std::conditional_t<kAmx, AmxWide<Arch, E>, Bf16Wide<Arch, E>>, NoBf16>
      bf(w, scratch, L, qt, ldr);

  const KvSource<E> src(w);
  float* ones = scratch + L.ones;
  for (int64_t r = 0; r < ldr; ++r) ones[r] = 1.0f;
  constexpr bool kFloat = std::is_same_v<E, float>;
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += T::kBlockKeys) {
    const int64_t nk = min64(T::kBlockKeys, key_hi - j0);

    // Tiles that every row sees whole skip the mask (and use the unguarded P·V).
    const bool whole = max_lo <= j0 && min_hi >= j0 + nk;
    // The column max comes out of the score microkernel, except where masking (or a bias) will
    // still change the scores: a masked-out large logit must not become the reference. The f32
    // score microkernel applies softcap and ALiBi itself (its max is of the final scores); the
    // bf16 one does not: there a softcap (monotonic) maps the column max through, ALiBi (a shift
    // per key) turns the fused max off.
    constexpr bool kTermsInScores = !kBf16Math;
    const bool fuse_max = whole && !w.bias && (kTermsInScores || !w.alibi);
    // Row vectors [nv0, nv1) see keys of this tile; the others see none (a causal diagonal's
    // earlier rows, a window's later ones) and are skipped: an all-masked tile leaves a row's
    // m, l and O exactly as they are (alpha 1, sum 0), so the results keep their bits. Zen 5, two
    // threads, 2048² causal, 8 heads, D 64, alternated in one process: bf16 math 6.66/6.67 →
    // 6.51/6.51 ms, f32 10.50/10.57 → 10.43/10.53; with a window of 256 bf16 2.58/2.59 → 2.34/2.35,
    // f32 3.47/3.39 → 3.34/3.26; 4096² bf16 25.09/25.12 → 24.74/24.73.
    int nv0 = 0, nv1 = nvr;
    if (!whole) {
      auto sees = [&](int n) {
        const B jlo(static_cast<float>(j0)), jhi(static_cast<float>(j0 + nk));
        return xsimd::any((B::load_aligned(hi + n * W) > jlo) & (B::load_aligned(lo + n * W) < jhi) &
                          (B::load_aligned(lo + n * W) < B::load_aligned(hi + n * W)));
      };
      while (nv0 < nvr && !sees(nv0)) ++nv0;
      while (nv1 > nv0 && !sees(nv1 - 1)) --nv1;
      if (nv0 == nv1) continue;
    }
    const int nvs = nv1 - nv0;
    const int64_t rv0 = int64_t{nv0} * W, rv1 = min64(nr, int64_t{nv1} * W);  // the rows they hold
    if (fuse_max)
      for (int64_t r = 0; r < ldr; r += W) B(kNegInf).store_aligned(colmax + r);
    if constexpr (kBf16Math) {
      bf.scores(src, j0, nk, nv0, nv1, st, fuse_max ? colmax : nullptr);
    } else {
      wide_scores<Arch>(w, src, scratch + L.kpanel, qt + rv0, ldr, nvs, j0, nk, st + rv0,
                        fuse_max ? colmax + rv0 : nullptr, slope + rv0, pos + rv0);
    }
    if (terms && !kTermsInScores) {
      wide_score_terms<Arch>(w, st + rv0, ldr, nvs, j0, nk, slope + rv0, pos + rv0);
      if (fuse_max)
        for (int64_t r = 0; r < ldr; r += W)
          softcap_f32<Arch>(B::load_aligned(colmax + r), w.softcap, 1.0f / w.softcap).store_aligned(colmax + r);
    }
    if (w.bias) {
      for (int64_t r = rv0; r < rv1; ++r) {
        const float* b = rows.bias(r) + j0 * w.bias_key_stride;
        for (int64_t jj = 0; jj < nk; ++jj) st[jj * ldr + r] += b[jj * w.bias_key_stride];
      }
    }
    const bool masked = !whole || w.bias != nullptr;
    if (!whole) {
      for (int64_t jj = 0; jj < nk; ++jj) {
        const B jf(static_cast<float>(j0 + jj));
        for (int n = nv0; n < nv1; ++n) {
          float* s = st + jj * ldr + n * W;
          const auto visible = (jf >= B::load_aligned(lo + n * W)) & (jf < B::load_aligned(hi + n * W));
          xsimd::select(visible, B::load_aligned(s), B(kNegInf)).store_aligned(s);
        }
      }
      if (w.tree) tree_terms(w, rows, st, 1, ldr, rv0, rv1, j0, nk);
    }
    // Online softmax down the columns of Sᵀ, W query rows at a time: new maxima and rescale
    // factors first, then the exponentials of all columns together.
    // (bf16 math takes blocks of up to twice the rows: its K and V tiles are packed once per block)
    constexpr int kRowVectors = kBf16Math ? 2 * T::kMaxRowVectors : T::kMaxRowVectors;
    B ref[kRowVectors], sum[kRowVectors];
    for (int n = nv0; n < nv1; ++n) {
      B mx(kNegInf);
      if (fuse_max)
        mx = B::load_aligned(colmax + n * W);
      else
        for (int64_t jj = 0; jj < nk; ++jj) mx = xsimd::max(mx, B::load_aligned(st + jj * ldr + n * W));
      const B m_old = B::load_aligned(m + n * W);
      const B m_new = xsimd::max(m_old, mx);
      // All keys masked so far: use 0 as the reference so exp2(−inf − ref) is 0, not NaN.
      ref[n] = xsimd::select(m_new == B(kNegInf), B(0.0f), m_new);
      m_new.store_aligned(m + n * W);
      exp2_nonpositive<Arch>((m_old - ref[n]) * B(kLog2e)).store_aligned(alpha + n * W);
    }
    static_assert(T::kMaxRowVectors == 4, "exp_columns is dispatched for 1–4 row vectors");
    if constexpr (kBf16Math) {
      bf.exponentials(st, nk, nv0, nv1, ref, sum);
    } else {
      for (int n0 = nv0; n0 < nv1; n0 += 4) {
        switch (nv1 - n0) {
          case 1: exp_columns<Arch, 1>(st + n0 * W, ldr, nk, ref + n0, sum + n0); break;
          case 2: exp_columns<Arch, 2>(st + n0 * W, ldr, nk, ref + n0, sum + n0); break;
          case 3: exp_columns<Arch, 3>(st + n0 * W, ldr, nk, ref + n0, sum + n0); break;
          default: exp_columns<Arch, 4>(st + n0 * W, ldr, nk, ref + n0, sum + n0); break;
        }
      }
    }
    for (int n = nv0; n < nv1; ++n)
      xsimd::fma(B::load_aligned(l + n * W), B::load_aligned(alpha + n * W), sum[n]).store_aligned(l + n * W);
    if constexpr (kBf16Math) {
      if (bf.pv(src, oacc, dvp, alpha, j0, nk, nv0, nv1, masked)) continue;
    }
    if constexpr (kTransposedO) {  // (Oᵀ: the rows are columns; pvt takes up to kMaxPvtNV row vectors)
      if (!kFloat) values_to_f32_panel(src, j0, nk, w.value_dim, w.value_dim, scratch + L.vpanel);
      for (int n0 = nv0; n0 < nv1; n0 += kMaxPvtNV) {
        const int nvg = nv1 - n0 < kMaxPvtNV ? nv1 - n0 : kMaxPvtNV;
        const int64_t r0 = int64_t{n0} * W;
        if constexpr (kFloat)
          pvt_runs<Arch>(src, oacc + r0, ldr, alpha + r0, ones, st + r0, ldr, j0, nk, w.value_dim, nvg, masked);
        else
          pvt_block<Arch>(oacc + r0, ldr, alpha + r0, st + r0, ldr, scratch + L.vpanel, w.value_dim, w.value_dim, nvg,
                          nk, masked);
      }
    } else if (kFloat && w.value_dim % W == 0) {
      pv_runs<Arch>(src, oacc + rv0 * dvp, dvp, alpha + rv0, ones, st + rv0, 1, ldr, j0, nk, rv1 - rv0, dvp / W, masked,
                    0);
    } else {  // pad (and widen) V rows so the microkernel never reads past a row
      values_to_f32_panel(src, j0, nk, w.value_dim, dvp, scratch + L.vpanel);
      pv_block<Arch>(oacc + rv0 * dvp, dvp, alpha + rv0, st + rv0, 1, ldr, scratch + L.vpanel, dvp, rv1 - rv0, dvp / W,
                     nk, masked);
    }
  }
  if constexpr (kTransposedO)
    write_rows<Arch>(w, rows, oacc, 1, m, l, ldr, scratch + L.vpanel);
  else
    write_rows<Arch>(w, rows, oacc, dvp, m, l);
}

}  // namespace
}  // namespace attend::kernels
