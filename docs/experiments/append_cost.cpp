// Session 49's append timer (docs/performance.md, "Session 49"): not built by the project. The median
// time of KVCache::append from f32 tensors, per storage type, for one token into 32 kv heads (a
// decode step's append) and 256 tokens into 8 kv heads (a prompt chunk's), D 128, at position 1000
// of a slot of 4096 (warm: each repetition truncates back to 1000 tokens). Built from the
// repository root after a build:
//   g++ -std=c++20 -O2 -march=native -fopenmp -Iinclude -Ibuild/runtime/include \
//       docs/experiments/append_cost.cpp -o /tmp/append_cost build/lib/libattend_core.a -ldnnl -lnuma -lpthread
//   OMP_NUM_THREADS=2 /tmp/append_cost
#include <algorithm>
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>
using namespace attend;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main() {
  const int64_t D = 128, kCached = 1000;
  for (DType dt : {DType::f32, DType::bf16, DType::i8}) {
    for (auto [H, n] : {std::pair<int64_t, int64_t>{32, 1}, {8, 256}}) {
      KVCache cache({H, D, 1, 4096, dt});
      std::vector<float> k(H * n * D), v(H * n * D), z(H * kCached * D);
      for (size_t i = 0; i < k.size(); ++i) {
        k[i] = std::sin(0.37f * static_cast<float>(i));
        v[i] = std::cos(0.11f * static_cast<float>(i));
      }
      const auto Z = TensorView::dense(static_cast<const float*>(z.data()), {1, H, kCached, D});
      cache.append(0, Z, Z);
      const auto K = TensorView::dense(static_cast<const float*>(k.data()), {1, H, n, D});
      const auto V = TensorView::dense(static_cast<const float*>(v.data()), {1, H, n, D});
      std::vector<double> ts;
      for (int r = 0; r < 400; ++r) {
        cache.truncate(0, kCached);
        const double t0 = now();
        cache.append(0, K, V);
        ts.push_back(now() - t0);
      }
      std::sort(ts.begin(), ts.end());
      const double t = ts[ts.size() / 2];
      std::printf("%s H=%lld n=%lld: %.2f us (%.2f ns per value)\n",
                  dt == DType::f32    ? "f32"
                  : dt == DType::bf16 ? "bf16"
                                      : "i8",
                  static_cast<long long>(H), static_cast<long long>(n), t * 1e6,
                  t * 1e9 / (2.0 * static_cast<double>(H * n * D)));
    }
  }
}
