// Microkernel: one tile of transposed f32 scores, Sᵀ[R keys][NV·W query rows] = K·Qᵀ, for the
// wide (prefill) path. R ≤ 6 keys (their elements broadcast), NV ≤ 4 vectors of query rows;
// R·NV accumulators stay in registers (24 on AVX-512: 6 keys × 4 vectors).
#pragma once

#include <array>
#include <utility>

#include "../simd/arch.hpp"
#include "../simd/tanh.hpp"

namespace attend::kernels {
namespace {
// Sᵀ[R keys][NV·W rows] = K[R keys]·Qᵀ panel. `krow[r]` points at key r's D values, `kstep` floats
// apart (1: a row; kKeyBlock: a blocked K, read in place), broadcast one element at a time; the
// panel holds Q transposed, `ldq` floats per d.
struct ScoreArgs {
  const float* const* krow;
  const float* qt;
  int64_t ldq;
  int64_t depth;
  float* out;  // Sᵀ rows, `ldo` floats apart
  int64_t ldo;
  float* colmax = nullptr;  // optional: running max over keys of each query row (column of Sᵀ)
  // Optional score terms applied before the store (and the column max), in this order: softcap > 0:
  // the products arrive divided by softcap (the caller scales Q by scale / softcap) and become
  // s ← softcap·tanh(products) (simd/tanh.hpp); slope non-null: ALiBi,
  // s += slope[row]·(key0 + r − pos[row]) for key r of the call (key0: the first key's index).
  float softcap = 0.0f;
  const float* slope = nullptr;
  const float* pos = nullptr;
  float key0 = 0.0f;
  int64_t kstep = 1;
  // Optional software prefetch (row-major K streamed from memory, kstep 1): while key r's row is
  // read, the line pf_ahead floats further (the same depth of key r + R, the next call's) is
  // requested as the row's own line is begun (every 16 depth steps), for rows r < pf_rows. The
  // requests follow the reading, so they spread over the call's FMAs instead of stalling the core
  // in a burst. 0: none.
  int64_t pf_ahead = 0;
  int pf_rows = 0;
  // Optional: the V rows of this call's keys (pf_v + r·pf_v_stride, pf_v_floats floats each),
  // requested along with K's (the P·V phase that follows the tile's scores then finds them in
  // cache). Null: none.
  const float* pf_v = nullptr;
  int64_t pf_v_stride = 0, pf_v_floats = 0;
};

template <class Arch, int R, int NV>
void score_tile(const ScoreArgs& a) {
  using B = vfloat<Arch>;
  constexpr int W = B::size;
  B acc[R][NV];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = B(0.0f);
  const float* kr[R];
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r) kr[r] = a.krow[r];
  const float* qt = a.qt;
  const int64_t kstep = a.kstep;
  const int64_t pf_ahead = a.pf_ahead;
  const int pf_rows = pf_ahead ? a.pf_rows : 0;
  const bool pf = pf_rows > 0 || a.pf_v;
  for (int64_t d = 0, kd = 0; d < a.depth; ++d, kd += kstep, qt += a.ldq) {
    if (pf && (d & 15) == 0) {
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r)
        if (r < pf_rows) __builtin_prefetch(kr[r] + kd + pf_ahead, 0, 3);
      if (a.pf_v && d < a.pf_v_floats) {
        ATTEND_UNROLL
        for (int r = 0; r < R; ++r) __builtin_prefetch(a.pf_v + r * a.pf_v_stride + d, 0, 3);
      }
    }
    B q[NV];
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) q[n] = B::load_aligned(qt + n * W);
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r) {
      const B kb(kr[r][kd]);
      ATTEND_UNROLL
      for (int n = 0; n < NV; ++n) acc[r][n] = xsimd::fma(kb, q[n], acc[r][n]);
    }
  }
  if (a.softcap > 0.0f) {
    ATTEND_UNROLL
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < NV; ++n) acc[r][n] = capped_tanh<Arch>(acc[r][n], a.softcap);
  }
  if (a.slope) {
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) {
      const B slope = B::load_aligned(a.slope + n * W), pos = B::load_aligned(a.pos + n * W);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) acc[r][n] = xsimd::fma(slope, B(a.key0 + static_cast<float>(r)) - pos, acc[r][n]);
    }
  }
  if (a.pf_v)  // (value rows longer than the depth)
    for (int64_t e = round_up(a.depth, 16); e < a.pf_v_floats; e += 16)
      for (int r = 0; r < R; ++r) __builtin_prefetch(a.pf_v + r * a.pf_v_stride + e, 0, 3);
  ATTEND_UNROLL
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n].store_aligned(a.out + r * a.ldo + n * W);
  if (a.colmax) {
    ATTEND_UNROLL
    for (int n = 0; n < NV; ++n) {
      B mx = B::load_aligned(a.colmax + n * W);
      ATTEND_UNROLL
      for (int r = 0; r < R; ++r) mx = xsimd::max(mx, acc[r][n]);
      mx.store_aligned(a.colmax + n * W);
    }
  }
}

// Function-pointer table so a runtime (keys, row vectors) remainder picks the right specialisation.
constexpr int kMaxScoreR = 6, kMaxScoreNV = 4;

template <class Arch, int... I>
constexpr auto make_score_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const ScoreArgs&), sizeof...(I)>{
      &score_tile<Arch, I / kMaxScoreNV + 1, I % kMaxScoreNV + 1>...};
}

template <class Arch>
inline void score_dispatch(int r, int nv, const ScoreArgs& a) {
  static constexpr auto table = make_score_table<Arch>(std::make_integer_sequence<int, kMaxScoreR * kMaxScoreNV>{});
  table[(r - 1) * kMaxScoreNV + (nv - 1)](a);
}

}  // namespace
}  // namespace attend::kernels
