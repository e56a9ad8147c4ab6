// Every entry point gives bitwise identical results for 1, 2, 3 and 16 threads: work is split by
// shape only and every reduction has a fixed order (split-K decode included).
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cstring>
#include <functional>
#include <random>
#include <string>
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

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  return random_values(rng, n);
}

// Runs `f(threads)` for each thread count and expects the same bits every time.
void expect_same_bits(const std::string& what, const std::function<std::vector<float>(int)>& f) {
  const std::vector<float> one = f(1);
  for (int t : {2, 3, 16}) {
    const std::vector<float> other = f(t);
    ASSERT_EQ(one.size(), other.size());
    EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * sizeof(float))) << what << ": " << t << " threads";
  }
}

TEST(Determinism, SdpaPrefillAndSplitDecode) {
  struct Shape {
    int64_t B, Hq, Hkv, Nq, Nk, D;
    bool causal;
  };
  for (const Shape s :
       {Shape{2, 8, 2, 130, 130, 64, true}, Shape{1, 8, 8, 1, 5000, 128, false}, Shape{3, 4, 1, 2, 2500, 40, true}}) {
    const auto q = random_vec(static_cast<size_t>(s.B * s.Hq * s.Nq * s.D), 1);
    const auto k = random_vec(static_cast<size_t>(s.B * s.Hkv * s.Nk * s.D), 2);
    const auto v = random_vec(k.size(), 3);
    // (FpMath::bf16: prefill's items run in runs per thread, each packing its own heads' K/V)
    for (Isa isa : supported_isas())
      for (FpMath fpmath : {FpMath::strict, FpMath::bf16})
        expect_same_bits(std::string("sdpa ") + isa_name(isa) + (fpmath == FpMath::bf16 ? " bf16 math" : "") +
                             " Nq=" + std::to_string(s.Nq),
                         [&](int threads) {
                           std::vector<float> o(q.size());
                           SdpaOptions opt;
                           opt.causal = s.causal;
                           opt.num_threads = threads;
                           opt.isa = isa;
                           opt.fpmath = fpmath;
                           scaled_dot_product_attention(TensorView::dense(q.data(), {s.B, s.Hq, s.Nq, s.D}),
                                                        TensorView::dense(k.data(), {s.B, s.Hkv, s.Nk, s.D}),
                                                        TensorView::dense(v.data(), {s.B, s.Hkv, s.Nk, s.D}),
                                                        TensorView::dense(o.data(), {s.B, s.Hq, s.Nq, s.D}), opt);
                           return o;
                         });
  }
}

TEST(Determinism, CachedAttention) {
  const int64_t B = 2, Hq = 8, Hkv = 2, D = 64, L = 3000;
  const auto k = random_vec(static_cast<size_t>(B * Hkv * L * D), 4), v = random_vec(k.size(), 5);
  const auto q = random_vec(static_cast<size_t>(B * Hq * D), 6);
  for (DType dt : {DType::f32, DType::bf16, DType::i8})
    expect_same_bits(std::string("cached_attention ") + dtype_name(dt), [&](int threads) {
      KVCache cache({Hkv, D, B, L, dt});
      const int64_t seqs[] = {0, 1};
      for (int64_t b = 0; b < B; ++b) {
        const TensorView::Dims st{0, L * D, D, 1};
        const int64_t n = b == 0 ? L - 1 : 1000;  // different lengths in one batch
        cache.append(b, TensorView(k.data() + b * Hkv * L * D, {1, Hkv, n, D}, st),
                     TensorView(v.data() + b * Hkv * L * D, {1, Hkv, n, D}, st));
      }
      std::vector<float> o(q.size());
      SdpaOptions opt;
      opt.num_threads = threads;
      cached_attention(TensorView::dense(q.data(), {B, Hq, 1, D}), TensorView::dense(q.data(), {B, Hkv, 1, D}),
                       TensorView::dense(q.data() + Hkv * D, {B, Hkv, 1, D}), cache, seqs,
                       TensorView::dense(o.data(), {B, Hq, 1, D}), opt);
      return o;
    });
}

TEST(Determinism, LayerEntryPoints) {
  MhaConfig cfg;
  cfg.d_model = 256;
  cfg.n_heads = 8;
  cfg.n_kv_heads = 2;
  cfg.bias = true;
  cfg.rope = true;
  const int64_t d = 256, kv = 64;
  const auto wq = random_vec(d * d, 7), wk = random_vec(kv * d, 8), wv = random_vec(kv * d, 9),
             wo = random_vec(d * d, 10);
  const auto bq = random_vec(d, 11), bk = random_vec(kv, 12), bv = random_vec(kv, 13), bo = random_vec(d, 14);
  MhaWeights w;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  w.q_bias = bq.data();
  w.k_bias = bk.data();
  w.v_bias = bv.data();
  w.o_bias = bo.data();
  for (DType wdt : {DType::f32, DType::bf16}) {
    cfg.weight_dtype = wdt;
    const MultiHeadAttention layer(cfg, w);
    const std::string tag = std::string(" weights ") + dtype_name(wdt);
    const auto x = random_vec(static_cast<size_t>(3 * 70 * d), 15);
    expect_same_bits("forward" + tag, [&](int threads) {
      std::vector<float> y(x.size());
      MhaOptions opt;
      opt.causal = true;
      opt.num_threads = threads;
      layer.forward(x.data(), y.data(), 3, 70, opt);
      return y;
    });
    expect_same_bits("forward_cached prefill + decode" + tag, [&](int threads) {
      KVCache cache({2, 32, 3, 200, DType::f32});
      const int64_t seqs[] = {2, 0, 1};
      std::vector<float> y(x.size()), out;
      layer.forward_cached(x.data(), y.data(), 3, 70, cache, seqs, threads_option(threads));
      out = y;
      for (int step = 0; step < 3; ++step) {
        std::vector<float> ys(3 * d);
        layer.forward_cached(x.data() + step * d, ys.data(), 3, 1, cache, seqs, threads_option(threads));
        out.insert(out.end(), ys.begin(), ys.end());
      }
      return out;
    });
    expect_same_bits("cross_attend" + tag, [&](int threads) {
      KVCache cache({2, 32, 2, 100, DType::f32});
      const int64_t seqs[] = {1, 0};
      layer.set_memory(x.data(), 2, 90, cache, seqs, threads_option(threads));
      std::vector<float> y(2 * 5 * d);
      layer.cross_attend(x.data() + 1000, y.data(), 2, 5, cache, seqs, threads_option(threads));
      return y;
    });
  }
}

}  // namespace
}  // namespace attend::testing
