// cached_attention and the cache's modifying calls reject bad input before changing anything: every
// check scaled_dot_product_attention runs (negative strides, outputs overlapping an input or
// themselves, read-only outputs), the cache's own (sequence ids, capacity with ErrorCode::capacity),
// the context's byte limit, and a second call modifying the same cache at once
// (ErrorCode::concurrent_use). After each rejection the cache's lengths, its contents (the result
// of a later valid call) and the output are exactly as before.
#include <gtest/gtest.h>

#include <atomic>
#include <attend/attend.hpp>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

constexpr int64_t kHkv = 2, kGroup = 2, kHq = kHkv * kGroup, kD = 16, kN = 3, kCap = 40;

struct Fixture {
  KVCache cache{{kHkv, kD, 3, kCap, DType::f32}};
  std::vector<float> q, k, v;
  TestTensor o = TestTensor::make({2, kHq, kN, kD});
  std::vector<int64_t> seqs{2, 0};
  Fixture() {
    std::mt19937 rng(11);
    // Prior contents: 10 tokens in slot 0, 25 in slot 2.
    for (int64_t slot : {0, 2}) {
      const int64_t n = slot == 0 ? 10 : 25;
      const auto pk = random_values(rng, static_cast<size_t>(kHkv * n * kD)), pv = random_values(rng, pk.size());
      cache.append(slot, TensorView::dense(pk.data(), {1, kHkv, n, kD}),
                   TensorView::dense(pv.data(), {1, kHkv, n, kD}));
    }
    q = random_values(rng, static_cast<size_t>(2 * kHq * kN * kD));
    k = random_values(rng, static_cast<size_t>(2 * kHkv * kN * kD));
    v = random_values(rng, k.size());
    o.fill(12345.0f);
  }
  TensorView qv() const { return TensorView::dense(q.data(), {2, kHq, kN, kD}); }
  TensorView kv() const { return TensorView::dense(k.data(), {2, kHkv, kN, kD}); }
  TensorView vv() const { return TensorView::dense(v.data(), {2, kHkv, kN, kD}); }
  void call(const TensorView& q_, const TensorView& k_, const TensorView& v_, const TensorView& o_,
            const SdpaOptions& opt = {}) {
    cached_attention(q_, k_, v_, cache, seqs, o_, opt);
  }
};

// A valid call's output on a fresh cache with the same contents: what every rejected call must
// leave reachable.
std::vector<float> valid_result() {
  Fixture s;
  s.call(s.qv(), s.kv(), s.vv(), s.o.view);
  return std::vector<float>(s.o.base(), s.o.base() + s.o.used);
}

void expect_rejected(const std::string& what, const std::function<void(Fixture&)>& bad,
                     ErrorCode code = ErrorCode::invalid_argument) {
  SCOPED_TRACE(what);
  Fixture s;
  try {
    bad(s);
    ADD_FAILURE() << "not rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
  }
  EXPECT_EQ(s.cache.length(0), 10);
  EXPECT_EQ(s.cache.length(1), 0);
  EXPECT_EQ(s.cache.length(2), 25);
  EXPECT_TRUE(s.o.guards_intact());
  for (size_t i = 0; i < s.o.used; ++i) ASSERT_EQ(s.o.base()[i], 12345.0f) << "o written at " << i;
  // The cache still gives the result a fresh cache gives (nothing was appended or overwritten).
  s.seqs = {2, 0};
  s.call(s.qv(), s.kv(), s.vv(), s.o.view);
  EXPECT_EQ(0, std::memcmp(s.o.base(), valid_result().data(), s.o.used * sizeof(float)));
}

TEST(CachedAttentionInvalid, RejectsWhatSdpaRejectsAndChangesNothing) {
  expect_rejected("negative q stride", [](Fixture& s) {
    s.call(TensorView(s.q.data() + (kN - 1) * kD, {2, kHq, kN, kD}, {kHq * kN * kD, kN * kD, -kD, 1}), s.kv(), s.vv(),
           s.o.view);
  });
  expect_rejected("negative o stride", [](Fixture& s) {
    s.call(s.qv(), s.kv(), s.vv(),
           TensorView(s.o.base() + (kN - 1) * kD, {2, kHq, kN, kD}, {kHq * kN * kD, kN * kD, -kD, 1}));
  });
  expect_rejected("negative k_new stride", [](Fixture& s) {
    s.call(s.qv(), TensorView(s.k.data() + kHkv * kN * kD, {2, kHkv, kN, kD}, {-kHkv * kN * kD, kN * kD, kD, 1}),
           s.vv(), s.o.view);
  });
  auto over = [](const std::vector<float>& buf) {
    return TensorView(const_cast<float*>(buf.data()), {2, kHq, kN, kD}, {kHkv * kN * kD, 0, kD, 1});
  };
  expect_rejected("o overlaps q", [](Fixture& s) {
    s.call(s.qv(), s.kv(), s.vv(),
           TensorView(s.q.data(), {2, kHq, kN, kD}, TensorView::dense_strides({2, kHq, kN, kD})));
  });
  expect_rejected("o overlaps k_new", [&](Fixture& s) {
    s.call(s.qv(), s.kv(), s.vv(), TensorView(const_cast<float*>(s.k.data()) + 1, {1, 1, 1, kD}, {0, 0, 0, 1}));
  });
  expect_rejected("o overlaps v_new", [&](Fixture& s) { s.call(s.qv(), s.kv(), s.vv(), over(s.v)); });
  expect_rejected("o aliases itself", [](Fixture& s) {
    s.call(s.qv(), s.kv(), s.vv(), TensorView(s.o.base(), {2, kHq, kN, kD}, {0, 0, 0, 1}));
  });
  expect_rejected("read-only o", [](Fixture& s) { s.call(s.qv(), s.kv(), s.vv(), s.o.cview()); });
  expect_rejected("null q", [](Fixture& s) {
    s.call(
        TensorView(static_cast<const float*>(nullptr), {2, kHq, kN, kD}, TensorView::dense_strides({2, kHq, kN, kD})),
        s.kv(), s.vv(), s.o.view);
  });
  expect_rejected("k_new tokens differ from q's", [](Fixture& s) {
    s.call(s.qv(), TensorView::dense(s.k.data(), {2, kHkv, kN - 1, kD}),
           TensorView::dense(s.v.data(), {2, kHkv, kN - 1, kD}), s.o.view);
  });
  expect_rejected("head dim differs from the cache's", [](Fixture& s) {
    s.call(TensorView::dense(s.q.data(), {2, kHq, kN, kD / 2}), TensorView::dense(s.k.data(), {2, kHkv, kN, kD / 2}),
           TensorView::dense(s.v.data(), {2, kHkv, kN, kD / 2}), TensorView::dense(s.o.base(), {2, kHq, kN, kD / 2}));
  });
  expect_rejected("kv_lens given", [](Fixture& s) {
    const int64_t lens[2] = {1, 1};
    SdpaOptions o;
    o.kv_lens = lens;
    s.call(s.qv(), s.kv(), s.vv(), s.o.view, o);
  });
  expect_rejected("negative window", [](Fixture& s) {
    SdpaOptions o;
    o.window = -1;
    s.call(s.qv(), s.kv(), s.vv(), s.o.view, o);
  });
  expect_rejected("duplicate sequence", [](Fixture& s) {
    s.seqs = {0, 0};
    s.call(s.qv(), s.kv(), s.vv(), s.o.view);
  });
  expect_rejected("sequence out of range", [](Fixture& s) {
    s.seqs = {0, 3};
    s.call(s.qv(), s.kv(), s.vv(), s.o.view);
  });
  expect_rejected("one sequence for a batch of two", [](Fixture& s) {
    s.seqs = {0};
    s.call(s.qv(), s.kv(), s.vv(), s.o.view);
  });
}

// Capacity is its own error code, names the sequence, and leaves every sequence of the batch as it
// was (slot 2 holds 25 of 40: 3 more fit; slot 0 holds 10: with 38 more tokens neither fits).
TEST(CachedAttentionInvalid, CapacityIsStructured) {
  Fixture s;
  EXPECT_EQ(s.cache.remaining(0), kCap - 10);
  EXPECT_EQ(s.cache.remaining(2), kCap - 25);
  std::mt19937 rng(2);
  constexpr int64_t kMany = 16;  // fits slot 0 (10 + 16), not slot 2 (25 + 16)
  const auto q = random_values(rng, static_cast<size_t>(2 * kHq * kMany * kD));
  const auto k = random_values(rng, static_cast<size_t>(2 * kHkv * kMany * kD));
  std::vector<float> o(q.size(), 7.0f);
  const int64_t seqs[2] = {0, 2};
  try {
    cached_attention(TensorView::dense(q.data(), {2, kHq, kMany, kD}),
                     TensorView::dense(k.data(), {2, kHkv, kMany, kD}),
                     TensorView::dense(k.data(), {2, kHkv, kMany, kD}), s.cache, seqs,
                     TensorView::dense(o.data(), {2, kHq, kMany, kD}));
    FAIL() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
    EXPECT_NE(std::string(e.what()).find("sequence 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.cache.length(0), 10);
  EXPECT_EQ(s.cache.length(2), 25);
  for (float x : o) ASSERT_EQ(x, 7.0f);
  // KVCache::append reports the same way.
  try {
    s.cache.append(2, TensorView::dense(k.data(), {1, kHkv, kMany, kD}),
                   TensorView::dense(k.data(), {1, kHkv, kMany, kD}));
    FAIL() << "append overflow accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
  }
  EXPECT_EQ(s.cache.length(2), 25);
}

// Before this was fixed, cached_attention wrote K/V into the cache and then ran the attention, so a
// failure there (here: the context's byte limit) left the sequences longer.
TEST(CachedAttentionInvalid, WorkspaceLimitChangesNothing) {
  ContextConfig cc;
  cc.max_workspace_bytes = 4096;  // one page: less than any call's tile scratch
  Context tiny(cc);
  expect_rejected(
      "workspace limit",
      [&](Fixture& s) {
        SdpaOptions o;
        o.context = &tiny;
        s.call(s.qv(), s.kv(), s.vv(), s.o.view, o);
      },
      ErrorCode::capacity);
}

// Two threads appending to one cache: previously some appends were silently lost (11 of 320 in one
// run of three). Now a call that finds the cache claimed throws concurrent_use, and every append
// that returned normally is in the cache: the lengths equal the successful appends.
TEST(CachedAttentionInvalid, ConcurrentModificationIsDetectedNotLost) {
  constexpr int kThreads = 4, kAppends = 200;
  KVCache cache({1, 64, 2, kThreads * kAppends, DType::f32});
  std::vector<float> row(64, 0.5f);
  std::atomic<int64_t> ok[2] = {0, 0};
  std::atomic<int> other_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      const int64_t seq = t % 2;  // two threads per sequence, and both sequences share the cache
      for (int i = 0; i < kAppends; ++i) {
        try {
          cache.append(seq, TensorView::dense(row.data(), {1, 1, 1, 64}), TensorView::dense(row.data(), {1, 1, 1, 64}));
          ++ok[seq];
        } catch (const Error& e) {
          if (e.code() != ErrorCode::concurrent_use) ++other_errors;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(other_errors.load(), 0);
  EXPECT_EQ(cache.length(0), ok[0].load());
  EXPECT_EQ(cache.length(1), ok[1].load());
  EXPECT_GT(ok[0].load() + ok[1].load(), 0);
}

// The layer's calls share the rules: tokens = 0 is a no-op, span forms check sizes, options that do
// not apply are rejected, capacity is ErrorCode::capacity.
TEST(LayerCalls, ZeroTokensSpansAndOptions) {
  std::mt19937 rng(5);
  const auto wq = random_values(rng, 32 * 32, -0.2f, 0.2f), wk = random_values(rng, 16 * 32, -0.2f, 0.2f);
  MhaConfig cfg;
  cfg.d_model = 32;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  MhaWeights w;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wk.data();
  w.o = wq.data();
  const MultiHeadAttention layer(cfg, w);
  KVCache cache({2, 8, 2, 4, DType::f32});
  const int64_t seq[1] = {0};
  std::vector<float> x(5 * 32, 0.1f), y(5 * 32, 7.0f);

  layer.forward(x.data(), y.data(), 1, 0);
  layer.forward_cached(x.data(), y.data(), 1, 0, cache, seq);
  layer.cross_attend(x.data(), y.data(), 1, 0, cache, seq);
  layer.forward(nullptr, nullptr, 0, 5);
  for (float v : y) ASSERT_EQ(v, 7.0f);
  EXPECT_EQ(cache.length(0), 0);

  EXPECT_THROW(layer.forward(std::span<const float>(x).first(32 * 4), std::span<float>(y), 1, 5), Error);
  EXPECT_THROW(layer.forward(std::span<const float>(x), std::span<float>(y).first(32), 1, 5), Error);
  layer.forward(std::span<const float>(x), std::span<float>(y), 1, 5);
  EXPECT_NE(y[0], 7.0f);

  MhaOptions noncausal;
  noncausal.causal = false;
  EXPECT_THROW(layer.forward_cached(x.data(), y.data(), 1, 1, cache, seq, noncausal), Error);
  const int64_t len[1] = {1};
  MhaOptions lengths;
  lengths.lengths = len;
  EXPECT_THROW(layer.cross_attend(x.data(), y.data(), 1, 1, cache, seq, lengths), Error);
  MhaOptions negative;
  negative.first_position = -1;
  EXPECT_THROW(layer.forward(x.data(), y.data(), 1, 1, negative), Error);

  try {
    layer.forward_cached(x.data(), y.data(), 1, 5, cache, seq);  // capacity 4
    FAIL() << "overflow accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
  }
  EXPECT_EQ(cache.length(0), 0);
}

}  // namespace
}  // namespace attend::testing
