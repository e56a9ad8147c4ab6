// cached_attention / KVCache::append on every ISA path, against the double reference run on the
// cache's contents as stored (widened from bf16/f16 exactly), so the only error measured is the
// kernel's own. Covers the narrow decode path (N = 1, D a multiple of the vector width), the wide
// path (N = 9, and D = 40 whose rows need padding), split-K (1500 cached keys) and sliding windows
// that start inside a block of the cache's blocked K layout.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"
#include "cache_test_params.hpp"

namespace attend::testing {
namespace {

class CachedAttention : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(CachedAttention, MatchesReferenceOverStoredValues) {
  const auto [isa, dtype] = GetParam();
  struct Case {
    int64_t prefix, N, window;
  };
  // Query heads per kv head 1, 2, 4, 8: every row pack of the decode kernel (and its key-block
  // grouping) on every ISA.
  for (int64_t Hq : {2, 4, 8, 16})
    for (int64_t D : {64, 40})
      for (auto [prefix, N, window] : {Case{0, 9, 0}, Case{30, 1, 0}, Case{1500, 1, 0}, Case{100, 9, 0},
                                       Case{30, 1, 21}, Case{1500, 1, 300}, Case{100, 9, 37}}) {
        SCOPED_TRACE("Hq=" + std::to_string(Hq) + " D=" + std::to_string(D) + " prefix=" + std::to_string(prefix) +
                     " N=" + std::to_string(N) + " window=" + std::to_string(window));
        const int64_t B = 2, Hkv = 2, total = prefix + N;
        KVCache cache({Hkv, D, 3, 1600, dtype});
        std::mt19937 rng(static_cast<uint32_t>(D + prefix));
        // Full K/V [B, Hkv, total, D] as f32; the first `prefix` tokens are appended directly.
        std::vector<float> k = random_values(rng, static_cast<size_t>(B * Hkv * total * D));
        std::vector<float> v = random_values(rng, k.size());
        const std::vector<float> q = random_values(rng, static_cast<size_t>(B * Hq * N * D));
        const int64_t seqs[] = {2, 0};
        for (int64_t b = 0; b < B; ++b)
          cache.append(seqs[b], TensorView(k.data() + b * Hkv * total * D, {1, Hkv, prefix, D}, {0, total * D, D, 1}),
                       TensorView(v.data() + b * Hkv * total * D, {1, Hkv, prefix, D}, {0, total * D, D, 1}));
        // Output inside NaN-patterned guards: a write past the tile shows up even without ASan.
        TestTensor guarded = TestTensor::make({B, Hq, N, D});
        guarded.fill(0.0f);
        SdpaOptions opt;
        opt.isa = isa;
        opt.window = window;  // a window starts mid key block: the blocked K's first block is partly masked
        const TensorView::Dims new_strides{Hkv * total * D, total * D, D, 1};
        cached_attention(
            TensorView::dense(q.data(), {B, Hq, N, D}), TensorView(k.data() + prefix * D, {B, Hkv, N, D}, new_strides),
            TensorView(v.data() + prefix * D, {B, Hkv, N, D}, new_strides), cache, seqs, guarded.view, opt);
        EXPECT_TRUE(guarded.guards_intact());
        const std::vector<float> o(guarded.base(), guarded.base() + q.size());
        EXPECT_EQ(cache.length(2), total);
        EXPECT_EQ(cache.length(0), total);
        // Reference over what the cache holds.
        for (float& x : k) x = round_trip(x, dtype);
        for (float& x : v) x = round_trip(x, dtype);
        SdpaOptions ref;
        ref.causal = true;
        ref.window = window;
        const auto want =
            reference_attention(TensorView::dense(static_cast<const float*>(q.data()), {B, Hq, N, D}),
                                TensorView::dense(static_cast<const float*>(k.data()), {B, Hkv, total, D}),
                                TensorView::dense(static_cast<const float*>(v.data()), {B, Hkv, total, D}), ref);
        EXPECT_TRUE(close_to(o, want, 1e-5));
      }
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndType, CachedAttention, ::testing::ValuesIn(isa_dtype_params()), isa_dtype_name);

TEST(Conversions, RoundToNearestEvenAndSpecials) {
  // bf16 and f16 against their definitions on values chosen at rounding boundaries.
  EXPECT_EQ(numeric::to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(numeric::to_bf16(1.00390625f), 0x3f80);  // exactly half an ulp above 1: ties to even
  EXPECT_EQ(numeric::to_bf16(1.01171875f), 0x3f82);  // 1 + 1.5 ulp: ties to even (up)
  EXPECT_TRUE(std::isnan(numeric::from_bf16(numeric::to_bf16(NAN))));
  EXPECT_EQ(numeric::to_f16(1.0f), 0x3c00);
  EXPECT_EQ(numeric::to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(numeric::to_f16(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(numeric::to_f16(-2.0f), 0xc000);
  EXPECT_EQ(numeric::to_f16(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(numeric::to_f16(6.1035156e-05f), 0x0400);  // smallest normal
  EXPECT_TRUE(std::isnan(numeric::from_f16(numeric::to_f16(NAN))));
  // Every f16 bit pattern survives from_f16 → to_f16 (NaNs stay NaN).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = numeric::from_f16(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(numeric::to_f16(f), h) << std::hex << h;
  }
}

TEST(KVCacheAppend, RejectsOverflowAndBadShapes) {
  KVCache cache({2, 8, 1, 4});
  std::vector<float> kv(2 * 5 * 8, 1.0f);
  const TensorView five(kv.data(), {1, 2, 5, 8}, {0, 40, 8, 1}), three(kv.data(), {1, 2, 3, 8}, {0, 40, 8, 1});
  EXPECT_THROW(cache.append(0, five, five), Error);
  EXPECT_EQ(cache.length(0), 0);
  cache.append(0, three, three);
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_THROW(cache.append(0, three, three), Error);
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_THROW(cache.append(0, TensorView(kv.data(), {1, 1, 3, 8}, {0, 40, 8, 1}), three), Error);
}

}  // namespace
}  // namespace attend::testing
