// Session 33's standalone synthetic (docs/performance.md, "The GQA shapes' remaining gap"): not
// built by the project. It reads a buffer on two threads (2 MiB pages, clflushopt before each
// pass) against a plain read of the same bytes, with decode's GQA arithmetic per byte (R rows: 2R
// FMAs per 128 bytes) and optional prefetcht0 / prefetcht1 per line at fixed distances; the R = 4
// pass alternates CHUNK-byte chunks of two streams ("K" and "V"), as decode's tiles do.
//   g++ -O2 -mavx512f -mclflushopt -fopenmp decode_synthetic.cpp -o decode_synthetic
//   CHUNK=131072 OMP_NUM_THREADS=2 ./decode_synthetic 64 4096 24576   # MiB, L1 and L2 distances
// NOEVICT=1 with a small buffer (1 MiB) measures the arithmetic alone (GB/s columns). The data
// must be normal floats: bytes 0x01 made every FMA a microcode assist (denormal products).
// The next step: grow it towards flash_narrow until it loses what the kernel loses.
// Session 35: its plain read (four 512-bit loads into one XOR chain per 256 bytes) streams ~10%
// slower on the AMX Xeon than the bench's Evict::read (28.4–31.7 against 33–35 GB/s), so its
// shares stand against a slower read than the bench's; docs/experiments/read_shapes.cpp compares
// read loops, and its eviction fences only the calling thread (the bench fences each).
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
static void* huge(size_t n) {
  void* p = mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char* a = (char*)(((uintptr_t)p + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
  madvise(a, n, MADV_HUGEPAGE);
  memset(a, 0x3f, n);
  return a;
}
static void evict(char* p, size_t n) {
#pragma omp parallel for
  for (size_t i = 0; i < n; i += 64) _mm_clflushopt(p + i);
  _mm_sfence();
}
template <int R>
__attribute__((noinline)) __m512 fmas(const float* p, size_t n, const float* q, int pfl1, int pfl2) {
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 32) {
    if (pfl1)
      _mm_prefetch((const char*)(p + i) + pfl1, _MM_HINT_T0),
          _mm_prefetch((const char*)(p + i) + pfl1 + 64, _MM_HINT_T0);
    if (pfl2)
      _mm_prefetch((const char*)(p + i) + pfl2, _MM_HINT_T1),
          _mm_prefetch((const char*)(p + i) + pfl2 + 64, _MM_HINT_T1);
    __m512 k0 = _mm512_load_ps(p + i), k1 = _mm512_load_ps(p + i + 16);
    for (int r = 0; r < R; ++r) {
      __m512 qb = _mm512_set1_ps(q[(i / 32 + r) & 127]);
      acc[r][0] = _mm512_fmadd_ps(qb, k0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(qb, k1, acc[r][1]);
    }
  }
  __m512 s = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) s = _mm512_add_ps(s, _mm512_add_ps(acc[r][0], acc[r][1]));
  return s;
}
int main(int argc, char** argv) {
  size_t bytes = (size_t)atoi(argv[1]) << 20;
  int pfl1 = argc > 2 ? atoi(argv[2]) : 0, pfl2 = argc > 3 ? atoi(argv[3]) : 0;
  char* buf = (char*)huge(bytes);
  float q[256];
  for (int i = 0; i < 256; ++i) q[i] = 0.001f * i;
  volatile float sink = 0;
  for (int rep = 0; rep < 7; ++rep) {
    double t[4];
    for (int mode = 0; mode < 4; ++mode) {
      if (!getenv("NOEVICT")) evict(buf, bytes);
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(2)
      {
        int th = omp_get_thread_num();
        size_t half = bytes / 2;
        const float* p = (const float*)(buf + th * half);
        __m512 r;
        if (mode == 0) {
          __m512i a = _mm512_setzero_si512();
          const char* c = (const char*)p;
          for (size_t i = 0; i < half; i += 256)
            a = _mm512_xor_si512(
                _mm512_xor_si512(a, _mm512_load_si512(c + i)),
                _mm512_xor_si512(_mm512_load_si512(c + i + 64),
                                 _mm512_xor_si512(_mm512_load_si512(c + i + 128), _mm512_load_si512(c + i + 192))));
          r = _mm512_castsi512_ps(a);
        } else if (mode == 1)
          r = fmas<1>(p, half / 4, q, pfl1, pfl2);
        else if (mode == 2) {
          // K/V alternation: the thread's half is K then V (each half/2); chunks of `chunk` bytes
          // of K, then of V, with the requests running on past each chunk's end (as decode does).
          size_t chunk = getenv("CHUNK") ? atol(getenv("CHUNK")) : 131072;
          const float* k = p;
          const float* v = p + half / 8;
          r = _mm512_setzero_ps();
          for (size_t o = 0; o < half / 2; o += chunk) {
            r = _mm512_add_ps(r, fmas<4>(k + o / 4, chunk / 4, q, pfl1, pfl2));
            r = _mm512_add_ps(r, fmas<4>(v + o / 4, chunk / 4, q, pfl1, pfl2));
          }
        } else
          r = fmas<8>(p, half / 4, q, pfl1, pfl2);
        sink += _mm512_reduce_add_ps(r);
      }
      t[mode] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    printf("read %.1f GB/s | R=1 %.0f%% R=4 K/V chunks %.0f%% R=8 %.0f%% | GB/s %.1f %.1f %.1f\n", bytes / t[0] / 1e9,
           100 * t[0] / t[1], 100 * t[0] / t[2], 100 * t[0] / t[3], bytes / t[1] / 1e9, bytes / t[2] / 1e9,
           bytes / t[3] / 1e9);
  }
}
