// AMX microkernels of the bf16-math wide path (FpMath::bf16 on a CPU with AMX-BF16: Sapphire
// Rapids and later Xeons). `tdpbf16ps` multiplies a 16 × 32 bf16 tile A by a 32 × 16 tile B held
// as 16 rows of bf16 pairs (B[k/2][n] = (B[k][n], B[k + 1][n])) into a 16 × 16 f32 tile: the same
// pairs along the reduced dimension as vdpbf16ps, so the bf16-math panels (Qᵀ pairs, K rows, P
// pairs) are its operands as they are. One instruction is 8,192 multiply-adds (one core here: 3.7
// TFLOP/s against the FMAs' 0.23). Compiled only into the avx512_bf16 table (-mamx-tile -mamx-bf16).
#pragma once

#if defined(__AMX_TILE__) && defined(__AMX_BF16__)

#include <immintrin.h>

#include <cstdint>

namespace attend::kernels {
namespace {

// Palette 1, every tile 16 rows of 64 bytes. Loaded by each call of the AMX driver (the thread may
// have run oneDNN's AMX kernels, which load their own, in between) and released at its end.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void amx_configure() {
  AmxTileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
}

// Operands of amx_block: C[m][n] (+)= Σ over chunks of A[m][32] · B[32][n], in 16 × 16 tiles.
// MG tiles of A are a_group bytes apart (chunk ch of group 0 at a(ch), rows lda bytes apart); NG
// tiles of B b_group bytes apart (chunk ch at b + ch·b_chunk, rows ldb apart); C tile (i, j) at c +
// i·c_mgroup + j·c_ngroup, rows ldc apart.
struct AmxOperands {
  int64_t lda, a_group;
  const char* b;
  int64_t ldb, b_group, b_chunk;
  int64_t chunks;
  char* c;
  int64_t ldc, c_mgroup, c_ngroup;
  bool load_c;  // accumulate onto C (else C = the product)
};

// Tiles 0–3 hold C, 4–5 A, 6–7 B: an MG × NG (≤ 2 × 2) block of C per pass over the chunks.
template <int MG, int NG, class AChunk>
inline void amx_block(const AmxOperands& o, AChunk a) {
  static_assert(MG >= 1 && MG <= 2 && NG >= 1 && NG <= 2, "at most 2 × 2 C tiles");
  char* c = o.c;
  if (o.load_c) {
    _tile_loadd(0, c, o.ldc);
    if constexpr (NG > 1) _tile_loadd(1, c + o.c_ngroup, o.ldc);
    if constexpr (MG > 1) _tile_loadd(2, c + o.c_mgroup, o.ldc);
    if constexpr (MG > 1 && NG > 1) _tile_loadd(3, c + o.c_mgroup + o.c_ngroup, o.ldc);
  } else {
    _tile_zero(0);
    if constexpr (NG > 1) _tile_zero(1);
    if constexpr (MG > 1) _tile_zero(2);
    if constexpr (MG > 1 && NG > 1) _tile_zero(3);
  }
  for (int64_t ch = 0; ch < o.chunks; ++ch) {
    const char* at = a(ch);
    const char* bt = o.b + ch * o.b_chunk;
    _tile_loadd(4, at, o.lda);
    if constexpr (MG > 1) _tile_loadd(5, at + o.a_group, o.lda);
    _tile_loadd(6, bt, o.ldb);
    if constexpr (NG > 1) _tile_loadd(7, bt + o.b_group, o.ldb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NG > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MG > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MG > 1 && NG > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, o.ldc);
  if constexpr (NG > 1) _tile_stored(1, c + o.c_ngroup, o.ldc);
  if constexpr (MG > 1) _tile_stored(2, c + o.c_mgroup, o.ldc);
  if constexpr (MG > 1 && NG > 1) _tile_stored(3, c + o.c_mgroup + o.c_ngroup, o.ldc);
}

// C over m_tiles × n_tiles tiles, in 2 × 2 blocks (the edges 2 × 1, 1 × 2, 1 × 1). a(i, ch): tile
// row i's chunk ch.
template <class AChunk>
inline void amx_product(AmxOperands o, int64_t m_tiles, int64_t n_tiles, AChunk a) {
  const AmxOperands base = o;
  for (int64_t i = 0; i < m_tiles; i += 2) {
    const auto ai = [&a, i](int64_t ch) { return a(i, ch); };
    for (int64_t j = 0; j < n_tiles; j += 2) {
      o.b = base.b + j * base.b_group;
      o.c = base.c + i * base.c_mgroup + j * base.c_ngroup;
      const bool m2 = i + 1 < m_tiles, n2 = j + 1 < n_tiles;
      if (m2 && n2)
        amx_block<2, 2>(o, ai);
      else if (m2)
        amx_block<2, 1>(o, ai);
      else if (n2)
        amx_block<1, 2>(o, ai);
      else
        amx_block<1, 1>(o, ai);
    }
  }
}

// The 16 × 16 matrix of 32-bit words r[0..15] (rows) transposed in place: r[i] becomes column i.
inline void transpose_words_16x16(__m512i* r) {
  __m512 x[16], t[16];
  for (int i = 0; i < 16; ++i) x[i] = _mm512_castsi512_ps(r[i]);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    x[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    x[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    x[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    x[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // x[4q + k] holds, in each 128-bit lane L, column 4L + k of rows 4q..4q+3.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_castps_si512(_mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
    r[8 + i] = _mm512_castps_si512(_mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
    r[4 + i] = _mm512_castps_si512(_mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88));
    r[12 + i] = _mm512_castps_si512(_mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd));
  }
}

}  // namespace
}  // namespace attend::kernels

#endif  // __AMX_TILE__ && __AMX_BF16__
