// Session 60's probe (docs/performance.md, "Session 60"): not built by the project. A GQA decode
// step of f32 D2's shape (8 kv heads × 4096 keys, D 128, four query rows per kv head) written as
// one pass per head with nothing between the two streams but a 16-key block's softmax: per block
// the four rows' scores in registers (keys in lanes, against the cache's blocked K, [D][16] per
// block), the online softmax on them, and P·V over the block's 16 V rows in two column halves
// (16 accumulators, O in L1). Orders (time_orders): 0 the bench's plain read, then the step with
// its requests varied. NOEVICT=1 times it warm (a small L to stay resident: argument 1).
//   g++ -std=c++20 -O2 -march=native -fopenmp fused_block_decode.cpp -o /tmp/fused_block_decode
//   OMP_NUM_THREADS=2 /tmp/fused_block_decode 4096 65536    # keys per head, L2 distance (bytes)
#include <cmath>
#include <cstring>

#include "stream_probe.hpp"

namespace {

constexpr int D = 128, KB = 16, R = 4;

// 2^x for x ≤ 0 (x below -126 gives 0): exponent from the integer part, a degree-5 polynomial on
// the fraction.
inline __m512 exp2v(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
  const __m512 fl = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, fl);
  __m512 p = _mm512_set1_ps(1.8775767e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.9893397e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5826318e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4015361e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9315308e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, fl);
}

struct Req {
  int64_t l1;  // > 0: K and V that many bytes past the block's next into L1, two lines each per depth pair
  int64_t l2;  // > 0: K and V that many bytes ahead into L2, two lines of each per depth pair
  bool skip_softmax = false;
  bool per_line = false;  // requests by each stream as it is read, l1 and l2 bytes ahead of the line
};

// One head: K blocks at k (L/16 blocks of D×16 floats), V rows at v (L × D), q[R][D] (scaled by
// log2 e / √D), o[R][D]. Returns a hash of o (keeps the work).
__attribute__((noinline)) __m512i head(const float* k, const float* v, const float* q, int64_t L, Req rq, float* o) {
  alignas(64) float O[R][D] = {};
  alignas(64) float P[R][KB];
  float m[R], l[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  const int64_t blocks = L / KB;
  const char* kend = reinterpret_cast<const char*>(k + L * D);
  const char* vend = reinterpret_cast<const char*>(v + L * D);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* kb = k + b * D * KB;
    const float* vb = v + b * KB * D;
    const char* kn = reinterpret_cast<const char*>(kb + D * KB);
    const char* vn = reinterpret_cast<const char*>(vb + KB * D);
    __m512 s[2][R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) s[0][r] = s[1][r] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 2) {
      if (rq.per_line) {  // each stream's own lines, as it is read (the ladder's requests)
        const char* a = reinterpret_cast<const char*>(kb + d * KB);
        if (rq.l1 > 0 && a + rq.l1 < kend)
          _mm_prefetch(a + rq.l1, _MM_HINT_T0), _mm_prefetch(a + rq.l1 + 64, _MM_HINT_T0);
        if (rq.l2 > 0 && a + rq.l2 < kend)
          _mm_prefetch(a + rq.l2, _MM_HINT_T1), _mm_prefetch(a + rq.l2 + 64, _MM_HINT_T1);
      } else {
        if (rq.l1 > 0) {
          const char* a = kn + rq.l1 - 8192 + d * 64;
          if (a < kend) _mm_prefetch(a, _MM_HINT_T0), _mm_prefetch(a + 64, _MM_HINT_T0);
          const char* c = vn + rq.l1 - 8192 + d * 64;
          if (c < vend) _mm_prefetch(c, _MM_HINT_T0), _mm_prefetch(c + 64, _MM_HINT_T0);
        }
        if (rq.l2 > 0) {
          const char* a = kn + rq.l2 + d * 64;
          if (a < kend) _mm_prefetch(a, _MM_HINT_T1), _mm_prefetch(a + 64, _MM_HINT_T1);
          const char* c = vn + rq.l2 + d * 64;
          if (c < vend) _mm_prefetch(c, _MM_HINT_T1), _mm_prefetch(c + 64, _MM_HINT_T1);
        }
      }
      const __m512 k0 = _mm512_load_ps(kb + d * KB), k1 = _mm512_load_ps(kb + (d + 1) * KB);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        s[0][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d]), k0, s[0][r]);
        s[1][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d + 1]), k1, s[1][r]);
      }
    }
    bool rescale = false;
    float alpha[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_add_ps(s[0][r], s[1][r]);
      const float mn = std::max(m[r], _mm512_reduce_max_ps(x));
      alpha[r] = mn == m[r] ? 1.0f : std::exp2(m[r] - mn);
      rescale |= alpha[r] != 1.0f;
      const __m512 p = exp2v(_mm512_sub_ps(x, _mm512_set1_ps(mn)));
      l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(p);
      m[r] = mn;
      _mm512_store_ps(P[r], p);
    }
    if (rescale)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < D; c += 16)
          _mm512_store_ps(O[r] + c, _mm512_mul_ps(_mm512_load_ps(O[r] + c), _mm512_set1_ps(alpha[r])));
#pragma GCC unroll 16
    for (int half = 0; half < D; half += 64) {
      __m512 acc[R][4];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_load_ps(O[r] + half + 16 * c);
#pragma GCC unroll 16
      for (int j = 0; j < KB; ++j) {
        const float* vr = vb + j * D + half;
        if (rq.per_line) {
          const char* a = reinterpret_cast<const char*>(vr);
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            if (rq.l1 > 0 && a + rq.l1 + 64 * i < vend) _mm_prefetch(a + rq.l1 + 64 * i, _MM_HINT_T0);
            if (rq.l2 > 0 && a + rq.l2 + 64 * i < vend) _mm_prefetch(a + rq.l2 + 64 * i, _MM_HINT_T1);
          }
        }
        const __m512 v0 = _mm512_load_ps(vr), v1 = _mm512_load_ps(vr + 16), v2 = _mm512_load_ps(vr + 32),
                     v3 = _mm512_load_ps(vr + 48);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 p = _mm512_set1_ps(P[r][j]);
          acc[r][0] = _mm512_fmadd_ps(p, v0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(p, v1, acc[r][1]);
          acc[r][2] = _mm512_fmadd_ps(p, v2, acc[r][2]);
          acc[r][3] = _mm512_fmadd_ps(p, v3, acc[r][3]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < 4; ++c) _mm512_store_ps(O[r] + half + 16 * c, acc[r][c]);
    }
  }
  __m512i h = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < D; c += 16) {
      const __m512 x = _mm512_div_ps(_mm512_load_ps(O[r] + c), _mm512_set1_ps(l[r]));
      _mm512_store_ps(o + r * D + c, x);
      h = _mm512_xor_si512(h, _mm512_castps_si512(x));
    }
  return h;
}

// The same step in tiles of TB blocks (the library's structure: a tile's scores, then its softmax,
// then its P·V), with the per-line requests (Req::per_line).
template <int TB>
__attribute__((noinline)) __m512i head_tiled(const float* k, const float* v, const float* q, int64_t L, Req rq,
                                             float* o) {
  alignas(64) float O[R][D] = {};
  alignas(64) static thread_local float S[R][TB * KB];
  float m[R], l[R];
  for (int r = 0; r < R; ++r) m[r] = -INFINITY, l[r] = 0.0f;
  const char* kend = reinterpret_cast<const char*>(k + L * D);
  const char* vend = reinterpret_cast<const char*>(v + L * D);
  for (int64_t t = 0; t < L / KB; t += TB) {
    for (int bt = 0; bt < TB; ++bt) {
      const float* kb = k + (t + bt) * D * KB;
      __m512 s[2][R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) s[0][r] = s[1][r] = _mm512_setzero_ps();
      for (int d = 0; d < D; d += 2) {
        const char* a = reinterpret_cast<const char*>(kb + d * KB);
        if (a + rq.l1 < kend) _mm_prefetch(a + rq.l1, _MM_HINT_T0), _mm_prefetch(a + rq.l1 + 64, _MM_HINT_T0);
        if (a + rq.l2 < kend) _mm_prefetch(a + rq.l2, _MM_HINT_T1), _mm_prefetch(a + rq.l2 + 64, _MM_HINT_T1);
        const __m512 k0 = _mm512_load_ps(kb + d * KB), k1 = _mm512_load_ps(kb + (d + 1) * KB);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          s[0][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d]), k0, s[0][r]);
          s[1][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * D + d + 1]), k1, s[1][r]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) _mm512_store_ps(S[r] + bt * KB, _mm512_add_ps(s[0][r], s[1][r]));
    }
    float alpha[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      __m512 mx = _mm512_set1_ps(-INFINITY);
      for (int j = 0; j < TB * KB; j += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(S[r] + j));
      const float mn = std::max(m[r], _mm512_reduce_max_ps(mx));
      alpha[r] = std::exp2(m[r] - mn);
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < TB * KB; j += 16) {
        const __m512 p = exp2v(_mm512_sub_ps(_mm512_load_ps(S[r] + j), _mm512_set1_ps(mn)));
        _mm512_store_ps(S[r] + j, p);
        sum = _mm512_add_ps(sum, p);
      }
      l[r] = l[r] * alpha[r] + _mm512_reduce_add_ps(sum);
      m[r] = mn;
    }
    const float* vt = v + t * KB * D;
#pragma GCC unroll 2
    for (int half = 0; half < D; half += 64) {
      __m512 acc[R][4];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < 4; ++c)
          acc[r][c] = _mm512_mul_ps(_mm512_load_ps(O[r] + half + 16 * c), _mm512_set1_ps(alpha[r]));
      for (int j = 0; j < TB * KB; ++j) {
        const float* vr = vt + j * D + half;
        const char* a = reinterpret_cast<const char*>(vr);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {  // the half row's 4 lines (as the blocks' step)
          if (a + rq.l1 + 64 * i < vend) _mm_prefetch(a + rq.l1 + 64 * i, _MM_HINT_T0);
          if (a + rq.l2 + 64 * i < vend) _mm_prefetch(a + rq.l2 + 64 * i, _MM_HINT_T1);
        }
        const __m512 v0 = _mm512_load_ps(vr), v1 = _mm512_load_ps(vr + 16), v2 = _mm512_load_ps(vr + 32),
                     v3 = _mm512_load_ps(vr + 48);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 p = _mm512_set1_ps(S[r][j]);
          acc[r][0] = _mm512_fmadd_ps(p, v0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(p, v1, acc[r][1]);
          acc[r][2] = _mm512_fmadd_ps(p, v2, acc[r][2]);
          acc[r][3] = _mm512_fmadd_ps(p, v3, acc[r][3]);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < 4; ++c) _mm512_store_ps(O[r] + half + 16 * c, acc[r][c]);
    }
  }
  __m512i h = _mm512_setzero_si512();
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < D; c += 16) {
      const __m512 x = _mm512_div_ps(_mm512_load_ps(O[r] + c), _mm512_set1_ps(l[r]));
      _mm512_store_ps(o + r * D + c, x);
      h = _mm512_xor_si512(h, _mm512_castps_si512(x));
    }
  return h;
}

}  // namespace

#ifndef FUSED_BLOCK_DECODE_NO_MAIN
int main(int argc, char** argv) {
  const int64_t L = argc > 1 ? std::atoll(argv[1]) : 4096, l2 = argc > 2 ? std::atoll(argv[2]) : 65536,
                l1 = argc > 3 ? std::atoll(argv[3]) : 8192;
  const long heads = 8;
  const size_t head_bytes = static_cast<size_t>(L) * D * 4 * 2;
  char* buf = huge_buffer(heads * head_bytes);
  alignas(64) static float q[R * D], out[2][R * D];
  for (int i = 0; i < R * D; ++i) q[i] = 0.01f * static_cast<float>(i % 13) * 1.442695f / std::sqrt(128.0f);
  // Sanity: the step's output against a double-precision reference for head 0.
  {
    const float* k = reinterpret_cast<const float*>(buf);
    const float* v = k + L * D;
    head(k, v, q, L, {0, 0}, out[0]);
    double worst = 0;
    for (int r = 0; r < R; ++r) {
      std::vector<double> s(static_cast<size_t>(L));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < L; ++j) {
        double a = 0;
        for (int d = 0; d < D; ++d) a += double(q[r * D + d]) * k[(j / KB) * D * KB + d * KB + j % KB];
        s[j] = a, mx = std::max(mx, a);
      }
      for (auto& x : s) x = std::exp2(x - mx), sum += x;
      for (int d = 0; d < D; ++d) {
        double a = 0;
        for (int64_t j = 0; j < L; ++j) a += s[j] * v[j * D + d];
        worst = std::max(worst, std::abs(a / sum - out[0][r * D + d]));
      }
    }
    std::printf("max |error| against the reference %.3g", worst);
    head_tiled<32>(k, v, q, L, {0, 0}, out[1]);
    double dt = 0;
    for (int i = 0; i < R * D; ++i) dt = std::max(dt, double(std::abs(out[1][i] - out[0][i])));
    std::printf(", tiles against blocks %.3g\n", dt);
  }
  const bool noevict = std::getenv("NOEVICT") && std::atoi(std::getenv("NOEVICT"));
  const char* names[] = {"plain read",
                         "fused, no requests",
                         "fused, L1 ahead",
                         "fused, L1 next + L2 ahead",
                         "fused, L2 ahead",
                         "fused, per line L1 + L2",
                         "fused, per line L1",
                         "tiles of 512 keys, per line",
                         "tiles of 64 keys, per line"};
  const bool skip = std::getenv("SKIPSM") && std::atoi(std::getenv("SKIPSM"));
  const Req reqs[] = {
      {}, {0, 0, skip}, {l1, 0, skip}, {l1, l2, skip}, {0, l2, skip}, {l1, l2, skip, true}, {l1, 0, skip, true}};
  if (noevict) {
    for (int m = 1; m < 9; ++m) {
      std::vector<double> t;
      for (int rep = 0; rep < (std::getenv("REPS") ? std::atoi(std::getenv("REPS")) : 21); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(2) schedule(static)
        for (long h = 0; h < heads; ++h) {
          const float* k = reinterpret_cast<const float*>(buf + h * head_bytes);
          if (m == 7)
            head_tiled<32>(k, k + L * D, q, L, reqs[5], out[omp_get_thread_num()]);
          else if (m == 8)
            head_tiled<4>(k, k + L * D, q, L, reqs[5], out[omp_get_thread_num()]);
          else
            head(k, k + L * D, q, L, reqs[m], out[omp_get_thread_num()]);
        }
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      std::printf("%-30s resident %.1f us (%.1f GB/s)\n", names[m], t[t.size() / 2] * 1e6,
                  heads * head_bytes / t[t.size() / 2] / 1e9);
    }
    return 0;
  }
  time_orders(buf, heads, head_bytes, names, 9, [&](int m, char* base) {
    const float* k = reinterpret_cast<const float*>(base);
    if (m == 7) return head_tiled<32>(k, k + L * D, q, L, reqs[5], out[omp_get_thread_num()]);
    if (m == 8) return head_tiled<4>(k, k + L * D, q, L, reqs[5], out[omp_get_thread_num()]);
    return head(k, k + L * D, q, L, reqs[m], out[omp_get_thread_num()]);
  });
}
#endif
