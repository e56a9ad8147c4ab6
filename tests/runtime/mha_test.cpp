// The attention layer and the KV cache against the double-precision reference layer.
//
// Configs cover MHA, GQA 4:1, MQA, biases, an odd d_model, RoPE on/off and both weight layouts.
// Tolerances are relative to the output's largest magnitude: 2e-5 for f32 (projections are f32
// GEMMs with K ≤ 96, attention as in the kernel tests); bf16 weights round weights and
// activations to 8 mantissa bits (relative 2^-9 each), so 3e-2; a bf16 KV cache stores K/V with
// 8 mantissa bits (3e-2), an f16 cache with 11 (4e-3), an i8 cache 8 bits per row with its own
// scale (3e-2, the bound the README states for it; measured on Gaussian data by I8CacheBound).
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../runtime/api/mha_access.hpp"
#include "../../runtime/numeric/convert.hpp"
#include "../reference/reference_layer.hpp"
#include "../test_tensors.hpp"

// Layer options that only set the thread count.
inline attend::MhaOptions threads_option(int threads) {
  attend::MhaOptions o;
  o.num_threads = threads;
  return o;
}

namespace attend::testing {
namespace {

struct LayerCase {
  std::string name;
  int64_t dm, hq, hkv, hd;
  bool bias = false, rope = false;
  int64_t hdv = 0;  // V head width (MhaConfig::value_head_dim); 0 = hd
  int64_t dv() const { return hdv ? hdv : hd; }
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale) { return random_values(rng, n, -scale, scale); }

struct Model {
  RefLayer ref;
  MhaConfig cfg;

  Model(const LayerCase& c, uint32_t seed = 5) {
    std::mt19937 rng(seed);
    ref.dm = c.dm;
    ref.hq = c.hq;
    ref.hkv = c.hkv;
    ref.hd = c.hd;
    ref.hdv = c.hdv;
    ref.rope = c.rope;
    const float ws = 1.0f / std::sqrt(static_cast<float>(c.dm));
    ref.wq = random_vec(rng, static_cast<size_t>(c.hq * c.hd * c.dm), ws);
    ref.wk = random_vec(rng, static_cast<size_t>(c.hkv * c.hd * c.dm), ws);
    ref.wv = random_vec(rng, static_cast<size_t>(c.hkv * c.dv() * c.dm), ws);
    ref.wo =
        random_vec(rng, static_cast<size_t>(c.dm * c.hq * c.dv()), 1.0f / std::sqrt(static_cast<float>(c.hq * c.dv())));
    if (c.bias) {
      ref.bq = random_vec(rng, static_cast<size_t>(c.hq * c.hd), 0.5f);
      ref.bk = random_vec(rng, static_cast<size_t>(c.hkv * c.hd), 0.5f);
      ref.bv = random_vec(rng, static_cast<size_t>(c.hkv * c.dv()), 0.5f);
      ref.bo = random_vec(rng, static_cast<size_t>(c.dm), 0.5f);
    }
    cfg.d_model = c.dm;
    cfg.n_heads = c.hq;
    cfg.n_kv_heads = c.hkv;
    cfg.head_dim = c.hd;
    cfg.value_head_dim = c.hdv;
    cfg.bias = c.bias;
    cfg.rope = c.rope;
  }

  MhaWeights weights() const {
    MhaWeights w;
    w.layout = WeightLayout::out_in;
    w.q = ref.wq.data();
    w.k = ref.wk.data();
    w.v = ref.wv.data();
    w.o = ref.wo.data();
    if (cfg.bias) {
      w.q_bias = ref.bq.data();
      w.k_bias = ref.bk.data();
      w.v_bias = ref.bv.data();
      w.o_bias = ref.bo.data();
    }
    return w;
  }

  MultiHeadAttention layer(DType wdt = DType::f32, bool cross = false) const {
    MhaConfig c = cfg;
    c.weight_dtype = wdt;
    c.cross_attention = cross;
    return MultiHeadAttention(c, weights());
  }
};

const std::vector<LayerCase>& layer_cases() {
  static const std::vector<LayerCase> cases = {
      {"mha", 64, 4, 4, 16},
      {"mha_bias_rope", 64, 4, 4, 16, true, true},
      {"gqa4", 64, 8, 2, 16, false, true},
      {"mqa_bias", 48, 6, 1, 8, true, false},
      {"odd_dmodel", 35, 5, 5, 7, true, false},
      {"wide_heads", 96, 2, 2, 64, false, true},
      {"value_dim_differs", 64, 8, 2, 16, true, true, 24},  // MhaConfig::value_head_dim
  };
  return cases;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  EXPECT_TRUE(close_to(got, want, tol)) << what;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

class Layer : public ::testing::TestWithParam<LayerCase> {};

TEST_P(Layer, ForwardMatchesReference) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(11);
  for (bool causal : {false, true})
    for (int64_t tokens : {1, 7, 70}) {
      const int64_t batch = 2;
      const auto x = random_vec(rng, static_cast<size_t>(batch * tokens * c.dm), 1.0f);
      std::vector<float> y(x.size());
      MhaOptions opt;
      opt.causal = causal;
      layer.forward(x.data(), y.data(), batch, tokens, opt);
      expect_close(y, m.ref.forward(x, batch, tokens, causal), 2e-5,
                   c.name + " tokens=" + std::to_string(tokens) + (causal ? " causal" : ""));
    }
}

TEST_P(Layer, PaddingLengthsAndPositionOffset) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(12);
  const int64_t batch = 3, tokens = 20;
  const std::vector<int64_t> lengths = {20, 9, 1};
  const auto x = random_vec(rng, static_cast<size_t>(batch * tokens * c.dm), 1.0f);
  std::vector<float> y(x.size());
  MhaOptions opt;
  opt.causal = true;
  opt.lengths = lengths;
  opt.first_position = 5;
  layer.forward(x.data(), y.data(), batch, tokens, opt);
  expect_close(y, m.ref.forward(x, batch, tokens, true, lengths, 5), 2e-5, c.name);
}

TEST_P(Layer, WeightLayoutsAgree) {
  // X·W layout is the transpose of nn.Linear's; both must build the same layer.
  const LayerCase& c = GetParam();
  Model m(c);
  auto transpose = [](const std::vector<float>& w, int64_t out, int64_t in) {
    std::vector<float> t(w.size());
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) t[static_cast<size_t>(i * out + o)] = w[static_cast<size_t>(o * in + i)];
    return t;
  };
  const auto wq = transpose(m.ref.wq, c.hq * c.hd, c.dm), wk = transpose(m.ref.wk, c.hkv * c.hd, c.dm),
             wv = transpose(m.ref.wv, c.hkv * c.dv(), c.dm), wo = transpose(m.ref.wo, c.dm, c.hq * c.dv());
  MhaWeights w = m.weights();
  w.layout = WeightLayout::in_out;
  w.q = wq.data();
  w.k = wk.data();
  w.v = wv.data();
  w.o = wo.data();
  const MultiHeadAttention a = m.layer(), b(m.cfg, w);
  std::mt19937 rng(13);
  const auto x = random_vec(rng, static_cast<size_t>(9 * c.dm), 1.0f);
  std::vector<float> ya(x.size()), yb(x.size());
  a.forward(x.data(), ya.data(), 1, 9);
  b.forward(x.data(), yb.data(), 1, 9);
  expect_close(yb, to_double(ya), 1e-6, c.name);
}

TEST_P(Layer, Bf16WeightsWithinBound) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer(DType::bf16);
  std::mt19937 rng(14);
  const auto x = random_vec(rng, static_cast<size_t>(2 * 33 * c.dm), 1.0f);
  std::vector<float> y(x.size());
  MhaOptions opt;
  opt.causal = true;
  layer.forward(x.data(), y.data(), 2, 33, opt);
  expect_close(y, m.ref.forward(x, 2, 33, true), 3e-2, c.name + " bf16 weights");
}

// MhaOptions::fpmath = bf16 reaches the attention: within the documented bound (1e-2 of the
// output's scale for the attention; the layer's output error stays below it here) and, where the
// CPU runs it natively, not the strict bits.
TEST_P(Layer, Bf16MathWithinBound) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(15);
  const int64_t tokens = 70;  // 70 × G rows per kv head: the prefill path
  const auto x = random_vec(rng, static_cast<size_t>(2 * tokens * c.dm), 1.0f);
  std::vector<float> y(x.size()), strict(x.size());
  MhaOptions opt;
  opt.causal = true;
  layer.forward(x.data(), strict.data(), 2, tokens, opt);
  opt.fpmath = FpMath::bf16;
  layer.forward(x.data(), y.data(), 2, tokens, opt);
  expect_close(y, m.ref.forward(x, 2, tokens, true), 1e-2, c.name + " fpmath=bf16");
  EXPECT_EQ(bf16_math_native(), y != strict) << c.name;
}

// Prefill N tokens, then decode M one at a time through the cache == one causal forward over N+M.
TEST_P(Layer, PrefillThenDecodeEqualsCausalForward) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(15);
  const int64_t n = 13, steps = 6, total = n + steps;
  const auto x = random_vec(rng, static_cast<size_t>(total * c.dm), 1.0f);
  const std::vector<double> want = m.ref.forward(x, 1, total, true);
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
    KVCache cache({c.hkv, c.hd, 2, 64, dt, c.dv()});
    std::vector<float> y(x.size());
    const int64_t seq[] = {1};
    layer.forward_cached(x.data(), y.data(), 1, n, cache, seq);
    for (int64_t t = n; t < total; ++t)
      layer.forward_cached(x.data() + t * c.dm, y.data() + t * c.dm, 1, 1, cache, seq);
    EXPECT_EQ(cache.length(1), total);
    EXPECT_EQ(cache.length(0), 0);
    const double tol = dt == DType::f32 ? 2e-5 : dt == DType::f16 ? 4e-3 : 3e-2;
    expect_close(y, want, tol, c.name + " cache " + dtype_name(dt));
  }
}

// Continuous batching through forward_paged: three sequences of different lengths advance by
// prompt chunks and decode tokens mixed in each call (packed [T, d_model]); every sequence's rows
// equal one causal forward over its whole token stream.
TEST_P(Layer, PagedStepsEqualCausalForward) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(16);
  // Tokens each sequence takes per call: a prompt in chunks, then decodes.
  const std::vector<std::vector<int64_t>> steps = {{13, 1, 20}, {1, 7, 1}, {1, 1, 1}, {5, 0, 1}};
  std::vector<int64_t> total(3, 0);
  for (const auto& st : steps)
    for (size_t i = 0; i < 3; ++i) total[i] += st[i];
  std::vector<std::vector<float>> xs, ys(3);
  for (size_t i = 0; i < 3; ++i) xs.push_back(random_vec(rng, static_cast<size_t>(total[i] * c.dm), 1.0f));
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
    PagedKVCache cache({c.hkv, c.hd, 64, 16, dt, c.dv()});
    const int64_t ids[3] = {cache.create_sequence(), cache.create_sequence(), cache.create_sequence()};
    std::vector<int64_t> done(3, 0);
    for (size_t i = 0; i < 3; ++i) ys[i].assign(xs[i].size(), 0.0f);
    for (const auto& st : steps) {
      std::vector<SequenceChunk> chunks;
      std::vector<float> x, y;
      for (size_t i : {size_t{2}, size_t{0}, size_t{1}}) {  // chunk order differs from id order
        chunks.push_back({ids[i], st[i]});
        x.insert(x.end(), xs[i].begin() + done[i] * c.dm, xs[i].begin() + (done[i] + st[i]) * c.dm);
      }
      y.assign(x.size(), 0.0f);
      layer.forward_paged(x, y, chunks, cache);
      size_t at = 0;
      for (size_t i : {size_t{2}, size_t{0}, size_t{1}}) {
        std::copy(y.begin() + static_cast<int64_t>(at), y.begin() + static_cast<int64_t>(at) + st[i] * c.dm,
                  ys[i].begin() + done[i] * c.dm);
        at += static_cast<size_t>(st[i] * c.dm);
        done[i] += st[i];
      }
    }
    const double tol = dt == DType::f32 ? 2e-5 : dt == DType::f16 ? 4e-3 : 3e-2;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(cache.length(ids[i]), total[i]);
      expect_close(ys[i], m.ref.forward(xs[i], 1, total[i], true), tol,
                   c.name + " paged " + dtype_name(dt) + " sequence " + std::to_string(i));
    }
  }
}

// Tensor parallelism by heads (MhaConfig::shard_rank / shard_count): the partial outputs of the N
// shards sum to the whole layer's output, through every entry point — forward (causal), a prefill
// then decode steps through a slot cache, a paged step of two chunks, and cross-attention — for
// every shard count the case allows (kv heads split or replicated), with and without the
// model-family terms (whose per-head sinks and slopes are sliced too), weights in both layouts.
TEST_P(Layer, ShardsSumToTheWholeLayer) {
  const LayerCase& c = GetParam();
  Model m(c);
  std::mt19937 rng(23);
  const int64_t batch = 2, n = 9, steps = 2, total = n + steps, mem = 7;
  const auto x = random_vec(rng, static_cast<size_t>(batch * total * c.dm), 1.0f);
  const auto memory = random_vec(rng, static_cast<size_t>(batch * mem * c.dm), 1.0f);
  const std::vector<float> sinks = random_vec(rng, static_cast<size_t>(c.hq), 1.5f);
  // out_in weights transposed: the same layer in the in_out layout.
  auto transpose = [](const std::vector<float>& w, int64_t rows, int64_t cols) {
    std::vector<float> t(w.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) t[static_cast<size_t>(k * rows + r)] = w[static_cast<size_t>(r * cols + k)];
    return t;
  };
  const std::vector<float> tq = transpose(m.ref.wq, c.hq * c.hd, c.dm), tk = transpose(m.ref.wk, c.hkv * c.hd, c.dm),
                           tv = transpose(m.ref.wv, c.hkv * c.dv(), c.dm),
                           to = transpose(m.ref.wo, c.dm, c.hq * c.dv());
  // Every entry point's output for one configuration (a shard or the whole layer).
  struct Outputs {
    std::vector<float> forward, cached, paged, cross;
  };
  auto run = [&](const MhaConfig& cfg, bool in_out) {
    MhaWeights w = m.weights();
    if (in_out) {
      w.layout = WeightLayout::in_out;
      w.q = tq.data();
      w.k = tk.data();
      w.v = tv.data();
      w.o = to.data();
    }
    if (cfg.softcap > 0) w.sinks = sinks.data();
    const MultiHeadAttention layer(cfg, w);
    MhaConfig cross_cfg = cfg;
    cross_cfg.cross_attention = true;
    const MultiHeadAttention cross(cross_cfg, w);
    const MhaShardInfo sh = layer.shard_info();
    EXPECT_EQ(sh.heads * cfg.shard_count, c.hq);
    Outputs o;
    o.forward.assign(x.size(), 0.0f);
    layer.forward(x.data(), o.forward.data(), batch, total);
    KVCache cache({sh.kv_heads, c.hd, batch, 32, DType::f32, c.dv()});
    const int64_t seqs[] = {1, 0};
    std::vector<float> xb(static_cast<size_t>(batch * n * c.dm)), yb(xb.size());
    o.cached.assign(x.size(), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
      std::copy(x.begin() + b * total * c.dm, x.begin() + (b * total + n) * c.dm, xb.begin() + b * n * c.dm);
    layer.forward_cached(xb.data(), yb.data(), batch, n, cache, seqs);
    for (int64_t b = 0; b < batch; ++b)
      std::copy(yb.begin() + b * n * c.dm, yb.begin() + (b + 1) * n * c.dm, o.cached.begin() + b * total * c.dm);
    for (int64_t t = n; t < total; ++t) {
      std::vector<float> x1(static_cast<size_t>(batch * c.dm)), y1(x1.size());
      for (int64_t b = 0; b < batch; ++b)
        std::copy(x.begin() + (b * total + t) * c.dm, x.begin() + (b * total + t + 1) * c.dm, x1.begin() + b * c.dm);
      layer.forward_cached(x1.data(), y1.data(), batch, 1, cache, seqs);
      for (int64_t b = 0; b < batch; ++b)
        std::copy(y1.begin() + b * c.dm, y1.begin() + (b + 1) * c.dm, o.cached.begin() + (b * total + t) * c.dm);
    }
    PagedKVCache pool({sh.kv_heads, c.hd, 16, 16, DType::f32, c.dv()});
    const SequenceChunk chunks[] = {{pool.create_sequence(), total}, {pool.create_sequence(), 3}};
    o.paged.assign(static_cast<size_t>((total + 3) * c.dm), 0.0f);
    std::vector<float> xp(x.begin(), x.begin() + total * c.dm);
    xp.insert(xp.end(), x.begin() + total * c.dm, x.begin() + (total + 3) * c.dm);
    layer.forward_paged(xp, o.paged, chunks, pool);
    KVCache mem_cache({sh.kv_heads, c.hd, batch, 16, DType::f32, c.dv()});
    cross.set_memory(memory.data(), batch, mem, mem_cache, seqs);
    o.cross.assign(x.size(), 0.0f);
    cross.cross_attend(x.data(), o.cross.data(), batch, total, mem_cache, seqs);
    return o;
  };
  for (bool terms : {false, true}) {
    MhaConfig whole = m.cfg;
    whole.causal = true;
    if (terms) {
      whole.window = 5;
      whole.softcap = 2.0f;
      whole.alibi_slopes = alibi_slopes(c.hq);
    }
    const Outputs want = run(whole, false);
    for (int64_t shards : {int64_t{2}, int64_t{3}, int64_t{4}, c.hq}) {
      if (shards > c.hq || c.hq % shards != 0 || (c.hkv % shards != 0 && shards % c.hkv != 0)) continue;
      const bool in_out = shards == 2;
      Outputs sum;
      for (int64_t r = 0; r < shards; ++r) {
        MhaConfig cfg = whole;
        cfg.shard_rank = r;
        cfg.shard_count = shards;
        const Outputs part = run(cfg, in_out);
        if (r == 0) {
          sum = part;
          continue;
        }
        for (auto [dst, src] : {std::pair{&sum.forward, &part.forward}, std::pair{&sum.cached, &part.cached},
                                std::pair{&sum.paged, &part.paged}, std::pair{&sum.cross, &part.cross}})
          for (size_t i = 0; i < dst->size(); ++i) (*dst)[i] += (*src)[i];
      }
      const std::string what = c.name + " over " + std::to_string(shards) + " shards" + (terms ? " with terms" : "") +
                               (in_out ? " (in_out weights)" : "");
      expect_close(sum.forward, to_double(want.forward), 1e-5, what + ": forward");
      expect_close(sum.cached, to_double(want.cached), 1e-5, what + ": forward_cached");
      expect_close(sum.paged, to_double(want.paged), 1e-5, what + ": forward_paged");
      expect_close(sum.cross, to_double(want.cross), 1e-5, what + ": cross_attend");
    }
  }
}

// Shard configurations that cannot be: attend::Error at construction.
TEST(Layer, ShardConfigurationsRejected) {
  Model m({"gqa", 48, 6, 3, 8});
  for (auto [rank, count] : {std::pair<int64_t, int64_t>{0, 0}, {-1, 2}, {2, 2}, {0, 4}, {1, 2}, {0, 5}}) {
    MhaConfig cfg = m.cfg;
    cfg.shard_rank = rank;
    cfg.shard_count = count;
    // (1, 2): 6 heads split in two, but 3 kv heads neither split in two nor replicated onto two.
    EXPECT_THROW(MultiHeadAttention(cfg, m.weights()), Error) << rank << "/" << count;
  }
  MhaConfig ok = m.cfg;
  ok.shard_rank = 2;
  ok.shard_count = 3;
  const MhaShardInfo sh = MultiHeadAttention(ok, m.weights()).shard_info();
  EXPECT_EQ(sh.first_head, 4);
  EXPECT_EQ(sh.heads, 2);
  EXPECT_EQ(sh.first_kv_head, 2);
  EXPECT_EQ(sh.kv_heads, 1);
  MhaConfig rep = m.cfg;
  rep.n_heads = 6;
  rep.n_kv_heads = 1;
  rep.shard_rank = 5;
  rep.shard_count = 6;
  Model mq({"mqa", 48, 6, 1, 8});
  const MhaShardInfo r = MultiHeadAttention(rep, mq.weights()).shard_info();
  EXPECT_EQ(r.first_kv_head, 0);
  EXPECT_EQ(r.kv_heads, 1);
}

// The 8-bit cache's bound (README, Guarantees): the layer's output error through an i8 cache stays
// below 3e-2 of the output's scale on Gaussian activations and weights — prefill then decode, slot
// and paged caches, Llama-like head dims (64, 128) with GQA. Prints the measured worst error of
// each storage type (the README quotes them).
TEST(LayerI8, I8CacheBound) {
  struct Shape {
    int64_t dm, hq, hkv, hd;
  };
  for (const Shape sh : {Shape{256, 4, 1, 64}, Shape{512, 4, 2, 128}}) {
    std::mt19937 rng(21);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    const auto normal = [&](size_t n, float sigma) {
      std::vector<float> v(n);
      for (float& x : v) x = sigma * gauss(rng);
      return v;
    };
    RefLayer ref;
    ref.dm = sh.dm;
    ref.hq = sh.hq;
    ref.hkv = sh.hkv;
    ref.hd = sh.hd;
    ref.rope = true;
    const float ws = 1.0f / std::sqrt(static_cast<float>(sh.dm));
    ref.wq = normal(static_cast<size_t>(sh.hq * sh.hd * sh.dm), ws);
    ref.wk = normal(static_cast<size_t>(sh.hkv * sh.hd * sh.dm), ws);
    ref.wv = normal(static_cast<size_t>(sh.hkv * sh.hd * sh.dm), ws);
    ref.wo = normal(static_cast<size_t>(sh.dm * sh.hq * sh.hd), 1.0f / std::sqrt(static_cast<float>(sh.hq * sh.hd)));
    MhaConfig cfg;
    cfg.d_model = sh.dm;
    cfg.n_heads = sh.hq;
    cfg.n_kv_heads = sh.hkv;
    cfg.head_dim = sh.hd;
    cfg.rope = true;
    MhaWeights w;
    w.q = ref.wq.data();
    w.k = ref.wk.data();
    w.v = ref.wv.data();
    w.o = ref.wo.data();
    const MultiHeadAttention layer(cfg, w);
    const int64_t prompt = 90, steps = 40, total = prompt + steps;
    const std::vector<float> x = normal(static_cast<size_t>(total * sh.dm), 1.0f);
    const std::vector<double> want = ref.forward(x, 1, total, true);
    double scale = 1e-3;
    for (double v : want) scale = std::max(scale, std::abs(v));
    for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
      KVCache slots({sh.hkv, sh.hd, 1, total, dt});
      PagedKVCache paged({sh.hkv, sh.hd, 16, 16, dt});
      const int64_t id = paged.create_sequence();
      std::vector<float> y(x.size()), yp(x.size());
      const int64_t seq[] = {0};
      layer.forward_cached(x.data(), y.data(), 1, prompt, slots, seq);
      const SequenceChunk first{id, prompt};
      layer.forward_paged(x.data(), yp.data(), std::span(&first, 1), paged);
      for (int64_t t = prompt; t < total; ++t) {
        layer.forward_cached(x.data() + t * sh.dm, y.data() + t * sh.dm, 1, 1, slots, seq);
        const SequenceChunk one{id, 1};
        layer.forward_paged(x.data() + t * sh.dm, yp.data() + t * sh.dm, std::span(&one, 1), paged);
      }
      double worst = 0.0;
      for (size_t i = 0; i < x.size(); ++i)
        worst = std::max({worst, std::abs(y[i] - want[i]), std::abs(yp[i] - want[i])});
      std::printf("[ i8 bound ] d_model %lld, %lld:%lld heads of %lld, %s cache: max error %.2e of the output scale\n",
                  static_cast<long long>(sh.dm), static_cast<long long>(sh.hq), static_cast<long long>(sh.hkv),
                  static_cast<long long>(sh.hd), dtype_name(dt), worst / scale);
      EXPECT_LT(worst / scale, dt == DType::f32 ? 2e-5 : 3e-2) << dtype_name(dt);
    }
  }
}

// Activations of every dtype through forward, forward_cached and forward_paged, with f32 and bf16
// weights: x of bf16/f16 gives the bits of the f32 form on the widened values (y f32), and a
// 16-bit y is that result rounded (within half an ulp; oneDNN writes a bf16 y itself with bf16
// weights). Bad dtypes are rejected before anything is written.
TEST_P(Layer, SixteenBitActivations) {
  const LayerCase& c = GetParam();
  Model m(c);
  std::mt19937 rng(31);
  const int64_t batch = 2, tokens = 9, n = batch * tokens * c.dm;
  std::vector<float> x = random_vec(rng, static_cast<size_t>(n), 1.0f);
  for (DType wdt : {DType::f32, DType::bf16}) {
    const MultiHeadAttention layer = m.layer(wdt);
    for (DType xt : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(std::string("weights ") + dtype_name(wdt) + ", x " + dtype_name(xt));
      std::vector<uint16_t> x16(static_cast<size_t>(n));
      std::vector<float> xw(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        x16[i] = xt == DType::bf16 ? numeric::to_bf16(x[i]) : numeric::to_f16(x[i]);
        xw[i] = xt == DType::bf16 ? numeric::from_bf16(x16[i]) : numeric::from_f16(x16[i]);
      }
      const auto widen = [&](uint16_t h) { return xt == DType::bf16 ? numeric::from_bf16(h) : numeric::from_f16(h); };
      // Runs one entry point with f32 activations (want) and with x16 into f32 and 16-bit y.
      const auto check = [&](const char* what, auto&& run_f32, auto&& run_typed) {
        std::vector<float> want(x.size()), got(x.size());
        std::vector<uint16_t> got16(x.size());
        run_f32(xw.data(), want.data());
        run_typed(static_cast<const void*>(x16.data()), static_cast<void*>(got.data()), DType::f32);
        run_typed(static_cast<const void*>(x16.data()), static_cast<void*>(got16.data()), xt);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size())) << what << ": f32 y bits";
        const double ulp = xt == DType::bf16 ? 0x1p-8 : 0x1p-11;
        int64_t bad = 0;
        for (size_t i = 0; i < want.size(); ++i)
          // (f16 below 2^-14 is subnormal: its steps are 2^-24 however small the value)
          if (!(std::abs(widen(got16[i]) - want[i]) <=
                ulp * std::max<double>(std::abs(want[i]), xt == DType::f16 ? 0x1p-14 : 0.0)))
            ++bad;
        EXPECT_EQ(bad, 0) << what << ": 16-bit y is not the f32 result rounded";
      };
      check(
          "forward", [&](const float* xi, float* yo) { layer.forward(xi, yo, batch, tokens); },
          [&](const void* xi, void* yo, DType yt) { layer.forward(xi, xt, yo, yt, batch, tokens); });
      check(
          "forward_cached",
          [&](const float* xi, float* yo) {
            KVCache cache({c.hkv, c.hd, 2, 32, DType::bf16, c.dv()});
            const int64_t seqs[] = {1, 0};
            layer.forward_cached(xi, yo, batch, tokens, cache, seqs);
          },
          [&](const void* xi, void* yo, DType yt) {
            KVCache cache({c.hkv, c.hd, 2, 32, DType::bf16, c.dv()});
            const int64_t seqs[] = {1, 0};
            layer.forward_cached(xi, xt, yo, yt, batch, tokens, cache, seqs);
          });
      check(
          "forward_paged",
          [&](const float* xi, float* yo) {
            PagedKVCache cache({c.hkv, c.hd, 8, 16, DType::i8, c.dv()});
            const SequenceChunk ch[] = {{cache.create_sequence(), 7}, {cache.create_sequence(), 11}};
            layer.forward_paged(xi, yo, ch, cache);
          },
          [&](const void* xi, void* yo, DType yt) {
            PagedKVCache cache({c.hkv, c.hd, 8, 16, DType::i8, c.dv()});
            const SequenceChunk ch[] = {{cache.create_sequence(), 7}, {cache.create_sequence(), 11}};
            layer.forward_paged(xi, xt, yo, yt, ch, cache);
          });
      // Against the reference too (the f32 layer's bound; bf16 weights 3e-2).
      std::vector<float> y(x.size());
      layer.forward(x16.data(), xt, y.data(), DType::f32, batch, tokens);
      expect_close(y, m.ref.forward(xw, batch, tokens, false), wdt == DType::f32 ? 2e-5 : 3e-2, c.name);
      // Rejected: y of the other 16-bit type, an unknown or i8 x; y untouched.
      std::vector<uint16_t> y16(x.size(), 0x1234);
      const DType other = xt == DType::bf16 ? DType::f16 : DType::bf16;
      EXPECT_THROW(layer.forward(x16.data(), xt, y16.data(), other, batch, tokens), Error);
      EXPECT_THROW(layer.forward(x16.data(), DType::i8, y16.data(), DType::f32, batch, tokens), Error);
      EXPECT_THROW(layer.forward(x16.data(), static_cast<DType>(9), y16.data(), DType::f32, batch, tokens), Error);
      EXPECT_THROW(layer.forward(x16.data(), xt, x16.data() + 1, xt, batch, tokens), Error);  // overlap
      for (uint16_t h : y16) EXPECT_EQ(h, 0x1234);
    }
  }
}

TEST_P(Layer, CrossAttentionMatchesReference) {
  const LayerCase& c = GetParam();
  Model m(c);
  for (bool split : {false, true}) {
    const MultiHeadAttention layer = m.layer(DType::f32, split);
    std::mt19937 rng(16);
    const int64_t batch = 2, tokens = 5, mem = 23;
    const auto x = random_vec(rng, static_cast<size_t>(batch * tokens * c.dm), 1.0f);
    const auto memory = random_vec(rng, static_cast<size_t>(batch * mem * c.dm), 1.0f);
    KVCache cache({c.hkv, c.hd, 4, 32, DType::f32, c.dv()});
    const int64_t seqs[] = {3, 0};
    layer.set_memory(memory.data(), batch, mem, cache, seqs);
    EXPECT_EQ(cache.length(3), mem);
    std::vector<float> y(x.size());
    layer.cross_attend(x.data(), y.data(), batch, tokens, cache, seqs);
    expect_close(y, m.ref.forward(x, batch, tokens, false, {}, 0, &memory, mem), 2e-5,
                 c.name + (split ? " split projections" : " fused projections"));
  }
}

// The model-family terms through the layer (MhaConfig::window, softcap, alibi_slopes and
// MhaWeights::sinks): forward (causal or not), prefill then decode through a slot cache and a paged
// cache, and cross-attention (softcap and sinks only), each against the reference layer.
TEST_P(Layer, ModelFamilyTerms) {
  const LayerCase& c = GetParam();
  Model m(c);
  std::mt19937 rng(17);
  m.ref.window = 6;
  m.ref.softcap = 2.0;
  m.ref.alibi = alibi_slopes(c.hq);
  m.ref.sinks = random_vec(rng, static_cast<size_t>(c.hq), 1.5f);
  MhaConfig cfg = m.cfg;
  cfg.window = m.ref.window;
  cfg.softcap = static_cast<float>(m.ref.softcap);
  cfg.alibi_slopes = m.ref.alibi;
  MhaWeights w = m.weights();
  w.sinks = m.ref.sinks.data();
  const MultiHeadAttention layer(cfg, w);
  const int64_t n = 11, steps = 4, total = n + steps;
  const auto x = random_vec(rng, static_cast<size_t>(2 * total * c.dm), 1.0f);
  for (bool causal : {false, true}) {
    std::vector<float> y(x.size());
    MhaOptions opt;
    opt.causal = causal;
    layer.forward(x.data(), y.data(), 2, total, opt);
    expect_close(y, m.ref.forward(x, 2, total, causal), 2e-5, c.name + (causal ? " causal" : " not causal"));
  }
  const std::vector<float> x1(x.begin(), x.begin() + total * c.dm);
  const std::vector<double> want = m.ref.forward(x1, 1, total, true);
  {
    KVCache cache({c.hkv, c.hd, 1, 64, DType::f32, c.dv()});
    std::vector<float> y(x1.size());
    const int64_t seq[] = {0};
    layer.forward_cached(x1.data(), y.data(), 1, n, cache, seq);
    for (int64_t t = n; t < total; ++t)
      layer.forward_cached(x1.data() + t * c.dm, y.data() + t * c.dm, 1, 1, cache, seq);
    expect_close(y, want, 2e-5, c.name + " forward_cached");
  }
  {
    PagedKVCache cache({c.hkv, c.hd, 8, 16, DType::f32, c.dv()});
    const int64_t id = cache.create_sequence();
    std::vector<float> y(x1.size());
    const SequenceChunk prompt[] = {{id, n}};
    layer.forward_paged(x1.data(), y.data(), prompt, cache);
    for (int64_t t = n; t < total; ++t) {
      const SequenceChunk step[] = {{id, 1}};
      layer.forward_paged(x1.data() + t * c.dm, y.data() + t * c.dm, step, cache);
    }
    expect_close(y, want, 2e-5, c.name + " forward_paged");
  }
  {
    MhaConfig cross = cfg;
    cross.cross_attention = true;
    const MultiHeadAttention cl(cross, w);
    const int64_t mem = 9;
    const auto memory = random_vec(rng, static_cast<size_t>(mem * c.dm), 1.0f);
    KVCache cache({c.hkv, c.hd, 1, 16, DType::f32, c.dv()});
    const int64_t seq[] = {0};
    cl.set_memory(memory.data(), 1, mem, cache, seq);
    std::vector<float> y(static_cast<size_t>(3 * c.dm));
    cl.cross_attend(x1.data(), y.data(), 1, 3, cache, seq);
    expect_close(y,
                 m.ref.forward(std::vector<float>(x1.begin(), x1.begin() + 3 * c.dm), 1, 3, false, {}, 0, &memory, mem),
                 2e-5, c.name + " cross_attend");
  }
  // attention_weights: the rows of the same softmax (a sink takes weight: rows sum below 1).
  const int64_t heads[] = {0};
  const std::vector<float> aw = layer.attention_weights(x1.data(), 1, total, heads);
  double row_sum = 0.0;
  for (int64_t j = 0; j < total; ++j) row_sum += aw[static_cast<size_t>((total - 1) * total + j)];
  EXPECT_LT(row_sum, 1.0);
  EXPECT_GT(row_sum, 0.0);
  EXPECT_EQ(aw[static_cast<size_t>((total - 1) * total + (total - 1 - m.ref.window))], 0.0f) << "outside the window";
}

// Tree verification through the layer: each draft-tree token's output equals the causal forward
// over the history and its ancestor path (RoPE positions by depth), then keep() leaves the cache
// of that chain: the next decode matches the forward over history + path + the new token.
TEST_P(Layer, TreeVerificationThroughForwardPaged) {
  const LayerCase& c = GetParam();
  Model m(c);
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(18);
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 3};  // two branches: 0-1-3-5 and 0-2-4
  const int64_t hist = 9, T = static_cast<int64_t>(parents.size());
  const auto xh = random_vec(rng, static_cast<size_t>(hist * c.dm), 1.0f);
  const auto xt = random_vec(rng, static_cast<size_t>(T * c.dm), 1.0f);
  PagedKVCache cache({c.hkv, c.hd, 8, 16, DType::f32, c.dv()});
  const int64_t id = cache.create_sequence();
  std::vector<float> yh(xh.size()), yt(xt.size());
  const SequenceChunk prompt[] = {{id, hist, {}}};
  layer.forward_paged(xh.data(), yh.data(), prompt, cache);
  const SequenceChunk tree[] = {{id, T, parents}};
  layer.forward_paged(xt.data(), yt.data(), tree, cache);
  auto path = [&](int64_t t) {
    std::vector<int64_t> p;
    for (int64_t x = t; x >= 0; x = parents[static_cast<size_t>(x)]) p.insert(p.begin(), x);
    return p;
  };
  auto chain_input = [&](const std::vector<int64_t>& p) {
    std::vector<float> x = xh;
    for (int64_t a : p) x.insert(x.end(), xt.begin() + a * c.dm, xt.begin() + (a + 1) * c.dm);
    return x;
  };
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> x = chain_input(path(t));
    const int64_t n = static_cast<int64_t>(x.size()) / c.dm;
    const std::vector<double> want = m.ref.forward(x, 1, n, true);
    expect_close(std::vector<float>(yt.begin() + t * c.dm, yt.begin() + (t + 1) * c.dm),
                 std::vector<double>(want.end() - c.dm, want.end()), 2e-5, c.name + " tree token " + std::to_string(t));
  }
  std::vector<int64_t> accepted;
  for (int64_t a : path(4)) accepted.push_back(hist + a);
  cache.keep(id, hist, accepted);
  const auto xn = random_vec(rng, static_cast<size_t>(c.dm), 1.0f);
  std::vector<float> yn(xn.size());
  const SequenceChunk step[] = {{id, 1, {}}};
  layer.forward_paged(xn.data(), yn.data(), step, cache);
  std::vector<float> x = chain_input(path(4));
  x.insert(x.end(), xn.begin(), xn.end());
  const std::vector<double> want = m.ref.forward(x, 1, static_cast<int64_t>(x.size()) / c.dm, true);
  expect_close(yn, std::vector<double>(want.end() - c.dm, want.end()), 2e-5, c.name + " decode after keep");
}

TEST(Layer, ModelFamilyTermsRejected) {
  Model m({"mha", 64, 4, 4, 16});
  const std::vector<float> nan_sinks = {0.0f, NAN, 0.0f, 0.0f};
  auto build = [&](auto edit, const float* sinks = nullptr) {
    MhaConfig cfg = m.cfg;
    edit(cfg);
    MhaWeights w = m.weights();
    w.sinks = sinks;
    return MultiHeadAttention(cfg, w);
  };
  EXPECT_THROW(build([](MhaConfig& c) { c.window = -1; }), Error);
  EXPECT_THROW(build([](MhaConfig& c) { c.softcap = -2.0f; }), Error);
  EXPECT_THROW(build([](MhaConfig& c) { c.softcap = INFINITY; }), Error);
  EXPECT_THROW(build([](MhaConfig& c) { c.alibi_slopes = {1.0f, 2.0f}; }), Error);
  EXPECT_THROW(build([](MhaConfig& c) { c.alibi_slopes = {1.0f, 2.0f, NAN, 1.0f}; }), Error);
  EXPECT_THROW(build([](MhaConfig&) {}, nan_sinks.data()), Error);
  EXPECT_NO_THROW(build([](MhaConfig& c) { c.alibi_slopes = alibi_slopes(4); }));
}

INSTANTIATE_TEST_SUITE_P(Configs, Layer, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& i) { return i.param.name; });

LayerCase gqa_rope() { return {"gqa4", 64, 8, 2, 16, true, true}; }

TEST(KVCache, MixedLengthsDecodeTogetherEqualsAlone) {
  Model m(gqa_rope());
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(17);
  const int64_t dm = 64;
  const std::vector<int64_t> prompt = {3, 17, 40};
  KVCache together({2, 16, 3, 64}), alone({2, 16, 3, 64});
  std::vector<std::vector<float>> prompts;
  for (size_t s = 0; s < prompt.size(); ++s) {
    prompts.push_back(random_vec(rng, static_cast<size_t>(prompt[s] * dm), 1.0f));
    std::vector<float> y(prompts.back().size());
    const int64_t seq[] = {static_cast<int64_t>(s)};
    layer.forward_cached(prompts.back().data(), y.data(), 1, prompt[s], together, seq);
    layer.forward_cached(prompts.back().data(), y.data(), 1, prompt[s], alone, seq);
  }
  for (int step = 0; step < 4; ++step) {
    const auto x = random_vec(rng, static_cast<size_t>(3 * dm), 1.0f);
    std::vector<float> y_together(x.size()), y_alone(x.size());
    const int64_t seqs[] = {0, 1, 2};
    layer.forward_cached(x.data(), y_together.data(), 3, 1, together, seqs);
    for (int64_t s = 0; s < 3; ++s) {
      const int64_t seq[] = {s};
      layer.forward_cached(x.data() + s * dm, y_alone.data() + s * dm, 1, 1, alone, seq);
    }
    expect_close(y_together, to_double(y_alone), 1e-6, "step " + std::to_string(step));
  }
}

TEST(KVCache, TruncateThenReappendEqualsNeverAppended) {
  Model m(gqa_rope());
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(18);
  const auto prompt = random_vec(rng, 10 * 64, 1.0f);
  const auto rejected = random_vec(rng, 3 * 64, 1.0f);
  const auto next = random_vec(rng, 64, 1.0f);
  for (DType dt : {DType::f32, DType::bf16}) {
    KVCache a({2, 16, 1, 32, dt}), b({2, 16, 1, 32, dt});
    const int64_t seq[] = {0};
    std::vector<float> y(10 * 64), ya(64), yb(64);
    layer.forward_cached(prompt.data(), y.data(), 1, 10, a, seq);
    layer.forward_cached(prompt.data(), y.data(), 1, 10, b, seq);
    layer.forward_cached(rejected.data(), y.data(), 1, 3, a, seq);  // speculative tokens, rolled back
    a.truncate(0, 10);
    EXPECT_EQ(a.length(0), 10);
    layer.forward_cached(next.data(), ya.data(), 1, 1, a, seq);
    layer.forward_cached(next.data(), yb.data(), 1, 1, b, seq);
    EXPECT_EQ(ya, yb) << dtype_name(dt);
  }
}

TEST(KVCache, OverflowThrowsAndLosesNothing) {
  Model m(gqa_rope());
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(19);
  const auto prompt = random_vec(rng, 6 * 64, 1.0f);
  const auto next = random_vec(rng, 64, 1.0f);
  KVCache a({2, 16, 2, 8}), b({2, 16, 2, 8});
  const int64_t seq[] = {1};
  std::vector<float> y(6 * 64), ya(64), yb(64);
  layer.forward_cached(prompt.data(), y.data(), 1, 6, a, seq);
  layer.forward_cached(prompt.data(), y.data(), 1, 6, b, seq);
  const std::vector<float> y_before = y;
  const auto three = random_vec(rng, 3 * 64, 1.0f);
  EXPECT_THROW(layer.forward_cached(three.data(), y.data(), 1, 3, a, seq), Error);
  EXPECT_EQ(y, y_before) << "output written by a rejected call";
  EXPECT_EQ(a.length(1), 6);
  // A batch where only the second sequence overflows must not append to the first either.
  const int64_t both[] = {0, 1};
  const auto two = random_vec(rng, 2 * 3 * 64, 1.0f);
  std::vector<float> y2(two.size());
  EXPECT_THROW(layer.forward_cached(two.data(), y2.data(), 2, 3, a, both), Error);
  EXPECT_EQ(a.length(0), 0);
  // The cache still works exactly as the untouched copy.
  layer.forward_cached(next.data(), ya.data(), 1, 1, a, seq);
  layer.forward_cached(next.data(), yb.data(), 1, 1, b, seq);
  EXPECT_EQ(ya, yb);
  EXPECT_EQ(a.length(1), 7);
}

TEST(KVCache, SizesAndBadArguments) {
  KVCache f32({8, 128, 4, 100, DType::f32}), bf16({8, 128, 4, 100, DType::bf16});
  // Storage rounds the capacity up to whole key blocks (16 tokens): 100 → 112.
  EXPECT_EQ(f32.memory_bytes(), size_t{2} * 8 * 128 * 4 * 112 * 4);
  EXPECT_EQ(KVCache({8, 128, 4, 96, DType::f32}).memory_bytes(), size_t{2} * 8 * 128 * 4 * 96 * 4);
  EXPECT_EQ(bf16.memory_bytes(), f32.memory_bytes() / 2);
  EXPECT_THROW(KVCache({0, 128, 4, 100}), Error);
  EXPECT_THROW(f32.length(4), Error);
  EXPECT_THROW(f32.truncate(0, 1), Error);
  EXPECT_THROW(f32.reset(-1), Error);
}

// The packed weights' ranges (what the bench evicts before it times a decode step): every
// projection's, disjoint, weight_bytes() in all, fused or not, f32 or bf16.
TEST(Layer, WeightRangesAreThePackedWeights) {
  Model m(gqa_rope());
  for (DType wdt : {DType::f32, DType::bf16})
    for (bool cross : {false, true}) {
      const MultiHeadAttention layer = m.layer(wdt, cross);
      std::vector<std::pair<const void*, size_t>> r;
      detail::MhaAccess::weight_ranges(layer, r);
      EXPECT_EQ(r.size(), cross ? 3u : 2u);  // QKV + O, or Q, KV and O
      size_t total = 0;
      for (const auto& x : r) total += x.second;
      EXPECT_EQ(total, layer.weight_bytes());
      std::sort(r.begin(), r.end());
      for (size_t i = 0; i + 1 < r.size(); ++i)
        EXPECT_LE(static_cast<const char*>(r[i].first) + r[i].second, static_cast<const char*>(r[i + 1].first));
    }
}

TEST(Layer, InvalidConfigurationsAndCalls) {
  Model m(gqa_rope());
  MhaConfig bad = m.cfg;
  bad.n_kv_heads = 3;
  EXPECT_THROW(MultiHeadAttention(bad, m.weights()), Error);
  bad = m.cfg;
  bad.head_dim = 0;
  bad.d_model = 66;  // 8 heads do not divide 66
  EXPECT_THROW(MultiHeadAttention(bad, m.weights()), Error);
  bad = m.cfg;
  bad.head_dim = 15;  // odd head_dim with rope
  EXPECT_THROW(MultiHeadAttention(bad, m.weights()), Error);
  MhaWeights w = m.weights();
  w.o = nullptr;
  EXPECT_THROW(MultiHeadAttention(m.cfg, w), Error);
  bad = m.cfg;
  bad.weight_dtype = DType::f16;
  EXPECT_THROW(MultiHeadAttention(bad, m.weights()), Error);

  const MultiHeadAttention layer = m.layer();
  std::vector<float> x(2 * 64, 0.5f), y(2 * 64, 7.0f);
  KVCache wrong({4, 16, 2, 8});
  const int64_t seq[] = {0}, dup[] = {1, 1}, out_of_range[] = {5};
  EXPECT_THROW(layer.forward_cached(x.data(), y.data(), 1, 1, wrong, seq), Error);  // kv heads differ
  KVCache cache({2, 16, 2, 8});
  EXPECT_THROW(layer.forward_cached(x.data(), y.data(), 2, 1, cache, dup), Error);
  EXPECT_THROW(layer.forward_cached(x.data(), y.data(), 1, 1, cache, out_of_range), Error);
  EXPECT_THROW(layer.forward_cached(x.data(), y.data(), 2, 1, cache, seq), Error);  // 1 id for batch 2
  EXPECT_THROW(layer.forward(x.data(), x.data(), 1, 2), Error);                     // y overlaps x
  const int64_t too_long[] = {3};
  MhaOptions opt;
  opt.lengths = too_long;
  EXPECT_THROW(layer.forward(x.data(), y.data(), 1, 2, opt), Error);
  EXPECT_EQ(y, std::vector<float>(2 * 64, 7.0f)) << "a rejected call wrote its output";
  EXPECT_EQ(cache.length(0) + cache.length(1), 0);
}

TEST(Layer, AttentionWeightsAreTheSoftmaxRows) {
  Model m({"small", 32, 4, 2, 8, false, true});
  const MultiHeadAttention layer = m.layer();
  std::mt19937 rng(20);
  const int64_t tokens = 9;
  const auto x = random_vec(rng, static_cast<size_t>(tokens * 32), 1.0f);
  const int64_t heads[] = {3, 0};
  MhaOptions opt;
  opt.causal = true;
  const std::vector<float> w = layer.attention_weights(x.data(), 1, tokens, heads, opt);
  ASSERT_EQ(w.size(), size_t{2 * tokens * tokens});
  // Rows sum to one, nothing after the diagonal, and mixing V with these weights reproduces the
  // reference layer's attention: checked through head 3 against the reference's scores.
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < tokens; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < tokens; ++j) {
        const float p = w[static_cast<size_t>((h * tokens + i) * tokens + j)];
        if (j > i) {
          EXPECT_EQ(p, 0.0f);
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  // Recompute head 3's scores in double from the reference projections.
  std::vector<double> xd(x.begin(), x.end());
  auto q = RefLayer::linear(xd, tokens, 32, m.ref.wq, {}, 32);
  auto k = RefLayer::linear(xd, tokens, 32, m.ref.wk, {}, 16);
  m.ref.apply_rope(q, 4, 1, tokens, 0);
  m.ref.apply_rope(k, 2, 1, tokens, 0);
  for (int64_t i = 0; i < tokens; ++i) {
    std::vector<double> s(static_cast<size_t>(i + 1));
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < 8; ++d)
        dot += q[static_cast<size_t>(i * 32 + 3 * 8 + d)] * k[static_cast<size_t>(j * 16 + 1 * 8 + d)];
      s[static_cast<size_t>(j)] = dot / std::sqrt(8.0);
      mx = std::max(mx, s[static_cast<size_t>(j)]);
    }
    for (double& e : s) sum += e = std::exp(e - mx);
    for (int64_t j = 0; j <= i; ++j)
      EXPECT_NEAR(w[static_cast<size_t>(i * tokens + j)], s[static_cast<size_t>(j)] / sum, 1e-5);
  }
}

TEST(Positions, SinusoidalTable) {
  const int64_t dm = 10, tokens = 4;
  std::vector<float> x(2 * tokens * dm, 1.0f);
  add_sinusoidal_positions(x.data(), 2, tokens, dm, 3);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < dm; ++i) {
        const double angle = (3 + t) / std::pow(10000.0, 2.0 * (i / 2) / dm);
        const double want = 1.0 + (i % 2 == 0 ? std::sin(angle) : std::cos(angle));
        EXPECT_NEAR(x[static_cast<size_t>((b * tokens + t) * dm + i)], want, 1e-6);
      }
  EXPECT_THROW(add_sinusoidal_positions(x.data(), 1, 1, 0), Error);
}

// 8 threads share one layer, each with its own cache, 200 decode steps each; every output equals
// the single-threaded run of the same sequence.
TEST(Concurrency, EightThreadsShareOneLayer) {
  Model m(gqa_rope());
  const MultiHeadAttention layer = m.layer();
  constexpr int kThreads = 8, kSteps = 200;
  auto run = [&](int id, std::vector<float>& out) {
    std::mt19937 rng(100 + id);
    KVCache cache({2, 16, 1, kSteps + 8});
    const int64_t seq[] = {0};
    const auto prompt = random_vec(rng, 5 * 64, 1.0f);
    std::vector<float> y(5 * 64);
    layer.forward_cached(prompt.data(), y.data(), 1, 5, cache, seq, threads_option(1));
    out = y;
    for (int s = 0; s < kSteps; ++s) {
      const auto x = random_vec(rng, 64, 1.0f);
      std::vector<float> ys(64);
      layer.forward_cached(x.data(), ys.data(), 1, 1, cache, seq, threads_option(1));
      out.insert(out.end(), ys.begin(), ys.end());
    }
  };
  std::vector<std::vector<float>> serial(kThreads), parallel(kThreads);
  for (int i = 0; i < kThreads; ++i) run(i, serial[i]);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(run, i, std::ref(parallel[i]));
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(serial[i], parallel[i]) << "thread " << i;
}

TEST(Layer, ForwardPagedRejectsAndChangesNothing) {
  Model m(gqa_rope());
  const MultiHeadAttention layer = m.layer();
  PagedKVCache cache({2, 16, 4, 16, DType::f32});
  const int64_t a = cache.create_sequence(), b = cache.create_sequence();
  std::vector<float> x(40 * 64, 0.1f), y(40 * 64, 3.0f);
  const std::vector<SequenceChunk> two = {{a, 20}, {b, 20}};
  layer.forward_paged(std::span<const float>(x.data(), 20 * 64), std::span<float>(y.data(), 20 * 64),
                      std::vector<SequenceChunk>{{a, 20}}, cache);  // 2 blocks; 2 free
  const std::vector<float> y_before = y;
  auto unchanged = [&] {
    EXPECT_EQ(cache.length(a), 20);
    EXPECT_EQ(cache.length(b), 0);
    EXPECT_EQ(cache.free_blocks(), 2);
    EXPECT_EQ(y, y_before);
  };
  try {  // a needs 1 more block (40 tokens), b 2: 1 missing
    layer.forward_paged(x.data(), y.data(), two, cache);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capacity);
    EXPECT_EQ(e.blocks_missing(), 1);
  }
  unchanged();
  MhaOptions pos;
  pos.first_position = 3;
  EXPECT_THROW(layer.forward_paged(x.data(), y.data(), two, cache, pos), Error);
  MhaOptions noncausal;
  noncausal.causal = false;
  EXPECT_THROW(layer.forward_paged(x.data(), y.data(), two, cache, noncausal), Error);
  EXPECT_THROW(layer.forward_paged(std::span<const float>(x.data(), 10), std::span<float>(y.data(), 10), two, cache),
               Error);
  EXPECT_THROW(layer.forward_paged(x.data(), y.data(), std::vector<SequenceChunk>{{a, 1}, {a, 1}}, cache), Error);
  EXPECT_THROW(layer.forward_paged(x.data(), y.data(), std::vector<SequenceChunk>{{77, 1}}, cache), Error);
  PagedKVCache other({1, 16, 4, 16, DType::f32});
  const int64_t o = other.create_sequence();
  EXPECT_THROW(layer.forward_paged(x.data(), y.data(), std::vector<SequenceChunk>{{o, 1}}, other), Error);
  unchanged();
  // tokens = 0 everywhere is a no-op.
  layer.forward_paged(x.data(), y.data(), std::vector<SequenceChunk>{{a, 0}, {b, 0}}, cache);
  unchanged();
}

}  // namespace
}  // namespace attend::testing
