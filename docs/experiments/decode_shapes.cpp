// Session 35's stepwise model of the f32 cache's GQA decode (docs/performance.md, "Session 35"):
// not built by the project. Two threads stream a buffer laid out as the f32 cache of D2's shape (8
// kv heads × 4096 keys, D 128: per head 256 K blocks of [128][16] floats, then 4096 V rows of 512
// bytes; 2 MiB pages, clflushopt + mfence on each thread before every pass) and add the kernel's
// features one stage at a time, each against the bench's plain read of the same bytes:
//   0  each head's K then V, one 512-bit chain (a plain read in the heads' order)
//   1  the kernel's order: per 256-key tile, K two blocks at a time a line of each per step, then
//      the tile's V rows (eight 512-bit loads a row); no requests, no arithmetic
//   2  1 + the kernel's requests: K the next call's two blocks into L1 (block after block, 128
//      bytes a step) and the blocks 3 on into L2 (a line of each a step); V 8 rows on into L1 and
//      48 rows on into L2 (whole rows)
//   3  2 + the arithmetic: 4 query rows, 8 FMAs a K step, 32 a V row
//   4  3 + a softmax-like pass between the phases (4 rows × 256 scores, exp-like polynomial)
//   5, 6  4 + one or two lines of V rows beyond P·V's own window requested into L2 per vector
//      step of that pass
//   7  4 software-pipelined (session 36): the scores of tile t + 1's block pairs interleaved with
//      the P·V of tile t's keys, 32 V rows per block pair, so both streams always flow
//   8  4 + one line of every 4 KiB page 64 KiB ahead of the K and V streams requested into L2
//      (session 39)
//   9  1 + the same page requests
//   10 two passes: all of a head's K scored (tile by tile, the requests of 2), a softmax-like
//      pass, then all of its V (session 39)
//   11 2 + the page requests of 8 (no arithmetic; session 40)
//   12 4 without the kernel's own requests, + the page requests (session 40)
// Medians of 15 passes, stages rotated from one pass to the next.
//   g++ -O2 -march=native -fopenmp docs/experiments/decode_shapes.cpp -o /tmp/decode_shapes
//   /tmp/decode_shapes [HEADS]      # HEADS kv heads of 4096 keys, 4 MiB each (8: D2's 32 MiB)
//   VL2=0 /tmp/decode_shapes 128    # without V's L2 requests (a Zen 5's rule)
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "stream_probe.hpp"

static long H = 8;
constexpr long L = 4096, D = 128, T = 256, KB = L * D * 4;  // KB: one head's K (or V) bytes

alignas(64) static float q[4][D];
// Stages 8 and 9: one line of every 4 KiB page PA bytes ahead of each stream, into L2.
static long PA = 0;
// V requests: VL1 rows on into L1, VL2 rows on into L2 (0: none, a Zen 5's rule); environment.
static long VL1 = getenv("VL1") ? atol(getenv("VL1")) : 8, VL2 = getenv("VL2") ? atol(getenv("VL2")) : 48;

// Scores of two blocks (b0, b1) for 4 rows; pf: the next call's blocks (L1, 128 bytes a step in
// address order), l2: the blocks 3 on (a line of each a step).
template <bool Req, bool Fma>
__attribute__((noinline)) __m512 scores(const float* b0, const float* b1, const char* p0, const char* p1,
                                        const char* l0, const char* l1, float* s) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, c0 = a0, c1 = a0, c2 = a0, c3 = a0;
  for (long d = 0; d < D; ++d) {
    if (Req) {
      if (p0) {
        const long o = d * 128;
        const char* pp = o < 8192 ? p0 + o : p1 + (o - 8192);
        _mm_prefetch(pp, _MM_HINT_T0), _mm_prefetch(pp + 64, _MM_HINT_T0);
      }
      if (l0) _mm_prefetch(l0 + d * 64, _MM_HINT_T1), _mm_prefetch(l1 + d * 64, _MM_HINT_T1);
    }
    const __m512 k0 = _mm512_load_ps(b0 + d * 16), k1 = _mm512_load_ps(b1 + d * 16);
    if (Fma) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[0][d]), k0, a0), c0 = _mm512_fmadd_ps(_mm512_set1_ps(q[0][d]), k1, c0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[1][d]), k0, a1), c1 = _mm512_fmadd_ps(_mm512_set1_ps(q[1][d]), k1, c1);
      a2 = _mm512_fmadd_ps(_mm512_set1_ps(q[2][d]), k0, a2), c2 = _mm512_fmadd_ps(_mm512_set1_ps(q[2][d]), k1, c2);
      a3 = _mm512_fmadd_ps(_mm512_set1_ps(q[3][d]), k0, a3), c3 = _mm512_fmadd_ps(_mm512_set1_ps(q[3][d]), k1, c3);
    } else {
      a0 = _mm512_add_ps(a0, k0), c0 = _mm512_add_ps(c0, k1);
    }
  }
  _mm512_store_ps(s, a0), _mm512_store_ps(s + 16, c0);
  _mm512_store_ps(s + T, a1), _mm512_store_ps(s + T + 16, c1);
  _mm512_store_ps(s + 2 * T, a2), _mm512_store_ps(s + 2 * T + 16, c2);
  _mm512_store_ps(s + 3 * T, a3), _mm512_store_ps(s + 3 * T + 16, c3);
  return a0;
}

// O[4][128] += P[4][n] · V[n][128]; requests V rows 8 on (L1) and 48 on (L2), below lim.
template <bool Req, bool Fma>
__attribute__((noinline)) void pv(const float* v, long n, long lim, const float* p, float* o) {
  __m512 acc[4][8];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[r][c] = _mm512_load_ps(o + r * D + c * 16);
  for (long j = 0; j < n; ++j, v += D) {
    if (PA && (j & 7) == 0 && j + PA / (4 * D) < lim) _mm_prefetch(reinterpret_cast<const char*>(v) + PA, _MM_HINT_T1);
    if (Req) {
      if (j + VL1 < lim)
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) _mm_prefetch(reinterpret_cast<const char*>(v + VL1 * D) + c * 64, _MM_HINT_T0);
      if (VL2 && j + VL2 < lim)
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) _mm_prefetch(reinterpret_cast<const char*>(v + VL2 * D) + c * 64, _MM_HINT_T1);
    }
    if (Fma) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512 pb = _mm512_set1_ps(p[r * T + j]);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) acc[r][c] = _mm512_fmadd_ps(pb, _mm512_load_ps(v + c * 16), acc[r][c]);
      }
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) acc[0][c] = _mm512_add_ps(acc[0][c], _mm512_load_ps(v + c * 16));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm512_store_ps(o + r * D + c * 16, acc[r][c]);
}

template <int F>
__attribute__((noinline)) void softmax_like(float* s, const char* next) {
  for (int r = 0; r < 4; ++r)
    for (long j = 0; j < T; j += 16) {
      if (F && next)
        for (int f = 0; f < F; ++f, next += 64) _mm_prefetch(next, _MM_HINT_T1);
      __m512 x = _mm512_mul_ps(_mm512_load_ps(s + r * T + j), _mm512_set1_ps(1e-6f));
      __m512 y = _mm512_set1_ps(1.0f);
      for (int i = 0; i < 6; ++i) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f / (i + 1)));
      _mm512_store_ps(s + r * T + j, y);
    }
}

template <bool Req, bool Fma, bool Soft, int F = 0>
float head(const char* base) {
  const float* K = reinterpret_cast<const float*>(base);
  const float* V = reinterpret_cast<const float*>(base + KB);
  alignas(64) static thread_local float s[4 * T], o[4 * D];
  std::memset(o, 0, sizeof o);
  const long nb = L / 16;
  auto blk = [&](long b) { return reinterpret_cast<const char*>(K + b * 16 * D); };
  __m512 sink = _mm512_setzero_ps();
  for (long t = 0; t < L; t += T) {
    for (long b = t / 16; b < (t + T) / 16; b += 2) {
      const bool p = b + 3 < nb, l = b + 4 < nb;
      if (PA && b * 16 * D * 4 + PA < KB)
        for (int i = 0; i < 4; ++i) _mm_prefetch(blk(b) + PA + i * 4096, _MM_HINT_T1);
      sink = _mm512_add_ps(sink, scores<Req, Fma>(K + b * 16 * D, K + (b + 1) * 16 * D, p ? blk(b + 2) : nullptr,
                                                  p ? blk(b + 3) : nullptr, l ? blk(b + 3) : nullptr,
                                                  l ? blk(b + 4) : nullptr, s + (b * 16 - t)));
    }
    if (Soft) softmax_like<F>(s, t + T < L ? reinterpret_cast<const char*>(V + (t + 48) * D) : nullptr);
    pv<Req, Fma>(V + t * D, T, L - t, s, o);
  }
  return _mm512_reduce_add_ps(sink) + o[0] + o[4 * D - 1];
}

// Two passes: all of the head's K scored (tile by tile, the kernel's requests), a softmax-like pass
// over every score, then all of its V.
float head_two_pass(const char* base) {
  const float* K = reinterpret_cast<const float*>(base);
  const float* V = reinterpret_cast<const float*>(base + KB);
  alignas(64) static thread_local float s[4 * L], o[4 * D];
  std::memset(o, 0, sizeof o);
  const long nb = L / 16;
  auto blk = [&](long b) { return reinterpret_cast<const char*>(K + b * 16 * D); };
  __m512 sink = _mm512_setzero_ps();
  alignas(64) static thread_local float st[4 * T];
  for (long t = 0; t < L; t += T) {
    for (long b = t / 16; b < (t + T) / 16; b += 2) {
      const bool p = b + 3 < nb, l = b + 4 < nb;
      sink = _mm512_add_ps(sink, scores<true, true>(K + b * 16 * D, K + (b + 1) * 16 * D, p ? blk(b + 2) : nullptr,
                                                    p ? blk(b + 3) : nullptr, l ? blk(b + 3) : nullptr,
                                                    l ? blk(b + 4) : nullptr, st + (b * 16 - t)));
    }
    softmax_like<0>(st, nullptr);
    for (int r = 0; r < 4; ++r) std::memcpy(s + r * L + t, st + r * T, sizeof(float) * T);
  }
  for (long t = 0; t < L; t += T) {
    for (int r = 0; r < 4; ++r) std::memcpy(st + r * T, s + r * L + t, sizeof(float) * T);
    pv<true, true>(V + t * D, T, L - t, st, o);
  }
  return _mm512_reduce_add_ps(sink) + o[0] + o[4 * D - 1];
}

// Scores of tile t + 1 interleaved with P·V of tile t (32 keys of V per block pair of K).
float head_pipe(const char* base) {
  const float* K = reinterpret_cast<const float*>(base);
  const float* V = reinterpret_cast<const float*>(base + KB);
  alignas(64) static thread_local float sa[4 * T], sb[4 * T], o[4 * D];
  std::memset(o, 0, sizeof o);
  const long nb = L / 16;
  auto blk = [&](long b) { return reinterpret_cast<const char*>(K + b * 16 * D); };
  __m512 sink = _mm512_setzero_ps();
  auto score_pair = [&](long b, float* s) {
    const bool p = b + 3 < nb, l = b + 4 < nb;
    sink = _mm512_add_ps(
        sink, scores<true, true>(K + b * 16 * D, K + (b + 1) * 16 * D, p ? blk(b + 2) : nullptr,
                                 p ? blk(b + 3) : nullptr, l ? blk(b + 3) : nullptr, l ? blk(b + 4) : nullptr, s));
  };
  float *cur = sa, *nxt = sb;
  for (long b = 0; b < T / 16; b += 2) score_pair(b, cur + b * 16);
  for (long t = 0; t < L; t += T) {
    softmax_like<0>(cur, nullptr);
    for (long i = 0; i < T / 32; ++i) {
      if (t + T < L) score_pair((t + T) / 16 + 2 * i, nxt + 32 * i);
      pv<true, true>(V + (t + 32 * i) * D, 32, L - t - 32 * i, cur + 32 * i, o);
    }
    std::swap(cur, nxt);
  }
  return _mm512_reduce_add_ps(sink) + o[0] + o[4 * D - 1];
}

__attribute__((noinline)) float plain_head(const char* base) {
  __m512 a = _mm512_setzero_ps();
  const float* f = reinterpret_cast<const float*>(base);
  for (long i = 0; i < 2 * KB / 4; i += 16) a = _mm512_add_ps(a, _mm512_load_ps(f + i));
  return _mm512_reduce_add_ps(a);
}

int main(int argc, char** argv) {
  if (argc > 1) H = atol(argv[1]);
  const size_t bytes = static_cast<size_t>(H) * 2 * KB;
  char* buf = huge_buffer(bytes);
  for (int r = 0; r < 4; ++r)
    for (int d = 0; d < D; ++d) q[r][d] = 1e-3f * static_cast<float>(r + d);
  constexpr int M = 14;
  const char* names[M] = {"the bench's plain read",
                          "0 heads' K then V, one chain",
                          "1 kernel order, no requests",
                          "2 + the kernel's requests",
                          "3 + the FMAs",
                          "4 + a softmax-like pass",
                          "5 4 + 1 V line into L2 a step",
                          "6 4 + 2 V lines into L2 a step",
                          "7 4 with K of t+1 and V of t interleaved",
                          "8 4 + a line a 4 KiB page 64 KiB on",
                          "9 1 + a line a 4 KiB page 64 KiB on",
                          "10 two passes: K, then V",
                          "11 2 + a line a 4 KiB page 64 KiB on",
                          "12 4 without requests + page lines"};
  std::vector<double> r[M];
  volatile float sink = 0;
  for (int rep = 0; rep < 15; ++rep)
    for (int i = 0; i < M; ++i) {
      const int m = (i + rep) % M;
      evict(buf, bytes);
      PA = (m >= 9 && m != 11) ? 65536 : 0;
      const auto t0 = std::chrono::steady_clock::now();
      if (m == 0) {
#pragma omp parallel num_threads(2)
        sink = sink + static_cast<float>(bench_read(buf + omp_get_thread_num() * bytes / 2, bytes / 2));
      } else {
#pragma omp parallel for num_threads(2) schedule(static)
        for (long h = 0; h < H; ++h) {
          const char* base = buf + h * 2 * KB;
          float v = 0;
          switch (m) {
            case 1: v = plain_head(base); break;
            case 2: v = head<false, false, false>(base); break;
            case 3: v = head<true, false, false>(base); break;
            case 4: v = head<true, true, false>(base); break;
            case 5: v = head<true, true, true>(base); break;
            case 6: v = head<true, true, true, 1>(base); break;
            case 7: v = head<true, true, true, 2>(base); break;
            case 8: v = head_pipe(base); break;
            case 9: v = head<true, true, true>(base); break;
            case 10: v = head<false, false, false>(base); break;
            case 11: v = head_two_pass(base); break;
            case 12: v = head<true, false, false>(base); break;
            case 13: v = head<false, true, true>(base); break;
          }
          sink = sink + v;
        }
      }
      r[m].push_back(bytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
    }
  for (int m = 0; m < M; ++m) {
    std::sort(r[m].begin(), r[m].end());
    std::printf("%-32s median %.1f GB/s (%.1f-%.1f)\n", names[m], r[m][7], r[m][0], r[m][14]);
  }
}
