// cached_attention / KVCache::append on every ISA path, against the double reference run on the
// cache's contents as stored (widened from bf16/f16 exactly), so the only error measured is the
// kernel's own. Covers the narrow decode path (N = 1, D a multiple of the vector width), the wide
// path (N = 9, and D = 40 whose rows need padding), split-K (1500 cached keys) and sliding windows
// that start inside a block of the cache's blocked K layout. Decode's new K/V are stored by the item
// of the key range that holds them (exec::Problem::store): two new tokens inside one range (1500
// cached) and across two (1535 cached: ranges of 768 keys), which are stored before the items.
// 512 and 1025 keys (511 and 1024 cached, one new): a blocked f32/16-bit K's decode tiles are 512
// keys (flash_narrow's narrow_tile_keys), so exactly one tile, and two tiles and one key more.
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../../runtime/api/kv_cache_access.hpp"
#include "../../runtime/api/paged_kv_cache_access.hpp"
#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"
#include "cache_test_params.hpp"

namespace attend::testing {
namespace {

class CachedAttention : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

// The double reference of a causal (windowed) cache call over dense q [B, Hq, N, D] and the whole
// K/V [B, Hkv, total, D] as a cache of `dtype` holds them (k and v are rounded in place).
std::vector<double> reference_over_stored(const std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                                          int64_t B, int64_t Hq, int64_t Hkv, int64_t N, int64_t total, int64_t D,
                                          int64_t window, DType dtype) {
  for (size_t row = 0; row < k.size(); row += static_cast<size_t>(D)) {
    round_trip_row(k.data() + row, D, dtype);
    round_trip_row(v.data() + row, D, dtype);
  }
  SdpaOptions ref;
  ref.causal = true;
  ref.window = window;
  return reference_attention(TensorView::dense(q.data(), {B, Hq, N, D}),
                             TensorView::dense(static_cast<const float*>(k.data()), {B, Hkv, total, D}),
                             TensorView::dense(static_cast<const float*>(v.data()), {B, Hkv, total, D}), ref);
}

TEST_P(CachedAttention, MatchesReferenceOverStoredValues) {
  const auto [isa, dtype] = GetParam();
  struct Case {
    int64_t prefix, N, window;
  };
  // Query heads per kv head 1, 2, 4, 8: every row pack of the decode kernel (and its key-block
  // grouping) on every ISA.
  for (int64_t Hq : {2, 4, 8, 16})
    for (int64_t D : {64, 40})
      for (auto [prefix, N, window] :
           {Case{0, 9, 0}, Case{30, 1, 0}, Case{1500, 1, 0}, Case{100, 9, 0}, Case{30, 1, 21}, Case{1500, 1, 300},
            Case{100, 9, 37}, Case{1500, 2, 0}, Case{1535, 2, 0}, Case{511, 1, 0}, Case{1024, 1, 0}}) {
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
        EXPECT_TRUE(close_to(o, reference_over_stored(q, k, v, B, Hq, Hkv, N, total, D, window, dtype),
                             stored_values_tolerance(isa, dtype)));
      }
}

// A token stored with an infinity or a NaN (its i8 scale is NaN) never reaches a query that cannot
// see it: it sits in a key tile those queries read but outside their sliding window — on the decode
// (narrow) path, in the window's first key block (V scales folded into the weights), and on the
// prefill path, seen by the first 20 of 40 queries only (V dequantised into panels).
TEST_P(CachedAttention, NonFiniteTokenOutsideTheWindowStaysOut) {
  const auto [isa, dtype] = GetParam();
  const int64_t Hq = 4, Hkv = 2, D = 64, prefix = 300, window = 100;
  for (int64_t N : {1, 40}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    std::mt19937 rng(9);
    const int64_t total = prefix + N;
    std::vector<float> k = random_values(rng, static_cast<size_t>(Hkv * total * D));
    std::vector<float> v = random_values(rng, k.size());
    const std::vector<float> q = random_values(rng, static_cast<size_t>(Hq * N * D));
    // N = 1: the query sees keys [201, 301); key 195 shares the 16-key block of key 201.
    // N = 40: query i sees [201 + i, 301 + i); key 220 is seen by queries 0..19 only.
    const int64_t bad = N == 1 ? 195 : 220, first_clean = N == 1 ? 0 : 20;
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t d = 0; d < D; ++d) {
        k[static_cast<size_t>((h * total + bad) * D + d)] = d % 2 ? INFINITY : 1.0f;
        v[static_cast<size_t>((h * total + bad) * D + d)] = d % 3 ? NAN : -INFINITY;
      }
    KVCache cache({Hkv, D, 1, 512, dtype});
    const TensorView::Dims strides{0, total * D, D, 1};
    cache.append(0, TensorView(k.data(), {1, Hkv, prefix, D}, strides),
                 TensorView(v.data(), {1, Hkv, prefix, D}, strides));
    std::vector<float> o(q.size());
    SdpaOptions opt;
    opt.isa = isa;
    opt.window = window;
    const int64_t seqs[] = {0};
    cached_attention(TensorView::dense(q.data(), {1, Hq, N, D}),
                     TensorView(k.data() + prefix * D, {1, Hkv, N, D}, strides),
                     TensorView(v.data() + prefix * D, {1, Hkv, N, D}, strides), cache, seqs,
                     TensorView::dense(o.data(), {1, Hq, N, D}), opt);
    const auto want = reference_over_stored(q, k, v, 1, Hq, Hkv, N, total, D, window, dtype);
    std::vector<float> got;
    std::vector<double> ref_rows;
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = first_clean; i < N; ++i)
        for (int64_t d = 0; d < D; ++d) {
          got.push_back(o[static_cast<size_t>((h * N + i) * D + d)]);
          ref_rows.push_back(want[static_cast<size_t>((h * N + i) * D + d)]);
        }
    EXPECT_TRUE(close_to(got, ref_rows, stored_values_tolerance(isa, dtype)));
  }
}

// The 8-bit cache's integer decode (avx512_bf16 tier, two or more rows per kv head) at the edges of
// its arithmetic, against the reference over the stored values at its bound, and the f32 kernels
// (avx512) on the same cache: the largest depth whose sums fit 32 bits (D 512, every K code 127 and
// every query code 32767: Σ = 512·127·32767, 99.2% of 2³¹, and V codes ±127 with equal weights
// across whole tiles) and one past it (D 528, the f32 fallback); groups of 1 (integer under the
// AMX Xeons' rules), 2, 3 (a padding row), 4 and 8 rows; 1001 keys (an odd last key, paired with a
// zero weight), 2600 and (D 64) 8300 keys (split-K ranges: an i8 cache splits from 8192 keys, the f32 kernels from
// 1024); a non-finite query (the f32 fallback: the rounded query would lose it) and a NaN V token a row sees (its
// tile's P·V in f32: the row's output is NaN, as the reference's).
TEST(I8IntegerDecode, EdgesOfItsSumsMatchTheReference) {
  const auto isas = supported_isas();
  if (std::find(isas.begin(), isas.end(), Isa::avx512_bf16) == isas.end())
    GTEST_SKIP() << "this CPU has no AVX512_BF16 + AVX512_VNNI: the integer decode is not built for it";
  for (int64_t D : {512, 528, 64})
    for (int64_t G : {1, 2, 3, 4, 8})
      for (int64_t total : {1001, 2600, 8300})
        for (int special : {0, 1, 2}) {  // 0 none, 1 NaN query element, 2 NaN V token seen by all
          if (total == 8300 && D != 64) continue;
          SCOPED_TRACE("D=" + std::to_string(D) + " G=" + std::to_string(G) + " total=" + std::to_string(total) +
                       " special=" + std::to_string(special));
          const int64_t Hkv = 2, Hq = G * Hkv;
          std::mt19937 rng(static_cast<uint32_t>(D * 31 + G * 7 + total + special));
          std::vector<float> k(static_cast<size_t>(Hkv * total * D)), v(k.size());
          std::vector<float> q = random_values(rng, static_cast<size_t>(Hq * D));
          if (D == 512) {  // the largest sums: K and q constant, V codes at ±127
            std::fill(k.begin(), k.end(), 0.5f);
            std::fill(q.begin(), q.end(), 0.25f);
            for (size_t i = 0; i < v.size(); ++i) v[i] = (i * 7919 % 3 == 0) ? -2.0f : 2.0f;
          } else {
            k = random_values(rng, k.size());
            v = random_values(rng, v.size());
          }
          if (special == 1) q[static_cast<size_t>(D + 3)] = NAN;  // row 1 (kv head 0's, or kv head 1's)
          if (special == 2)
            for (int64_t h = 0; h < Hkv; ++h) v[static_cast<size_t>((h * total + total / 2) * D + 5)] = NAN;
          std::vector<float> ref_k = k, ref_v = v;
          const auto want = reference_over_stored(q, ref_k, ref_v, 1, Hq, Hkv, 1, total, D, 0, DType::i8);
          for (Isa isa : {Isa::avx512_bf16, Isa::avx512}) {
            SCOPED_TRACE(isa_name(isa));
            KVCache cache({Hkv, D, 1, total, DType::i8});
            const TensorView::Dims strides{0, total * D, D, 1};
            cache.append(0, TensorView(k.data(), {1, Hkv, total - 1, D}, strides),
                         TensorView(v.data(), {1, Hkv, total - 1, D}, strides));
            std::vector<float> o(q.size());
            SdpaOptions opt;
            opt.isa = isa;
            const int64_t seqs[] = {0};
            cached_attention(TensorView::dense(q.data(), {1, Hq, 1, D}),
                             TensorView(k.data() + (total - 1) * D, {1, Hkv, 1, D}, strides),
                             TensorView(v.data() + (total - 1) * D, {1, Hkv, 1, D}, strides), cache, seqs,
                             TensorView::dense(o.data(), {1, Hq, 1, D}), opt);
            if (special == 0) {
              EXPECT_TRUE(close_to(o, want, stored_values_tolerance(isa, DType::i8)));
              continue;
            }
            // The rows that met a NaN are NaN; the others match the reference.
            std::vector<float> got;
            std::vector<double> clean;
            for (int64_t r = 0; r < Hq; ++r) {
              const bool poisoned = special == 2 || r == 1;
              for (int64_t d = 0; d < D; ++d) {
                const float x = o[static_cast<size_t>(r * D + d)];
                if (poisoned) {
                  EXPECT_TRUE(std::isnan(x)) << "row " << r << " element " << d;
                } else {
                  got.push_back(x);
                  clean.push_back(want[static_cast<size_t>(r * D + d)]);
                }
              }
            }
            EXPECT_TRUE(close_to(got, clean, stored_values_tolerance(isa, DType::i8)));
          }
        }
}

// One query row per kv head over an 8-bit cache (MHA decode): where the decode rules put it on the
// integer kernels (DecodeTuning::i8_one_row_integer: the AMX Xeons'; ctest runs this suite under
// every class's rules), its output is bitwise row 0 of a GQA pair's over the same cache — each
// row's integer sums and scales are its own — and elsewhere it is not (the f32 kernels); within the
// bound of the reference over the stored values either way.
TEST(I8IntegerDecode, OneRowTakesTheIntegerKernelsWhereTheRulesSay) {
  const auto isas = supported_isas();
  if (std::find(isas.begin(), isas.end(), Isa::avx512_bf16) == isas.end())
    GTEST_SKIP() << "this CPU has no AVX512_BF16 + AVX512_VNNI: the integer decode is not built for it";
  const bool integer = decode_tuning().i8_one_row_integer;
  const int64_t D = 128, Hkv = 3;
  for (int64_t total : {17, 300, 1001}) {
    SCOPED_TRACE("total=" + std::to_string(total));
    std::mt19937 rng(static_cast<uint32_t>(total));
    const std::vector<float> k = random_values(rng, static_cast<size_t>(Hkv * total * D));
    const std::vector<float> v = random_values(rng, k.size());
    const std::vector<float> q1 = random_values(rng, static_cast<size_t>(Hkv * D));
    std::vector<float> q2 = random_values(rng, static_cast<size_t>(2 * Hkv * D));
    for (int64_t h = 0; h < Hkv; ++h)  // the pair's first row is the single row
      std::copy_n(q1.begin() + h * D, D, q2.begin() + 2 * h * D);
    KVCache cache({Hkv, D, 1, total, DType::i8});
    const TensorView::Dims strides{0, total * D, D, 1};
    cache.append(0, TensorView(k.data(), {1, Hkv, total - 1, D}, strides),
                 TensorView(v.data(), {1, Hkv, total - 1, D}, strides));
    SdpaOptions opt;
    opt.isa = Isa::avx512_bf16;
    const int64_t seqs[] = {0};
    auto step = [&](const std::vector<float>& q, int64_t rows) {
      std::vector<float> o(q.size());
      cache.truncate(0, total - 1);
      cached_attention(TensorView::dense(q.data(), {1, rows, 1, D}),
                       TensorView(k.data() + (total - 1) * D, {1, Hkv, 1, D}, strides),
                       TensorView(v.data() + (total - 1) * D, {1, Hkv, 1, D}, strides), cache, seqs,
                       TensorView::dense(o.data(), {1, rows, 1, D}), opt);
      return o;
    };
    const std::vector<float> one = step(q1, Hkv), pair = step(q2, 2 * Hkv);
    std::vector<float> first(one.size());
    for (int64_t h = 0; h < Hkv; ++h) std::copy_n(pair.begin() + 2 * h * D, D, first.begin() + h * D);
    EXPECT_EQ(std::memcmp(one.data(), first.data(), sizeof(float) * one.size()) == 0, integer)
        << (integer ? "one row did not take the integer kernels" : "one row took the integer kernels");
    std::vector<float> ref_k = k, ref_v = v;
    const auto want = reference_over_stored(q1, ref_k, ref_v, 1, Hkv, Hkv, 1, total, D, 0, DType::i8);
    EXPECT_TRUE(close_to(one, want, stored_values_tolerance(Isa::avx512_bf16, DType::i8)));
  }
}

// The i8 quantisation of one row: scale max|x|/127, every element within half a step of its
// value, the largest at ±127, exact zeros, and a non-finite row marked by a NaN scale.
TEST(I8Quantisation, RowsRoundTripWithinHalfAStep) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 7, 64, 128}) {
    std::vector<float> x = random_values(rng, static_cast<size_t>(n), -3.0f, 3.0f);
    x[static_cast<size_t>(n / 2)] = -4.0f;  // the largest magnitude
    std::vector<int8_t> q(static_cast<size_t>(n));
    const float s = numeric::quantize_i8_row(x.data(), n, q.data());
    EXPECT_FLOAT_EQ(s, 4.0f / 127.0f);
    EXPECT_EQ(q[static_cast<size_t>(n / 2)], -127);
    for (int64_t d = 0; d < n; ++d) {
      EXPECT_LE(std::abs(q[static_cast<size_t>(d)] * s - x[static_cast<size_t>(d)]), 0.5f * s * (1 + 1e-6f));
      EXPECT_GE(q[static_cast<size_t>(d)], -127);
    }
  }
  std::vector<float> zeros(16, 0.0f), bad(16, 1.0f);
  std::vector<int8_t> q(16, 9);
  EXPECT_EQ(numeric::quantize_i8_row(zeros.data(), 16, q.data()), 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  bad[3] = INFINITY;
  EXPECT_TRUE(std::isnan(numeric::quantize_i8_row(bad.data(), 16, q.data())));
}

// The codes are x / s rounded to nearest, ties to even (std::nearbyint's default mode), whatever
// the row: with max|x| = 127 the scale is exactly 1, so every half-way value k + 0.5 is a tie.
TEST(I8Quantisation, CodesRoundHalfWayToEven) {
  std::vector<float> x;
  for (int k = -127; k < 127; ++k) x.push_back(static_cast<float>(k) + 0.5f);
  x.push_back(127.0f);
  x.push_back(-0.0f);
  x.push_back(0.4999999f);
  std::vector<int8_t> q(x.size());
  ASSERT_EQ(numeric::quantize_i8_row(x.data(), static_cast<int64_t>(x.size()), q.data()), 1.0f);
  for (size_t d = 0; d < x.size(); ++d) EXPECT_EQ(q[d], static_cast<int8_t>(std::nearbyint(x[d]))) << x[d];
  // Any scale: the codes are std::nearbyint(x / s), clamped to ±127.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> y = random_values(rng, 128, -5.0f, 5.0f);
    std::vector<int8_t> c(y.size());
    const float s = numeric::quantize_i8_row(y.data(), 128, c.data());
    for (size_t d = 0; d < y.size(); ++d)
      EXPECT_EQ(c[d], static_cast<int8_t>(std::clamp(std::nearbyint(y[d] / s), -127.0f, 127.0f)));
  }
  std::vector<float> nan_row(16, 1.0f);
  nan_row[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(numeric::quantize_i8_row(nan_row.data(), 16, q.data())));
}

// quantize_i8 against its definition element by element (scale max|x| / 127 from std::fabs, codes
// std::nearbyint(x / s) clamped to ±127), over row lengths around its chunks of 64, with the codes
// put to every 16th byte as a K row's are, the largest magnitude anywhere in the row (also the last
// element, and a subnormal row), and each kind of non-finite element (a negative NaN too: its bits
// without the sign still read as non-finite) making a NaN scale and zero codes.
TEST(I8Quantisation, ChunkedRowsMatchTheDefinition) {
  std::mt19937 rng(12);
  for (int64_t n : {1, 7, 17, 63, 64, 65, 128, 129, 513, 576}) {
    for (int where : {0, 1, 2}) {  // the largest magnitude: first, last, random
      std::vector<float> x = random_values(rng, static_cast<size_t>(n), -2.0f, 2.0f);
      const size_t at = where == 0 ? 0 : where == 1 ? static_cast<size_t>(n - 1) : rng() % static_cast<size_t>(n);
      x[at] = (rng() & 1) ? 3.5f : -3.5f;
      if (n > 3) x[1] = -0.0f;
      for (float scale : {1.0f, 1e-39f}) {  // 1e-39: every element subnormal
        std::vector<float> y = x;
        for (float& e : y) e *= scale;
        float amax = 0.0f;
        for (float e : y) amax = std::max(amax, std::fabs(e));
        const float want_s = amax / 127.0f;
        std::vector<int8_t> strided(static_cast<size_t>(16 * n), 99);
        const float s = numeric::quantize_i8(
            n, [&](int64_t d) { return y[static_cast<size_t>(d)]; },
            [&](int64_t d, int8_t q) { strided[static_cast<size_t>(16 * d)] = q; });
        ASSERT_EQ(s, want_s) << n;
        for (int64_t d = 0; d < n; ++d) {
          const int8_t want = want_s == 0.0f
                                  ? int8_t{0}
                                  : static_cast<int8_t>(std::clamp(std::nearbyint(y[static_cast<size_t>(d)] / want_s),
                                                                   -127.0f, 127.0f));
          ASSERT_EQ(strided[static_cast<size_t>(16 * d)], want) << "n " << n << " d " << d;
          ASSERT_EQ(strided[static_cast<size_t>(16 * d + 1)], 99);  // nothing between
        }
      }
    }
    for (float bad :
         {INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> y = random_values(rng, static_cast<size_t>(n), -1.0f, 1.0f);
      y[static_cast<size_t>(n - 1)] = bad;
      std::vector<int8_t> q(static_cast<size_t>(n), 99);
      EXPECT_TRUE(std::isnan(numeric::quantize_i8_row(y.data(), n, q.data()))) << n << " " << bad;
      for (int8_t c : q) ASSERT_EQ(c, 0);
    }
  }
}

// An i8 cache takes a quarter of the f32 bytes for K and V, plus one f32 scale per token row.
TEST(I8Quantisation, MemoryIsAQuarterPlusScales) {
  const KVCache f32({4, 128, 2, 1000, DType::f32}), i8({4, 128, 2, 1000, DType::i8});
  EXPECT_EQ(i8.memory_bytes(), f32.memory_bytes() / 4 + 2 * 4 * 2 * 1008 * sizeof(float));
  const PagedKVCache p32({4, 128, 10, 32, DType::f32}), p8({4, 128, 10, 32, DType::i8});
  EXPECT_EQ(p8.memory_bytes(), p32.memory_bytes() / 4 + 2 * 4 * 10 * 32 * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndType, CachedAttention, ::testing::ValuesIn(isa_dtype_params()), isa_dtype_name);

// A pool of 2 MiB or more starts on a 2 MiB page (so transparent huge pages can back all of it)
// and still works when moved, appended to and read; a smaller one needs no alignment.
TEST(CacheStorage, LargePoolsStartOnA2MiBPage) {
  for (DType dt : {DType::i8, DType::f32}) {
    KVCache big({8, 128, 1, 4097, dt});  // i8: 8.7 MB, f32: 34 MB, neither a multiple of 2 MiB
    const auto base = reinterpret_cast<uintptr_t>(detail::KVCacheAccess::keys(big, 0));
    EXPECT_EQ(base % (uintptr_t{2} << 20), 0u);
    std::mt19937 rng(3);
    const int64_t n = 4097;
    std::vector<float> k(static_cast<size_t>(8 * n * 128)), v(k.size());
    for (float& x : k) x = std::normal_distribution<float>()(rng);
    for (float& x : v) x = std::normal_distribution<float>()(rng);
    big.append(0, TensorView::dense(k.data(), {1, 8, n, 128}), TensorView::dense(v.data(), {1, 8, n, 128}));
    KVCache moved = std::move(big);  // the mapping moves with it (freed once, by `moved`)
    EXPECT_EQ(moved.length(0), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(detail::KVCacheAccess::keys(moved, 0)), base);
  }
}

// storage_ranges (what the bench evicts before it times a decode step) names the bytes decode
// reads: one K range (whole 16-token blocks), one V range and, for i8, two scale ranges per kv head
// and page, disjoint, as many bytes as the tokens take. Filling every other byte between them with
// 0xFF (NaN in f32/bf16/f16 elements and scales) leaves a decode step's output bitwise the same.
using Ranges = std::vector<std::pair<const void*, size_t>>;

void poison_between(Ranges r) {
  std::sort(r.begin(), r.end());
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    auto* end = static_cast<unsigned char*>(const_cast<void*>(r[i].first)) + r[i].second;
    auto* next = static_cast<unsigned char*>(const_cast<void*>(r[i + 1].first));
    ASSERT_LE(end, next) << "ranges overlap";
    std::memset(end, 0xFF, static_cast<size_t>(next - end));
  }
}

size_t range_bytes(const Ranges& r) {
  size_t n = 0;
  for (const auto& x : r) n += x.second;
  return n;
}

TEST(CacheStorage, RangesAreWhatDecodeReads) {
  constexpr int64_t H = 2, G = 2, D = 32, n = 45;  // 46 tokens after the step: 3 K blocks of 16
  std::mt19937 rng(9);
  const std::vector<float> k = random_values(rng, H * n * D), v = random_values(rng, H * n * D);
  const std::vector<float> q = random_values(rng, H * G * D), kn = random_values(rng, H * D),
                           vn = random_values(rng, H * D);
  const auto kv = [&](const std::vector<float>& x, int64_t tokens) {
    return TensorView::dense(x.data(), {1, H, tokens, D});
  };
  const auto qv = TensorView::dense(q.data(), {1, H * G, 1, D});
  for (DType dt : {DType::f32, DType::bf16, DType::i8}) {
    SCOPED_TRACE(dtype_name(dt));
    const size_t elem = dtype_size(dt), scales = dt == DType::i8 ? 2 * 4 * (n + 1) : 0;
    const size_t want = H * ((n + 1 + 15) / 16 * 16 * D * elem + (n + 1) * D * elem + scales);
    {  // the slot cache: sequence 1 of 3
      KVCache cache({H, D, 3, 64, dt});
      for (int64_t s = 0; s < 3; ++s) cache.append(s, kv(k, n), kv(v, n));
      const std::vector<int64_t> seqs{1};
      std::vector<float> before(q.size()), after(q.size());
      auto step = [&](std::vector<float>& o) {
        cached_attention(qv, kv(kn, 1), kv(vn, 1), cache, seqs, TensorView::dense(o.data(), {1, H * G, 1, D}));
      };
      step(before);
      Ranges r;
      detail::KVCacheAccess::storage_ranges(cache, 1, r);
      EXPECT_EQ(r.size(), static_cast<size_t>(H * (dt == DType::i8 ? 4 : 2)));
      EXPECT_EQ(range_bytes(r), want);
      cache.truncate(1, n);
      poison_between(r);
      step(after);
      EXPECT_EQ(std::memcmp(before.data(), after.data(), sizeof(float) * before.size()), 0);
    }
    {  // the paged cache of 16-token blocks, two sequences' blocks interleaved
      PagedKVCache cache({H, D, 12, 16, dt});
      const int64_t a = cache.create_sequence(), b = cache.create_sequence();
      for (int64_t t = 0; t < n; t += 16) {
        const int64_t m = std::min<int64_t>(16, n - t);
        const TensorView::Dims st{0, n * D, D, 1};
        cache.append(a, TensorView(k.data() + t * D, {1, H, m, D}, st), TensorView(v.data() + t * D, {1, H, m, D}, st));
        cache.append(b, TensorView(v.data() + t * D, {1, H, m, D}, st), TensorView(k.data() + t * D, {1, H, m, D}, st));
      }
      const SequenceChunk chunk{a, 1};
      std::vector<float> before(q.size()), after(q.size());
      auto step = [&](std::vector<float>& o) {
        paged_attention(qv, kv(kn, 1), kv(vn, 1), cache, std::span(&chunk, 1),
                        TensorView::dense(o.data(), {1, H * G, 1, D}));
      };
      step(before);
      Ranges r;
      detail::PagedKVCacheAccess::storage_ranges(cache, a, r);
      EXPECT_EQ(r.size(), static_cast<size_t>(3 * H * (dt == DType::i8 ? 4 : 2)));
      EXPECT_EQ(range_bytes(r), want);
      cache.truncate(a, n);
      poison_between(r);
      step(after);
      EXPECT_EQ(std::memcmp(before.data(), after.data(), sizeof(float) * before.size()), 0);
      EXPECT_THROW(detail::PagedKVCacheAccess::storage_ranges(cache, 99, r), Error);
    }
  }
}

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
  // Between every two adjacent finite f16 values of one sign: the exact midpoint (an f32) goes to
  // the even one, one f32 ulp either side of it to the nearer one.
  for (uint32_t h = 0; h < 0x7bff; ++h)
    for (uint32_t sign : {0u, 0x8000u}) {
      const float lo = numeric::from_f16(static_cast<uint16_t>(sign | h));
      const float hi = numeric::from_f16(static_cast<uint16_t>(sign | (h + 1)));
      const float mid = lo + (hi - lo) / 2;  // exact: f16 has 11 significant bits, f32 24
      const uint32_t even = (h & 1u) ? h + 1 : h;
      ASSERT_EQ(numeric::to_f16(mid), sign | even) << std::hex << h;
      ASSERT_EQ(numeric::to_f16(std::nextafter(mid, lo)), sign | h) << std::hex << h;
      ASSERT_EQ(numeric::to_f16(std::nextafter(mid, hi)), sign | (h + 1)) << std::hex << h;
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
