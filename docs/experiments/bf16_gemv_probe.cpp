// Session 36's question for the bf16 layer's decode (docs/performance.md, "Session 36"): can a
// bf16 GEMV stream its weights at the share of a plain read that oneDNN 2.6's f32 GEMV reaches on
// the AMX Xeon (~105%), where oneDNN's bf16 one reads ~85%? Not built by the project; a probe, not
// a kernel: M = 1, y[N] = x[K]·W, W bf16 in blocks of 16 outputs × 2 inputs (64 bytes, the
// vdpbf16ps operand), each block of 16 outputs one contiguous stream of K/2 such lines; the output
// blocks split between 2 threads. Evicted before each call (clflushopt) and paired with the
// bench's plain read of the same bytes; medians of 15.
//   g++ -O2 -march=native -fopenmp docs/experiments/bf16_gemv_probe.cpp -o /tmp/bf16_gemv
//   /tmp/bf16_gemv 6144      # N (K 4096)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "stream_probe.hpp"

constexpr long K = 4096;

// One block of 16 outputs: K/2 lines of 16 × 2 bf16; x as bf16 pairs. PF: prefetcht0 4 KiB and
// prefetcht1 24 KiB ahead (the fastest plain read of session 35).
template <bool PF>
__attribute__((noinline)) __m512 block(const char* w, const unsigned* xp) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (long kp = 0; kp < K / 2; kp += 4, w += 256) {
    if (PF) {
      _mm_prefetch(w + 4096, _MM_HINT_T0), _mm_prefetch(w + 4096 + 64, _MM_HINT_T0);
      _mm_prefetch(w + 4096 + 128, _MM_HINT_T0), _mm_prefetch(w + 4096 + 192, _MM_HINT_T0);
      _mm_prefetch(w + 24576, _MM_HINT_T1), _mm_prefetch(w + 24576 + 64, _MM_HINT_T1);
      _mm_prefetch(w + 24576 + 128, _MM_HINT_T1), _mm_prefetch(w + 24576 + 192, _MM_HINT_T1);
    }
    a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(w), (__m512bh)_mm512_set1_epi32(xp[kp]));
    a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_load_si512(w + 64), (__m512bh)_mm512_set1_epi32(xp[kp + 1]));
    a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_load_si512(w + 128), (__m512bh)_mm512_set1_epi32(xp[kp + 2]));
    a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_load_si512(w + 192), (__m512bh)_mm512_set1_epi32(xp[kp + 3]));
  }
  return _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
}

int main(int argc, char** argv) {
  const long N = argc > 1 ? atol(argv[1]) : 6144;
  const size_t bytes = static_cast<size_t>(N) * K * 2;
  char* w = huge_buffer(bytes);  // (normal floats' bit patterns: normal bf16 pairs too)
  std::vector<unsigned> xp(K / 2, 0x3c003c00u);
  std::vector<float> y(N);
  const char* names[3] = {"plain read", "bf16 GEMV", "bf16 GEMV + prefetch 4K/24K"};
  std::vector<double> ms[3], share[2];
  for (int rep = 0; rep < 15; ++rep) {
    double t[3];
    for (int m = 0; m < 3; ++m) {
      evict(w, bytes);
      const auto t0 = std::chrono::steady_clock::now();
      if (m == 0) {
        volatile unsigned s = 0;
#pragma omp parallel num_threads(2)
        s = s + bench_read(w + omp_get_thread_num() * bytes / 2, bytes / 2);
      } else {
#pragma omp parallel for num_threads(2) schedule(static)
        for (long nb = 0; nb < N / 16; ++nb) {
          const char* b = w + nb * (K / 2) * 64;
          _mm512_storeu_ps(y.data() + nb * 16, m == 1 ? block<false>(b, xp.data()) : block<true>(b, xp.data()));
        }
      }
      t[m] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ms[m].push_back(t[m] * 1e3);
    }
    share[0].push_back(t[0] / t[1] * 100), share[1].push_back(t[0] / t[2] * 100);
  }
  for (auto& v : ms) std::sort(v.begin(), v.end());
  for (auto& v : share) std::sort(v.begin(), v.end());
  std::printf("N %ld, %.1f MB: %s %.3f ms; %s %.3f ms, %.1f%%; %s %.3f ms, %.1f%%\n", N, bytes / 1e6, names[0],
              ms[0][7], names[1], ms[1][7], share[0][7], names[2], ms[2][7], share[1][7]);
}
