// Session 34's replica of the 8-bit cache's GQA decode access pattern (docs/performance.md,
// "Session 34"): not built by the project. One thread reads a buffer laid out as the cache's
// storage for D2's shape (8 kv heads × 4096 keys, D 128: K blocks, V rows, K scales, V scales),
// in the kernel's order (per head, 256-key tiles: two 2 KiB K blocks a line of each at a time, the
// tile's K scales, its V rows, its V scales), with prefetcht0 / prefetcht1 at the kernel's
// distances, and W × 8 independent vpdpwssd (throughput-bound work, like the kernel's) per 128
// bytes; it prints the share of a plain read of the same bytes (both evicted with clflushopt
// first; median of 15) and the same pass's time with the data warm (from the L3).
//   g++ -O2 -mavx512f -mavx512bw -mavx512vnni -mclflushopt decode_replica.cpp -o decode_replica
//   ./decode_replica 1 8192 8192 24576 W    # mode (0: K lines in order, 1: two blocks, 2: no
//                                            # scales), K and V L1 distance, L2 distance, W
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
static void* huge(size_t n) {
  void* p = mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* a = (char*)(((uintptr_t)p + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
  madvise(a, n, MADV_HUGEPAGE);
  memset(a, 0x3f, n);
  return a;
}
static void evict(char* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_clflushopt(p + i);
  _mm_sfence();
}
const long H = 8, L = 4096, D = 128, T = 256;
const size_t KB = H * L * D, SB = H * L * 4;
static inline __m512i ld(const char* p) { return _mm512_load_si512(p); }
int mode, pfk, pfv, l2, W;
static inline __m512i work(__m512i a, int w) {
  __m512i x0 = a, x1 = _mm512_add_epi32(a, a), x2 = _mm512_sub_epi32(a, a), x3 = _mm512_abs_epi32(a),
          x4 = _mm512_srli_epi32(a, 1), x5 = _mm512_slli_epi32(a, 1), x6 = _mm512_srli_epi32(a, 2),
          x7 = _mm512_slli_epi32(a, 2);
  const __m512i m = _mm512_set1_epi32(3);
  for (int i = 0; i < w; ++i) {
    asm("vpdpwssd %1, %1, %0" : "+v"(x0) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x1) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x2) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x3) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x4) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x5) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x6) : "v"(m));
    asm("vpdpwssd %1, %1, %0" : "+v"(x7) : "v"(m));
  }
  return _mm512_xor_si512(_mm512_xor_si512(_mm512_xor_si512(x0, x1), _mm512_xor_si512(x2, x3)),
                          _mm512_xor_si512(_mm512_xor_si512(x4, x5), _mm512_xor_si512(x6, x7)));
}
__attribute__((noinline)) __m512i run(const char* base) {
  const char* K = base;
  const char* V = base + KB;
  const char* KS = base + 2 * KB;
  const char* VS = KS + SB;
  __m512i acc = _mm512_setzero_si512();
  for (long h = 0; h < H; ++h) {
    const char* k = K + h * L * D;
    const char* v = V + h * L * D;
    const char* ks = KS + h * L * 4;
    const char* vs = VS + h * L * 4;
    for (long t = 0; t < L; t += T) {
      const char* kt = k + t * D;
      const char* vt = v + t * D;
      if (mode == 0) {  // sequential lines
        for (long i = 0; i < T * D; i += 64) {
          if (pfk) _mm_prefetch(kt + i + pfk, _MM_HINT_T0);
          if (l2) _mm_prefetch(kt + i + l2, _MM_HINT_T1);
          acc = _mm512_xor_si512(acc, ld(kt + i));
        }
      } else {  // two blocks of 2 KiB interleaved line by line
        for (long b = 0; b < T / 16; b += 2)
          for (long c = 0; c < D / 4; ++c) {
            const char* a0 = kt + b * 16 * D + c * 64;
            if (pfk) {
              _mm_prefetch(a0 + pfk, _MM_HINT_T0);
              _mm_prefetch(a0 + 2048 + pfk, _MM_HINT_T0);
            }
            if (l2) {
              _mm_prefetch(a0 + l2, _MM_HINT_T1);
              _mm_prefetch(a0 + 2048 + l2, _MM_HINT_T1);
            }
            acc = _mm512_xor_si512(acc, _mm512_xor_si512(ld(a0), ld(a0 + 2048)));
            if (W && (c & 1)) acc = work(acc, W);
          }
      }
      if (mode != 2)
        for (long i = 0; i < T * 4; i += 64) acc = _mm512_xor_si512(acc, ld(ks + t * 4 + i));
      for (long i = 0; i < T * D; i += 64) {
        if (pfv) _mm_prefetch(vt + i + pfv, _MM_HINT_T0);
        if (l2) _mm_prefetch(vt + i + l2, _MM_HINT_T1);
        acc = _mm512_xor_si512(acc, ld(vt + i));
        if (W && (i & 64)) acc = work(acc, W);
      }
      if (mode != 2)
        for (long i = 0; i < T * 4; i += 64) acc = _mm512_xor_si512(acc, ld(vs + t * 4 + i));
    }
  }
  return acc;
}
int main(int argc, char** argv) {
  mode = atoi(argv[1]);
  pfk = atoi(argv[2]);
  pfv = atoi(argv[3]);
  l2 = atoi(argv[4]);
  W = argc > 5 ? atoi(argv[5]) : 0;
  size_t bytes = 2 * KB + 2 * SB;
  char* buf = (char*)huge(bytes);
  std::vector<double> r;
  volatile long sink = 0;
  for (int rep = 0; rep < 15; ++rep) {
    evict(buf, bytes);
    auto t0 = std::chrono::steady_clock::now();
    __m512i a = _mm512_setzero_si512();
    for (size_t i = 0; i < bytes; i += 256)
      a = _mm512_xor_si512(a, _mm512_xor_si512(_mm512_xor_si512(ld(buf + i), ld(buf + i + 64)),
                                               _mm512_xor_si512(ld(buf + i + 128), ld(buf + i + 192))));
    double tr = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    evict(buf, bytes);
    t0 = std::chrono::steady_clock::now();
    __m512i b = run(buf);
    double tk = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += _mm512_reduce_add_epi64(a) + _mm512_reduce_add_epi64(b);
    r.push_back(tr / tk);
  }
  std::sort(r.begin(), r.end());
  {
    run(buf);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) {
      __m512i b = run(buf);
      sink += _mm512_reduce_add_epi64(b);
    }
    double tw = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
    evict(buf, bytes);
    t0 = std::chrono::steady_clock::now();
    __m512i a = _mm512_setzero_si512();
    for (size_t i = 0; i < bytes; i += 64) a = _mm512_xor_si512(a, ld(buf + i));
    double tr = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink += _mm512_reduce_add_epi64(a);
    printf("  warm (L3) run %.0f us vs DRAM read %.0f us: ", tw * 1e6, tr * 1e6);
  }
  printf("W %d mode %d pfk %d pfv %d l2 %d: %.1f%% (min %.1f max %.1f)\n", W, mode, pfk, pfv, l2, 100 * r[r.size() / 2],
         100 * r[0], 100 * r.back());
}
