// Session 58's FMA ladder (docs/performance.md, "Session 58"): not built by the project. How fast
// two threads (NT=1: one) stream evicted bytes (2 MiB pages, clflushopt + mfence per thread before
// each pass) when each 64-byte line feeds R FMAs, the decode kernels' arithmetic per byte (R = 4: a
// GQA group of four over f32 K/V, 8: a group of eight), against a plain read of the same bytes in
// the same loop shape (R = 0: one XOR chain of 512-bit loads). Eight lines per iteration, each line's
// FMAs into its own accumulators (no chain of latencies), one prefetcht0 L1 bytes and one prefetcht1
// L2 bytes ahead of every line. CHUNK=n: each thread's half is a "K" and a "V" region read in
// alternating n-byte chunks (decode's tiles: 512 keys × 512 bytes = 262144); GAP=n: n dependent FMAs
// between chunks (a softmax phase issuing no loads). Columns: R = 0, "vmem" (four FMAs per line, each
// with the line as its memory operand, as pv_tile_vmem's f32 P·V), "pairs" (R = 4 with the K chunks
// walked two 8 KiB blocks at once, a line of each, as blocked_scores' groups of two), R = 4, R = 8.
// Medians of 9 passes, the percentages against R = 0's.
//   g++ -O2 -march=native -fopenmp docs/experiments/fma_ladder.cpp -o /tmp/fma_ladder
//   CHUNK=262144 /tmp/fma_ladder 128 4096 24576     # MiB, L1 and L2 distances (bytes)
//   NOEVICT=1 /tmp/fma_ladder 2 0 0                  # the arithmetic alone (L2-resident)
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "stream_probe.hpp"  // huge_buffer

enum Mode { kRead, kVmem, kPairs, kR4, kR8 };
const char* const kNames[] = {"R=0 (read)", "vmem", "pairs", "R=4", "R=8"};

template <int R, bool Pairs>
__attribute__((noinline)) float fmas(const char* c, size_t n, int l1, int l2, const float* q) {
  __m512 acc[8][R];
  for (int u = 0; u < 8; ++u)
    for (int r = 0; r < R; ++r) acc[u][r] = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 512) {
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      // Pairs: 16 KiB groups, lines alternately from the group's two 8 KiB blocks.
      const size_t at = Pairs ? i / 16384 * 16384 + (u & 1) * 8192 + (i % 16384) / 2 + (u >> 1) * 64 : i + u * 64;
      const char* l = c + at;
      if (l1) _mm_prefetch(l + l1, _MM_HINT_T0);
      if (l2) _mm_prefetch(l + l2, _MM_HINT_T1);
      const __m512 v = _mm512_load_ps(reinterpret_cast<const float*>(l));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[u][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * 8 + u]), v, acc[u][r]);
    }
  }
  __m512 s = _mm512_setzero_ps();
  for (int u = 0; u < 8; ++u)
    for (int r = 0; r < R; ++r) s = _mm512_add_ps(s, acc[u][r]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((noinline)) float read(const char* c, size_t n, int l1, int l2) {
  __m512i x = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64) {
    if (l1) _mm_prefetch(c + i + l1, _MM_HINT_T0);
    if (l2) _mm_prefetch(c + i + l2, _MM_HINT_T1);
    x = _mm512_xor_si512(x, _mm512_load_si512(c + i));
  }
  return _mm512_reduce_add_ps(_mm512_castsi512_ps(x));
}

__attribute__((noinline)) float vmem(const char* c, size_t n, int l1, int l2, const float* q) {
  __m512 acc[8][4];
  for (int u = 0; u < 8; ++u)
    for (int r = 0; r < 4; ++r) acc[u][r] = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 512) {
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) {
      const char* l = c + i + u * 64;
      if (l1) _mm_prefetch(l + l1, _MM_HINT_T0);
      if (l2) _mm_prefetch(l + l2, _MM_HINT_T1);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512 pb = _mm512_set1_ps(q[r * 8 + u]);
        asm volatile("vfmadd231ps (%1), %2, %0" : "+v"(acc[u][r]) : "r"(l), "v"(pb) : "memory");
      }
    }
  }
  __m512 s = _mm512_setzero_ps();
  for (int u = 0; u < 8; ++u)
    for (int r = 0; r < 4; ++r) s = _mm512_add_ps(s, acc[u][r]);
  return _mm512_reduce_add_ps(s);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: fma_ladder MiB L1_BYTES L2_BYTES (env NT, CHUNK, GAP, NOEVICT)\n");
    return 2;
  }
  const size_t bytes = static_cast<size_t>(std::atoi(argv[1])) << 20;
  const int l1 = std::atoi(argv[2]), l2 = std::atoi(argv[3]);
  const int nt = std::getenv("NT") ? std::atoi(std::getenv("NT")) : 2;
  const bool evict = !std::getenv("NOEVICT");
  const int gap = std::getenv("GAP") ? std::atoi(std::getenv("GAP")) : 0;
  char* buf = huge_buffer(bytes);
  float q[64];
  for (int i = 0; i < 64; ++i) q[i] = 0.001f * i;
  volatile float sink = 0;
  std::vector<double> t[5];
  for (int rep = 0; rep < 9; ++rep)
    for (int m = 0; m < 5; ++m) {
#pragma omp parallel num_threads(nt)
      {
        const size_t part = bytes / nt;
        char* p = buf + omp_get_thread_num() * part;
        if (evict) {
          for (size_t i = 0; i < part; i += 64) _mm_clflushopt(p + i);
          _mm_mfence();
        }
      }
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(nt)
      {
        const size_t part = bytes / nt;
        const char* p = buf + omp_get_thread_num() * part;
        size_t chunk = std::getenv("CHUNK") ? std::atol(std::getenv("CHUNK")) : part;
        const bool kv = chunk < part;
        if (!kv) chunk = part;
        float r = 0;
        for (size_t o = 0; o < (kv ? part / 2 : part); o += chunk)
          for (int s = 0; s < (kv ? 2 : 1); ++s) {
            const char* c = p + (s ? part / 2 : 0) + o;
            switch (m) {
              case kRead: r += read(c, chunk, l1, l2); break;
              case kVmem: r += vmem(c, chunk, l1, l2, q); break;
              case kPairs:
                r += s == 0 ? fmas<4, true>(c, chunk, l1, l2, q) : fmas<4, false>(c, chunk, l1, l2, q);
                break;
              case kR4: r += fmas<4, false>(c, chunk, l1, l2, q); break;
              case kR8: r += fmas<8, false>(c, chunk, l1, l2, q); break;
            }
            if (gap) {
              __m512 g = _mm512_set1_ps(r);
              for (int i = 0; i < gap; ++i) g = _mm512_fmadd_ps(g, g, g);
              r += _mm512_reduce_add_ps(g) * 0.0f;
            }
          }
#pragma omp atomic
        sink += r;
      }
      t[m].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  double base = 0;
  for (int m = 0; m < 5; ++m) {
    std::sort(t[m].begin(), t[m].end());
    const double med = t[m][t[m].size() / 2];
    if (m == 0) base = med;
    std::printf("%s %.1f GB/s (%.0f%%)  ", kNames[m], bytes / med / 1e9, 100 * base / med);
  }
  std::printf("\n");
}
