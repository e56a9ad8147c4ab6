// Session 64: a layer decode step in its parts (not built by the project). The layer's step
// (forward_cached), its two projections alone (gemm::Linear, as the layer runs them: QKV fused,
// then W_O), each projection alone, and its attention alone (cached_attention), f32 or bf16
// (weights, activations, cache and fpmath, as layer/attend-bf16), every part after the bench's
// eviction of its own bytes and paired with the bench's reference read of them; CHAIN=1 runs
// steps back to back after one eviction of all their bytes and times each step.
// Defaults: L4 (B 8, 2048 cached tokens); `… bf16 11 1 4096` is L3. Built from the repository root
// after a build:
//   g++ -std=c++20 -O2 -march=native -fopenmp -I. -Iinclude -Ibuild/runtime/include \
//       docs/experiments/layer_parts.cpp bench/machine.cpp -o /tmp/layer_parts \
//       build/lib/libattend_layer.a build/lib/libattend_core.a -ldnnl -lnuma -lbenchmark -lpthread
//   OMP_NUM_THREADS=2 /tmp/layer_parts bf16 11           # L4's parts, medians of 11
//   CHAIN=1 OMP_NUM_THREADS=2 /tmp/layer_parts bf16 11 1 4096   # L3's steps in chains, each step timed
//   usage: layer_parts f32|bf16 REPS B CACHED
#include <algorithm>
#include <attend/attend.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_common.hpp"
#include "runtime/gemm/onednn_matmul.hpp"
using namespace attend;
using namespace attend::bench;
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
int main(int argc, char** argv) {
  const bool bf = argc > 1 && std::string(argv[1]) == "bf16";
  const int reps = argc > 2 ? atoi(argv[2]) : 11;
  const int64_t B = argc > 3 ? atoll(argv[3]) : 8, L = argc > 4 ? atoll(argv[4]) : 2048;
  const int64_t dm = 4096, hq = 32, hkv = 8, hd = 128, C = hq * hd + 2 * hkv * hd;
  const DType dt = bf ? DType::bf16 : DType::f32;
  std::vector<float> wq(dm * hq * hd), wk(dm * hkv * hd), wv(dm * hkv * hd), wo(hq * hd * dm), x(B * dm), y(B * dm);
  fill(wq, 1, 0.01f);
  fill(wk, 2, 0.01f);
  fill(wv, 3, 0.01f);
  fill(wo, 4, 0.01f);
  fill(x, 5);
  std::vector<float> wqkv(dm * C);  // the layer's fused QKV weights, X·W layout
  for (int64_t r = 0; r < dm; ++r) {
    std::memcpy(wqkv.data() + r * C, wq.data() + r * hq * hd, 4 * hq * hd);
    std::memcpy(wqkv.data() + r * C + hq * hd, wk.data() + r * hkv * hd, 4 * hkv * hd);
    std::memcpy(wqkv.data() + r * C + hq * hd + hkv * hd, wv.data() + r * hkv * hd, 4 * hkv * hd);
  }
  KvBuffer kc(B * hkv * L * hd), vc(B * hkv * L * hd);
  fill(kc, 6);
  fill(vc, 7);
  KVCache cache({hkv, hd, B, L, dt});
  for (int64_t b = 0; b < B; ++b) {
    const TensorView::Dims st{0, L * hd, hd, 1};
    cache.append(b, TensorView(kc.data() + b * hkv * L * hd, {1, hkv, L - 1, hd}, st),
                 TensorView(vc.data() + b * hkv * L * hd, {1, hkv, L - 1, hd}, st));
  }
  std::vector<int64_t> seqs(B);
  for (int64_t b = 0; b < B; ++b) seqs[b] = b;
  MhaConfig cfg;
  cfg.d_model = dm;
  cfg.n_heads = hq;
  cfg.n_kv_heads = hkv;
  cfg.head_dim = hd;
  cfg.causal = true;
  cfg.weight_dtype = dt;
  MhaWeights w;
  w.layout = WeightLayout::in_out;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  const MultiHeadAttention layer(cfg, w);
  MhaOptions mo;
  SdpaOptions so;
  if (bf) mo.fpmath = so.fpmath = FpMath::bf16;
  const gemm::WeightType wt = bf ? gemm::WeightType::bf16 : gemm::WeightType::f32;
  const gemm::ActType at = bf ? gemm::ActType::bf16 : gemm::ActType::f32;
  const gemm::Linear qkv(wqkv.data(), false, dm, C, nullptr, wt), o(wo.data(), false, hq * hd, dm, nullptr, wt);
  std::printf("qkv: %s\no: %s\n", qkv.implementation(B).c_str(), o.implementation(B).c_str());
  const std::vector<uint16_t> x16 = to_bf16(x);
  std::vector<uint16_t> y16(B * dm), rows16(B * C), attn16(B * hq * hd);
  std::vector<float> rows(B * C), attn(B * hq * hd);
  std::vector<float> scratch(std::max(qkv.scratch_floats(B, at, at), o.scratch_floats(B, at, at)) + 64);
  float* scr = scratch.data() + (16 - reinterpret_cast<uintptr_t>(scratch.data()) / 4 % 16) % 16;
  // The attention's own step: one new token per sequence (as the layer appends it).
  std::vector<float> q(B * hq * hd), kn(B * hkv * hd), vn(B * hkv * hd), out(B * hq * hd);
  fill(q, 8);
  fill(kn, 9);
  fill(vn, 10);
  const std::vector<uint16_t> q16 = to_bf16(q), kn16 = to_bf16(kn), vn16 = to_bf16(vn);
  std::vector<uint16_t> out16(out.size());
  auto view = [&](const std::vector<float>& f, const std::vector<uint16_t>& h, int64_t heads) {
    return bf ? TensorView::dense(static_cast<const void*>(h.data()), DType::bf16, {B, heads, 1, hd})
              : TensorView::dense(static_cast<const float*>(f.data()), {B, heads, 1, hd});
  };
  const TensorView Q = view(q, q16, hq), K = view(kn, kn16, hkv), V = view(vn, vn16, hkv);
  const TensorView O = bf ? TensorView::dense(static_cast<void*>(out16.data()), DType::bf16, {B, hq, 1, hd})
                          : TensorView::dense(out.data(), {B, hq, 1, hd});
  const void* xin = bf ? static_cast<const void*>(x16.data()) : x.data();
  void* yout = bf ? static_cast<void*>(y16.data()) : y.data();
  // Each part runs after an eviction of its own bytes and is paired with reads of them, each after
  // its own eviction, as the bench's decode entries are (the volume evicted before a call moved
  // its time here: the projections alone ran 20–45% slower after all the step's bytes were evicted).
  Evict e_cache = evict_cache(cache, seqs), e_qkv, e_o, e_lin, e_layer, e_all;
  e_qkv.add(qkv.weight_data(), qkv.weight_bytes());
  e_o.add(o.weight_data(), o.weight_bytes());
  e_lin.add(e_qkv).add(e_o);
  add_weights(e_layer, layer);
  e_layer.add(e_cache);
  e_all.add(e_layer).add(e_lin);
  const std::function<void()> run_layer = [&] { layer.forward_cached(xin, dt, yout, dt, B, 1, cache, seqs, mo); };
  const std::function<void()> run_qkv = [&] {
    qkv.run(xin, at, bf ? static_cast<void*>(rows16.data()) : rows.data(), at, B, 0, scr);
  };
  const std::function<void()> run_o = [&] {
    o.run(bf ? static_cast<const void*>(attn16.data()) : attn.data(), at, yout, at, B, 0, scr);
  };
  const std::function<void()> run_attention = [&] { cached_attention(Q, K, V, cache, seqs, O, so); };
  auto truncate = [&] {
    for (int64_t b = 0; b < B; ++b) cache.truncate(b, L - 1);
  };
  if (std::getenv("CHAIN")) {  // steps run back to back after one eviction, each timed
    struct Chain {
      const char* name;
      std::vector<std::pair<const char*, const std::function<void()>*>> steps;
    };
    const std::vector<Chain> chains = {{"qkv, o", {{"qkv", &run_qkv}, {"o", &run_o}}},
                                       {"o, qkv", {{"o", &run_o}, {"qkv", &run_qkv}}},
                                       {"qkv, attention, o", {{"qkv", &run_qkv}, {"a", &run_attention}, {"o", &run_o}}},
                                       {"o alone", {{"o", &run_o}}},
                                       {"qkv alone", {{"qkv", &run_qkv}}},
                                       {"attention alone", {{"a", &run_attention}}}};
    for (const Chain& c : chains) {
      std::vector<std::vector<double>> t(c.steps.size());
      for (int i = 0; i < reps; ++i) {
        truncate();
        e_all();
        for (size_t k = 0; k < c.steps.size(); ++k) {
          const double t0 = now();
          (*c.steps[k].second)();
          t[k].push_back(now() - t0);
        }
      }
      std::printf("%-18s", c.name);
      for (size_t k = 0; k < c.steps.size(); ++k) std::printf("  %s %.3f", c.steps[k].first, median(t[k]) * 1e3);
      std::printf(" ms\n");
    }
    return 0;
  }
  struct Part {
    const char* name;
    const Evict* bytes;
    std::function<void()> run;
    double idle = 0.0;  // seconds of the part that are a wait (not counted)
  };
  const std::vector<Part> parts = {
      {"layer", &e_layer, run_layer},
      {"projections", &e_lin,
       [&] {
         run_qkv();
         run_o();
       }},
      {"projections, 100 us apart", &e_lin,
       [&] {
         run_qkv();
         const double t = now();
         while (now() - t < 1e-4) {
         }
         run_o();
       },
       1e-4},
      {"qkv", &e_qkv, run_qkv},
      {"o", &e_o, run_o},
      {"attention", &e_cache, run_attention},
  };
  std::vector<std::vector<double>> ts(parts.size()), shares(parts.size());
  uint32_t sink = 0;
  // The parts in a rotating order: a call's time here depends on what ran just before it (session
  // 64: whatever followed the layer's part and its reference reads ran 20–30% slower, whichever
  // part it was), so each part follows each other part equally often.
  for (int i = 0; i < reps + 2; ++i)
    for (size_t n = 0; n < parts.size(); ++n) {
      const size_t p = (n + static_cast<size_t>(i)) % parts.size();
      truncate();
      (*parts[p].bytes)();
      const double t0 = now();
      parts[p].run();
      const double t = now() - t0 - parts[p].idle;
      Evict::ReferenceRead fastest{};
      const double r = parts[p].bytes->reference_seconds(sink, fastest);
      if (i >= 2) ts[p].push_back(t), shares[p].push_back(r / t);
    }
  for (size_t p = 0; p < parts.size(); ++p)
    std::printf("%s %-26s %.3f ms, %.1f%% of a read of its %.1f MB\n", bf ? "bf16" : "f32 ", parts[p].name,
                median(ts[p]) * 1e3, 100 * median(shares[p]), parts[p].bytes->bytes() / 1e6);
  return sink == 0x5eed ? 1 : 0;
}
