// The shape of a server embedding attend: one immutable attention layer shared by worker threads,
// each worker owning a KV cache for its sequences; prefill a prompt, then decode token by token.
// Weights are random here; a real server loads them (see attend-run for safetensors).
#include <atomic>
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

// Layer options that only set the thread count.
inline attend::MhaOptions threads_option(int threads) {
  attend::MhaOptions o;
  o.num_threads = threads;
  return o;
}

int main() {
  attend::MhaConfig cfg;
  cfg.d_model = 512;
  cfg.n_heads = 8;
  cfg.n_kv_heads = 2;  // GQA 4:1
  cfg.rope = true;
  const int64_t d = cfg.d_model, hd = d / cfg.n_heads, kv_out = cfg.n_kv_heads * hd;

  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(static_cast<float>(d)));
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  const auto wq = random(d * d), wk = random(kv_out * d), wv = random(kv_out * d), wo = random(d * d);
  attend::MhaWeights w;
  w.layout = attend::WeightLayout::out_in;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  const attend::MultiHeadAttention layer(cfg, w);  // weights copied and prepacked; buffers may go

  constexpr int kWorkers = 4, kSequences = 2, kPrompt = 64, kSteps = 32;
  std::atomic<int> bad{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int id = 0; id < kWorkers; ++id) {
    workers.emplace_back([&, id] {
      // Each worker: its own cache (bf16 storage), two sequences decoded together, one thread
      // per call so four workers share the machine without oversubscription.
      attend::KVCache cache({cfg.n_kv_heads, hd, kSequences, kPrompt + kSteps, attend::DType::bf16});
      std::mt19937 local(static_cast<unsigned>(id));
      std::normal_distribution<float> x_dist(0.0f, 1.0f);
      const int64_t seqs[kSequences] = {0, 1};
      std::vector<float> x(kSequences * kPrompt * d), y(x.size());
      for (float& v : x) v = x_dist(local);
      layer.forward_cached(x.data(), y.data(), kSequences, kPrompt, cache, seqs, threads_option(1));
      std::vector<float> token(kSequences * d), out(token.size());
      for (int step = 0; step < kSteps; ++step) {
        for (float& v : token) v = x_dist(local);
        layer.forward_cached(token.data(), out.data(), kSequences, 1, cache, seqs, threads_option(1));
        for (float v : out)
          if (!std::isfinite(v)) ++bad;
      }
      if (cache.length(0) != kPrompt + kSteps || cache.length(1) != kPrompt + kSteps) ++bad;
    });
  }
  for (auto& t : workers) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "embedding_server: attend %s (%s), %d workers x %d sequences: prefill %d + decode %d tokens in %.3f s "
      "(%.0f decode tokens/s)\n",
      ATTEND_VERSION_STRING, attend::isa_name(attend::active_isa()), kWorkers, kSequences, kPrompt, kSteps, s,
      kWorkers * kSequences * kSteps / s);
  if (bad) {
    std::fprintf(stderr, "embedding_server: %d bad outputs\n", bad.load());
    return 1;
  }
  return 0;
}
