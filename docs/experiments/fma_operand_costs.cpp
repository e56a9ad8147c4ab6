// Session 57's probe (docs/performance.md, "Session 57": what a Zen 4 thread's loads cost next to
// its FMAs): 16 independent FMAs per step, L1-resident operands, one thread, the other operand taken
// each way (a broadcast load of 32/64/128/256 bits, a 512-bit load, one load and four in-register
// shuffles per four FMAs, with and without prefetches). Not built by the project:
//   g++ -O2 -mavx512f -mavx512dq -o /tmp/fma_operand_costs docs/experiments/fma_operand_costs.cpp
//   /tmp/fma_operand_costs        # ns per 16 FMAs ("cycles" assume 3.7 GHz)
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
template <int STRIDE, int PF = 0>
__attribute__((noinline)) float runsh(const float* k, const float* q, long steps, long reps) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (long r = 0; r < reps; ++r) {
    const float* kb = k;
    for (long c = 0; c < steps; c += 4, kb += 16) {
      if (PF) {
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) { __builtin_prefetch((const char*)k + 8192 + ((c * 64 + p * 64) & 8191), 0, 3); if (PF > 1) __builtin_prefetch((const char*)k + 16384 + ((c * 64 + p * 64) & 8191), 0, 2); }
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
      __m512 qv = _mm512_load_ps(q + ((c + i) & 31) * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; j += 4) {
        __m512 kv = _mm512_loadu_ps(kb + j * STRIDE);
        __m512 b0 = _mm512_shuffle_f32x4(kv, kv, 0x00);
        __m512 b1 = _mm512_shuffle_f32x4(kv, kv, 0x55);
        __m512 b2 = _mm512_shuffle_f32x4(kv, kv, 0xaa);
        __m512 b3 = _mm512_shuffle_f32x4(kv, kv, 0xff);
        acc[j] = _mm512_fmadd_ps(b0, qv, acc[j]);
        acc[j+1] = _mm512_fmadd_ps(b1, qv, acc[j+1]);
        acc[j+2] = _mm512_fmadd_ps(b2, qv, acc[j+2]);
        acc[j+3] = _mm512_fmadd_ps(b3, qv, acc[j+3]);
      }
      }
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
template <int STRIDE, int MODE>
__attribute__((noinline)) float run(const float* k, const float* q, long steps, long reps) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (long r = 0; r < reps; ++r) {
    const float* kb = k;
    for (long c = 0; c < steps; ++c, kb += 4) {
      __m512 qv = _mm512_load_ps(q + (c & 31) * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) {
        __m512 b;
        if (MODE == 0) b = _mm512_broadcast_f32x4(_mm_loadu_ps(kb + j * STRIDE));
        else if (MODE == 1) b = _mm512_set1_ps(kb[j * STRIDE]);
        else if (MODE == 3) b = _mm512_castpd_ps(_mm512_set1_pd(*(const double*)(kb + j * STRIDE)));
        else if (MODE == 4) b = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double*)(kb + j * STRIDE))));
        else b = _mm512_loadu_ps(kb + j * STRIDE);
        acc[j] = _mm512_fmadd_ps(b, qv, acc[j]);
      }
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}
int main() {
  float* k = (float*)aligned_alloc(64, 1 << 20); float* q = (float*)aligned_alloc(64, 4096);
  memset(k, 0, 1 << 20); memset(q, 0, 4096);
  const long steps = 32, reps = 2000000;
  auto t = [&](auto f, const char* name) { double t0 = now(); float x = f(); double dt = now() - t0;
    printf("%-28s %.2f cycles/step (at 3.7GHz est) ns/step %.3f %g\n", name, dt * 3.7e9 / (steps * reps), dt * 1e9 / (steps * reps), x); };
  for (int i = 0; i < 2; ++i) {
  t([&] { return run<128, 0>(k, q, steps, reps); }, "bcast128 stride 512B");
  t([&] { return runsh<128>(k, q, steps, reps); }, "load+4 shuffles per 4 fma");
  t([&] { return runsh<128, 1>(k, q, steps, reps); }, "  + 16 L1 prefetch per 64 fma");
  t([&] { return runsh<128, 2>(k, q, steps, reps); }, "  + 16 L1 + 16 L2 prefetch");
  t([&] { return run<132, 0>(k, q, steps, reps); }, "bcast128 stride 528B");
  t([&] { return run<4, 0>(k, q, steps, reps); }, "bcast128 stride 16B");
  t([&] { return run<128, 1>(k, q, steps, reps); }, "bcast32 stride 512B");
  t([&] { return run<128, 3>(k, q, steps, reps); }, "bcast64 stride 512B");
  t([&] { return run<128, 4>(k, q, steps, reps); }, "bcast256 stride 512B");
  t([&] { return run<128, 2>(k, q, steps, reps); }, "load512 stride 512B");
  t([&] { return run<16, 2>(k, q, steps, reps); }, "load512 stride 64B");
  }
}
