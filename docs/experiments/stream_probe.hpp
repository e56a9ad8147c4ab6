// What session 35's stream probes (read_shapes.cpp, decode_shapes.cpp) share: a buffer on 2 MiB
// pages filled with normal floats, its eviction on two threads, and the bench's plain read.
#pragma once

#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

// The order probes' harness (decode_order.cpp, rowmajor_order.cpp): `orders` ways of reading the
// `heads` heads of `head_bytes` each at buf, rotated pass by pass over `reps` passes, each pass
// after evict(): order 0 is the bench's plain read of the whole buffer (each thread its half), order
// m > 0 head(m, base of a head) over the heads on two threads. Prints each order's median GB/s.
template <class Head>
void time_orders(char* buf, long heads, size_t head_bytes, const char* const* names, int orders, Head&& head,
                 int width = 34, int reps = 21) {
  const size_t bytes = static_cast<size_t>(heads) * head_bytes;
  std::vector<std::vector<double>> r(static_cast<size_t>(orders));
  volatile int sink = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int i = 0; i < orders; ++i) {
      const int m = (i + rep) % orders;
      evict(buf, bytes);
      const auto t0 = std::chrono::steady_clock::now();
      if (m == 0) {
#pragma omp parallel num_threads(2)
        sink = sink + bench_read(buf + omp_get_thread_num() * bytes / 2, bytes / 2);
      } else {
#pragma omp parallel for num_threads(2) schedule(static)
        for (long h = 0; h < heads; ++h) sink = sink + _mm512_reduce_add_epi32(head(m, buf + h * head_bytes));
      }
      r[static_cast<size_t>(m)].push_back(static_cast<double>(bytes) /
                                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                                          1e9);
    }
  for (int m = 0; m < orders; ++m) {
    std::vector<double>& v = r[static_cast<size_t>(m)];
    std::sort(v.begin(), v.end());
    std::printf("%-*s median %.1f GB/s (%.1f-%.1f)\n", width, names[m], v[reps / 2], v[0], v[reps - 1]);
  }
}
