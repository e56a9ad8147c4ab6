// Session 55: can AMX tiles take the bf16 decode GEMV's 5-16 rows (layer/attend-bf16/L4: 8 rows,
// oneDNN's brg:avx512_core_amx_bf16 today, reading its weights at ~65% of a plain read)? The weights
// in oneDNN's BA16a64b2a packing are already tdpbf16ps's B operand (a 32-deep chunk of a 64-column
// block = four 16 x 64-byte tiles, rows 256 bytes apart), so per chunk: x as one A tile, four B tiles,
// four tdpbf16ps into four C tiles. K 4096, N and rows from the command line, weights flushed
// (clflushopt) before each call when the third argument is 1; 2 threads, medians of 15 calls.
//   g++ -O2 -march=native -mamx-tile -mamx-bf16 -fopenmp docs/experiments/amx_gemv_probe.cpp -o /tmp/amx_gemv_probe
//   OMP_NUM_THREADS=2 PFD=1 /tmp/amx_gemv_probe 6144 8 1
// Variants: 0 the B tiles loaded in order (tile 5 reused for the fourth); 1 two passes of 32 columns,
// chunk pairs on alternating A/B tiles; 2 the loads interleaved with the products (each B tile
// reloaded right after the product that frees it); 4 as 2, the chunk first copied by vector loads
// into an L1 staging buffer; 3 a plain read with the same requests (no products).
// Measured on the model-167 AMX Xeon (docs/performance.md, session 55), N 6144, 8 rows, evicted:
// read 2.87-3.07 ms (16.4-17.5 GB/s); variants 0/1/2 4.2-5.4 ms at every L1 request distance (0-8
// chunks); 4 4.15 ms (12.1 GB/s, ~70% of the read). Warm (N 256): read 0.040 ms, tiles 0.059-0.098.
// Tile loads straight from a stream do not overlap the misses; staged they reach ~70%: about
// oneDNN's 65%, short of the vdpbf16ps kernel's 85% at 1-4 rows. Not built into the tree
// (docs/experiments/bf16_gemv_amx.diff: the in-tree version of variant 0, 5-16 rows).
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
struct alignas(64) Cfg {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static const int64_t K = 4096;
static int variant = 0, pfd = 1;
// weights: blocks of 64 cols, each K/2 pairs × 256 bytes
void kern(const uint16_t* x, int rows, const char* w, int64_t b0, int64_t b1, float* y, int64_t out) {
  Cfg cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = t <= 4 || (variant == 1 && t <= 5) ? rows : 16;
  }
  if (variant == 1) {  // C0,C1 ; A4,A5 ; B 2,3,6,7
    for (int t = 0; t < 8; ++t) cfg.rows[t] = (t == 0 || t == 1 || t == 4 || t == 5) ? rows : 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) float acc[16 * 64];
  const int64_t chunks = K / 32, lda = K * 2;
  for (int64_t c = b0; c < b1; ++c) {
    const char* block = w + c * K * 128;
    if (variant == 0) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* wb = block + ch * 4096;
        if (pfd) {
          for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 4096 * pfd + l * 64, _MM_HINT_T0);
          for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 24576 + l * 64, _MM_HINT_T1);
        }
        _tile_loadd(4, x + ch * 32, lda);
        _tile_loadd(5, wb, 256);
        _tile_loadd(6, wb + 64, 256);
        _tile_loadd(7, wb + 128, 256);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 7);
        _tile_loadd(5, wb + 192, 256);
        _tile_dpbf16ps(3, 4, 5);
      }
      _tile_stored(0, acc, 256);
      _tile_stored(1, acc + 16, 256);
      _tile_stored(2, acc + 32, 256);
      _tile_stored(3, acc + 48, 256);
    } else if (variant == 1) {
      // two passes over the block, 32 columns each, chunk parity alternates A/B tiles
      for (int half = 0; half < 2; ++half) {
        _tile_zero(0);
        _tile_zero(1);
        const char* hb = block + half * 128;
        for (int64_t ch = 0; ch < chunks; ch += 2) {
          const char* wb = hb + ch * 4096;
          if (pfd) {
            for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 8192 * pfd + (l >> 1) * 256 + (l & 1) * 64, _MM_HINT_T0);
            for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 24576 + (l >> 1) * 256 + (l & 1) * 64, _MM_HINT_T1);
          }
          _tile_loadd(4, x + ch * 32, lda);
          _tile_loadd(2, wb, 256);
          _tile_loadd(3, wb + 64, 256);
          _tile_dpbf16ps(0, 4, 2);
          _tile_dpbf16ps(1, 4, 3);
          _tile_loadd(5, x + ch * 32 + 32, lda);
          _tile_loadd(6, wb + 4096, 256);
          _tile_loadd(7, wb + 4096 + 64, 256);
          _tile_dpbf16ps(0, 5, 6);
          _tile_dpbf16ps(1, 5, 7);
        }
        _tile_stored(0, acc + half * 32, 256);
        _tile_stored(1, acc + half * 32 + 16, 256);
      }
    } else if (variant == 2) {
      // 4 C, A4, B5,B6,B7 rotating: chunk loads into the tile freed longest ago
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* wb = block + ch * 4096;
        if (pfd) {
          for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 4096 * pfd + l * 64, _MM_HINT_T0);
          for (int l = 0; l < 64; ++l) _mm_prefetch(wb + 24576 + l * 64, _MM_HINT_T1);
        }
        _tile_loadd(5, wb, 256);
        _tile_loadd(6, wb + 64, 256);
        _tile_loadd(4, x + ch * 32, lda);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(7, wb + 128, 256);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(5, wb + 192, 256);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 4, 5);
      }
      _tile_stored(0, acc, 256);
      _tile_stored(1, acc + 16, 256);
      _tile_stored(2, acc + 32, 256);
      _tile_stored(3, acc + 48, 256);
    } else if (variant == 4) {
      alignas(64) static thread_local char stage[2][4096];
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* wb = block + ch * 4096;
        char* st = stage[ch & 1];
        for (int l = 0; l < 64; ++l) {
          _mm_prefetch(wb + 4096 * pfd + l * 64, _MM_HINT_T0);
          _mm_prefetch(wb + 24576 + l * 64, _MM_HINT_T1);
          _mm512_store_si512(st + l * 64, _mm512_load_si512(wb + l * 64));
        }
        _tile_loadd(5, st, 256);
        _tile_loadd(6, st + 64, 256);
        _tile_loadd(4, x + ch * 32, lda);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(7, st + 128, 256);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(5, st + 192, 256);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 4, 5);
      }
      _tile_stored(0, acc, 256);
      _tile_stored(1, acc + 16, 256);
      _tile_stored(2, acc + 32, 256);
      _tile_stored(3, acc + 48, 256);
    } else if (variant == 3) {
      // vdpbf16ps-free baseline: just the prefetches and plain loads (a read)
      __m512i s = _mm512_setzero_si512();
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const char* wb = block + ch * 4096;
        for (int l = 0; l < 64; ++l) {
          _mm_prefetch(wb + 4096 + l * 64, _MM_HINT_T0);
          _mm_prefetch(wb + 24576 + l * 64, _MM_HINT_T1);
        }
        for (int l = 0; l < 64; ++l) s = _mm512_xor_si512(s, _mm512_load_si512(wb + l * 64));
      }
      _mm512_store_si512(acc, s);
    }
    for (int r = 0; r < rows; ++r) memcpy(y + r * out + c * 64, acc + r * 64, 256);
  }
  _tile_release();
}
int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  if (getenv("PFD")) pfd = atoi(getenv("PFD"));
  const int64_t out = atol(argv[1]);
  const int rows = atoi(argv[2]);
  const bool evict = atoi(argv[3]);
  const int64_t bytes = out * K * 2;
  char* w = (char*)aligned_alloc(4096, bytes);
  for (int64_t i = 0; i < bytes / 2; ++i) ((uint16_t*)w)[i] = 0x3f80 + (i % 7);
  std::vector<uint16_t> x(16 * K, 0x3f80);
  std::vector<float> y(16 * out);
  std::vector<char> junk(256 << 20, 1);
  for (int v : {2, 4, 3}) {
    variant = v;
    std::vector<double> t;
    for (int rep = 0; rep < 15; ++rep) {
      if (evict)
        for (int64_t i = 0; i < bytes; i += 64) _mm_clflushopt(w + i);
      _mm_sfence();
      auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
      {
        int th = omp_get_thread_num(), n = omp_get_num_threads();
        int64_t blocks = out / 64;
        kern(x.data(), rows, w, th * blocks / n, (th + 1) * blocks / n, y.data(), out);
      }
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
    }
    std::sort(t.begin(), t.end());
    printf("variant %d: %.3f ms (%.1f GB/s)  y0 %g\n", v, t[7], bytes / t[7] / 1e6, y[0]);
  }
}
