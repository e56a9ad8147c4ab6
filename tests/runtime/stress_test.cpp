// Stress: 16 threads share one layer, each with its own cache, running a random mix of prefill,
// decode, truncate and reset with random lengths — including requests that overflow a slot and
// must fail cleanly. Each thread's script is replayed serially first; every concurrent output,
// length and error must equal the serial run bit for bit. Bounded by the script length (and run
// under ThreadSanitizer and AddressSanitizer in CI).
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../test_tensors.hpp"

// Layer options that only set the thread count.
inline attend::MhaOptions threads_option(int threads) {
  attend::MhaOptions o;
  o.num_threads = threads;
  return o;
}

namespace attend::testing {
namespace {

constexpr int64_t kDm = 128, kHeads = 8, kKvHeads = 2, kHd = 16, kCapacity = 48;

struct Op {
  enum Kind { prefill, decode, truncate, reset } kind;
  int64_t seq, n;
  std::vector<float> x;
};

std::vector<Op> script(uint32_t seed, int ops) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Op> s;
  for (int i = 0; i < ops; ++i) {
    Op op{static_cast<Op::Kind>(rng() % 4), static_cast<int64_t>(rng() % 2), 0, {}};
    if (op.kind == Op::prefill) op.n = 1 + static_cast<int64_t>(rng() % 20);  // sometimes overflows
    if (op.kind == Op::decode) op.n = 1;
    if (op.kind == Op::truncate) op.n = static_cast<int64_t>(rng() % 30);  // sometimes past the length
    const int64_t rows = op.kind == Op::decode ? 2 : op.n;                 // decode: both sequences
    if (op.kind == Op::prefill || op.kind == Op::decode) {
      op.x.resize(static_cast<size_t>(rows * kDm));
      for (float& v : op.x) v = u(rng);
    }
    s.push_back(std::move(op));
  }
  return s;
}

// Runs a script on a fresh cache; returns everything observable: outputs, lengths, error flags.
std::vector<float> play(const MultiHeadAttention& layer, const std::vector<Op>& ops, DType dtype) {
  KVCache cache({kKvHeads, kHd, 2, kCapacity, dtype});
  std::vector<float> trace;
  for (const Op& op : ops) {
    bool failed = false;
    try {
      switch (op.kind) {
        case Op::prefill: {
          std::vector<float> y(op.x.size());
          const int64_t seq[] = {op.seq};
          layer.forward_cached(op.x.data(), y.data(), 1, op.n, cache, seq, threads_option(1));
          trace.insert(trace.end(), y.begin(), y.end());
          break;
        }
        case Op::decode: {
          std::vector<float> y(op.x.size());
          const int64_t seqs[] = {0, 1};
          layer.forward_cached(op.x.data(), y.data(), 2, 1, cache, seqs, threads_option(1));
          trace.insert(trace.end(), y.begin(), y.end());
          break;
        }
        case Op::truncate: cache.truncate(op.seq, op.n); break;
        case Op::reset: cache.reset(op.seq); break;
      }
    } catch (const Error&) {
      failed = true;
    }
    trace.push_back(failed ? -1.0f : 1.0f);
    trace.push_back(static_cast<float>(cache.length(0)));
    trace.push_back(static_cast<float>(cache.length(1)));
  }
  return trace;
}

TEST(Stress, SixteenThreadsRandomCacheOperations) {
  MhaConfig cfg;
  cfg.d_model = kDm;
  cfg.n_heads = kHeads;
  cfg.n_kv_heads = kKvHeads;
  cfg.rope = true;
  std::mt19937 rng(99);
  auto weights = [&](size_t n) { return random_values(rng, n, -0.1f, 0.1f); };
  const auto wq = weights(kDm * kDm), wk = weights(kKvHeads * kHd * kDm), wv = weights(kKvHeads * kHd * kDm),
             wo = weights(kDm * kDm);
  MhaWeights w;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  const MultiHeadAttention layer(cfg, w);

  constexpr int kThreads = 16, kOps = 60;
  const DType dtypes[4] = {DType::f32, DType::bf16, DType::f16, DType::i8};
  std::vector<std::vector<Op>> scripts;
  std::vector<std::vector<float>> serial(kThreads), concurrent(kThreads);
  for (int t = 0; t < kThreads; ++t) scripts.push_back(script(1000 + t, kOps));
  for (int t = 0; t < kThreads; ++t) serial[t] = play(layer, scripts[t], dtypes[t % 4]);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { concurrent[t] = play(layer, scripts[t], dtypes[t % 4]); });
  for (auto& th : threads) th.join();
  int errors = 0;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(serial[t].size(), concurrent[t].size()) << "thread " << t;
    EXPECT_EQ(0, std::memcmp(serial[t].data(), concurrent[t].data(), serial[t].size() * sizeof(float)))
        << "thread " << t;
    for (size_t i = 0; i + 2 < serial[t].size(); ++i) errors += serial[t][i] == -1.0f;
  }
  EXPECT_GT(errors, 0) << "the scripts should include rejected (overflowing) operations";
}

}  // namespace
}  // namespace attend::testing
