// Session 52's row-major order probe (docs/performance.md, "Session 52"): not built by the project.
// Two threads read a buffer laid out as sdpa/attend/D2's K and V (H kv heads × [K 4096 × 128 f32
// rows | V the same], 2 MiB pages, clflushopt + mfence on each thread before every pass) in tiles of
// 256 keys, K then V, in different orders: 512-bit loads XORed together, no arithmetic, with or
// without software requests; against the bench's plain read of the same bytes (stream_probe.hpp).
// Orders rotate pass by pass; medians of 21 passes.
//   g++ -O2 -march=native -fopenmp docs/experiments/rowmajor_order.cpp -o /tmp/rowmajor_order
//   /tmp/rowmajor_order [HEADS]     # 8 heads (D2's 32 MiB)
// On a Zen 4 (GB/s, two runs): the plain read 35.5, 32.1 and a tile's rows in address order 35.6,
// 30.8; four rows at a time depth-major (narrow_scores' order for a GQA group of four) 23.5, 22.0,
// with its requests (the next group into L1 in address order, 24 KiB on into L2) 30.4, 29.8; that
// order touching the next group with plain loads in address order 46.5, 31.6 (the read 44.5, 33.2).
// In the kernel neither order carried over (performance.md): the arithmetic is not overlapped.
#include <cstdio>

#include "stream_probe.hpp"
static long H = 8;
constexpr long L = 4096, D = 128, RB = D * 4, KB = L * RB;
constexpr long T = 256;
using V = __m512i;
static inline V ld(const char* p) { return _mm512_load_si512(p); }
static inline V x(V a, V b) { return _mm512_xor_si512(a, b); }
__attribute__((noinline)) V seq(const char* p, long n, V a) {
  for (long i = 0; i < n; i += 64) a = x(a, ld(p + i));
  return a;
}
// K in groups of G rows, depth-major (the kernel's narrow_scores: NR = 4 -> G = 4). REQ bits: 1 the
// next group into L1 in address order, 2 the group 24 KiB on into L2, 4 the group AHEAD groups on
// touched with plain loads in address order.
template <int G, int REQ, int AHEAD = 1>
__attribute__((noinline)) V groups(const char* K, long rows, long total_rows, V a) {
  V c[G], t = a;
  for (int g = 0; g < G; ++g) c[g] = a;
  for (long r = 0; r < rows; r += G) {
    const char* p = K + r * RB;
    const char* run = (REQ & 1) && r + G < total_rows ? p + G * RB : nullptr;             // next group, L1, in order
    const char* l2 = (REQ & 2) && r + G + 48 < total_rows ? p + (G + 48) * RB : nullptr;  // 24 KiB on, L2
    const char* touch = (REQ & 4) && r + G * AHEAD < total_rows ? p + G * AHEAD * RB : nullptr;
    for (long d = 0; d < RB; d += 64) {
      const long at = (d / 64) * G * 64;
      for (int g = 0; g < G; ++g) {
        if (run) _mm_prefetch(run + at + g * 64, _MM_HINT_T0);
        if (l2) _mm_prefetch(l2 + at + g * 64, _MM_HINT_T1);
        if (touch) t = _mm512_or_si512(t, ld(touch + at + g * 64));
      }
      for (int g = 0; g < G; ++g) c[g] = x(c[g], ld(p + g * RB + d));
    }
  }
  for (int g = 1; g < G; ++g) c[0] = x(c[0], c[g]);
  return x(c[0], t);
}
// A sequential read, with (REQ & 2) each line's successor 24 KiB on requested into L2.
template <int REQ = 0>
__attribute__((noinline)) V seq(const char* p, long n, long avail, V a) {
  for (long i = 0; i < n; i += 64) {
    if ((REQ & 2) && i + 24576 < avail) _mm_prefetch(p + i + 24576, _MM_HINT_T1);
    a = x(a, ld(p + i));
  }
  return a;
}
// Head `base` in tiles of T keys: the tile's K in order m, then its V (sequential; with L2
// requests where order m has them).
V head(int m, const char* base) {
  const char* K = base;
  const char* Vv = base + KB;
  V a = _mm512_setzero_si512();
  const long tb = T * RB;
  const bool v_requests = m == 3 || m == 5 || m == 9;
  for (long t = 0; t < KB; t += tb) {
    const long rows = L - t / RB;
    switch (m) {
      case 1: a = seq(K + t, tb, KB - t, a); break;
      case 2: a = groups<4, 0>(K + t, T, rows, a); break;
      case 3: a = groups<4, 3>(K + t, T, rows, a); break;
      case 4: a = groups<4, 1>(K + t, T, rows, a); break;
      case 5: a = groups<4, 2>(K + t, T, rows, a); break;
      case 6: a = groups<2, 0>(K + t, T, rows, a); break;
      case 7: a = groups<8, 0>(K + t, T, rows, a); break;
      case 8: a = groups<16, 0>(K + t, T, rows, a); break;
      case 9: a = seq<2>(K + t, tb, KB - t, a); break;
      case 10: a = groups<4, 4, 1>(K + t, T, rows, a); break;
      case 11: a = groups<4, 4, 2>(K + t, T, rows, a); break;
      case 12: a = groups<4, 4, 4>(K + t, T, rows, a); break;
    }
    a = v_requests ? seq<2>(Vv + t, tb, KB - t, a) : seq(Vv + t, tb, KB - t, a);
  }
  return a;
}
int main(int argc, char** argv) {
  if (argc > 1) H = atol(argv[1]);
  const size_t bytes = size_t(H) * 2 * KB;
  char* buf = huge_buffer(bytes);
  constexpr int M = 13;
  const char* names[M] = {"bench read (xor words, halves)",
                          "1 tiles K,V seq",
                          "2 K groups of 4 depth-major, no req",
                          "3 groups4 + kernel req (L1 next, L2 24K)",
                          "4 groups4 + L1 next only",
                          "5 groups4 + L2 only",
                          "6 groups of 2",
                          "7 groups of 8",
                          "8 groups of 16",
                          "9 tiles seq + L2 24K",
                          "10 groups4 + touch loads 1 ahead",
                          "11 touch 2 ahead",
                          "12 touch 4 ahead"};
  time_orders(buf, H, 2 * KB, names, M, head, 44);
}
