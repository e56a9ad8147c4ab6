// Session 61's probe (docs/performance.md, "Session 61"): not built by the project. Is the gap
// between fused_block_decode.cpp's step (~90% of its plain read) and the library's (~70% of the
// bench's reference) in the code or in the memory? This times, in one process over the same
// KVCache's bytes (f32, one sequence, Hkv kv heads × L keys, D 128, four query rows per kv head),
// each after the bench's eviction (bench/machine.hpp Evict): the library's decode step
// (cached_attention, its append included), fused_block_decode.cpp's 16-key fused step and its
// 512-key tiles over the cache's own K and V (the ranges the bench evicts), the harness's plain
// read of those bytes, the bench's reference read (the best of three) and the append alone; with
// -DNARROW_FUSED, over a tree with narrow_fused_f32.diff applied, also that diff's library kernel
// called here on whole heads (static schedule, its scratch on each thread's stack). Rotated per
// rep. REALQ=1: that call's queries are the library step's (else the harness's). TRACE=1 prints
// each library call's TSC start and end to stderr (TRACE=2 each direct head's time too); the
// diff's ATTEND_FUSED_TRACE=1 records the library's items' TSC times, written to
// /tmp/fused_trace.txt at exit (2.6 GHz TSC here).
//   g++ -std=c++20 -O2 -march=native -fopenmp -I. -Iinclude -Ibuild/runtime/include \
//       docs/experiments/fused_in_cache.cpp bench/machine.cpp -o /tmp/fused_in_cache \
//       build/lib/libattend_core.a -ldnnl -lnuma -lbenchmark -lpthread
//   OMP_NUM_THREADS=2 /tmp/fused_in_cache 4096 8 21 [L1 bytes] [L2 bytes]
#define FUSED_BLOCK_DECODE_NO_MAIN
#include "docs/experiments/fused_block_decode.cpp"
// (after the harness: its anonymous namespace holds head(), head_tiled<>())
#include <x86intrin.h>

#include <attend/attend.hpp>
#include <string>

#include "bench/bench_common.hpp"
#if defined(NARROW_FUSED)
#include "runtime/kernels/flash_narrow.hpp"
#endif

using namespace attend;
using namespace attend::bench;

int main(int argc, char** argv) {
  const int64_t L = argc > 1 ? atoll(argv[1]) : 4096, Hkv = argc > 2 ? atoll(argv[2]) : 8;
  const int reps = argc > 3 ? atoi(argv[3]) : 21;
  const int64_t l1 = argc > 4 ? atoll(argv[4]) : 4096, l2 = argc > 5 ? atoll(argv[5]) : 65536;
  const int64_t grp = 4, Hq = Hkv * grp;
  KvBuffer k(Hkv * L * D), v(Hkv * L * D);
  fill(k, 21);
  fill(v, 22);
  std::vector<float> qv(Hq * D), o(Hq * D), kn(Hkv * D), vn(Hkv * D);
  fill(qv, 23);
  fill(kn, 24);
  fill(vn, 25);
  const auto Q = TensorView::dense(static_cast<const float*>(qv.data()), {1, Hq, 1, D});
  const auto O = TensorView::dense(o.data(), {1, Hq, 1, D});
  KVCache cache({Hkv, D, 1, L, DType::f32});
  std::vector<int64_t> seqs{0};
  cache.append(0, TensorView(k.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}),
               TensorView(v.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}));
  const auto K1 = TensorView::dense(static_cast<const float*>(kn.data()), {1, Hkv, 1, D});
  const auto V1 = TensorView::dense(static_cast<const float*>(vn.data()), {1, Hkv, 1, D});
  // The cache's own bytes at its full length (the harness's steps read L keys per head).
  cached_attention(Q, K1, V1, cache, seqs, O);
  std::vector<std::pair<const void*, size_t>> ranges;
  detail::KVCacheAccess::storage_ranges(cache, 0, ranges);
  if (static_cast<int64_t>(ranges.size()) != 2 * Hkv) return std::printf("unexpected ranges\n"), 1;
  Evict e;
  e.add(ranges);
  alignas(64) static float qh[R * D], out[2][R * D];
  for (int i = 0; i < R * D; ++i) qh[i] = 0.01f * static_cast<float>(i % 13) * 1.442695f / std::sqrt(128.0f);
  const Req per_line{l1, l2, false, true};
  const char* names[] = {"library step (cached_attention)",  "harness fused, per line",
                         "harness tiles 512, per line",      "harness plain read (bench_read)",
                         "bench reference (best of 3)",      "the append alone",
                         "library fused kernel, called here"};
#if defined(NARROW_FUSED)
  constexpr int kinds = 7;
#else
  constexpr int kinds = 6;
#endif
  std::vector<std::vector<double>> t(kinds);
  volatile unsigned sink = 0;
  for (int rep = 0; rep < reps + 1; ++rep)
    for (int i = 0; i < kinds; ++i) {
      const int m = (i + rep) % kinds;
      cache.truncate(0, L - 1);
      e();
      double s = 0;
      if (m == 4) {
        uint32_t x = 0;
        Evict::ReferenceRead fastest{};
        s = e.reference_seconds(x, fastest);
        sink = sink + x;
        cache.append(0, K1, V1);
      } else {
        if (m != 0 && m != 5) cache.append(0, K1, V1), e();  // the harness reads the full length, evicted
        const auto t0 = std::chrono::steady_clock::now();
        if (m == 5) {
          cache.append(0, K1, V1);
        } else if (m == 0) {
          const auto c0 = __rdtsc();
          cached_attention(Q, K1, V1, cache, seqs, O);
          if (std::getenv("TRACE"))
            std::fprintf(stderr, "call start %llu end %llu\n", (unsigned long long)c0, (unsigned long long)__rdtsc());
        } else if (m == 6) {
#if defined(NARROW_FUSED)
#pragma omp parallel for num_threads(2) schedule(static)
          for (int64_t hd = 0; hd < Hkv; ++hd) {
            using namespace attend::kernels;
            FlashWork w{};
            w.k = ranges[2 * hd].first;
            w.v = ranges[2 * hd + 1].first;
            w.k_blocked = true;
            w.v_row_stride = D;
            w.head_dim = D;
            w.value_dim = D;
            w.l2_ahead_bytes = 65536;
            w.l2_pages = false;
            NarrowRows nr{};
            nr.nr = 4;
            nr.dvp = D;
            nr.key_lo = 0;
            nr.key_hi = L;
            alignas(64) float qn[4 * D], oacc[4 * D], mm[4], ll[4];
            for (int i = 0; i < 4 * D; ++i)
              qn[i] = std::getenv("REALQ") ? qv[hd * 4 * D + i] / std::sqrt(128.0f) : qh[i], oacc[i] = 0.0f;
            for (int r = 0; r < 4; ++r) mm[r] = -INFINITY, ll[r] = 0.0f, nr.rlo[r] = 0, nr.rhi[r] = L;
            NarrowHead hh{qn, oacc, mm, ll, nullptr, nullptr, nullptr, nullptr};
            const KvSource<float> src(w);
            const auto c0 = __rdtsc();
            narrow_fused_f32<xsimd::avx512bw, 4, 128>(w, nr, hh, src);
            if (std::getenv("TRACE") && std::atoi(std::getenv("TRACE")) == 2)
              std::fprintf(stderr, "direct %p %.1f\n", w.k, (__rdtsc() - c0) / 2600.0);
            sink = sink + static_cast<unsigned>(oacc[5]);
          }
#endif
        } else if (m == 3) {
#pragma omp parallel for num_threads(2) schedule(static)
          for (int64_t h = 0; h < 2 * Hkv; ++h)
            sink = sink + bench_read(static_cast<const char*>(ranges[h].first), ranges[h].second);
        } else {
#pragma omp parallel for num_threads(2) schedule(static)
          for (int64_t h = 0; h < Hkv; ++h) {
            const auto* kp = static_cast<const float*>(ranges[2 * h].first);
            const auto* vp = static_cast<const float*>(ranges[2 * h + 1].first);
            const __m512i x = m == 1 ? head(kp, vp, qh, L, per_line, out[omp_get_thread_num()])
                                     : head_tiled<32>(kp, vp, qh, L, per_line, out[omp_get_thread_num()]);
            sink = sink + _mm512_reduce_add_epi32(x);
          }
        }
        s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      if (rep > 0) t[m].push_back(s);
    }
  for (int m = 0; m < kinds; ++m) {
    std::sort(t[m].begin(), t[m].end());
    const double med = t[m][t[m].size() / 2];
    std::printf("%-34s median %8.1f us  %.1f GB/s (%.1f%% of the reference)\n", names[m], med * 1e6,
                e.bytes() / med / 1e9, 100.0 * t[4][t[4].size() / 2] / med);
  }
  std::printf("K head 0 at %p, V head 0 at %p, K head 1 at %p (%u)\n", ranges[0].first, ranges[1].first,
              ranges[2].first, sink & 1u);
}
