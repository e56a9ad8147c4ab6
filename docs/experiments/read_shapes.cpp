// Session 35's read-shape probe (docs/performance.md, "Session 35"): not built by the project. How
// fast two threads stream the same evicted bytes (2 MiB pages, clflushopt + mfence on each thread
// before every pass) with differently shaped plain read loops: the bench's own (Evict::read's
// compiler-vectorised XOR of 32-bit words, which GCC 12 emits as 256-bit loads for -march=native),
// 512-bit loads with one or two XOR chains, with decode's software requests (prefetcht0 4 KiB,
// prefetcht1 24 KiB ahead), and four interleaved streams. The modes rotate their order from one
// repetition to the next; medians of 15 passes each.
//   g++ -O2 -march=native -fopenmp docs/experiments/read_shapes.cpp -o /tmp/read_shapes
//   /tmp/read_shapes 32        # MiB
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

// 512-bit loads, C independent chains (C lines per iteration), optional requests per line.
template <int C, bool P0, bool P1>
__attribute__((noinline)) unsigned zmm_read(const char* c, size_t n) {
  __m512i a[C];
  for (int k = 0; k < C; ++k) a[k] = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 64 * C)
    for (int k = 0; k < C; ++k) {
      if (P0) _mm_prefetch(c + i + 64 * k + 4096, _MM_HINT_T0);
      if (P1) _mm_prefetch(c + i + 64 * k + 24576, _MM_HINT_T1);
      a[k] = _mm512_xor_si512(a[k], _mm512_load_si512(c + i + 64 * k));
    }
  for (int k = 1; k < C; ++k) a[0] = _mm512_xor_si512(a[0], a[k]);
  return static_cast<unsigned>(_mm512_reduce_or_epi32(a[0]));
}

// 512-bit loads from S equal parts of the range in turn (S streams), one chain each.
template <int S>
__attribute__((noinline)) unsigned zmm_streams(const char* c, size_t n) {
  __m512i a[S];
  for (int s = 0; s < S; ++s) a[s] = _mm512_setzero_si512();
  const size_t part = n / S;
  for (size_t i = 0; i < part; i += 64)
    for (int s = 0; s < S; ++s) a[s] = _mm512_xor_si512(a[s], _mm512_load_si512(c + s * part + i));
  for (int s = 1; s < S; ++s) a[0] = _mm512_xor_si512(a[0], a[s]);
  return static_cast<unsigned>(_mm512_reduce_or_epi32(a[0]));
}

// Rows of 512 bytes (an f32 V row at D 128), each read by 8 unrolled 512-bit loads into 8 chains
// (P·V's shape: 8 load instructions, each striding a row).
__attribute__((noinline)) unsigned zmm_rows(const char* c, size_t n) {
  __m512i a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 512)
    for (int k = 0; k < 8; ++k) a[k] = _mm512_xor_si512(a[k], _mm512_load_si512(c + i + 64 * k));
  for (int k = 1; k < 8; ++k) a[0] = _mm512_xor_si512(a[0], a[k]);
  return static_cast<unsigned>(_mm512_reduce_or_epi32(a[0]));
}

int main(int argc, char** argv) {
  const size_t bytes = static_cast<size_t>(argc > 1 ? atoi(argv[1]) : 32) << 20;
  char* buf = huge_buffer(bytes);
  constexpr int M = 8;
  const char* names[M] = {"bench read (256-bit)",
                          "512-bit, 1 chain",
                          "512-bit, 2 chains",
                          "512-bit, 2 chains, p0 4K + p1 24K",
                          "512-bit, 2 chains, p1 24K",
                          "512-bit, 4 streams",
                          "512-bit, 1 chain, p0 4K + p1 24K",
                          "512-bit, 512-byte rows, 8 chains"};
  std::vector<double> r[M];
  volatile unsigned sink = 0;
  for (int rep = 0; rep < 15; ++rep)
    for (int i = 0; i < M; ++i) {
      const int m = (i + rep) % M;
      evict(buf, bytes);
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(2)
      {
        const size_t half = bytes / 2;
        const char* c = buf + omp_get_thread_num() * half;
        unsigned v = 0;
        switch (m) {
          case 0: v = bench_read(c, half); break;
          case 1: v = zmm_read<1, false, false>(c, half); break;
          case 2: v = zmm_read<2, false, false>(c, half); break;
          case 3: v = zmm_read<2, true, true>(c, half); break;
          case 4: v = zmm_read<2, false, true>(c, half); break;
          case 5: v = zmm_streams<4>(c, half); break;
          case 6: v = zmm_read<1, true, true>(c, half); break;
          case 7: v = zmm_rows(c, half); break;
        }
        sink = sink + v;
      }
      r[m].push_back(bytes / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
    }
  for (int m = 0; m < M; ++m) {
    std::sort(r[m].begin(), r[m].end());
    std::printf("%-36s median %.1f GB/s (%.1f-%.1f)\n", names[m], r[m][7], r[m][0], r[m][14]);
  }
}
