// Session 39's footprint driver (docs/performance.md, "Session 39"): not built by the project. One
// f32 decode step over a slot KVCache (B sequences of L keys, or the lengths in a file; 8 kv heads,
// 4 query rows each, D 128), timed after the bench's eviction of the cache's bytes (bench/machine.hpp
// Evict) and paired with a plain read of the same bytes, as decode_driver.cpp. CAP sets the slot
// capacity (the spacing of heads and sequences) apart from the keys read. Built from the repository
// root after a build:
//   g++ -std=c++20 -O2 -march=native -fopenmp -I. -Iinclude -Ibuild/runtime/include \
//       docs/experiments/decode_footprint.cpp bench/machine.cpp -o /tmp/decode_footprint \
//       build/lib/libattend_core.a -ldnnl -lnuma -lbenchmark -lpthread
//   OMP_NUM_THREADS=2 /tmp/decode_footprint 8 2048 15        # D3's shape, 134 MB
//   OMP_NUM_THREADS=2 /tmp/decode_footprint 8 8192 15        # the same over 537 MB
//   OMP_NUM_THREADS=2 /tmp/decode_footprint 8 2048 15 8208   # 134 MB read, slots of 8208 tokens
//   usage: decode_footprint B L REPS [CAP] [LENGTHS_FILE]
#include <algorithm>
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "bench/bench_common.hpp"
using namespace attend;
using namespace attend::bench;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char** argv) {
  int64_t B = atoll(argv[1]), L = atoll(argv[2]);
  const int reps = atoi(argv[3]);
  std::vector<int64_t> lens(B, L);
  if (argc > 5) {
    std::ifstream f(argv[5]);
    lens.clear();
    int64_t x;
    while (f >> x) lens.push_back(x);
    B = lens.size();
  }
  const int64_t maxl = *std::max_element(lens.begin(), lens.end());
  const int64_t cap = argc > 4 && atoll(argv[4]) > 0 ? atoll(argv[4]) : maxl + 16;
  const int64_t Hkv = 8, D = 128, Hq = 32;
  KvBuffer k(Hkv * maxl * D), v(Hkv * maxl * D);
  fill(k, 21);
  fill(v, 22);
  std::vector<float> q(B * Hq * D), o(B * Hq * D), kn(B * Hkv * D), vn(B * Hkv * D);
  fill(q, 23);
  fill(kn, 24);
  fill(vn, 25);
  KVCache cache({Hkv, D, B, cap, DType::f32});
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < B; ++b) {
    seqs.push_back(b);
    cache.append(b, TensorView(k.data(), {1, Hkv, lens[b] - 1, D}, {0, maxl * D, D, 1}),
                 TensorView(v.data(), {1, Hkv, lens[b] - 1, D}, {0, maxl * D, D, 1}));
  }
  const TensorView Q(q.data(), {B, Hq, 1, D}, {Hq * D, D, Hq * D, 1});
  const TensorView KN(kn.data(), {B, Hkv, 1, D}, {Hkv * D, D, Hkv * D, 1});
  const TensorView VN(vn.data(), {B, Hkv, 1, D}, {Hkv * D, D, Hkv * D, 1});
  const TensorView O(o.data(), {B, Hq, 1, D}, {Hq * D, D, Hq * D, 1});
  Evict e = evict_cache(cache, seqs);
  std::vector<double> ts, rs;
  uint32_t sink = 0;
  for (int i = 0; i < reps + 2; ++i) {
    for (int64_t b = 0; b < B; ++b) cache.truncate(b, lens[b] - 1);
    e();
    double t0 = now();
    cached_attention(Q, KN, VN, cache, seqs, O);
    double t1 = now();
    e();
    double t2 = now();
    sink ^= e.read();
    double t3 = now();
    if (i >= 2) {
      ts.push_back(t1 - t0);
      rs.push_back(t3 - t2);
    }
  }
  std::vector<double> ratio;
  for (size_t i = 0; i < ts.size(); ++i) ratio.push_back(rs[i] / ts[i]);
  auto med = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  std::printf("B=%lld L=%lld cap=%lld: step %.1f us, read %.1f us, share %.1f%% (bytes %.1f MB) %u\n", (long long)B,
              (long long)L, (long long)cap, med(ts) * 1e6, med(rs) * 1e6, 100 * med(ratio), e.bytes() / 1e6, sink & 1);
}
