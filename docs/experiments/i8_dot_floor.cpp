// Session 43's synthetic (docs/performance.md, "Session 43"): not built by the project. The 8-bit
// GQA decode's irreducible integer work against a plain read of the same bytes, on all OpenMP
// threads (each its own contiguous part; 2 MiB pages, clflushopt of every line before each pass).
// Per 64-byte line: NR vpdpbusd into independent accumulators — what a kernel multiplying 8-bit
// codes by 8-bit Q and 8-bit P issues for NR rows per kv head (Q·Kᵀ and P·V: 2 · 4 · 128 MACs per
// key and kv head at NR = 4, D 128 = 16 vpdpbusd per 264 bytes, ~4 per line).
//   g++ -O2 -mavx512f -mavx512bw -mavx512vnni -mclflushopt -fopenmp i8_dot_floor.cpp -o i8_dot_floor
//   OMP_NUM_THREADS=2 ./i8_dot_floor MiB NR L1ahead L2ahead      # e.g. 64 4 4096 65536
// NOEVICT=1 with a small buffer (0.5 MiB) times the arithmetic alone (400 passes per timing).
// NR = 4 only: CHUNK=bytes alternates two streams ("K", then "V") chunk by chunk, as decode's
// tiles do; PAUSE=n adds n × 8 independent FMAs after each K+V chunk pair (a compute-only phase,
// the softmax's place); PFPAUSE=1|2 requests the next K chunk's lines through the pause (into L2 |
// L1), PFBEYOND=1 the lines L2ahead past it instead.
// Prints the medians of 9 pairs: the read's GB/s, the kernel's, and the kernel's share of the read.
#include <immintrin.h>
#include <omp.h>
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
  for (size_t i = 0; i < n; ++i) a[i] = (char)(i * 131 + 7);
  return a;
}
static void evict(char* p, size_t n) {
#pragma omp parallel
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    size_t part = n / nt;
    for (size_t i = t * part; i < (t + 1) * part; i += 64) _mm_clflushopt(p + i);
    _mm_sfence();
  }
}
// dots1 … dots8 are written out, one per NR (4 lines per step and NR·4 accumulators;
// 2 lines and 16 for NR = 8):
// as one template over accumulator arrays, GCC 12 kept the accumulators on the stack (a load and a
// store around every vpdpbusd): NR = 4 resident ran at 76–117 GB/s against 204 written out.
__attribute__((noinline)) __m512i dots1(const char* p, size_t n, int pf1, int pf2) {
  const __m512i q0 = _mm512_set1_epi32(0x01020304 * 1);
  __m512i a0_0 = _mm512_setzero_si512();
  __m512i a1_0 = _mm512_setzero_si512();
  __m512i a2_0 = _mm512_setzero_si512();
  __m512i a3_0 = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 256) {
    if (pf1) {
      _mm_prefetch(p + i + pf1 + 0, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 64, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 128, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 192, _MM_HINT_T0);
    }
    if (pf2) {
      _mm_prefetch(p + i + pf2 + 0, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 64, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 128, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 192, _MM_HINT_T1);
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 0);
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_0) : "v"(k), "v"(q0));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 64);
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_0) : "v"(k), "v"(q0));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 128);
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_0) : "v"(k), "v"(q0));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 192);
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_0) : "v"(k), "v"(q0));
    }
  }
  __m512i s = _mm512_setzero_si512();
  s = _mm512_add_epi32(s, a0_0);
  s = _mm512_add_epi32(s, a1_0);
  s = _mm512_add_epi32(s, a2_0);
  s = _mm512_add_epi32(s, a3_0);
  return s;
}
__attribute__((noinline)) __m512i dots2(const char* p, size_t n, int pf1, int pf2) {
  const __m512i q0 = _mm512_set1_epi32(0x01020304 * 1);
  const __m512i q1 = _mm512_set1_epi32(0x01020304 * 2);
  __m512i a0_0 = _mm512_setzero_si512();
  __m512i a0_1 = _mm512_setzero_si512();
  __m512i a1_0 = _mm512_setzero_si512();
  __m512i a1_1 = _mm512_setzero_si512();
  __m512i a2_0 = _mm512_setzero_si512();
  __m512i a2_1 = _mm512_setzero_si512();
  __m512i a3_0 = _mm512_setzero_si512();
  __m512i a3_1 = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 256) {
    if (pf1) {
      _mm_prefetch(p + i + pf1 + 0, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 64, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 128, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 192, _MM_HINT_T0);
    }
    if (pf2) {
      _mm_prefetch(p + i + pf2 + 0, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 64, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 128, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 192, _MM_HINT_T1);
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 0);
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_1) : "v"(k), "v"(q1));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 64);
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_1) : "v"(k), "v"(q1));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 128);
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_1) : "v"(k), "v"(q1));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 192);
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_1) : "v"(k), "v"(q1));
    }
  }
  __m512i s = _mm512_setzero_si512();
  s = _mm512_add_epi32(s, a0_0);
  s = _mm512_add_epi32(s, a0_1);
  s = _mm512_add_epi32(s, a1_0);
  s = _mm512_add_epi32(s, a1_1);
  s = _mm512_add_epi32(s, a2_0);
  s = _mm512_add_epi32(s, a2_1);
  s = _mm512_add_epi32(s, a3_0);
  s = _mm512_add_epi32(s, a3_1);
  return s;
}
__attribute__((noinline)) __m512i dots4(const char* p, size_t n, int pf1, int pf2) {
  const __m512i q0 = _mm512_set1_epi32(0x01020304 * 1);
  const __m512i q1 = _mm512_set1_epi32(0x01020304 * 2);
  const __m512i q2 = _mm512_set1_epi32(0x01020304 * 3);
  const __m512i q3 = _mm512_set1_epi32(0x01020304 * 4);
  __m512i a0_0 = _mm512_setzero_si512();
  __m512i a0_1 = _mm512_setzero_si512();
  __m512i a0_2 = _mm512_setzero_si512();
  __m512i a0_3 = _mm512_setzero_si512();
  __m512i a1_0 = _mm512_setzero_si512();
  __m512i a1_1 = _mm512_setzero_si512();
  __m512i a1_2 = _mm512_setzero_si512();
  __m512i a1_3 = _mm512_setzero_si512();
  __m512i a2_0 = _mm512_setzero_si512();
  __m512i a2_1 = _mm512_setzero_si512();
  __m512i a2_2 = _mm512_setzero_si512();
  __m512i a2_3 = _mm512_setzero_si512();
  __m512i a3_0 = _mm512_setzero_si512();
  __m512i a3_1 = _mm512_setzero_si512();
  __m512i a3_2 = _mm512_setzero_si512();
  __m512i a3_3 = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 256) {
    if (pf1) {
      _mm_prefetch(p + i + pf1 + 0, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 64, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 128, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 192, _MM_HINT_T0);
    }
    if (pf2) {
      _mm_prefetch(p + i + pf2 + 0, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 64, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 128, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 192, _MM_HINT_T1);
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 0);
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_3) : "v"(k), "v"(q3));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 64);
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_3) : "v"(k), "v"(q3));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 128);
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a2_3) : "v"(k), "v"(q3));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 192);
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a3_3) : "v"(k), "v"(q3));
    }
  }
  __m512i s = _mm512_setzero_si512();
  s = _mm512_add_epi32(s, a0_0);
  s = _mm512_add_epi32(s, a0_1);
  s = _mm512_add_epi32(s, a0_2);
  s = _mm512_add_epi32(s, a0_3);
  s = _mm512_add_epi32(s, a1_0);
  s = _mm512_add_epi32(s, a1_1);
  s = _mm512_add_epi32(s, a1_2);
  s = _mm512_add_epi32(s, a1_3);
  s = _mm512_add_epi32(s, a2_0);
  s = _mm512_add_epi32(s, a2_1);
  s = _mm512_add_epi32(s, a2_2);
  s = _mm512_add_epi32(s, a2_3);
  s = _mm512_add_epi32(s, a3_0);
  s = _mm512_add_epi32(s, a3_1);
  s = _mm512_add_epi32(s, a3_2);
  s = _mm512_add_epi32(s, a3_3);
  return s;
}
__attribute__((noinline)) __m512i dots8(const char* p, size_t n, int pf1, int pf2) {
  const __m512i q0 = _mm512_set1_epi32(0x01020304 * 1);
  const __m512i q1 = _mm512_set1_epi32(0x01020304 * 2);
  const __m512i q2 = _mm512_set1_epi32(0x01020304 * 3);
  const __m512i q3 = _mm512_set1_epi32(0x01020304 * 4);
  const __m512i q4 = _mm512_set1_epi32(0x01020304 * 5);
  const __m512i q5 = _mm512_set1_epi32(0x01020304 * 6);
  const __m512i q6 = _mm512_set1_epi32(0x01020304 * 7);
  const __m512i q7 = _mm512_set1_epi32(0x01020304 * 8);
  __m512i a0_0 = _mm512_setzero_si512();
  __m512i a0_1 = _mm512_setzero_si512();
  __m512i a0_2 = _mm512_setzero_si512();
  __m512i a0_3 = _mm512_setzero_si512();
  __m512i a0_4 = _mm512_setzero_si512();
  __m512i a0_5 = _mm512_setzero_si512();
  __m512i a0_6 = _mm512_setzero_si512();
  __m512i a0_7 = _mm512_setzero_si512();
  __m512i a1_0 = _mm512_setzero_si512();
  __m512i a1_1 = _mm512_setzero_si512();
  __m512i a1_2 = _mm512_setzero_si512();
  __m512i a1_3 = _mm512_setzero_si512();
  __m512i a1_4 = _mm512_setzero_si512();
  __m512i a1_5 = _mm512_setzero_si512();
  __m512i a1_6 = _mm512_setzero_si512();
  __m512i a1_7 = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 128) {
    if (pf1) {
      _mm_prefetch(p + i + pf1 + 0, _MM_HINT_T0);
      _mm_prefetch(p + i + pf1 + 64, _MM_HINT_T0);
    }
    if (pf2) {
      _mm_prefetch(p + i + pf2 + 0, _MM_HINT_T1);
      _mm_prefetch(p + i + pf2 + 64, _MM_HINT_T1);
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 0);
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_3) : "v"(k), "v"(q3));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_4) : "v"(k), "v"(q4));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_5) : "v"(k), "v"(q5));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_6) : "v"(k), "v"(q6));
      asm("vpdpbusd %2, %1, %0" : "+v"(a0_7) : "v"(k), "v"(q7));
    }
    {
      const __m512i k = _mm512_load_si512(p + i + 64);
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_0) : "v"(k), "v"(q0));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_1) : "v"(k), "v"(q1));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_2) : "v"(k), "v"(q2));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_3) : "v"(k), "v"(q3));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_4) : "v"(k), "v"(q4));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_5) : "v"(k), "v"(q5));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_6) : "v"(k), "v"(q6));
      asm("vpdpbusd %2, %1, %0" : "+v"(a1_7) : "v"(k), "v"(q7));
    }
  }
  __m512i s = _mm512_setzero_si512();
  s = _mm512_add_epi32(s, a0_0);
  s = _mm512_add_epi32(s, a0_1);
  s = _mm512_add_epi32(s, a0_2);
  s = _mm512_add_epi32(s, a0_3);
  s = _mm512_add_epi32(s, a0_4);
  s = _mm512_add_epi32(s, a0_5);
  s = _mm512_add_epi32(s, a0_6);
  s = _mm512_add_epi32(s, a0_7);
  s = _mm512_add_epi32(s, a1_0);
  s = _mm512_add_epi32(s, a1_1);
  s = _mm512_add_epi32(s, a1_2);
  s = _mm512_add_epi32(s, a1_3);
  s = _mm512_add_epi32(s, a1_4);
  s = _mm512_add_epi32(s, a1_5);
  s = _mm512_add_epi32(s, a1_6);
  s = _mm512_add_epi32(s, a1_7);
  return s;
}
static __m512i plain(const char* c, size_t n) {
  __m512i a = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 256)
    a = _mm512_xor_si512(
        _mm512_xor_si512(a, _mm512_load_si512(c + i)),
        _mm512_xor_si512(_mm512_load_si512(c + i + 64),
                         _mm512_xor_si512(_mm512_load_si512(c + i + 128), _mm512_load_si512(c + i + 192))));
  return a;
}
int main(int argc, char** argv) {
  size_t bytes = (size_t)(atof(argv[1]) * (1 << 20));
  int nr = argc > 2 ? atoi(argv[2]) : 4;
  int pf1 = argc > 3 ? atoi(argv[3]) : 0, pf2 = argc > 4 ? atoi(argv[4]) : 0;
  char* buf = (char*)huge(bytes);
  bool noevict = getenv("NOEVICT");
  int reps = noevict ? 400 : 1;
  size_t beyond = getenv("PFBEYOND") ? pf2 : 0;
  int pfpause = getenv("PFPAUSE") ? atoi(getenv("PFPAUSE")) : 0;
  int pause = getenv("PAUSE") ? atoi(getenv("PAUSE")) : 0;
  size_t chunk = getenv("CHUNK") ? atol(getenv("CHUNK")) : 0;
  volatile int sink = 0;
  std::vector<double> share, gbr, gbd;
  for (int rep = 0; rep < 9; ++rep) {
    double t[2];
    for (int mode = 0; mode < 2; ++mode) {
      if (!noevict) evict(buf, bytes);
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
      {
        int th = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t part = bytes / nt;
        const char* p = buf + th * part;
        __m512i r = _mm512_setzero_si512();
        for (int k = 0; k < reps; ++k) {
          if (mode == 0)
            r = _mm512_add_epi32(r, plain(p, part));
          else if (nr == 1)
            r = _mm512_add_epi32(r, dots1(p, part, pf1, pf2));
          else if (nr == 2)
            r = _mm512_add_epi32(r, dots2(p, part, pf1, pf2));
          else if (nr == 4 && chunk) {
            // K/V alternation: the part's first half is "K", the second "V", chunk bytes of each in turn.
            const char* k = p;
            const char* v = p + part / 2;
            for (size_t o = 0; o < part / 2; o += chunk) {
              r = _mm512_add_epi32(r, dots4(k + o, chunk, pf1, pf2));
              r = _mm512_add_epi32(r, dots4(v + o, chunk, pf1, pf2));
              if (pause) {  // a compute-only pass between tiles (the softmax's place): `pause` dependent-free FMAs x 8
                __m512 x0 = _mm512_set1_ps(1.0f), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0;
                const __m512 m = _mm512_set1_ps(0.999f), a = _mm512_set1_ps(0.001f);
                const char* nk = k + o + chunk + beyond;
                const size_t lines = chunk / 64;
                for (int it = 0; it < pause; ++it) {
                  if (pfpause && (size_t)it < lines && o + chunk + beyond < part / 2) {
                    if (pfpause == 1)
                      _mm_prefetch(nk + 64 * it, _MM_HINT_T1);
                    else
                      _mm_prefetch(nk + 64 * it, _MM_HINT_T0);
                  }
                  x0 = _mm512_fmadd_ps(x0, m, a);
                  x1 = _mm512_fmadd_ps(x1, m, a);
                  x2 = _mm512_fmadd_ps(x2, m, a);
                  x3 = _mm512_fmadd_ps(x3, m, a);
                  x4 = _mm512_fmadd_ps(x4, m, a);
                  x5 = _mm512_fmadd_ps(x5, m, a);
                  x6 = _mm512_fmadd_ps(x6, m, a);
                  x7 = _mm512_fmadd_ps(x7, m, a);
                }
                r = _mm512_add_epi32(
                    r, _mm512_castps_si512(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                                                         _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(x6, x7)))));
              }
            }
          } else if (nr == 4)
            r = _mm512_add_epi32(r, dots4(p, part, pf1, pf2));
          else
            r = _mm512_add_epi32(r, dots8(p, part, pf1, pf2));
        }
        sink += _mm512_reduce_add_epi32(r);
      }
      t[mode] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    share.push_back(100 * t[0] / t[1]);
    gbr.push_back(reps * bytes / t[0] / 1e9);
    gbd.push_back(reps * bytes / t[1] / 1e9);
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto mn = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  auto mx = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  printf("NR=%d pf %d/%d: read %.1f GB/s, dots %.1f GB/s, share median %.1f%% (%.1f-%.1f)\n", nr, pf1, pf2, med(gbr),
         med(gbd), med(share), mn(share), mx(share));
}
