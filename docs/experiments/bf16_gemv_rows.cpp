// Session 37: attend's bf16 decode GEMV (runtime/kernels/ukernel/bf16_gemv.hpp, taken by
// gemm::Linear for up to kBf16GemvMaxRows rows) against oneDNN 2.6's bf16 matmul on the same packed
// weights (LinearForce::onednn_decode), by row count: K 4096, N from the command line, weights
// evicted before each call (NOEVICT=1: warm, e.g. N 256 to time the arithmetic from L2), 2
// threads, medians of 15 alternated calls. Beyond kBf16GemvMaxRows both columns are oneDNN's.
//   cmake --build build && g++ -O2 -march=native -std=c++20 -fopenmp -I. docs/experiments/bf16_gemv_rows.cpp \
//     build/lib/libattend_layer.a build/lib/libattend_core.a -ldnnl -lnuma -o /tmp/bf16_gemv_rows
//   OMP_NUM_THREADS=2 /tmp/bf16_gemv_rows 6144
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "docs/experiments/stream_probe.hpp"
#include "runtime/gemm/onednn_matmul.hpp"
using namespace attend::gemm;
int main(int argc, char** argv) {
  const long in = 4096, out = argc > 1 ? atol(argv[1]) : 6144;
  std::vector<float> w(in * out);
  std::mt19937 rng(1);
  for (auto& v : w) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  Linear own(w.data(), false, in, out, nullptr, WeightType::bf16);
  Linear dnn(w.data(), false, in, out, nullptr, WeightType::bf16, {false, false, true});
  std::vector<uint16_t> x(16 * in, 0x3f80);
  std::vector<float> y(16 * out);
  std::vector<float> scratch(1 << 24);
  for (int m : {1, 2, 3, 4, 5, 6, 8}) {
    std::vector<double> t[2];
    for (int rep = 0; rep < 15; ++rep)
      for (int k = 0; k < 2; ++k) {
        const Linear& L = k ? own : dnn;
        if (!getenv("NOEVICT")) evict((char*)L.weight_data(), L.weight_bytes());
        auto t0 = std::chrono::steady_clock::now();
        L.run(x.data(), ActType::bf16, y.data(), ActType::f32, m, 2, scratch.data());
        t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
      }
    for (auto& v : t) std::sort(v.begin(), v.end());
    printf("m %d: onednn %.3f ms, attend %.3f ms (%s)\n", m, t[0][7], t[1][7], own.implementation(m).c_str());
  }
}
