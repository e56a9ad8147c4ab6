// The model-family score terms (SdpaOptions::softcap, sinks, alibi_slopes) against the
// double-precision reference: every combination with the masks (causal, window, kv_lens, bias) and
// GQA, on every ISA path, through scaled_dot_product_attention (wide prefill tiles, narrow decode
// tiles, split-K decode, bf16 math), cached_attention and paged_attention over every storage type;
// the slopes of alibi_slopes(); and each bad argument rejected with nothing written.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"
#include "cache_test_params.hpp"

namespace attend::testing {
namespace {

// Which terms a case switches on; the values are drawn per case.
struct Terms {
  float softcap = 0.0f;
  bool sinks = false, alibi = false;
  std::string describe() const {
    return (softcap > 0 ? " softcap=" + std::to_string(softcap) : std::string()) + (sinks ? " sinks" : "") +
           (alibi ? " alibi" : "");
  }
};

// Every non-empty combination of the three terms (softcap small enough to bend the scores).
std::vector<Terms> every_combination() {
  std::vector<Terms> t;
  for (int mask = 1; mask < 8; ++mask) t.push_back({mask & 1 ? 3.0f : 0.0f, (mask & 2) != 0, (mask & 4) != 0});
  return t;
}

// Per-head values the options point at (kept alive by the caller).
struct TermValues {
  std::vector<float> sinks, slopes;
  TermValues(const Terms& t, int64_t heads, std::mt19937& rng) {
    // Sinks around the scores' range: some dominate a row, some barely register.
    if (t.sinks) sinks = random_values(rng, static_cast<size_t>(heads), -2.0f, 3.0f);
    if (t.alibi) slopes = alibi_slopes(heads);
  }
  void apply(const Terms& t, SdpaOptions& opt) const {
    opt.softcap = t.softcap;
    opt.sinks = sinks;
    opt.alibi_slopes = slopes;
  }
};

struct Shape {
  int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  bool causal;
  int64_t window;
  bool kv_lens = false, bias = false;
  std::string describe() const {
    return "B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
           " Nq=" + std::to_string(Nq) + " Nk=" + std::to_string(Nk) + " D=" + std::to_string(D) +
           " Dv=" + std::to_string(Dv) + (causal ? " causal" : "") + " window=" + std::to_string(window) +
           (kv_lens ? " kv_lens" : "") + (bias ? " bias" : "");
  }
};

// Prefill tiles (wide path: 64-row/64-key edges), chunked prefill, decode (narrow path; long key
// ranges split across threads), GQA and MQA, D ≠ Dv, kv_lens (with a fully masked batch entry)
// and a bias.
std::vector<Shape> shapes() {
  return {
      {1, 2, 2, 1, 1, 16, 16, false, 0},         {2, 4, 2, 17, 17, 64, 64, true, 0},
      {1, 4, 1, 65, 65, 32, 48, true, 20},       {1, 2, 2, 130, 130, 64, 64, false, 0},
      {1, 8, 2, 20, 150, 64, 64, true, 0},       {1, 8, 2, 1, 300, 64, 64, true, 0},
      {2, 8, 2, 1, 2100, 128, 128, true, 0},     {1, 4, 4, 3, 700, 64, 64, true, 100},
      {1, 16, 2, 1, 513, 64, 32, false, 0},      {2, 4, 2, 33, 70, 16, 16, false, 0, true},
      {2, 4, 2, 1, 400, 64, 64, false, 0, true}, {1, 4, 2, 40, 90, 64, 64, true, 30, false, true},
  };
}

void run_sdpa(const Shape& s, const Terms& t, Isa isa, FpMath fpmath, double tol, uint32_t seed,
              CausalAlignment align = CausalAlignment::bottom_right) {
  SCOPED_TRACE(s.describe() + t.describe() + (fpmath == FpMath::bf16 ? " fpmath=bf16" : "") +
               (align == CausalAlignment::top_left ? " top_left" : ""));
  std::mt19937 rng(seed);
  TestTensor q = TestTensor::make({s.B, s.Hq, s.Nq, s.D}), k = TestTensor::make({s.B, s.Hkv, s.Nk, s.D}),
             v = TestTensor::make({s.B, s.Hkv, s.Nk, s.Dv}), o = TestTensor::make({s.B, s.Hq, s.Nq, s.Dv});
  q.fill_uniform(rng, -2.0f, 2.0f);
  k.fill_uniform(rng, -2.0f, 2.0f);
  v.fill_uniform(rng);
  const TermValues tv(t, s.Hq, rng);
  SdpaOptions opt;
  opt.causal = s.causal;
  opt.causal_alignment = align;
  opt.window = s.window;
  opt.isa = isa;
  opt.fpmath = fpmath;
  tv.apply(t, opt);
  std::vector<int64_t> lens;
  if (s.kv_lens) {
    for (int64_t b = 0; b < s.B; ++b) lens.push_back(b == 0 ? 0 : s.Nk - 13);  // batch 0 sees no key
    opt.kv_lens = lens;
  }
  TestTensor bias;
  if (s.bias) {
    bias = TestTensor::make({1, s.Hq, s.Nq, s.Nk});
    bias.fill_uniform(rng, -1.0f, 1.0f);
    opt.bias = bias.cview();
  }
  scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o.view, opt);
  const std::vector<double> want = reference_attention(q.cview(), k.cview(), v.cview(), opt);
  std::vector<float> got;
  int64_t nonzero_masked = 0;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.Nq; ++i)
        for (int64_t d = 0; d < s.Dv; ++d) {
          got.push_back(o.at(b, h, i, d));
          if (want[got.size() - 1] == 0.0 && got.back() != 0.0) ++nonzero_masked;
        }
  EXPECT_TRUE(close_to(got, want, tol));
  EXPECT_EQ(nonzero_masked, 0) << "a row whose keys are all masked outputs zeros, with a sink too";
  EXPECT_TRUE(o.guards_intact());
}

class ScoreTerms : public ::testing::TestWithParam<Isa> {};

TEST_P(ScoreTerms, SdpaEveryCombinationAndShape) {
  uint32_t seed = 1;
  for (const Shape& s : shapes())
    for (const Terms& t : every_combination()) run_sdpa(s, t, GetParam(), FpMath::strict, 1e-5, seed++);
}

// SdpaOptions::causal_alignment = top_left (PyTorch's is_causal): query i at position i for the
// causal mask, the window and ALiBi. Nq < Nk (keys past Nq never visible: whole split-K items of a
// long decode row are masked), Nq > Nk (rows from Nk on see every key), with and without the terms.
TEST_P(ScoreTerms, TopLeftAlignment) {
  const std::vector<Shape> cases = {
      {1, 2, 2, 5, 9, 16, 16, true, 0},      {2, 4, 2, 17, 80, 64, 64, true, 0},
      {1, 4, 1, 90, 30, 32, 48, true, 0},    {1, 8, 2, 1, 2100, 64, 64, true, 0},
      {1, 4, 4, 3, 700, 64, 64, true, 2},    {1, 4, 2, 70, 130, 64, 64, true, 20},
      {1, 4, 2, 130, 70, 64, 64, false, 16}, {2, 4, 2, 33, 70, 16, 16, true, 0, true},
  };
  uint32_t seed = 500;
  for (const Shape& s : cases)
    for (const Terms& t : {Terms{}, Terms{3.0f, true, true}, Terms{0.0f, false, true}}) {
      run_sdpa(s, t, GetParam(), FpMath::strict, 1e-5, seed++, CausalAlignment::top_left);
      run_sdpa(s, t, GetParam(), FpMath::bf16, 3e-2, seed++, CausalAlignment::top_left);
    }
}

TEST_P(ScoreTerms, SdpaBf16Math) {
  // Prefill-shaped calls run vdpbf16ps where the CPU has it; the bound is fpmath's (sdpa_test).
  uint32_t seed = 100;
  for (const Shape& s : shapes())
    for (const Terms& t : {Terms{3.0f, true, true}, Terms{0.0f, true, false}, Terms{5.0f, false, false}})
      run_sdpa(s, t, GetParam(), FpMath::bf16, 2e-2, seed++);
}

// The softcap really is a tanh of the scaled score (not a clamp): with large logits and a small
// cap the output differs from the uncapped one, and matches the reference.
TEST_P(ScoreTerms, SoftcapBendsLargeLogits) {
  std::mt19937 rng(3);
  TestTensor q = TestTensor::make({1, 2, 40, 32}), k = TestTensor::make({1, 2, 40, 32}),
             v = TestTensor::make({1, 2, 40, 32}), o1 = TestTensor::make({1, 2, 40, 32}),
             o2 = TestTensor::make({1, 2, 40, 32});
  q.fill_uniform(rng, -4.0f, 4.0f);
  k.fill_uniform(rng, -4.0f, 4.0f);
  v.fill_uniform(rng);
  SdpaOptions opt;
  opt.isa = GetParam();
  scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o1.view, opt);
  opt.softcap = 1.5f;
  scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o2.view, opt);
  const std::vector<double> want = reference_attention(q.cview(), k.cview(), v.cview(), opt);
  std::vector<float> got;
  double diff = 0.0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 40; ++i)
      for (int64_t d = 0; d < 32; ++d) {
        got.push_back(o2.at(0, h, i, d));
        diff = std::max(diff, static_cast<double>(std::abs(o2.at(0, h, i, d) - o1.at(0, h, i, d))));
      }
  EXPECT_TRUE(close_to(got, want, 1e-5));
  EXPECT_GT(diff, 1e-2);
}

// MLA's absorbed decode: v a view of k's memory (its leading Dv columns), MQA with 16 heads,
// D = 576, Dv = 512, split-K lengths; and a small GQA shape the same way (prefill and decode).
TEST_P(ScoreTerms, MlaValueInsideKey) {
  struct Mla {
    int64_t B, Hq, Hkv, Nq, Nk, D, Dv;
  };
  for (const Mla& m : {Mla{2, 16, 1, 1, 700, 576, 512}, Mla{1, 16, 1, 1, 3000, 576, 512}, Mla{1, 8, 2, 1, 300, 64, 32},
                       Mla{1, 8, 2, 37, 90, 64, 48}}) {
    SCOPED_TRACE("Hq=" + std::to_string(m.Hq) + " Nq=" + std::to_string(m.Nq) + " Nk=" + std::to_string(m.Nk) +
                 " D=" + std::to_string(m.D) + " Dv=" + std::to_string(m.Dv));
    std::mt19937 rng(static_cast<uint32_t>(m.Nk));
    TestTensor q = TestTensor::make({m.B, m.Hq, m.Nq, m.D}), k = TestTensor::make({m.B, m.Hkv, m.Nk, m.D}),
               o = TestTensor::make({m.B, m.Hq, m.Nq, m.Dv});
    q.fill_uniform(rng);
    k.fill_uniform(rng);
    const TensorView v(k.view.data(), {m.B, m.Hkv, m.Nk, m.Dv}, k.view.strides());
    SdpaOptions opt;
    opt.causal = true;
    opt.isa = GetParam();
    scaled_dot_product_attention(q.cview(), k.cview(), v, o.view, opt);
    const std::vector<double> want = reference_attention(q.cview(), k.cview(), v, opt);
    std::vector<float> got;
    for (int64_t b = 0; b < m.B; ++b)
      for (int64_t h = 0; h < m.Hq; ++h)
        for (int64_t i = 0; i < m.Nq; ++i)
          for (int64_t d = 0; d < m.Dv; ++d) got.push_back(o.at(b, h, i, d));
    EXPECT_TRUE(close_to(got, want, 1e-5));
    EXPECT_TRUE(o.guards_intact());
  }
}

// Results stay bitwise independent of the thread count with every term on (the sink enters one
// split's state; the merge order is fixed).
TEST_P(ScoreTerms, SameBitsForEveryThreadCount) {
  std::mt19937 rng(9);
  const int64_t Hq = 8, Hkv = 2, Nk = 3000, D = 64;
  TestTensor q = TestTensor::make({1, Hq, 1, D}), k = TestTensor::make({1, Hkv, Nk, D}),
             v = TestTensor::make({1, Hkv, Nk, D});
  q.fill_uniform(rng);
  k.fill_uniform(rng);
  v.fill_uniform(rng);
  const TermValues tv({2.0f, true, true}, Hq, rng);
  std::vector<float> first;
  for (int threads : {1, 2, 3, 8}) {
    TestTensor o = TestTensor::make({1, Hq, 1, D});
    SdpaOptions opt;
    opt.causal = true;
    opt.window = 2000;
    opt.num_threads = threads;
    opt.isa = GetParam();
    tv.apply({2.0f, true, true}, opt);
    scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o.view, opt);
    std::vector<float> got(o.view.data(), o.view.data() + Hq * D);
    if (first.empty())
      first = got;
    else
      EXPECT_EQ(0, std::memcmp(first.data(), got.data(), sizeof(float) * got.size())) << threads << " threads";
  }
}

// cached_attention: a prompt in two chunks, then decode steps, with every term, against the
// reference over what the cache holds (values as its storage type keeps them); K and V head dims
// equal or not (KVCacheConfig::value_dim), multiples of the vector width or not.
class CachedScoreTerms : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

const std::vector<std::pair<int64_t, int64_t>>& head_dims() {
  static const std::vector<std::pair<int64_t, int64_t>> dims = {{64, 64}, {48, 80}, {128, 32}, {40, 24}};
  return dims;
}

TEST_P(CachedScoreTerms, ChunksThenDecodeMatchReference) {
  const auto [isa, dtype] = GetParam();
  const int64_t Hq = 8, Hkv = 2, C = 512;
  const double tol = dtype == DType::f32 ? 1e-5 : dtype == DType::i8 ? 3e-2 : 1e-2;
  std::mt19937 rng(21);
  for (const auto& [D, Dv] : head_dims())
    for (const Terms& t : {Terms{3.0f, true, true}, Terms{0.0f, true, false}, Terms{0.0f, false, true}}) {
      for (int64_t window : {0, 50}) {
        SCOPED_TRACE("D=" + std::to_string(D) + " Dv=" + std::to_string(Dv) + t.describe() +
                     " window=" + std::to_string(window));
        KVCache cache({Hkv, D, 2, C, dtype, Dv});
        EXPECT_EQ(cache.config().value_dim, Dv);
        const TermValues tv(t, Hq, rng);
        std::vector<float> held_k(static_cast<size_t>(Hkv * C * D)), held_v(static_cast<size_t>(Hkv * C * Dv));
        int64_t len = 0;
        const int64_t seq[] = {1};
        for (int64_t n : {70, 33, 1, 1, 1}) {
          const auto q = random_values(rng, static_cast<size_t>(Hq * n * D), -2.0f, 2.0f);
          const auto k = random_values(rng, static_cast<size_t>(Hkv * n * D), -2.0f, 2.0f);
          const auto v = random_values(rng, static_cast<size_t>(Hkv * n * Dv));
          std::vector<float> o(static_cast<size_t>(Hq * n * Dv));
          SdpaOptions opt;
          opt.isa = isa;
          opt.window = window;
          tv.apply(t, opt);
          cached_attention(TensorView::dense(q.data(), {1, Hq, n, D}), TensorView::dense(k.data(), {1, Hkv, n, D}),
                           TensorView::dense(v.data(), {1, Hkv, n, Dv}), cache, seq,
                           TensorView::dense(o.data(), {1, Hq, n, Dv}), opt);
          for (int64_t h = 0; h < Hkv; ++h)
            for (int64_t i = 0; i < n; ++i) {
              float* kd = &held_k[static_cast<size_t>((h * C + len + i) * D)];
              float* vd = &held_v[static_cast<size_t>((h * C + len + i) * Dv)];
              std::copy_n(&k[static_cast<size_t>((h * n + i) * D)], D, kd);
              std::copy_n(&v[static_cast<size_t>((h * n + i) * Dv)], Dv, vd);
              round_trip_row(kd, D, dtype);
              round_trip_row(vd, Dv, dtype);
            }
          len += n;
          SdpaOptions ref = opt;
          ref.causal = true;
          const std::vector<double> want = reference_attention(
              TensorView::dense(q.data(), {1, Hq, n, D}), TensorView(held_k.data(), {1, Hkv, len, D}, {0, C * D, D, 1}),
              TensorView(held_v.data(), {1, Hkv, len, Dv}, {0, C * Dv, Dv, 1}), ref);
          EXPECT_TRUE(close_to(o, want, tol)) << "after " << len << " tokens";
        }
      }
    }
}

// paged_attention: mixed prompt chunks and decodes of three sequences in one call, every term, K
// and V head dims equal or not (PagedKVCacheConfig::value_dim).
TEST_P(CachedScoreTerms, PagedMixedChunksMatchReference) {
  const auto [isa, dtype] = GetParam();
  const int64_t Hq = 8, Hkv = 2;
  const double tol = dtype == DType::f32 ? 1e-5 : dtype == DType::i8 ? 3e-2 : 1e-2;
  std::mt19937 rng(22);
  const Terms t{4.0f, true, true};
  const TermValues tv(t, Hq, rng);
  for (const auto& [D, Dv] : head_dims()) {
    SCOPED_TRACE("D=" + std::to_string(D) + " Dv=" + std::to_string(Dv));
    PagedKVCache cache({Hkv, D, 64, 16, dtype, Dv});
    const int64_t ids[3] = {cache.create_sequence(), cache.create_sequence(), cache.create_sequence()};
    std::vector<std::vector<float>> hk(3), hv(3);  // per sequence [token][Hkv][D or Dv], as stored
    for (const std::vector<int64_t>& step : {std::vector<int64_t>{40, 1, 90}, {1, 37, 1}, {1, 1, 1}}) {
      int64_t T = 0;
      for (int64_t n : step) T += n;
      const auto q = random_values(rng, static_cast<size_t>(T * Hq * D), -2.0f, 2.0f);
      const auto k = random_values(rng, static_cast<size_t>(T * Hkv * D), -2.0f, 2.0f);
      const auto v = random_values(rng, static_cast<size_t>(T * Hkv * Dv));
      std::vector<float> o(static_cast<size_t>(T * Hq * Dv));
      std::vector<SequenceChunk> chunks;
      for (size_t i = 0; i < 3; ++i) chunks.push_back({ids[i], step[i]});
      SdpaOptions opt;
      opt.isa = isa;
      opt.window = 60;
      tv.apply(t, opt);
      const auto tok = [&](const float* p, int64_t H, int64_t d) {
        return TensorView(p, {1, H, T, d}, {0, d, H * d, 1});
      };
      paged_attention(tok(q.data(), Hq, D), tok(k.data(), Hkv, D), tok(v.data(), Hkv, Dv), cache, chunks,
                      TensorView(o.data(), {1, Hq, T, Dv}, {0, Dv, Hq * Dv, 1}), opt);
      int64_t first = 0;
      for (size_t i = 0; i < 3; ++i) {
        const int64_t n = step[i];
        for (int64_t r = 0; r < n * Hkv; ++r)
          for (auto [src, dst, d] : {std::tuple{&k, &hk[i], D}, std::tuple{&v, &hv[i], Dv}}) {
            std::vector<float> row(src->begin() + (first * Hkv + r) * d, src->begin() + (first * Hkv + r + 1) * d);
            round_trip_row(row.data(), d, dtype);
            dst->insert(dst->end(), row.begin(), row.end());
          }
        const int64_t len = static_cast<int64_t>(hk[i].size()) / (Hkv * D);
        SdpaOptions ref = opt;
        ref.causal = true;
        const std::vector<double> want =
            reference_attention(TensorView(q.data() + first * Hq * D, {1, Hq, n, D}, {0, D, Hq * D, 1}),
                                TensorView(hk[i].data(), {1, Hkv, len, D}, {0, D, Hkv * D, 1}),
                                TensorView(hv[i].data(), {1, Hkv, len, Dv}, {0, Dv, Hkv * Dv, 1}), ref);
        std::vector<float> got;  // [Hq][n][Dv], the reference's order
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t j = first; j < first + n; ++j)
            got.insert(got.end(), o.begin() + (j * Hq + h) * Dv, o.begin() + (j * Hq + h + 1) * Dv);
        EXPECT_TRUE(close_to(got, want, tol)) << "sequence " << i << " after " << len << " tokens";
        first += n;
      }
    }
    // keep() moves K and V rows of their own widths: a decode step after it sees exactly the kept
    // tokens.
    const int64_t len0 = cache.length(ids[0]);
    const int64_t positions[] = {len0 - 3, len0 - 1};
    cache.keep(ids[0], len0 - 4, positions);
    ASSERT_EQ(cache.length(ids[0]), len0 - 2);
    for (auto [h, d] : {std::pair{&hk[0], D}, std::pair{&hv[0], Dv}}) {
      const auto row = [&](int64_t t) { return h->begin() + t * Hkv * d; };
      std::vector<float> kept(h->begin(), row(len0 - 4));
      kept.insert(kept.end(), row(len0 - 3), row(len0 - 2));
      kept.insert(kept.end(), row(len0 - 1), row(len0));
      *h = kept;
    }
    const auto q = random_values(rng, static_cast<size_t>(Hq * D)),
               k = random_values(rng, static_cast<size_t>(Hkv * D)),
               v = random_values(rng, static_cast<size_t>(Hkv * Dv));
    std::vector<float> o(static_cast<size_t>(Hq * Dv));
    const SequenceChunk step[] = {{ids[0], 1, {}}};
    SdpaOptions opt;
    opt.isa = isa;
    tv.apply(t, opt);
    paged_attention(TensorView::dense(q.data(), {1, Hq, 1, D}), TensorView::dense(k.data(), {1, Hkv, 1, D}),
                    TensorView::dense(v.data(), {1, Hkv, 1, Dv}), cache, step,
                    TensorView::dense(o.data(), {1, Hq, 1, Dv}), opt);
    for (auto [src, dst, d] : {std::tuple{&k, &hk[0], D}, std::tuple{&v, &hv[0], Dv}}) {
      std::vector<float> r(*src);
      for (int64_t hh = 0; hh < Hkv; ++hh) round_trip_row(r.data() + hh * d, d, dtype);
      dst->insert(dst->end(), r.begin(), r.end());
    }
    const int64_t len = len0 - 1;
    SdpaOptions ref = opt;
    ref.causal = true;
    EXPECT_TRUE(close_to(o,
                         reference_attention(TensorView::dense(q.data(), {1, Hq, 1, D}),
                                             TensorView(hk[0].data(), {1, Hkv, len, D}, {0, D, Hkv * D, 1}),
                                             TensorView(hv[0].data(), {1, Hkv, len, Dv}, {0, Dv, Hkv * Dv, 1}), ref),
                         tol))
        << "decode after keep";
  }
}

// The slopes of the ALiBi paper for a power of two and for the interleaved remainder.
TEST(AlibiSlopes, PaperValues) {
  const std::vector<float> eight = alibi_slopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(eight[static_cast<size_t>(h)], std::ldexp(1.0f, -(h + 1)));
  const std::vector<float> twelve = alibi_slopes(12);  // 8 of 2^(-(h+1)), then 2^-0.5, 2^-1.5, …
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(twelve[static_cast<size_t>(h)], eight[static_cast<size_t>(h)]);
  for (int k = 0; k < 4; ++k)
    EXPECT_FLOAT_EQ(twelve[static_cast<size_t>(8 + k)], static_cast<float>(std::pow(2.0, -0.5 - k)));
  EXPECT_FLOAT_EQ(alibi_slopes(1)[0], 1.0f / 256.0f);
  EXPECT_THROW(alibi_slopes(0), Error);
}

// Bad terms: attend::Error before anything is written (the output keeps its bits, a cache its
// length).
TEST(ScoreTermsInvalid, RejectedAndNothingChanges) {
  const int64_t Hq = 4, Hkv = 2, N = 5, D = 16;
  std::mt19937 rng(4);
  TestTensor q = TestTensor::make({1, Hq, N, D}), k = TestTensor::make({1, Hkv, N, D}),
             v = TestTensor::make({1, Hkv, N, D}), o = TestTensor::make({1, Hq, N, D});
  q.fill_uniform(rng);
  k.fill_uniform(rng);
  v.fill_uniform(rng);
  o.fill(7.0f);
  const std::vector<float> three(3, 0.5f), four(4, 0.5f);
  std::vector<float> nan4 = four, inf4 = four;
  nan4[2] = std::numeric_limits<float>::quiet_NaN();
  inf4[1] = std::numeric_limits<float>::infinity();
  std::vector<SdpaOptions> bad(8);
  bad[0].softcap = -1.0f;
  bad[1].softcap = std::numeric_limits<float>::infinity();
  bad[2].softcap = std::numeric_limits<float>::quiet_NaN();
  bad[3].sinks = three;
  bad[4].sinks = nan4;
  bad[5].alibi_slopes = three;
  bad[6].alibi_slopes = inf4;
  bad[7].sinks = inf4;
  KVCache cache({Hkv, D, 1, 64, DType::f32});
  PagedKVCache paged({Hkv, D, 8, 16, DType::f32});
  const int64_t id = paged.create_sequence();
  const int64_t seq[] = {0};
  const SequenceChunk chunk[] = {{id, N}};
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    EXPECT_THROW(scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o.view, bad[i]), Error);
    EXPECT_THROW(cached_attention(q.cview(), k.cview(), v.cview(), cache, seq, o.view, bad[i]), Error);
    EXPECT_THROW(paged_attention(q.cview(), k.cview(), v.cview(), paged, chunk, o.view, bad[i]), Error);
    EXPECT_EQ(cache.length(0), 0);
    EXPECT_EQ(paged.length(id), 0);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i2 = 0; i2 < N; ++i2)
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(o.at(0, h, i2, d), 7.0f);
  }
  // top_left is sdpa's alone (a cache's queries are its last positions); a value outside the enum
  // is rejected everywhere.
  SdpaOptions top_left, bogus;
  top_left.causal = true;
  top_left.causal_alignment = CausalAlignment::top_left;
  bogus.causal_alignment = static_cast<CausalAlignment>(7);
  EXPECT_THROW(cached_attention(q.cview(), k.cview(), v.cview(), cache, seq, o.view, top_left), Error);
  EXPECT_THROW(paged_attention(q.cview(), k.cview(), v.cview(), paged, chunk, o.view, top_left), Error);
  EXPECT_THROW(scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o.view, bogus), Error);
  EXPECT_THROW(cached_attention(q.cview(), k.cview(), v.cview(), cache, seq, o.view, bogus), Error);
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_EQ(paged.length(id), 0);
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t i2 = 0; i2 < N; ++i2)
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(o.at(0, h, i2, d), 7.0f);
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryIsa, ScoreTerms, ::testing::ValuesIn(supported_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(EveryIsaAndStorage, CachedScoreTerms, ::testing::ValuesIn(isa_dtype_params()), isa_dtype_name);

}  // namespace
}  // namespace attend::testing
