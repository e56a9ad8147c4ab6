// What session 35's stream probes (read_shapes.cpp, decode_shapes.cpp) share: a buffer on 2 MiB
// pages filled with normal floats, its eviction on two threads, and the bench's plain read.
#pragma once

#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

// n bytes on 2 MiB pages (where the kernel allows), filled with normal floats (denormal products
// would make every FMA a microcode assist).
inline char* huge_buffer(size_t n) {
  void* p = mmap(nullptr, n + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  char* a = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1));
  madvise(a, n, MADV_HUGEPAGE);
  float* f = reinterpret_cast<float*>(a);
  for (size_t i = 0; i < n / 4; ++i) f[i] = 1e-3f * static_cast<float>(i % 97);
  return a;
}

// Every line of [p, p + n) flushed, each of two threads its half, fenced on each (as the bench).
inline void evict(char* p, size_t n) {
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    for (size_t i = n / 2 * t; i < n / 2 * (t + 1); i += 64) _mm_clflushopt(p + i);
    _mm_mfence();
  }
}

// The bench's plain read (bench/machine.cpp xor_words; GCC 12 emits 256-bit loads for it).
__attribute__((noinline)) inline unsigned bench_read(const char* c, size_t n) {
  unsigned x[16] = {};
  const unsigned* w = reinterpret_cast<const unsigned*>(c);
  for (size_t i = 0; i < n / 4; i += 16) {
#pragma omp simd
    for (int k = 0; k < 16; ++k) x[k] ^= w[i + k];
  }
  unsigned y = 0;
  for (unsigned v : x) y ^= v;
  return y;
}
