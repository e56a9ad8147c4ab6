// Session 51's access-order probe (docs/performance.md, "Session 51"): not built by the project.
// Two threads read a buffer laid out as the f32 cache of D2's shape (H kv heads × [K 2 MiB as
// 16-key blocks of [128][16] floats | V 2 MiB of 512-byte rows], 2 MiB pages, clflushopt + mfence
// on each thread before every pass) in different orders: 512-bit loads XORed together, no
// arithmetic, with or without software requests; against the bench's plain read of the same bytes
// (stream_probe.hpp). Orders rotate pass by pass; medians of 21 passes.
//   g++ -O2 -march=native -fopenmp docs/experiments/decode_order.cpp -o /tmp/decode_order
//   /tmp/decode_order [HEADS] [TILE_KEYS]     # 8 heads (D2's 32 MiB), 256-key tiles
// On a Zen 4: the scores' old order (two blocks at once, a line of each: 4, 5) 13–15% below a plain
// read; a plain read with requests ahead of each line (8–10) 5–15% below one without.
#include <cstdio>

#include "stream_probe.hpp"
static long H = 8;
constexpr long L = 4096, D = 128, KB = L * D * 4;
static long T = 256;
using V = __m512i;
static inline V ld(const char* p) { return _mm512_load_si512(p); }
static inline V x(V a, V b) { return _mm512_xor_si512(a, b); }
__attribute__((noinline)) V seq(const char* p, long n, V a) {  // one chain
  for (long i = 0; i < n; i += 64) a = x(a, ld(p + i));
  return a;
}
__attribute__((noinline)) V seq4(const char* p, long n, V a) {  // 4 chains, 4 lines a step
  V b = a, c = a, d = a;
  for (long i = 0; i < n; i += 256)
    a = x(a, ld(p + i)), b = x(b, ld(p + i + 64)), c = x(c, ld(p + i + 128)), d = x(d, ld(p + i + 192));
  return x(x(a, b), x(c, d));
}
// K of blocks [b0, b1) two blocks at a time, a line of each per step (the kernel's scores).
__attribute__((noinline)) V kpairs(const char* K, long b0, long b1, V a) {
  V c = a;
  for (long b = b0; b < b1; b += 2) {
    const char* p0 = K + b * 8192;
    const char* p1 = p0 + 8192;
    for (long i = 0; i < 8192; i += 64) a = x(a, ld(p0 + i)), c = x(c, ld(p1 + i));
  }
  return x(a, c);
}
// K and V tiles of T keys interleaved a line of each (two streams at once)
__attribute__((noinline)) V kv_inter(const char* K, const char* Vp, long n, V a) {
  V c = a;
  for (long i = 0; i < n; i += 64) a = x(a, ld(K + i)), c = x(c, ld(Vp + i));
  return x(a, c);
}
template <int L1A, int L2A>
__attribute__((noinline)) V seqr(const char* p, long n, V a) {  // one chain + requests per line
  for (long i = 0; i < n; i += 64) {
    if (L1A && i + L1A < n) _mm_prefetch(p + i + L1A, _MM_HINT_T0);
    if (L2A && i + L2A < n) _mm_prefetch(p + i + L2A, _MM_HINT_T1);
    a = x(a, ld(p + i));
  }
  return a;
}
// kernel-like: pairs, next pair into L1 in address order (2 lines a step), 24 KiB on into L2 a line of each
__attribute__((noinline)) V kpairs_req(const char* K, long b0, long b1, long nb, V a) {
  V c = a;
  for (long b = b0; b < b1; b += 2) {
    const char* p0 = K + b * 8192;
    const char* p1 = p0 + 8192;
    const char* n1 = b + 3 < nb ? p0 + 16384 : nullptr;
    const char* l2 = b + 4 < nb ? p0 + 24576 : nullptr;
    for (long i = 0; i < 8192; i += 64) {
      if (n1) _mm_prefetch(n1 + 2 * i, _MM_HINT_T0), _mm_prefetch(n1 + 2 * i + 64, _MM_HINT_T0);
      if (l2) _mm_prefetch(l2 + i, _MM_HINT_T1), _mm_prefetch(l2 + 8192 + i, _MM_HINT_T1);
      a = x(a, ld(p0 + i)), c = x(c, ld(p1 + i));
    }
  }
  return x(a, c);
}
V head(int m, const char* base) {
  const char* K = base;
  const char* Vv = base + KB;
  V a = _mm512_setzero_si512();
  const long tb = T * D * 4;  // tile bytes
  switch (m) {
    case 1: return seq(base, 2 * KB, a);
    case 2: return seq4(base, 2 * KB, a);
    case 3:
      for (long t = 0; t < KB; t += tb) a = seq(K + t, tb, a), a = seq(Vv + t, tb, a);
      return a;
    case 4: a = kpairs(K, 0, L / 16, a); return seq(Vv, KB, a);
    case 5:
      for (long t = 0; t < KB; t += tb) a = kpairs(K, t / 8192, (t + tb) / 8192, a), a = seq(Vv + t, tb, a);
      return a;
    case 6: return kv_inter(K, Vv, KB, a);
    case 8: return seqr<4096, 0>(base, 2 * KB, a);
    case 9: return seqr<0, 24576>(base, 2 * KB, a);
    case 10: return seqr<4096, 24576>(base, 2 * KB, a);
    case 11:
      for (long t = 0; t < KB; t += tb)
        a = kpairs_req(K, t / 8192, (t + tb) / 8192, L / 16, a), a = seqr<4096, 24576>(Vv + t, tb, a);
      return a;
    case 12:
      for (long t = 0; t < KB; t += tb) a = seqr<8192, 24576>(K + t, tb, a), a = seqr<4096, 24576>(Vv + t, tb, a);
      return a;
    case 13:
      for (long t = 0; t < KB; t += tb) a = seqr<0, 24576>(K + t, tb, a), a = seqr<0, 24576>(Vv + t, tb, a);
      return a;
    case 7:
      for (long t = 0; t < KB; t += tb) a = seq4(K + t, tb, a), a = seq4(Vv + t, tb, a);
      return a;
  }
  return a;
}
int main(int argc, char** argv) {
  if (argc > 1) H = atol(argv[1]);
  if (argc > 2) T = atol(argv[2]);
  const size_t bytes = size_t(H) * 2 * KB;
  char* buf = huge_buffer(bytes);
  constexpr int M = 14;
  const char* names[M] = {"bench read (xor words, halves)",
                          "1 head K then V, one chain",
                          "2 head K then V, 4 chains",
                          "3 K/V tiles alternating, seq",
                          "4 K pairs interleaved, then V",
                          "5 kernel order (tiles, K pairs)",
                          "6 K and V a line of each",
                          "7 = 3 with 4 chains",
                          "8 seq + L1 4K",
                          "9 seq + L2 24K",
                          "10 seq + L1 4K + L2 24K",
                          "11 kernel order + kernel-like req",
                          "12 tiles seq + L1 + L2 req",
                          "13 tiles seq + L2 req only"};
  time_orders(buf, H, 2 * KB, names, M, head);
}
