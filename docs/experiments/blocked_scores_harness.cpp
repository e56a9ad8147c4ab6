// Session 58's blocked-K scores harness (docs/performance.md, "Session 58"): not built by the project.
// The tree's blocked_scores_dispatch (a GQA group of four, f32, D 128) over an evicted blocked K of H
// kv heads × L keys (env H, L; default D2's 8 × 4096: 16.8 MB, 2 MiB pages), 512-key tiles as
// flash_narrow calls it, against a plain read of the same bytes (one 512-bit XOR chain, prefetcht0
// 4 KiB and prefetcht1 24 KiB ahead of each line); medians of 15 alternated passes. Arguments: L2
// blocks ahead (l2_key_blocks) and whether the next group is requested into L1. Variants by env:
// INORDER=1 one block at a time without requests (FlashWork::hardware_stream); ORDREQ=1 one block
// at a time with the tree's requests; MY=1|2 a copy of its f32 loop with one request pair per
// loaded line at D1 / D2 bytes ahead (BURST=1: the pair per iteration issued before the loads);
// (the FMA ladder's loop is docs/experiments/fma_ladder.cpp); NOEVICT=1 resident; NT=2 two threads; EV2=1
// evicts twice the bytes (as decode_driver, whose V follows K).
//   g++ -std=c++20 -O3 -DNDEBUG -march=native -fopenmp -I. -Iinclude -Iruntime -Ibuild/runtime/include \
//       docs/experiments/blocked_scores_harness.cpp -o /tmp/ks
//   /tmp/ks 3 1            # the amx_xeon rule's requests (3 blocks = 24 KiB into L2, L1 on)
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/kernels/ukernel/blocked_key_scores.hpp"
#include "stream_probe.hpp"  // huge_buffer
// blocked_scores' loop (f32, 4 rows, G blocks, U = 2) with requests at fixed distances from each loaded line.
template <int G>
__attribute__((noinline)) void my_scores(const float* const* blk, int64_t depth, const float* q, float* s, int l1,
                                         int l2) {
  constexpr int U = 2;
  __m512 acc[U][4][G];
  for (int u = 0; u < U; ++u)
    for (int r = 0; r < 4; ++r)
      for (int g = 0; g < G; ++g) acc[u][r][g] = _mm512_setzero_ps();
  static const bool burst = getenv("BURST");
  for (int64_t d = 0; d < depth; d += U) {
    if (burst) {
      const char* l = (const char*)(blk[0] + d * 16);
      if (l1) _mm_prefetch(l + l1, _MM_HINT_T0), _mm_prefetch(l + l1 + 64, _MM_HINT_T0);
      if (l2) _mm_prefetch(l + l2, _MM_HINT_T1), _mm_prefetch(l + l2 + 64, _MM_HINT_T1);
    }
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      __m512 kv[G];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const float* l = blk[g] + (d + u) * 16;
        if (!burst && l1) _mm_prefetch((const char*)l + l1, _MM_HINT_T0);
        if (!burst && l2) _mm_prefetch((const char*)l + l2, _MM_HINT_T1);
        kv[g] = _mm512_load_ps(l);
      }
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512 qb = _mm512_set1_ps(q[r * depth + d + u]);
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) acc[u][r][g] = _mm512_fmadd_ps(qb, kv[g], acc[u][r][g]);
      }
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int g = 0; g < G; ++g) _mm512_store_ps(s + r * 512 + g * 16, _mm512_add_ps(acc[0][r][g], acc[1][r][g]));
}
using namespace attend::kernels;
using A = xsimd::avx512bw;
int main(int argc, char** argv) {
  const int64_t H = getenv("H") ? atoi(getenv("H")) : 8, L = getenv("L") ? atoi(getenv("L")) : 4096, D = 128;
  const int64_t l2b = argc > 1 ? atoi(argv[1]) : 3;  // L2 blocks ahead
  const bool l1 = argc > 2 ? atoi(argv[2]) : 1;
  const int nt = getenv("NT") ? atoi(getenv("NT")) : 1;
  const int64_t tile = getenv("TILE") ? atoi(getenv("TILE")) : 512;
  const size_t bytes = H * L * D * 4;
  const bool inorder = getenv("INORDER");
  const bool noevict = getenv("NOEVICT");
  const size_t ebytes = getenv("EV2") ? 2 * bytes : bytes;
  char* K = huge_buffer(ebytes);
  std::vector<double> tk, tr;
  volatile float sink = 0;
  for (int rep = 0; rep < 15; ++rep) {
    for (int m = 0; m < 2; ++m) {
#pragma omp parallel num_threads(nt)
      {
        size_t part = ebytes / nt;
        char* p = K + omp_get_thread_num() * part;
        if (!noevict)
          for (size_t i = 0; i < part; i += 64) _mm_clflushopt(p + i);
        _mm_mfence();
      }
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(nt)
      {
        alignas(64) float q[4 * 128], s[4 * 512];
        for (int i = 0; i < 512; ++i) q[i] = 0.001f * i;
        const int th = omp_get_thread_num();
        float acc = 0;
        if (m == 0) {
          for (int64_t h = th * H / nt; h < (th + 1) * H / nt; ++h) {
            const float* kh = (const float*)K + h * L * D;
            for (int64_t j0 = 0; j0 < L; j0 += tile) {
              const float* blk[64];
              const int64_t blocks = tile / 16;
              const int64_t known = std::min<int64_t>(blocks + 4 + l2b, (L - j0) / 16);
              for (int64_t b = 0; b < known; ++b) blk[b] = kh + (j0 + b * 16) * D;
              if (getenv("ORDREQ")) {
                for (int64_t b = 0; b < blocks; ++b)
                  blocked_scores<A, 4, 1, float, 2>(
                      blk + b, D, q, s + b * 16, 512, l1 && b + 1 < known ? blk + b + 1 : nullptr,
                      l2b > 0 && b + l2b < known ? blk + b + l2b : nullptr, false, nullptr);
              } else if (getenv("MY")) {
                const int G = atoi(getenv("MY"));
                const int d1 = getenv("D1") ? atoi(getenv("D1")) : 4096, d2 = getenv("D2") ? atoi(getenv("D2")) : 24576;
                for (int64_t b = 0; b < blocks; b += G)
                  if (G == 2)
                    my_scores<2>(blk + b, D, q, s + b * 16, l1 ? d1 : 0, l2b ? d2 : 0);
                  else
                    my_scores<1>(blk + b, D, q, s + b * 16, l1 ? d1 : 0, l2b ? d2 : 0);
              } else
                blocked_scores_dispatch<A, float>(4, blk, blocks, known, D, q, s, 512, 1, l2b, l1, false, inorder);
              acc += s[7];
            }
          }
        } else {
          size_t part = bytes / nt;
          const char* c = K + th * part;
          __m512i x = _mm512_setzero_si512();
          for (size_t i = 0; i < part; i += 64) {
            _mm_prefetch(c + i + 4096, _MM_HINT_T0);
            _mm_prefetch(c + i + 24576, _MM_HINT_T1);
            x = _mm512_xor_si512(x, _mm512_load_si512(c + i));
          }
          acc += _mm512_reduce_add_ps(_mm512_castsi512_ps(x));
        }
#pragma omp critical
        sink = sink + acc;
      }
      (m ? tr : tk).push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(tk.begin(), tk.end());
  std::sort(tr.begin(), tr.end());
  printf("l2b=%lld l1=%d nt=%d tile=%lld: scores %.1f GB/s, read %.1f GB/s, %.0f%%\n", (long long)l2b, l1, nt,
         (long long)tile, bytes / tk[7] / 1e9, bytes / tr[7] / 1e9, 100 * tr[7] / tk[7]);
}
