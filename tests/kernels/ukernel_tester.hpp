// The microkernel tester: every microkernel of runtime/kernels/ukernel/ (and the exp2 polynomial)
// alone, against a double-precision reference, over the boundary classes its own tile constants
// define. The sizes are generated from Tiles<Arch> (not listed by hand), so a change of tile
// constants moves the tested edges with it: for each blocked dimension with tile t the tester
// takes 1, t − 1, t, t + 1, 2t + 1 (and 0 where a call may be empty), clipped to what the caller
// can pass.
//
// Included only by tests/kernels/ukernel_cases_<isa>.cpp, each compiled with that ISA's flags. Like
// the kernels, everything here is a template or in an anonymous namespace, and it uses nothing
// inline from the standard library that other translation units also instantiate (no containers,
// no <random>): an AVX-512 copy of a shared inline function could otherwise be linked into the
// whole test binary. Results go out through plain C types (UkernelReport).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "../../runtime/kernels/simd/exp2.hpp"
#include "../../runtime/kernels/simd/tanh.hpp"
#include "../../runtime/kernels/tile_traits.hpp"
#include "../../runtime/kernels/ukernel/blocked_key_scores.hpp"
#include "../../runtime/kernels/ukernel/narrow_dot_scores.hpp"
#include "../../runtime/kernels/ukernel/pv_tile.hpp"
#include "../../runtime/kernels/ukernel/score_tile_kqt_f32.hpp"
#include "ukernel_report.hpp"

namespace attend::kernels {
namespace {
namespace tester {

// A 64-byte aligned buffer of floats (or 16-bit elements), zero-filled.
template <class T>
struct Buf {
  T* p;
  explicit Buf(int64_t n)
      : p(static_cast<T*>(::operator new[](sizeof(T) * static_cast<size_t>(n > 0 ? n : 1), std::align_val_t(64)))) {
    std::memset(static_cast<void*>(p), 0, sizeof(T) * static_cast<size_t>(n > 0 ? n : 1));
  }
  ~Buf() { ::operator delete[](static_cast<void*>(p), std::align_val_t(64)); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  T& operator[](int64_t i) { return p[i]; }
};

// A small deterministic generator (no <random>: see the file comment).
struct Lcg {
  uint64_t s;
  float uniform() {  // [-1, 1)
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
  }
};

// Element of type E nearest to x (round to nearest even), and its value.
template <class E>
E make(float x);
template <>
float make<float>(float x) {
  return x;
}
template <>
Bf16 make<Bf16>(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return Bf16{static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16)};
}
template <>
F16 make<F16>(float x) {  // |x| ≤ 1 here: normal or zero f16, no overflow
  const double a = std::fabs(static_cast<double>(x));
  if (a < 6.103515625e-05) return F16{static_cast<uint16_t>(x < 0 ? 0x8000u : 0u)};
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m·2^e, m in [0.5, 1)
  double mant = std::nearbyint((m * 2.0 - 1.0) * 1024.0);
  int exp = e - 1 + 15;
  if (mant == 1024.0) mant = 0.0, ++exp;
  return F16{
      static_cast<uint16_t>((x < 0 ? 0x8000u : 0u) | (static_cast<uint32_t>(exp) << 10) | static_cast<uint32_t>(mant))};
}

template <>
I8 make<I8>(float x) {  // an 8-bit cache's code for x in [−1, 1] (scale 1/127; the kernel sees the code)
  if (!(std::fabs(x) <= 1.0f)) return I8{-128};  // no NaN in i8: the extreme code instead
  return I8{static_cast<int8_t>(std::nearbyint(x * 127.0f))};
}
// The largest magnitude make<E> gives for |x| ≤ 1 (the tolerance scales with it).
template <class E>
constexpr double value_range() {
  return std::is_same_v<E, I8> ? 128.0 : 1.0;
}

template <class E>
const char* type_name() {
  return std::is_same_v<E, float> ? "f32" : std::is_same_v<E, Bf16> ? "bf16" : std::is_same_v<E, I8> ? "i8" : "f16";
}

// The boundary classes of a blocked dimension with tile t, clipped to [lo, hi].
struct Sizes {
  int64_t v[16];
  int n = 0;
  void add(int64_t x, int64_t lo, int64_t hi) {
    if (x < lo || x > hi) return;
    for (int i = 0; i < n; ++i)
      if (v[i] == x) return;
    if (n < 16) v[n++] = x;
  }
};
Sizes boundary(int64_t t, int64_t lo, int64_t hi) {
  Sizes s;
  for (int64_t x : {int64_t{0}, int64_t{1}, t - 1, t, t + 1, 2 * t + 1}) s.add(x, lo, hi);
  return s;
}

// |got − want| ≤ tol · (Σ|terms| + floor): the error bound of an f32 sum of products, relative to
// the magnitudes summed (cancellation makes a relative-to-result bound meaningless).
bool close(double got, double want, double magnitude, double tol = 4e-6) {
  return std::isfinite(got) && std::fabs(got - want) <= tol * (magnitude + 1e-6);
}

// ---------------------------------------------------------------------------------------------
// score_tile: Sᵀ[keys][rows] = K·Qᵀ over a wide tile, walked as flash_wide walks it (up to
// kAccRegs / nv keys per call for nv = ceil(rows / W) row vectors), with the fused column max; K in rows and, as a
// cache holds it, blocked ([D][kKeyBlock] per kKeyBlock keys, read with kstep = kKeyBlock); with and without the
// K and V rows that decode requests ahead (ScoreArgs::pf_ahead, pf_v).
template <class Arch>
void score_cases(UkernelReport& r) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  const Sizes keys = boundary(T::kScoreKeys, 1, T::kBlockKeys), rows = boundary(W, 1, T::kBlockRows);
  Sizes keys_all = keys;
  for (int i = 0; i < boundary(T::kBlockKeys, 1, T::kBlockKeys).n; ++i)
    keys_all.add(boundary(T::kBlockKeys, 1, T::kBlockKeys).v[i], 1, T::kBlockKeys);
  keys_all.add(T::kBlockRows, 1, T::kBlockKeys);
  const Sizes depths = boundary(W, 1, 4 * W + 3);
  Lcg rng{1};
  for (int blocked = 0; blocked < 2; ++blocked)
    for (int ik = 0; ik < keys_all.n; ++ik)
      for (int ir = 0; ir < rows.n; ++ir)
        for (int id = 0; id < depths.n; ++id) {
          const int64_t nk = keys_all.v[ik], nr = rows.v[ir], depth = depths.v[id];
          const int64_t ldr = round_up(nr, W);
          const int nv = static_cast<int>(ldr / W);
          const int64_t kstep = blocked ? kKeyBlock : 1;
          // Key j's element d.
          auto kat = [&](int64_t j, int64_t d) {
            return blocked ? (j / kKeyBlock * depth + d) * kKeyBlock + j % kKeyBlock : j * depth + d;
          };
          Buf<float> k(round_up(nk, kKeyBlock) * depth), qt(depth * ldr), st(nk * ldr), colmax(ldr);
          for (int64_t i = 0; i < round_up(nk, kKeyBlock) * depth; ++i) k[i] = rng.uniform();
          for (int64_t d = 0; d < depth; ++d)
            for (int64_t c = 0; c < nr; ++c) qt[d * ldr + c] = rng.uniform();
          for (int64_t c = 0; c < ldr; ++c) colmax[c] = kNegInf;
          const float* krow[kMaxScoreR];
          // As flash_wide: as many keys per call as the accumulator budget holds for nv vectors.
          const int r_full = static_cast<int>(min64(kMaxScoreR, T::kAccRegs / nv));
          for (int64_t j = 0; j < nk; j += r_full) {
            const int R = static_cast<int>(min64(r_full, nk - j));
            for (int i = 0; i < R; ++i) krow[i] = k.p + kat(j + i, 0);
            ScoreArgs a{krow, qt.p, ldr, depth, st.p + j * ldr, ldr, colmax.p};
            a.kstep = kstep;
            // Every other key count: "V" rows (K's, some longer than the depth) and, row-major,
            // the next call's K rows requested as decode's wide path requests them
            // (ScoreArgs::pf_v, pf_ahead); the sums must not change.
            if (ik % 2 == 1) {
              if (!blocked && nk - (j + R) > 0) {
                a.pf_ahead = R * depth;
                a.pf_rows = static_cast<int>(min64(R, nk - (j + R)));
              }
              a.pf_v = krow[0];
              a.pf_v_stride = depth;
              a.pf_v_floats = depth + (id % 2) * 17;
            }
            score_dispatch<Arch>(R, nv, a);
          }
          ++r.cases;
          for (int64_t c = 0; c < nr; ++c) {
            double mx = -INFINITY;
            for (int64_t j = 0; j < nk; ++j) {
              double want = 0.0, mag = 0.0;
              for (int64_t d = 0; d < depth; ++d) {
                want += static_cast<double>(k[kat(j, d)]) * qt[d * ldr + c];
                mag += std::fabs(static_cast<double>(k[kat(j, d)]) * qt[d * ldr + c]);
              }
              mx = mx > st[j * ldr + c] ? mx : st[j * ldr + c];
              if (!close(st[j * ldr + c], want, mag)) {
                r.fail("score_tile keys=%lld rows=%lld depth=%lld kstep=%lld: S[%lld][%lld] = %g, want %g",
                       (long long)nk, (long long)nr, (long long)depth, (long long)kstep, (long long)j, (long long)c,
                       st[j * ldr + c], want);
                return;
              }
            }
            if (colmax[c] != static_cast<float>(mx)) {
              r.fail("score_tile keys=%lld rows=%lld depth=%lld: column max of row %lld = %g, want %g", (long long)nk,
                     (long long)nr, (long long)depth, (long long)c, colmax[c], mx);
              return;
            }
          }
        }
}

// pvt_block's bits against pv_block's. Both fuse every product with its sum, but on AVX-512 one
// through xsimd::fma (xsimd 8: x·y + z, fused by GCC's contraction) and the other's masked kernel
// through an FMA intrinsic; a sanitizer build's instrumentation stops the contraction, so there
// the two may differ by a rounding of the product per key (1–2 ulps seen) and are compared to
// 4 ulps of 1 per key (the cases' values are O(1)) instead. Every other build compares the bits.
inline bool same_fma_bits(float a, float b, int64_t keys) {
#if defined(ATTEND_SANITIZER_BUILD)
  return std::fabs(static_cast<double>(a) - b) <= 4.0 * std::numeric_limits<float>::epsilon() * (1.0 + keys);
#else
  (void)keys;
  return std::memcmp(&a, &b, sizeof(float)) == 0;
#endif
}
// Whether this is such a build (xsimd::fma's x·y + z not contracted into one FMA).
#if defined(ATTEND_SANITIZER_BUILD)
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

// ---------------------------------------------------------------------------------------------
// pv_block: O[rows][Dv] = α·O + P·V over a key run, both P layouts (wide Sᵀ, narrow S), masked and
// not, V of each element type, with and without V prefetching. In masked runs some keys have P = 0
// in every row and NaN in V: they must not reach any row.
template <class Arch, class E>
void pv_cases(UkernelReport& r) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  const int nv_max = static_cast<int>(min64(kMaxPvNV, T::kAccRegs / T::kPvRows));
  Sizes rows = boundary(T::kPvRows, 1, T::kBlockRows);
  Sizes vecs = boundary(nv_max, 1, 2 * nv_max + 1);
  // GQA groups of four and eight at D 128 on AVX-512 (8 vectors): decode's whole-register passes
  // (pv_tile_vmem, 32 accumulators).
  rows.add(4, 1, T::kBlockRows);
  rows.add(8, 1, T::kBlockRows);
  vecs.add(kMaxPvNV, 1, 2 * nv_max + 1);
  Sizes keys = boundary(T::kBlockKeys, 0, T::kNarrowBlockKeys);
  keys.add(T::kNarrowBlockKeys, 0, T::kNarrowBlockKeys);
  keys.add(T::kNarrowTileKeys, 0, T::kNarrowBlockKeys);  // the row-major and 8-bit tiles
  Lcg rng{2};
  for (int ir = 0; ir < rows.n; ++ir)
    for (int iv = 0; iv < vecs.n; ++iv)
      for (int ik = 0; ik < keys.n; ++ik)
        for (int variant = 0; variant < 4; ++variant) {
          const bool masked = variant & 1, narrow_layout = variant & 2;
          const int64_t nr = rows.v[ir], nvec = vecs.v[iv], nk = keys.v[ik], dv = nvec * W;
          const int64_t ldo = dv, ldr = round_up(nr, W);
          // P: wide layout Sᵀ[key][ldr] (row stride 1), narrow S[row][nk] (key stride 1).
          const int64_t prs = narrow_layout ? nk : 1, pks = narrow_layout ? 1 : ldr;
          Buf<float> o(nr * ldo), want(nr * ldo), alpha(nr), p(ldr * (nk > 0 ? nk : 1));
          Buf<E> v(nk * dv + 1);
          for (int64_t i = 0; i < nr * ldo; ++i) want[i] = o[i] = rng.uniform();
          Buf<float> o0(nr * ldo);
          for (int64_t i = 0; i < nr * ldo; ++i) o0[i] = o[i];
          for (int64_t i = 0; i < nr; ++i) alpha[i] = 0.5f + 0.5f * rng.uniform();
          for (int64_t j = 0; j < nk; ++j) {
            const bool dead = masked && j % 5 == 2;
            for (int64_t i = 0; i < nr; ++i) p[i * prs + j * pks] = dead ? 0.0f : 0.5f + 0.5f * rng.uniform();
            for (int64_t d = 0; d < dv; ++d) v[j * dv + d] = make<E>(dead ? NAN : rng.uniform());
          }
          for (int64_t i = 0; i < nr; ++i)
            for (int64_t d = 0; d < dv; ++d) {
              double acc = static_cast<double>(alpha[i]) * want[i * ldo + d], mag = std::fabs(acc);
              for (int64_t j = 0; j < nk; ++j) {
                const double pj = p[i * prs + j * pks];
                if (pj == 0.0) continue;
                acc += pj * to_float(v[j * dv + d]);
                mag += std::fabs(pj * to_float(v[j * dv + d]));
              }
              want[i * ldo + d] = static_cast<float>(acc);
              (void)mag;
            }
          // The narrow layout is decode's: V prefetched (pf_limit), on 16-register targets O kept in
          // memory (pv_rows_in_memory), which must give the register blocks' bits.
          Buf<float> o_regs(nr * ldo);
          for (int64_t i = 0; i < nr * ldo; ++i) o_regs[i] = o[i];
          // Decode's L2 requests too (PvArgs::l2_*: here this call's own rows, in two segments).
          PvAhead ahead;
          if (narrow_layout) ahead = {{v.p, v.p + nk / 2 * dv}, nk / 2, nk};
          pv_block<Arch, E>(o.p, ldo, alpha.p, p.p, prs, pks, v.p, dv, nr, nvec, nk, masked, narrow_layout ? nk : 0,
                            ahead);
          ++r.cases;
          if (narrow_layout) {
            pv_block<Arch, E>(o_regs.p, ldo, alpha.p, p.p, prs, pks, v.p, dv, nr, nvec, nk, masked, 0);
            for (int64_t i = 0; i < nr * ldo; ++i)
              if (std::memcmp(&o[i], &o_regs[i], sizeof(float)) != 0) {
                r.fail(
                    "pv_block<%s> rows=%lld dv=%lld keys=%lld masked=%d: decode O[%lld] = %.9g, register blocks %.9g",
                    type_name<E>(), (long long)nr, (long long)dv, (long long)nk, masked ? 1 : 0, (long long)i, o[i],
                    o_regs[i]);
                return;
              }
          }
          // On AVX-512 every unmasked kernel (pv_tile, pv_tile_vmem, a bf16 V's pv_tile_bf16_pairs)
          // computes each element as O·alpha rounded, then one fused multiply-add per key in key
          // order: the bits of that sequence in scalar code. (Not in a sanitizer build, whose
          // instrumentation stops the contraction of xsimd::fma's x·y + z: same_fma_bits.)
          if (W == 16 && !masked && !kSanitizerBuild)
            for (int64_t i = 0; i < nr; ++i)
              for (int64_t d = 0; d < dv; ++d) {
                float e = o0[i * ldo + d] * alpha[i];
                for (int64_t j = 0; j < nk; ++j) e = std::fmaf(p[i * prs + j * pks], to_float(v[j * dv + d]), e);
                if (std::memcmp(&o[i * ldo + d], &e, sizeof(float)) != 0) {
                  r.fail(
                      "pv_block<%s> rows=%lld dv=%lld keys=%lld layout=%s: O[%lld][%lld] = %.9g, fused in key order "
                      "%.9g",
                      type_name<E>(), (long long)nr, (long long)dv, (long long)nk, narrow_layout ? "S" : "St",
                      (long long)i, (long long)d, o[i * ldo + d], e);
                  return;
                }
              }
          for (int64_t i = 0; i < nr * ldo; ++i)
            if (!close(o[i], want[i], (1.0 + nk) * value_range<E>())) {
              r.fail("pv_block<%s> rows=%lld dv=%lld keys=%lld masked=%d layout=%s: O[%lld] = %g, want %g",
                     type_name<E>(), (long long)nr, (long long)dv, (long long)nk, masked ? 1 : 0,
                     narrow_layout ? "S" : "St", (long long)i, o[i], want[i]);
              return;
            }
        }
}

// ---------------------------------------------------------------------------------------------
// pvt_block (the wide path's transposed P·V on 16 registers): Oᵀ[value_dim][nv·W] = α ⊙ Oᵀ + Pᵀ-
// weighted V for every row-vector count, value widths around its 12 / nv column blocks (any width:
// V's elements are broadcast), key runs around a wide tile, masked and not. A masked tile has keys
// dead in every row (P = 0, V = NaN: must reach no row) and keys with P = 0 in some rows only and
// finite V (the guarded and plain runs alternate); each element must carry pv_block's bits (the
// row-major register blocks over the same data) and the double-precision value.
template <class Arch>
void pvt_cases(UkernelReport& r) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  Lcg rng{4};
  for (int nv = 1; nv <= kMaxPvtNV; ++nv) {
    const int r_max = kPvtAccRegs / nv;
    Sizes widths = boundary(r_max, 1, 4 * r_max + 1);
    widths.add(64, 1, 256);
    widths.add(80, 1, 256);
    const Sizes keys = boundary(T::kBlockKeys, 0, 2 * T::kBlockKeys + 1);
    for (int iw = 0; iw < widths.n; ++iw)
      for (int ik = 0; ik < keys.n; ++ik)
        for (int masked = 0; masked < 2; ++masked) {
          const int64_t ldr = nv * W, dv = widths.v[iw], nk = keys.v[ik], dvp = round_up(dv, W);
          Buf<float> ot(dv * ldr), o(ldr * dvp), want(ldr * dv), alpha(ldr), pt(ldr * (nk > 0 ? nk : 1)),
              v(nk * dvp + 1);
          for (int64_t i = 0; i < ldr; ++i) alpha[i] = 0.5f + 0.5f * rng.uniform();
          for (int64_t i = 0; i < ldr; ++i)
            for (int64_t c = 0; c < dv; ++c) want[i * dv + c] = ot[c * ldr + i] = o[i * dvp + c] = rng.uniform();
          for (int64_t j = 0; j < nk; ++j) {
            const bool dead = masked && j % 5 == 2, partial = masked && j % 7 == 3;
            for (int64_t i = 0; i < ldr; ++i)
              pt[j * ldr + i] = dead || (partial && i % 3 == 0) ? 0.0f : 0.5f + 0.5f * rng.uniform();
            for (int64_t c = 0; c < dv; ++c) v[j * dvp + c] = dead ? NAN : rng.uniform();
          }
          for (int64_t i = 0; i < ldr; ++i)
            for (int64_t c = 0; c < dv; ++c) {
              double acc = static_cast<double>(alpha[i]) * want[i * dv + c];
              for (int64_t j = 0; j < nk; ++j)
                if (pt[j * ldr + i] != 0.0f) acc += static_cast<double>(pt[j * ldr + i]) * v[j * dvp + c];
              want[i * dv + c] = static_cast<float>(acc);
            }
          pvt_block<Arch>(ot.p, ldr, alpha.p, pt.p, ldr, v.p, dvp, dv, nv, nk, masked);
          // The row-major register blocks on the same data (V rows padded to whole vectors).
          pv_block<Arch, float>(o.p, dvp, alpha.p, pt.p, 1, ldr, v.p, dvp, ldr, dvp / W, nk, masked);
          ++r.cases;
          for (int64_t i = 0; i < ldr; ++i)
            for (int64_t c = 0; c < dv; ++c) {
              const float got = ot[c * ldr + i];
              if (!same_fma_bits(got, o[i * dvp + c], nk) ||
                  !close(got, want[i * dv + c], 1.0 + static_cast<double>(nk))) {
                r.fail(
                    "pvt_block nv=%d dv=%lld keys=%lld masked=%d: Oᵀ[%lld][%lld] = %.9g, register blocks %.9g, "
                    "want %.9g",
                    nv, (long long)dv, (long long)nk, masked, (long long)c, (long long)i, got, o[i * dvp + c],
                    want[i * dv + c]);
                return;
              }
            }
        }
  }
}

// ---------------------------------------------------------------------------------------------
// narrow_scores: S[rows][keys] = Q·Kᵀ for row packs of 1 … kNarrowMaxRows rows and up to W keys of a
// row-major K (keys past `keys` read the zero row), with and without the K prefetch (into L1 and L2).
template <class Arch, class E>
void narrow_cases(UkernelReport& r) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  const Sizes keys = boundary(W, 1, W);
  const Sizes depths = boundary(1, 1, 3);  // in vectors: D = W, 2W, 3W (the narrow path needs D % W == 0)
  Lcg rng{3};
  for (int pack = 1; pack <= T::kNarrowMaxRows; pack *= 2)
    for (int64_t nr : {int64_t{pack / 2 + 1}, int64_t{pack}})  // the fewest and the most rows a pack serves
      for (int ik = 0; ik < keys.n; ++ik)
        for (int id = 0; id < depths.n; ++id) {
          // Rows padded, or adjacent (the prefetches' in-order runs, and the L2 requests, need them).
          const int64_t nk = keys.v[ik], depth = depths.v[id] * W, ldk = (ik & 2) ? depth : depth + 3;
          Buf<float> q(pack * depth), s(pack * W), zeros(depth);
          Buf<E> k(2 * W * ldk);  // this group's keys and the next group's (prefetched)
          for (int64_t i = 0; i < nr * depth; ++i) q[i] = rng.uniform();
          for (int64_t i = 0; i < 2 * W * ldk; ++i) k[i] = make<E>(rng.uniform());
          narrow_scores_dispatch<Arch, E>(pack, k.p, ldk, nk, q.p, depth, reinterpret_cast<const E*>(zeros.p), s.p, W,
                                          nr, (ik & 1) ? k.p + W * ldk : nullptr, W, (ik & 1) ? k.p + W * ldk : nullptr,
                                          W);
          ++r.cases;
          for (int64_t i = 0; i < nr; ++i)
            for (int64_t j = 0; j < nk; ++j) {
              double want = 0.0, mag = 0.0;
              for (int64_t d = 0; d < depth; ++d) {
                want += static_cast<double>(q[i * depth + d]) * to_float(k[j * ldk + d]);
                mag += std::fabs(static_cast<double>(q[i * depth + d]) * to_float(k[j * ldk + d]));
              }
              if (!close(s[i * W + j], want, mag)) {
                r.fail("narrow_scores<%s> pack=%d rows=%lld keys=%lld depth=%lld: S[%lld][%lld] = %g, want %g",
                       type_name<E>(), pack, (long long)nr, (long long)nk, (long long)depth, (long long)i, (long long)j,
                       s[i * W + j], want);
                return;
              }
            }
        }
}

// ---------------------------------------------------------------------------------------------
// blocked_scores: S[rows][blocks·kKeyBlock] against a blocked K for every row pack (one and three
// packs of it), over block counts on both sides of the blocks-per-call group G, with the look-ahead (prefetch) window
// ending at, or past, the scored blocks.
template <class Arch, class E>
void blocked_cases(UkernelReport& r) {
  using T = Tiles<Arch>;
  constexpr int W = T::W;
  Lcg rng{4};
  for (int pack = 1; pack <= T::kNarrowMaxRows; pack *= 2) {
    const int64_t G = blocked_group<Arch>(pack);
    const Sizes blocks = boundary(G, 1, 4 * G + 1);
    // One pack, and three (16 registers take up to four packs of rows, block by block).
    for (int packs : {1, 3})
      for (int ib = 0; ib < blocks.n; ++ib)
        for (int64_t extra : {int64_t{0}, G, 2 * G + 1})
          for (int64_t depth : {int64_t{W}, int64_t{2 * W}, int64_t{8 * W}}) {
            const int64_t nb = blocks.v[ib], ahead = nb + extra, lds = round_up(nb * kKeyBlock, 16);
            const int64_t rows = int64_t{pack} * packs;
            Buf<float> q(rows * depth), s(rows * lds);
            Buf<E> k(ahead * kKeyBlock * depth);
            for (int64_t i = 0; i < rows * depth; ++i) q[i] = rng.uniform();
            for (int64_t i = 0; i < ahead * kKeyBlock * depth; ++i) k[i] = make<E>(rng.uniform());
            // Blocks are addressed one by one (a paged cache scatters them): block b is stored at
            // slot `where(b)`, in reverse order, so a kernel that assumed consecutive blocks reads
            // the wrong keys.
            const auto where = [&](int64_t b) { return ahead - 1 - b; };
            std::vector<const E*> blk(static_cast<size_t>(ahead));
            for (int64_t b = 0; b < ahead; ++b) blk[static_cast<size_t>(b)] = k.p + where(b) * kKeyBlock * depth;
            // The L2 requests (FlashWork::l2_ahead_bytes) on some cases: 1 or 2 blocks on, when known.
            const int64_t l2_blocks = extra == 2 * G + 1 ? 1 + ib % 2 : 0;
            blocked_scores_dispatch<Arch, E>(pack, blk.data(), nb, ahead, depth, q.p, s.p, lds, packs, l2_blocks);
            ++r.cases;
            // Whether `other` holds s's scores bit for bit; else reports the first that differs.
            const auto same_bits = [&](Buf<float>& other, const char* what, int how) {
              for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < nb * kKeyBlock; ++j)
                  if (std::memcmp(&s[i * lds + j], &other[i * lds + j], sizeof(float)) != 0) {
                    r.fail(
                        "blocked_scores<%s> pack=%d packs=%d blocks=%lld depth=%lld: S[%lld][%lld] = %.9g, %.9g %s %d",
                        type_name<E>(), pack, packs, (long long)nb, (long long)depth, (long long)i, (long long)j,
                        s[i * lds + j], other[i * lds + j], what, how);
                    return false;
                  }
              return true;
            };
            // The blocks one at a time in address order (FlashWork::hardware_stream: no requests;
            // FlashWork::one_block_scores: with them, page starts or whole lines): the same bits.
            for (int how = 0; how < 3; ++how) {
              Buf<float> so(rows * lds);
              blocked_scores_dispatch<Arch, E>(pack, blk.data(), nb, ahead, depth, q.p, so.p, lds, packs,
                                               how ? l2_blocks : 0, how > 0, how == 2, /*in_order*/ true);
              if (!same_bits(so, "in order, requests", how)) return;
            }
            // A 16-bit K scores as its f32 widening does, bit for bit (the same depth steps per
            // iteration; bf16 on AVX-512 through blocked_scores' pairs kernel).
            if constexpr (std::is_same_v<E, Bf16> || std::is_same_v<E, F16>) {
              Buf<float> kf(ahead * kKeyBlock * depth), sf(rows * lds);
              for (int64_t i = 0; i < ahead * kKeyBlock * depth; ++i) kf[i] = to_float(k[i]);
              std::vector<const float*> blkf(static_cast<size_t>(ahead));
              for (int64_t b = 0; b < ahead; ++b) blkf[static_cast<size_t>(b)] = kf.p + where(b) * kKeyBlock * depth;
              blocked_scores_dispatch<Arch, float>(pack, blkf.data(), nb, ahead, depth, q.p, sf.p, lds, packs);
              if (!same_bits(sf, "over the f32 widening, packs", packs)) return;
            }
            for (int64_t i = 0; i < rows; ++i)
              for (int64_t j = 0; j < nb * kKeyBlock; ++j) {
                double want = 0.0, mag = 0.0;
                for (int64_t d = 0; d < depth; ++d) {
                  const double kv =
                      to_float(k[where(j / kKeyBlock) * kKeyBlock * depth + d * kKeyBlock + j % kKeyBlock]);
                  want += static_cast<double>(q[i * depth + d]) * kv;
                  mag += std::fabs(static_cast<double>(q[i * depth + d]) * kv);
                }
                if (!close(s[i * lds + j], want, mag)) {
                  r.fail(
                      "blocked_scores<%s> pack=%d packs=%d blocks=%lld ahead=%lld depth=%lld: S[%lld][%lld] = %g, "
                      "want %g",
                      type_name<E>(), pack, packs, (long long)nb, (long long)ahead, (long long)depth, (long long)i,
                      (long long)j, s[i * lds + j], want);
                  return;
                }
              }
          }
  }
}

// ---------------------------------------------------------------------------------------------
// exp2_nonpositive over its whole input range: every 1/4096 from −200 to 0 (and the specials).
// Results of normal size are within 2^−22 relative (two f32 ulps: the polynomial's 1.1e-7 plus the
// rounding of the reduction and of the Horner steps); below 2^−126 exactly 0 (masked scores must
// give exactly 0, and no lane may compute a subnormal: Intel cores take a microcode assist for each
// such instruction).
template <class Arch>
void exp2_cases(UkernelReport& r) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  alignas(64) float in[W], out[W];
  constexpr int64_t kSteps = 200 * 4096;
  for (int64_t i = 0; i <= kSteps; i += W) {
    for (int l = 0; l < W; ++l) in[l] = -static_cast<float>(i + l) / 4096.0f;
    exp2_nonpositive<Arch>(B::load_aligned(in)).store_aligned(out);
    for (int l = 0; l < W; ++l) {
      const double want = std::exp2(static_cast<double>(in[l]));
      const bool ok =
          want >= std::ldexp(1.0, -126) ? std::fabs(out[l] - want) <= std::ldexp(want, -22) : out[l] == 0.0f;
      if (!ok) {
        r.fail("exp2_nonpositive(%.9g) = %.9g, want %.9g", in[l], out[l], want);
        return;
      }
    }
  }
  for (int l = 0; l < W; ++l) in[l] = l % 3 == 0 ? -INFINITY : l % 3 == 1 ? NAN : -0.0f;
  exp2_nonpositive<Arch>(B::load_aligned(in)).store_aligned(out);
  for (int l = 0; l < W; ++l) {
    const bool ok = l % 3 == 0 ? out[l] == 0.0f : l % 3 == 1 ? std::isnan(out[l]) : out[l] == 1.0f;
    if (!ok) {
      r.fail("exp2_nonpositive(%g) = %g", in[l], out[l]);
      return;
    }
  }
  r.cases += kSteps / W + 1;
}

// capped_tanh (softcap's cap·tanh(x)) over every 61st float in [2^-24, 16], both signs, for caps
// from 1e-3 to 3e5: relative error ≤ 4e-7 (the README's bound); and the specials: ±0 keep their
// sign, ±inf saturate at ±cap, NaN stays NaN.
template <class Arch>
void capped_tanh_cases(UkernelReport& r) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  alignas(64) float in[W], out[W];
  uint32_t lo, hi;
  const float a = std::ldexp(1.0f, -24), b = 16.0f;
  std::memcpy(&lo, &a, 4);
  std::memcpy(&hi, &b, 4);
  const float caps[] = {1.0f, 50.0f, 30.0f, 7.0f, 0.3f, 1e-3f, 3e5f};
  for (const float cap : caps)
    for (uint32_t bits = lo; bits <= hi; bits += 61 * W) {
      for (int l = 0; l < W; ++l) {
        const uint32_t x = bits + 61u * static_cast<uint32_t>(l);
        std::memcpy(&in[l], &x, 4);
        if (l % 2) in[l] = -in[l];
      }
      capped_tanh<Arch>(B::load_aligned(in), cap).store_aligned(out);
      ++r.cases;
      for (int l = 0; l < W; ++l) {
        const double want = static_cast<double>(cap) * std::tanh(static_cast<double>(in[l]));
        if (!(std::fabs(out[l] - want) <= 4e-7 * std::fabs(want))) {
          r.fail("capped_tanh(%.9g, cap %g) = %.9g, want %.9g", in[l], cap, out[l], want);
          return;
        }
      }
    }
  for (int l = 0; l < W; ++l)
    in[l] = l % 5 == 0 ? INFINITY : l % 5 == 1 ? -INFINITY : l % 5 == 2 ? NAN : l % 5 == 3 ? 0.0f : -0.0f;
  capped_tanh<Arch>(B::load_aligned(in), 50.0f).store_aligned(out);
  for (int l = 0; l < W; ++l) {
    const bool ok = l % 5 == 0   ? std::fabs(out[l] - 50.0) <= 50.0 * 4e-7
                    : l % 5 == 1 ? std::fabs(out[l] + 50.0) <= 50.0 * 4e-7
                    : l % 5 == 2 ? std::isnan(out[l])
                                 : out[l] == 0.0f && std::signbit(out[l]) == std::signbit(in[l]);
    if (!ok) {
      r.fail("capped_tanh(%g, cap 50) = %g", in[l], out[l]);
      return;
    }
  }
}

template <class Arch>
void run_all(UkernelReport& r) {
  score_cases<Arch>(r);
  pv_cases<Arch, float>(r);
  pv_cases<Arch, Bf16>(r);
  pv_cases<Arch, F16>(r);
  pv_cases<Arch, I8>(r);
  pvt_cases<Arch>(r);
  narrow_cases<Arch, float>(r);
  narrow_cases<Arch, Bf16>(r);
  narrow_cases<Arch, F16>(r);
  blocked_cases<Arch, float>(r);
  blocked_cases<Arch, Bf16>(r);
  blocked_cases<Arch, F16>(r);
  blocked_cases<Arch, I8>(r);
  exp2_cases<Arch>(r);
  capped_tanh_cases<Arch>(r);
}

}  // namespace tester
}  // namespace
}  // namespace attend::kernels
