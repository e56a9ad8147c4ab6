// Softmax edge cases on every ISA path, for both kernel paths (wide: 40 query rows; narrow: 1):
// logits near ±FLT_MAX and in [90, 100], all-negative logits near −1e4, shift invariance, and NaN
// containment — a NaN poisons exactly the rows that see it, and a NaN in a masked-out K/V
// position changes nothing.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

struct Problem {
  int64_t nq, nk, d;
  std::vector<float> q, k, v;
  explicit Problem(int64_t nq_, int64_t nk_, int64_t d_, uint32_t seed = 1) : nq(nq_), nk(nk_), d(d_) {
    std::mt19937 rng(seed);
    q = random_values(rng, static_cast<size_t>(nq * d));
    k = random_values(rng, static_cast<size_t>(nk * d));
    v = random_values(rng, static_cast<size_t>(nk * d));
  }
  std::vector<float> run(Isa isa, SdpaOptions opt) const {
    TestTensor o = TestTensor::make({1, 1, nq, d});  // inside NaN-patterned guards
    opt.isa = isa;
    scaled_dot_product_attention(TensorView::dense(q.data(), {1, 1, nq, d}), TensorView::dense(k.data(), {1, 1, nk, d}),
                                 TensorView::dense(v.data(), {1, 1, nk, d}), o.view, opt);
    EXPECT_TRUE(o.guards_intact()) << "write outside the output";
    return std::vector<float>(o.base(), o.base() + nq * d);
  }
  std::vector<double> reference(const SdpaOptions& opt) const {
    return reference_attention(TensorView::dense(q.data(), {1, 1, nq, d}), TensorView::dense(k.data(), {1, 1, nk, d}),
                               TensorView::dense(v.data(), {1, 1, nk, d}), opt);
  }
};

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  EXPECT_TRUE(close_to(got, want, rel));
}

bool row_has_nan(const std::vector<float>& o, int64_t row, int64_t d) {
  for (int64_t c = 0; c < d; ++c)
    if (std::isnan(o[static_cast<size_t>(row * d + c)])) return true;
  return false;
}

bool rows_equal(const std::vector<float>& a, const std::vector<float>& b, int64_t row, int64_t d) {
  return std::memcmp(a.data() + row * d, b.data() + row * d, sizeof(float) * d) == 0;
}

class Numerics : public ::testing::TestWithParam<Isa> {};

TEST_P(Numerics, LogitsNearFltMaxStayFiniteAndWeightsSumToOne) {
  // D = 16 with one non-zero component, so each logit is exactly q0·k0 and reaches ±3e38 with no
  // intermediate overflow; V = 1 makes every output the sum of the attention weights.
  for (int64_t nq : {1, 40}) {
    Problem p(nq, 70, 16);
    std::fill(p.q.begin(), p.q.end(), 0.0f);
    std::fill(p.k.begin(), p.k.end(), 0.0f);
    std::fill(p.v.begin(), p.v.end(), 1.0f);
    for (int64_t i = 0; i < nq; ++i) p.q[static_cast<size_t>(i * 16)] = (i % 2 ? -1.0f : 1.0f) * 1.7e19f;
    for (int64_t j = 0; j < 70; ++j) p.k[static_cast<size_t>(j * 16)] = 1.75e19f * std::cos(0.37f * j);
    SdpaOptions opt;
    opt.scale = 1.0f;
    const auto o = p.run(GetParam(), opt);
    for (float x : o) {
      ASSERT_TRUE(std::isfinite(x));
      EXPECT_NEAR(x, 1.0f, 1e-6f);
    }
  }
}

TEST_P(Numerics, LargePositiveAndAllNegativeLogitsMatchReference) {
  for (int64_t nq : {1, 40})
    for (auto [lo, hi] : {std::pair<float, float>{90.0f, 100.0f}, {-1.0001e4f, -0.9999e4f}}) {
      // Logits in [lo, hi] through an additive bias of constant rows plus small q·k terms.
      Problem p(nq, 90, 32, 3);
      std::vector<float> bias(static_cast<size_t>(nq * 90));
      std::mt19937 rng(4);
      std::uniform_real_distribution<float> u(lo, hi);
      for (float& b : bias) b = u(rng);
      SdpaOptions opt;
      opt.bias = TensorView::dense(static_cast<const float*>(bias.data()), {1, 1, nq, 90});
      opt.causal = nq > 1;
      const auto o = p.run(GetParam(), opt);
      for (float x : o) ASSERT_TRUE(std::isfinite(x));
      // Logits of magnitude L carry an absolute f32 rounding of L·2^-24 before the exponential.
      expect_close(o, p.reference(opt), 1e-5 + std::abs(hi) * 1.2e-7);
    }
}

TEST_P(Numerics, ShiftInvariance) {
  for (int64_t nq : {1, 40}) {
    Problem p(nq, 200, 64, 5);
    SdpaOptions plain;
    plain.causal = nq > 1;
    const auto base = p.run(GetParam(), plain);
    const std::vector<float> shift(static_cast<size_t>(nq * 200), 64.0f);
    SdpaOptions shifted = plain;
    shifted.bias = TensorView::dense(shift.data(), {1, 1, nq, 200});
    const auto moved = p.run(GetParam(), shifted);
    expect_close(moved, std::vector<double>(base.begin(), base.end()), 64 * 2.4e-7);
  }
}

TEST_P(Numerics, NanInQueryPoisonsOnlyItsRow) {
  for (int64_t nq : {1, 40}) {
    Problem p(nq, 100, 32, 6);
    SdpaOptions opt;
    opt.causal = true;
    const auto clean = p.run(GetParam(), opt);
    const int64_t bad = nq / 2;
    p.q[static_cast<size_t>(bad * 32 + 3)] = NAN;
    const auto o = p.run(GetParam(), opt);
    for (int64_t i = 0; i < nq; ++i) {
      if (i == bad) {
        EXPECT_TRUE(row_has_nan(o, i, 32)) << "row " << i;
      } else {
        EXPECT_TRUE(rows_equal(o, clean, i, 32)) << "row " << i << " changed";
      }
    }
  }
}

TEST_P(Numerics, NanInKeyOrValuePoisonsExactlyTheRowsThatSeeIt) {
  // Causal, Nq = Nk = 70: query i sees keys j ≤ i. A NaN at key 30 reaches rows ≥ 30 only.
  for (bool in_value : {false, true}) {
    Problem p(70, 70, 32, 7);
    SdpaOptions opt;
    opt.causal = true;
    const auto clean = p.run(GetParam(), opt);
    (in_value ? p.v : p.k)[static_cast<size_t>(30 * 32 + 5)] = NAN;
    const auto o = p.run(GetParam(), opt);
    for (int64_t i = 0; i < 70; ++i) {
      if (i >= 30) {
        EXPECT_TRUE(row_has_nan(o, i, 32)) << (in_value ? "V" : "K") << " row " << i;
      } else {
        EXPECT_TRUE(rows_equal(o, clean, i, 32)) << (in_value ? "V" : "K") << " row " << i << " changed";
      }
    }
  }
}

TEST_P(Numerics, NanInPaddedKeysChangesNothing) {
  // Keys at and past kv_lens are masked: NaN/inf there must not reach any output (decode and prefill).
  for (int64_t nq : {1, 40}) {
    Problem p(nq, 600, 64, 8);
    const int64_t len[1] = {333};
    SdpaOptions opt;
    opt.kv_lens = len;
    const auto clean = p.run(GetParam(), opt);
    for (int64_t j = 333; j < 600; ++j) {
      p.k[static_cast<size_t>(j * 64)] = NAN;
      p.v[static_cast<size_t>(j * 64 + 1)] = j % 2 ? NAN : INFINITY;
    }
    const auto o = p.run(GetParam(), opt);
    EXPECT_EQ(0, std::memcmp(o.data(), clean.data(), sizeof(float) * o.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, Numerics, ::testing::ValuesIn(supported_isas()),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace attend::testing
