// Session 34's decode driver (docs/performance.md, "Session 34"): not built by the project. One
// decode step over a KVCache (f32, bf16 or i8, one sequence, Hkv kv heads × L keys, D 128, GROUP query rows
// per kv head; bf16 since session 53), timed after the bench's eviction of the cache's bytes (bench/machine.hpp Evict)
// and paired with the bench's reference read of the same bytes (Evict::reference_seconds); NOEVICT=1 (argument 5) times
// it warm (L2 or L3). Median step, read and share over REPS steps, and a hash of the output's bits (to compare builds).
// `sdpa` (session 49) times scaled_dot_product_attention instead, over K and V in the user's tensors ([1, Hkv, L, D],
// 64-byte aligned): the row-major counterpart of the cache's step. Built from the repository root after a build:
//   g++ -std=c++20 -O2 -march=native -fopenmp -I. -Iinclude -Ibuild/runtime/include \
//       docs/experiments/decode_driver.cpp bench/machine.cpp -o /tmp/decode_driver \
//       build/lib/libattend_core.a -ldnnl -lnuma -lbenchmark -lpthread
//   OMP_NUM_THREADS=2 /tmp/decode_driver i8 4096 8 41        # D2's shape, evicted
//   OMP_NUM_THREADS=1 /tmp/decode_driver f32 1024 1 801 1    # one head, L2-resident
//   OMP_NUM_THREADS=2 /tmp/decode_driver sdpa 4096 8 41      # sdpa/attend/D2's shape, evicted
//   usage: decode_driver f32|bf16|i8|sdpa L Hkv REPS NOEVICT GROUP
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/bench_common.hpp"
using namespace attend;
using namespace attend::bench;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "i8";
  const bool sdpa = mode == "sdpa";
  const DType dt = mode == "i8" ? DType::i8 : mode == "bf16" ? DType::bf16 : DType::f32;
  const int64_t L = argc > 2 ? atoll(argv[2]) : 4096, Hkv = argc > 3 ? atoll(argv[3]) : 8, D = 128;
  const int64_t grp = argc > 6 ? atoll(argv[6]) : 4;
  const int64_t Hq = Hkv * grp;
  const int reps = argc > 4 ? atoi(argv[4]) : 41;
  const bool noflush = argc > 5 && atoi(argv[5]);
  KvBuffer k(Hkv * L * D), v(Hkv * L * D);
  fill(k, 21);
  fill(v, 22);
  std::vector<float> q(Hq * D), o(Hq * D), kn(Hkv * D), vn(Hkv * D);
  fill(q, 23);
  fill(kn, 24);
  fill(vn, 25);
  const auto Q = TensorView::dense(static_cast<const float*>(q.data()), {1, Hq, 1, D});
  const auto O = TensorView::dense(o.data(), {1, Hq, 1, D});
  // The cache holds L − 1 tokens and each step appends the L-th; sdpa reads all L from k and v.
  KVCache cache({Hkv, D, 1, sdpa ? 16 : L, dt});
  std::vector<int64_t> seqs{0};
  Evict e;
  if (sdpa) {
    e.add_all(k).add_all(v);
  } else {
    cache.append(0, TensorView(k.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}),
                 TensorView(v.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}));
    e = evict_cache(cache, seqs);
  }
  const auto K = TensorView::dense(static_cast<const float*>(sdpa ? k.data() : kn.data()), {1, Hkv, sdpa ? L : 1, D});
  const auto V = TensorView::dense(static_cast<const float*>(sdpa ? v.data() : vn.data()), {1, Hkv, sdpa ? L : 1, D});
  std::vector<double> ts, rs;
  uint32_t sink = 0;
  // FPMATH=bf16 in the environment: the call's SdpaOptions::fpmath (session 56).
  SdpaOptions opt;
  if (const char* f = std::getenv("FPMATH"); f && std::string(f) == "bf16") opt.fpmath = FpMath::bf16;
  for (int i = 0; i < reps + 3; ++i) {
    if (!sdpa) cache.truncate(0, L - 1);
    if (!noflush) e();
    double t0 = now();
    if (sdpa)
      scaled_dot_product_attention(Q, K, V, O, opt);
    else
      cached_attention(Q, K, V, cache, seqs, O, opt);
    double t1 = now();
    Evict::ReferenceRead fastest{};
    const double r = noflush ? 0.0 : e.reference_seconds(sink, fastest);
    if (i >= 3) {
      ts.push_back(t1 - t0);
      rs.push_back(r);
    }
  }
  std::vector<double> ratio;
  for (size_t i = 0; i < ts.size(); ++i) ratio.push_back(rs[i] / ts[i]);
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the output's bits
  for (float x : o) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    hash = (hash ^ u) * 1099511628211ull;
  }
  std::printf("hash %016llx %s L=%lld Hkv=%lld: step %.1f us, read %.1f us, share %.1f%% (bytes %.2f MB) %u\n",
              static_cast<unsigned long long>(hash), mode.c_str(), (long long)L, (long long)Hkv, med(ts) * 1e6,
              med(rs) * 1e6, 100 * med(ratio), e.bytes() / 1e6, sink & 1);
}
