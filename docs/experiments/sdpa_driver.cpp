// Session 49's sdpa decode driver (docs/performance.md, "Session 49"): not built by the project. One
// GQA decode step through scaled_dot_product_attention over K/V in the user's tensors ([1, Hkv, L, D],
// D 128, 64-byte aligned, GROUP query rows per kv head), timed after the bench's eviction of K and V
// (bench/machine.hpp Evict) and paired with the bench's reference read of the same bytes; NOEVICT=1
// (argument 4) times it warm. Median step, read and share over REPS steps; the hash is of the output
// bits (to compare builds). The row-major counterpart of decode_driver.cpp (the slot cache). Built
// from the repository root after a build:
//   g++ -std=c++20 -O2 -march=native -fopenmp -I. -Iinclude -Ibuild/runtime/include \
//       docs/experiments/sdpa_driver.cpp bench/machine.cpp -o /tmp/sdpa_driver \
//       build/lib/libattend_core.a -ldnnl -lnuma -lbenchmark -lpthread
//   OMP_NUM_THREADS=2 /tmp/sdpa_driver 4096 8 41          # sdpa/attend/D2's shape, evicted
//   OMP_NUM_THREADS=1 /tmp/sdpa_driver 512 2 4001 1       # 2 kv heads, L2-resident
//   usage: sdpa_driver L Hkv REPS NOEVICT GROUP
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "bench/bench_common.hpp"
using namespace attend;
using namespace attend::bench;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  const int64_t L = argc > 1 ? atoll(argv[1]) : 4096, Hkv = argc > 2 ? atoll(argv[2]) : 8, D = 128;
  const int reps = argc > 3 ? atoi(argv[3]) : 41;
  const bool noflush = argc > 4 && atoi(argv[4]);
  const int64_t grp = argc > 5 ? atoll(argv[5]) : 4, Hq = Hkv * grp;
  KvBuffer k(Hkv * L * D), v(Hkv * L * D), q(Hq * D), o(Hq * D);
  fill(k, 21);
  fill(v, 22);
  fill(q, 23);
  const auto Q = TensorView::dense(static_cast<const float*>(q.data()), {1, Hq, 1, D});
  const auto K = TensorView::dense(static_cast<const float*>(k.data()), {1, Hkv, L, D});
  const auto V = TensorView::dense(static_cast<const float*>(v.data()), {1, Hkv, L, D});
  const auto O = TensorView::dense(o.data(), {1, Hq, 1, D});
  Evict e;
  e.add_all(k).add_all(v);
  std::vector<double> ts, rs;
  uint32_t sink = 0;
  for (int i = 0; i < reps + 3; ++i) {
    if (!noflush) e();
    double t0 = now();
    scaled_dot_product_attention(Q, K, V, O);
    double t1 = now();
    bool won = false;
    const double r = noflush ? 0.0 : e.reference_seconds(sink, won);
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
  std::printf("hash %016llx ", static_cast<unsigned long long>(hash));
  std::printf("sdpa L=%lld Hkv=%lld: step %.1f us, read %.1f us, share %.1f%% %u\n", (long long)L, (long long)Hkv,
              med(ts) * 1e6, med(rs) * 1e6, 100 * med(ratio), sink & 1);
}
