// The narrow (decode) driver for an 8-bit cache on CPUs with AVX512_VNNI (the avx512_bf16 tier),
// for two or more rows per kv head (a GQA group, a few positions): Q·Kᵀ and P·V as integer
// dot products (vpdpwssd, 16-bit × 16-bit pairs summed into 32 bits) on the stored codes, instead
// of widening every code to f32 for an FMA (vpmovsxbd + vcvtdq2ps + vfmadd per 16 codes). Each
// instruction multiplies 32 pairs, and a K or V code is widened once, to 16 bits, for every row of
// the group.
//
// The arithmetic: row r's pre-scaled query is rounded to 16 bits against its largest magnitude
// (q ≈ qs[r]·Q, |Q| ≤ 32767, error ≤ qs[r]/2 per element: 2⁻¹⁶ of the row's largest), so a score is
// qs[r]·ks[j]·Σ Q·K with an exact integer sum. A tile's weights times V's scales, P'[r][j] =
// P[r][j]·vs[j], are rounded the same way against their largest in the tile, and O += ps[r]·Σ P'·V,
// the sum exact again; the online softmax (maxima, exponentials, sums, rescaling) stays f32. The
// added error is 2⁻¹⁶ of the largest term where the codes themselves carry 2⁻⁸.
//
// Sums fit in 32 bits: |Q·K| ≤ 32767·127·D < 2³¹ for D ≤ 512, |P'·V| ≤ 32767·127·256 per tile of
// kNarrowTileKeys keys. The rest falls back to the f32 driver (flash_narrow): one row except under
// the AMX Xeons' rules (i8_integer_fits), head_dim > 512 or not
// a multiple of 4, value_dim not a multiple of 32, a non-finite query (a rounded query would lose
// it), and, per tile, non-finite weights (a NaN V scale a visible key carries).
#pragma once

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)

#include <limits>

#include "flash_narrow.hpp"

namespace attend::kernels {
namespace {

constexpr float kI16Max = 32767.0f;

// acc += Σ pairs a·b (vpdpwssd). Inline assembly: GCC 12 keeps the intrinsic's tied accumulator
// in a fresh register per call and copies it back (a vmovdqa per vpdpwssd, and spills with 16
// accumulators): the score loop ran at half its instruction rate (perf annotate, L2-resident).
[[gnu::always_inline]] inline void dpwssd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// x[0, n) rounded to 16 bits against their largest magnitude: codes c[i] = nearbyint(x[i]·32767 /
// max) (n a multiple of 16, x 64-byte aligned); returns the scale max / 32767 (0 for all zeros),
// or a NaN when an element is not finite (codes then unset).
inline float round_to_i16(const float* x, int64_t n, int16_t* c) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_load_ps(x + i));
    bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ);
    amax = _mm512_max_ps(amax, a);
  }
  if (bad) return std::numeric_limits<float>::quiet_NaN();
  const float m = _mm512_reduce_max_ps(amax);
  if (m == 0.0f) {
    std::memset(c, 0, sizeof(int16_t) * static_cast<size_t>(n));
    return 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(kI16Max / m);
  for (int64_t i = 0; i < n; i += 16) {
    // |x·32767/max| ≤ 32767 plus an ulp: rounds (to nearest even) to at most 32767.
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(x + i), inv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i), _mm512_cvtsepi32_epi16(q));
  }
  return m / kI16Max;
}

// The score kernel's operand for depth quad c of a query row of codes Q: lanes 0–7 hold the pair
// (Q[4c], Q[4c + 2]), lanes 8–15 (Q[4c + 1], Q[4c + 3]) — the pairs the K quad's interleave puts
// in front of each key (i8_scores).
inline void query_quads(const int16_t* q, int64_t depth, int32_t* out) {
  auto pair = [](int16_t lo, int16_t hi) {
    return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                                (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
  };
  for (int64_t c = 0; c < depth / 4; ++c) {
    const __m512i v = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(pair(q[4 * c], q[4 * c + 2])),
                                              _mm512_set1_epi32(pair(q[4 * c + 1], q[4 * c + 3])));
    _mm512_store_si512(out + c * 16, v);
  }
}

// S[NR rows][G·kKeyBlock keys] = qs[r]·ks[j]·Σ_d Q[r][d]·K[j][d] over G blocks of a blocked i8 K
// ([D][kKeyBlock] codes each; ks[g]: the block's 16 K scales), keys in lanes. Per depth quad (the
// block's 64 bytes of depths 4c..4c+3): the rows d, d + 2 and d + 1, d + 3 interleaved bytewise
// (vpunpck[lh]bw of two 32-byte halves) and sign-extended to 16 bits give, per key, the pairs
// (d, d + 2) in lanes 0–7 and (d + 1, d + 3) in lanes 8–15, keys 0–7 from the low unpack and
// 8–15 from the high one; one vpdpwssd per row and half against query_quads, and the two halves
// added at the end. Each row's quad is loaded once per depth quad and kept in a register for the
// G blocks: as a memory operand of every vpdpwssd (2·G loads of 64 bytes per row and quad) the
// loads, not the dot products, set the pace — 21 against 16.5 cycles per 16 vpdpwssd in a loop of
// this kernel's shape on a Zen 4, and D2's shape from L3 0.29–0.33 → 0.21 ms on 2 threads. A zero
// sum stays 0 whatever the scale (as the f32 path: a token stored with a non-finite value has zero
// codes and a NaN scale). pf: null or the G blocks the next call reads, a line per block and depth
// quad; l2: null or G blocks further ahead, requested the same way into L2 (prefetcht1,
// FlashWork::l2_ahead_bytes; l2_pages: the lines that start a 4 KiB page only, FlashWork::l2_pages).
template <int NR, int G>
[[gnu::noinline]] void i8_scores(const I8* const* blk, int64_t depth, const int32_t* qv, const float* qs,
                                 const float* const* ks, float* s, int64_t lds, const I8* const* pf,
                                 const I8* const* l2, bool l2_pages) {
  __m512i lo[G][NR], hi[G][NR];
  ATTEND_UNROLL
  for (int g = 0; g < G; ++g)
    for (int r = 0; r < NR; ++r) lo[g][r] = hi[g][r] = _mm512_setzero_si512();
  const int64_t quads = depth / 4;
  for (int64_t c = 0; c < quads; ++c) {
    if (pf)  // line c of each of the next G blocks, as this call reads its own (blocked_scores)
      for (int g = 0; g < G; ++g) __builtin_prefetch(reinterpret_cast<const char*>(pf[g]) + c * 64, 0, 3);
    if (l2)  // line c of each of the G blocks: whole blocks by the last quad
      for (int g = 0; g < G; ++g) {
        const char* line = reinterpret_cast<const char*>(l2[g]) + c * 64;
        if (!l2_pages || starts_page(line)) __builtin_prefetch(line, 0, 2);
      }
    __m512i qr[NR];  // the rows' quads, in registers for the G blocks (see above)
    ATTEND_UNROLL
    for (int r = 0; r < NR; ++r) qr[r] = _mm512_load_si512(qv + (r * quads + c) * 16);
    ATTEND_UNROLL
    for (int g = 0; g < G; ++g) {
      const char* at = reinterpret_cast<const char*>(blk[g]) + c * 64;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32));
      const __m512i kl = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(a, b));
      const __m512i kh = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(a, b));
      ATTEND_UNROLL
      for (int r = 0; r < NR; ++r) {
        dpwssd(lo[g][r], kl, qr[r]);
        dpwssd(hi[g][r], kh, qr[r]);
      }
    }
  }
  ATTEND_UNROLL
  for (int g = 0; g < G; ++g) {
    const __m512 k = _mm512_loadu_ps(ks[g]);
    ATTEND_UNROLL
    for (int r = 0; r < NR; ++r) {
      // Keys 0–7 are lanes 0–7 + 8–15 of lo, keys 8–15 the same of hi.
      const __m512i sum = _mm512_add_epi32(_mm512_shuffle_i32x4(lo[g][r], hi[g][r], 0x44),
                                           _mm512_shuffle_i32x4(lo[g][r], hi[g][r], 0xee));
      const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(qs[r]));
      const __mmask16 live = _mm512_cmp_ps_mask(f, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      _mm512_storeu_ps(s + r * lds + g * kKeyBlock, _mm512_mask_mul_ps(f, live, f, k));
    }
  }
}

// Blocks per call for NR rows (1, 2, 4 or 8): 16 accumulators (one row: 8).
constexpr int i8_group(int nr) { return nr >= 8 ? 1 : nr == 4 ? 2 : 4; }

// How far ahead of the blocks being scored K is requested, and V ahead of the rows being summed,
// in bytes. Zen 5, two threads, LLC flushed, alternated in one process: D2's shape 0.264/0.270 →
// 0.248/0.250 ms with K 8 KB ahead instead of the next group (4 KB) and V 8 KB instead of
// kVPrefetchBytes, D3's 0.936/0.952 → 0.884/0.880 ms; 16 KB no better.
constexpr int64_t kI8KeyAheadBytes = 8192, kI8ValueAheadBytes = 8192;
/// The most blocks i8_scores_run looks ahead (into L1, and into L2).
constexpr int64_t kI8MaxAheadBlocks = 16;
static_assert(kMaxL2AheadBlocks <= kI8MaxAheadBlocks, "l2_key_blocks reaches past the blocks a tile knows");

// Scores a tile's `blocks` blocks (G at a time, then one at a time) for `packs` packs of NR rows
// (pack p's quads at qv + p·NR·D·4, its scores at s + p·NR·lds); blk[b] and ks[b] for b < known.
// The first pack requests the blocks kI8KeyAheadBytes on (at least the next group) as it goes, and,
// with l2_blocks > 0 (l2_key_blocks), the blocks that far on (at least a group) into L2.
// one_block (FlashWork::one_block_scores): every block on its own, in address order (one K stream;
// the integer sums, and so the scores, are the same).
template <int NR>
void i8_scores_run(const I8* const* blk, const float* const* ks, int64_t blocks, int64_t known, int64_t depth,
                   const int32_t* qv, const float* qs, float* s, int64_t lds, int packs, int64_t l2_blocks,
                   bool l2_pages, bool one_block) {
  constexpr int G = i8_group(NR);
  const int64_t ahead = min64(kI8MaxAheadBlocks, max64(G, kI8KeyAheadBytes / (kKeyBlock * depth)));
  const int64_t l2 = l2_blocks > 0 ? max64(G, l2_blocks) : 0;
  auto at = [&](int64_t b, int64_t n, int64_t by, int p) {
    return p == 0 && by > 0 && b + by + n <= known ? blk + b + by : nullptr;
  };
  int64_t b = 0;
  for (; !one_block && b + G <= blocks; b += G)
    for (int p = 0; p < packs; ++p)
      i8_scores<NR, G>(blk + b, depth, qv + p * NR * depth * 4, qs + p * NR, ks + b, s + p * NR * lds + b * kKeyBlock,
                       lds, at(b, G, ahead, p), at(b, G, l2, p), l2_pages);
  for (; b < blocks; ++b)
    for (int p = 0; p < packs; ++p)
      i8_scores<NR, 1>(blk + b, depth, qv + p * NR * depth * 4, qs + p * NR, ks + b, s + p * NR * lds + b * kKeyBlock,
                       lds, at(b, 1, ahead, p), at(b, 1, l2, p), l2_pages);
}

inline void i8_scores_dispatch(int row_pack, const I8* const* blk, const float* const* ks, int64_t blocks,
                               int64_t known, int64_t depth, const int32_t* qv, const float* qs, float* s, int64_t lds,
                               int packs, int64_t l2_blocks, bool l2_pages, bool one_block = false) {
  switch (row_pack) {
    case 1:
      return i8_scores_run<1>(blk, ks, blocks, known, depth, qv, qs, s, lds, packs, l2_blocks, l2_pages, one_block);
    case 2:
      return i8_scores_run<2>(blk, ks, blocks, known, depth, qv, qs, s, lds, packs, l2_blocks, l2_pages, one_block);
    case 4:
      return i8_scores_run<4>(blk, ks, blocks, known, depth, qv, qs, s, lds, packs, l2_blocks, l2_pages, one_block);
    default:
      return i8_scores_run<8>(blk, ks, blocks, known, depth, qv, qs, s, lds, packs, l2_blocks, l2_pages, one_block);
  }
}

// acc[NR][2·CV] (i32, in memory: row r's chunk c at acc + r·ldacc + 32c) += Σ over key pairs of P'·V for CV chunks of
// 32 value columns: V rows j and j + 1 (32 codes each per chunk) interleaved bytewise and sign-extended give the pairs
// (V[j][d], V[j+1][d]) for d in 0–7, 16–23 (low unpack) and 8–15, 24–31 (high), against the broadcast weight pair
// (P'[r][j], P'[r][j + 1]). acc[r][2c] holds columns {0–7, 16–23} of chunk c, acc[r][2c + 1] {8–15, 24–31}
// (i8_pv_finish puts them in order). pf_keys > 0: rows j + pf_keys (below pf_limit) are requested whole, pf_bytes each;
// and into L2 (prefetcht1) the `ahead` rows (row j of ahead.v[0] for j < ahead.split, else row j − split of
// ahead.v[1], for j < ahead.count), whole.
template <int NR, int CV>
[[gnu::noinline]] void i8_pv(const int8_t* v, int64_t ldv, const int16_t* w, int64_t ldw, int64_t pairs, int32_t* acc,
                             int64_t ldacc, int64_t pf_keys, int64_t pf_limit, int64_t pf_bytes, const PvAhead& ahead) {
  const int8_t* a0 = static_cast<const int8_t*>(ahead.v[0]);
  const int8_t* a1 = static_cast<const int8_t*>(ahead.v[1]);
  const int64_t a_split = ahead.split, a_count = pf_keys > 0 && a0 ? ahead.count : 0;
  const bool a_pages = ahead.pages;
  // Rows of 128 bytes on line boundaries (D 128): two requests at fixed offsets (RowRequests).
  // The rule is RowRequests', kept in these locals: through a RowRequests object this kernel (32
  // accumulators, already spilling) kept more on the stack (objdump of i8_pv<4, 4>: 156 stack
  // references against 104) and the 8-bit cache's D2/D3 lost 2–4 points of a read (session 35).
  const bool fixed = pf_bytes == 128 && rows_on_lines<int8_t>(v, ldv) && (!a0 || rows_on_lines<int8_t>(a0, ldv)) &&
                     (!a1 || rows_on_lines<int8_t>(a1, ldv));
  auto request = [&](auto hint, const int8_t* row) {
    constexpr int H = decltype(hint)::value;
    if (fixed) return request_whole_lines<H, 128>(row);
    request_lines<H>(row, pf_bytes);
  };
  __m512i a[NR][2 * CV];
  ATTEND_UNROLL
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < 2 * CV; ++i) a[r][i] = _mm512_load_si512(acc + r * ldacc + i * 16);
  for (int64_t p = 0; p < pairs; ++p, v += 2 * ldv, w += 2) {
    if (pf_keys > 0)
      for (int64_t k = 0; k < 2 && 2 * p + k + pf_keys < pf_limit; ++k)
        request(std::integral_constant<int, 3>{}, v + (pf_keys + k) * ldv);
    for (int64_t k = 2 * p; k < 2 * p + 2 && k < a_count; ++k) {
      const int8_t* row = k < a_split ? a0 + k * ldv : a1 + (k - a_split) * ldv;
      if (a_pages)
        request_row_pages<2>(row, ldv);
      else
        request(std::integral_constant<int, 2>{}, row);
    }
    __m512i pw[NR];
    ATTEND_UNROLL
    for (int r = 0; r < NR; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + r * ldw, sizeof pair);
      pw[r] = _mm512_set1_epi32(pair);
    }
    ATTEND_UNROLL
    for (int c = 0; c < CV; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c * 32));
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + ldv + c * 32));
      const __m512i vl = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(x, y));
      const __m512i vh = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(x, y));
      ATTEND_UNROLL
      for (int r = 0; r < NR; ++r) {
        dpwssd(a[r][2 * c], vl, pw[r]);
        dpwssd(a[r][2 * c + 1], vh, pw[r]);
      }
    }
  }
  ATTEND_UNROLL
  for (int r = 0; r < NR; ++r)
    for (int i = 0; i < 2 * CV; ++i) _mm512_store_si512(acc + r * ldacc + i * 16, a[r][i]);
}

// Chunks of 32 value columns per pass for NR rows (1, 2, 4 or 8): 16 accumulators for two rows and
// eight, 32 for four — a group of four at D 128 in one pass over each V row instead of two passes
// of 64 columns (one line of each 128-byte row), the second reading the tile from L2 after its
// bytes had arrived, with no request in flight. The compiler keeps about seven of the 32 on the
// stack (four broadcast weight pairs and the widened codes need registers too): a load and a store
// each per key pair. Zen 4, LLC flushed, alternated in one process, share of a read: D3's shape
// (8 × 8 kv heads × 2048 keys) 69.8 / 69.8 → 81.2 / 80.3%, D2's 61.5 / 62.6 → 64.6 / 64.7%.
// Eight rows at 32 accumulators (two chunks) spilled more and lost (D7-like shape, 64 q heads:
// 46.7 / 47.4 → 42.5 / 42.5%); the weight pairs as broadcast memory operands of vpdpwssd instead
// of registers measured no better (D3's 81.7 / 82.6 → 79.4 / 79.3%).
constexpr int i8_pv_chunks(int nr) { return nr >= 8 ? 1 : 4; }

template <int NR>
void i8_pv_passes(const int8_t* v, int64_t ldv, const int16_t* w, int64_t ldw, int64_t pairs, int32_t* acc,
                  int64_t ldacc, int64_t value_dim, int64_t pf_keys, int64_t pf_limit, const PvAhead& ahead) {
  constexpr int CV = i8_pv_chunks(NR);
  int64_t c = 0;
  for (; c + 32 * CV <= value_dim; c += 32 * CV)  // the first pass requests whole rows ahead
    i8_pv<NR, CV>(v + c, ldv, w, ldw, pairs, acc + c, ldacc, c == 0 ? pf_keys : 0, pf_limit, value_dim, ahead);
  if constexpr (CV > 2)  // (value_dim 64, 96, 192…: the rest in as few passes as fit)
    for (; c + 64 <= value_dim; c += 64)
      i8_pv<NR, 2>(v + c, ldv, w, ldw, pairs, acc + c, ldacc, c == 0 ? pf_keys : 0, pf_limit, value_dim, ahead);
  for (; c < value_dim; c += 32)
    i8_pv<NR, 1>(v + c, ldv, w, ldw, pairs, acc + c, ldacc, c == 0 ? pf_keys : 0, pf_limit, value_dim, ahead);
}

inline void i8_pv_dispatch(int rows, const int8_t* v, int64_t ldv, const int16_t* w, int64_t ldw, int64_t pairs,
                           int32_t* acc, int64_t ldacc, int64_t value_dim, int64_t pf_keys, int64_t pf_limit,
                           const PvAhead& ahead) {
  switch (rows) {
    case 1: return i8_pv_passes<1>(v, ldv, w, ldw, pairs, acc, ldacc, value_dim, pf_keys, pf_limit, ahead);
    case 2: return i8_pv_passes<2>(v, ldv, w, ldw, pairs, acc, ldacc, value_dim, pf_keys, pf_limit, ahead);
    case 4: return i8_pv_passes<4>(v, ldv, w, ldw, pairs, acc, ldacc, value_dim, pf_keys, pf_limit, ahead);
    default: return i8_pv_passes<8>(v, ldv, w, ldw, pairs, acc, ldacc, value_dim, pf_keys, pf_limit, ahead);
  }
}

// O[r] = alpha[r]·O[r] + ps[r]·acc[r], the accumulators' columns put back in order.
inline void i8_pv_finish(float* oacc, int64_t ldo, const float* alpha, const float* ps, const int32_t* acc,
                         int64_t ldacc, int64_t rows, int64_t value_dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]), sc = _mm512_set1_ps(ps[r]);
    float* o = oacc + r * ldo;
    const int32_t* a = acc + r * ldacc;
    for (int64_t c = 0; c < value_dim; c += 32) {
      const __m512i lo = _mm512_load_si512(a + c), hi = _mm512_load_si512(a + c + 16);
      const __m512 first = _mm512_cvtepi32_ps(_mm512_shuffle_i32x4(lo, hi, 0x44));
      const __m512 second = _mm512_cvtepi32_ps(_mm512_shuffle_i32x4(lo, hi, 0xee));
      _mm512_store_ps(o + c, _mm512_fmadd_ps(first, sc, _mm512_mul_ps(_mm512_load_ps(o + c), al)));
      _mm512_store_ps(o + c + 16, _mm512_fmadd_ps(second, sc, _mm512_mul_ps(_mm512_load_ps(o + c + 16), al)));
    }
  }
}

// Whether a work item takes the integer kernels (else flash_narrow's f32 ones). One row (MHA
// decode) takes them only where FlashWork::i8_one_row_integer says so (the AMX Xeons' rule). On a
// Zen 5 the integer version ran 2–5% slower than the f32 one with the LLC flushed (D1's shape,
// 0.821–0.854 against 0.777–0.818 ms alternated in one process, whatever the prefetch distances),
// though faster from L2 (0.020 against 0.024 ms; session 22): the call was bound by how its K and V
// streams overlap, not by arithmetic. On an Emerald Rapids (per 64 codes of a K line: two shuffles, two
// widenings and two vpdpwssd, against four widenings, four conversions and four FMAs) it reads
// D1's shape at 86–90% of a read against the f32 kernels' 78–82%, and D4's at 86–94% against
// 77–82% (attend-bench alternated, session 47; as a pack of two with a zero padding row, the
// first version, 84–87%).
inline bool i8_integer_fits(const FlashWork& w) {
  return (w.row_count >= 2 || (w.row_count == 1 && w.i8_one_row_integer)) && w.k_blocked && w.head_dim % 4 == 0 &&
         w.head_dim <= 512 && w.value_dim % 32 == 0;
}

template <class Arch>
void flash_narrow_i8(const FlashWork& w, float* scratch) {
  using T = Tiles<Arch>;
  static_assert(T::W == 16, "AVX-512 only");
  constexpr int64_t ldsn = T::kNarrowBlockKeys;  // the score rows' stride (narrow_softmax_phase's)
  constexpr int64_t tile = T::kNarrowTileKeys;   // keys per tile: the integer P·V sums' bound
  if (!i8_integer_fits(w)) return flash_narrow<Arch, I8>(w, scratch);
  const NarrowRows R = narrow_rows<Arch>(w);
  const Layout L = make_layout<Arch>(w.head_dim, w.value_dim, R.nr);
  const NarrowShared sh = narrow_shared<Arch>(scratch, L, R.depth, R.nr);
  const NarrowHead h = narrow_head(scratch, L);
  narrow_init<Arch>(w, R, h);
  const int64_t depth = R.depth, dv = w.value_dim, rows_packed = R.packs * R.row_pack;
  // The rows' query quads, scales and weight codes, and the tile's P·V sums.
  int32_t* qv = reinterpret_cast<int32_t*>(scratch + L.i8_q);
  float* qs = scratch + L.i8_scales;
  float* ps = qs + rows_packed;
  int16_t* wq = reinterpret_cast<int16_t*>(scratch + L.i8_w);
  int32_t* acc = reinterpret_cast<int32_t*>(scratch + L.i8_acc);
  const int64_t ldacc = dv;                    // a row's sums: dv lanes, each chunk's columns permuted (i8_pv)
  for (int64_t r = 0; r < rows_packed; ++r) {  // (a pack's padding rows: zero queries, zero codes)
    qs[r] = round_to_i16(h.qn + r * depth, depth, wq);
    if (qs[r] != qs[r]) return flash_narrow<Arch, I8>(w, scratch);  // a non-finite query
    query_quads(wq, depth, qv + r * depth * 4);
  }
  const KvSource<I8> src(w);
  // How far the L2 requests run ahead: K blocks of the scores, V rows of the P·V.
  const int64_t l2_blocks = l2_key_blocks<I8>(w), l2_keys = l2_rows<I8>(w, dv);
  const I8* blk[tile / kKeyBlock + kI8MaxAheadBlocks + 8];
  const float* ksc[tile / kKeyBlock + kI8MaxAheadBlocks + 8];
  for (int64_t j0 = R.key_lo; j0 < R.key_hi; j0 += tile) {
    const int64_t nk = min64(tile, R.key_hi - j0);
    const int64_t blocks = (nk + kKeyBlock - 1) / kKeyBlock;
    const int64_t known = min64(blocks + kI8MaxAheadBlocks + 8, (R.key_hi - j0 + kKeyBlock - 1) / kKeyBlock);
    for (int64_t b = 0; b < known; ++b) {
      blk[b] = src.key_block(j0 + b * kKeyBlock);
      ksc[b] = src.k_scale + src.scale_index(j0 + b * kKeyBlock);
    }
    i8_scores_dispatch(R.row_pack, blk, ksc, blocks, known, depth, qv, qs, h.s, ldsn, R.packs, l2_blocks, w.l2_pages,
                       w.one_block_scores);
    narrow_softmax_phase<Arch>(w, R, h, j0, nk);
    // P' = P·vs (a zero weight stays 0), rounded per row; a non-finite P' takes the f32 P·V.
    scale_by_keys<Arch>(h.s, ldsn, R.nr, src, src.v_scale, j0, nk);
    const int64_t nkp = round_up(nk, 16);  // (the weights past nk are 0: masked)
    bool finite = true;
    for (int64_t r = 0; r < rows_packed && finite; ++r) {  // (padding rows: zero scores, zero weights)
      ps[r] = round_to_i16(h.s + r * ldsn, nkp, wq + r * ldsn);
      finite = ps[r] == ps[r];
    }
    if (!finite) {
      pv_runs<Arch>(src, h.oacc, R.dvp, h.alpha, sh.ones, h.s, ldsn, 1, j0, nk, R.nr, R.dvp / T::W, true,
                    R.key_hi - j0);
      continue;
    }
    std::memset(acc, 0, sizeof(int32_t) * static_cast<size_t>(rows_packed * ldacc));
    const int64_t pf_keys = max64(2, kI8ValueAheadBytes / dv);
    for (int64_t j = 0; j < nk;) {
      // A run starts at a multiple of kKeyBlock: its pairs are (even, odd) keys, both rows stored
      // (an odd last key pairs with a row of its block whose weight is 0).
      const int64_t n = src.run(j0 + j, nk - j);
      const int64_t pf_limit = src.run(j0 + j, R.key_hi - j0 - j);
      const PvAhead ahead =
          l2_keys > 0 ? ahead_rows(src, j0 + j + l2_keys, n, R.key_hi - j0 - j - l2_keys, w.l2_pages) : PvAhead{};
      for (int64_t r0 = 0; r0 < R.nr; r0 += R.row_pack)
        i8_pv_dispatch(R.row_pack, reinterpret_cast<const int8_t*>(src.value(j0 + j)), w.v_row_stride,
                       wq + r0 * ldsn + j, ldsn, (n + 1) / 2, acc + r0 * ldacc, ldacc, dv, r0 == 0 ? pf_keys : 0,
                       pf_limit, ahead);
      j += n;
    }
    i8_pv_finish(h.oacc, R.dvp, h.alpha, ps, acc, ldacc, R.nr, dv);
  }
  write_rows<Arch>(w, RowMap{&w}, h.oacc, R.dvp, h.m, h.l);
}

}  // namespace
}  // namespace attend::kernels

#endif
