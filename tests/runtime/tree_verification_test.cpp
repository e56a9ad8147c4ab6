// Tree verification (SequenceChunk::parents) and its rollback (PagedKVCache::keep), on every ISA
// path and storage type: each draft-tree token's output equals the double-precision reference
// over the sequence's history plus its own ancestor path (positions by depth, so the window and
// ALiBi measure what a chain would), with every score term; keep() leaves exactly the accepted
// tokens, so the next decode step gives the bits of a cache that received the accepted path as a
// chain; copy-on-write protects forks; bad parents and keep positions change nothing.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"
#include "cache_test_params.hpp"

namespace attend::testing {
namespace {

constexpr int64_t Hq = 8, Hkv = 2, D = 64;

// Token-major [T, H, D] tensors as views [1, H, T, D].
TensorView tokens(const float* p, int64_t H, int64_t T) { return TensorView(p, {1, H, T, D}, {0, D, H * D, 1}); }
TensorView tokens(float* p, int64_t H, int64_t T) { return TensorView(p, {1, H, T, D}, {0, D, H * D, 1}); }

// A draft tree of 11 tokens: two roots, branches of depth up to 4, in an order where children
// do not follow their parents immediately.
const std::vector<int32_t> kParents = {-1, 0, 0, -1, 1, 2, 3, 4, 1, 7, 5};

std::vector<int32_t> path_to(int64_t t) {  // root … t, in depth order
  std::vector<int32_t> p;
  for (int64_t x = t; x >= 0; x = kParents[static_cast<size_t>(x)]) p.insert(p.begin(), static_cast<int32_t>(x));
  return p;
}

// What a sequence holds, as stored: [token][Hkv][D].
struct Held {
  DType dtype;
  std::vector<float> k, v;
  int64_t length() const { return static_cast<int64_t>(k.size()) / (Hkv * D); }
  void add(const float* kp, const float* vp) {  // one token, [Hkv][D]
    for (auto [src, dst] : {std::pair{kp, &k}, std::pair{vp, &v}}) {
      std::vector<float> row(src, src + Hkv * D);
      for (int64_t h = 0; h < Hkv; ++h) round_trip_row(row.data() + h * D, D, dtype);
      dst->insert(dst->end(), row.begin(), row.end());
    }
  }
};

// Reference for one query token (q [Hq][D]) over `keys` ([len][Hkv][D]) as the last position.
std::vector<double> reference_row(const float* q, const Held& keys, const SdpaOptions& opt) {
  SdpaOptions ref = opt;
  ref.causal = true;
  const int64_t len = keys.length();
  return reference_attention(TensorView(q, {1, Hq, 1, D}, {0, D, Hq * D, 1}),
                             TensorView(keys.k.data(), {1, Hkv, len, D}, {0, D, Hkv * D, 1}),
                             TensorView(keys.v.data(), {1, Hkv, len, D}, {0, D, Hkv * D, 1}), ref);
}

class TreeVerification : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(TreeVerification, EachTokenSeesItsAncestorsThenKeepRollsBack) {
  const auto [isa, dtype] = GetParam();
  const double tol = dtype == DType::f32 ? 1e-5 : dtype == DType::i8 ? 3e-2 : 1e-2;
  std::mt19937 rng(31);
  const std::vector<float> sinks = random_values(rng, Hq, -1.0f, 2.0f);
  const std::vector<float> slopes = alibi_slopes(Hq);
  struct Variant {
    std::string name;
    int64_t window;
    float softcap;
    bool sinks, alibi;
    int64_t history;
  };
  for (const Variant& var : {Variant{"plain", 0, 0.0f, false, false, 37}, Variant{"window", 40, 0.0f, false, false, 45},
                             Variant{"every term", 3, 2.0f, true, true, 20},
                             Variant{"long history (split-K)", 0, 0.0f, true, false, 4200}}) {
    SCOPED_TRACE(var.name);
    SdpaOptions opt;
    opt.isa = isa;
    opt.window = var.window;
    opt.softcap = var.softcap;
    if (var.sinks) opt.sinks = sinks;
    if (var.alibi) opt.alibi_slopes = slopes;
    PagedKVCache cache({Hkv, D, 512, 16, dtype});
    PagedKVCache chain_cache({Hkv, D, 512, 16, dtype});
    const int64_t seq = cache.create_sequence(), other = cache.create_sequence(), chain = chain_cache.create_sequence();
    Held held{dtype, {}, {}};
    // History: one prompt, appended to both caches and to an unrelated sequence in the same call.
    {
      const int64_t n = var.history;
      const auto k = random_values(rng, static_cast<size_t>(n * Hkv * D));
      const auto v = random_values(rng, k.size());
      for (int64_t t = 0; t < n; ++t)
        held.add(&k[static_cast<size_t>(t * Hkv * D)], &v[static_cast<size_t>(t * Hkv * D)]);
      cache.append(seq, tokens(k.data(), Hkv, n), tokens(v.data(), Hkv, n));
      cache.append(other, tokens(k.data(), Hkv, 5), tokens(v.data(), Hkv, 5));
      chain_cache.append(chain, tokens(k.data(), Hkv, n), tokens(v.data(), Hkv, n));
    }
    const int64_t T = static_cast<int64_t>(kParents.size());
    const auto q = random_values(rng, static_cast<size_t>(T * Hq * D), -2.0f, 2.0f);
    const auto k = random_values(rng, static_cast<size_t>(T * Hkv * D), -2.0f, 2.0f);
    const auto v = random_values(rng, k.size());
    // The tree chunk together with a decode of another sequence (batch invariance of the chunk).
    std::vector<float> q2(q), k2(k), v2(v);
    const auto qo = random_values(rng, static_cast<size_t>(Hq * D)),
               ko = random_values(rng, static_cast<size_t>(Hkv * D)),
               vo = random_values(rng, static_cast<size_t>(Hkv * D));
    q2.insert(q2.end(), qo.begin(), qo.end());
    k2.insert(k2.end(), ko.begin(), ko.end());
    v2.insert(v2.end(), vo.begin(), vo.end());
    std::vector<float> o(q2.size());
    const SequenceChunk chunks[] = {{seq, T, kParents}, {other, 1, {}}};
    paged_attention(tokens(q2.data(), Hq, T + 1), tokens(k2.data(), Hkv, T + 1), tokens(v2.data(), Hkv, T + 1), cache,
                    chunks, tokens(o.data(), Hq, T + 1), opt);
    EXPECT_EQ(cache.length(seq), var.history + T);
    for (int64_t t = 0; t < T; ++t) {
      Held keys = held;
      for (int32_t a : path_to(t)) keys.add(&k[static_cast<size_t>(a * Hkv * D)], &v[static_cast<size_t>(a * Hkv * D)]);
      const std::vector<double> want = reference_row(&q[static_cast<size_t>(t * Hq * D)], keys, opt);
      const std::vector<float> got(o.begin() + t * Hq * D, o.begin() + (t + 1) * Hq * D);
      EXPECT_TRUE(close_to(got, want, tol)) << "tree token " << t;
    }
    // Accept the path root 0 → 1 → 4 → 7 → 9 (packed positions history + {0, 1, 4, 7, 9}).
    const std::vector<int32_t> path = path_to(9);
    std::vector<int64_t> positions;
    for (int32_t a : path) positions.push_back(var.history + a);
    cache.keep(seq, var.history, positions);
    EXPECT_EQ(cache.length(seq), var.history + static_cast<int64_t>(path.size()));
    EXPECT_EQ(cache.length(other), 6);
    // The same path appended to the other cache as a chain; then one decode step on both must
    // give the same bits.
    for (int32_t a : path)
      chain_cache.append(chain, tokens(&k[static_cast<size_t>(a * Hkv * D)], Hkv, 1),
                         tokens(&v[static_cast<size_t>(a * Hkv * D)], Hkv, 1));
    const auto qd = random_values(rng, static_cast<size_t>(Hq * D)),
               kd = random_values(rng, static_cast<size_t>(Hkv * D)),
               vd = random_values(rng, static_cast<size_t>(Hkv * D));
    std::vector<float> od1(qd.size()), od2(qd.size());
    const SequenceChunk step1[] = {{seq, 1, {}}}, step2[] = {{chain, 1, {}}};
    paged_attention(tokens(qd.data(), Hq, 1), tokens(kd.data(), Hkv, 1), tokens(vd.data(), Hkv, 1), cache, step1,
                    tokens(od1.data(), Hq, 1), opt);
    paged_attention(tokens(qd.data(), Hq, 1), tokens(kd.data(), Hkv, 1), tokens(vd.data(), Hkv, 1), chain_cache, step2,
                    tokens(od2.data(), Hq, 1), opt);
    EXPECT_EQ(0, std::memcmp(od1.data(), od2.data(), sizeof(float) * od1.size())) << "keep ≠ the chain";
    for (int32_t a : path) held.add(&k[static_cast<size_t>(a * Hkv * D)], &v[static_cast<size_t>(a * Hkv * D)]);
    held.add(kd.data(), vd.data());
    EXPECT_TRUE(close_to(od1, reference_row(qd.data(), held, opt), tol));
  }
}

// keep() on a forked sequence copies the shared block a token lands in; the fork keeps its tokens.
TEST_P(TreeVerification, KeepCopiesSharedBlocks) {
  const auto [isa, dtype] = GetParam();
  std::mt19937 rng(32);
  PagedKVCache cache({Hkv, D, 16, 16, dtype});
  const int64_t a = cache.create_sequence();
  const int64_t n = 40;
  const auto k = random_values(rng, static_cast<size_t>(n * Hkv * D)), v = random_values(rng, k.size());
  cache.append(a, tokens(k.data(), Hkv, n), tokens(v.data(), Hkv, n));
  const int64_t b = cache.fork(a);
  const int64_t free_before = cache.free_blocks();
  const int64_t keep_positions[] = {12, 20, 33};
  cache.keep(a, 10, keep_positions);  // lands in block 0 (shared): one copy; blocks 1, 2 dropped
  EXPECT_EQ(cache.length(a), 13);
  EXPECT_EQ(cache.length(b), n);
  EXPECT_EQ(cache.free_blocks(), free_before - 1);  // the copy; the dropped blocks are still b's
  // Both sequences against the reference of what they should hold (a decode step each).
  Held ha{dtype, {}, {}}, hb{dtype, {}, {}};
  for (int64_t t = 0; t < n; ++t) hb.add(&k[static_cast<size_t>(t * Hkv * D)], &v[static_cast<size_t>(t * Hkv * D)]);
  for (int64_t t : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 20, 33})
    ha.add(&k[static_cast<size_t>(t * Hkv * D)], &v[static_cast<size_t>(t * Hkv * D)]);
  SdpaOptions opt;
  opt.isa = isa;
  const double tol = dtype == DType::f32 ? 1e-5 : dtype == DType::i8 ? 3e-2 : 1e-2;
  for (auto [id, held] : {std::pair{a, &ha}, std::pair{b, &hb}}) {
    const auto qd = random_values(rng, static_cast<size_t>(Hq * D)),
               kd = random_values(rng, static_cast<size_t>(Hkv * D)),
               vd = random_values(rng, static_cast<size_t>(Hkv * D));
    std::vector<float> od(qd.size());
    const SequenceChunk step[] = {{id, 1, {}}};
    paged_attention(tokens(qd.data(), Hq, 1), tokens(kd.data(), Hkv, 1), tokens(vd.data(), Hkv, 1), cache, step,
                    tokens(od.data(), Hq, 1), opt);
    held->add(kd.data(), vd.data());
    EXPECT_TRUE(close_to(od, reference_row(qd.data(), *held, opt), tol)) << "sequence " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndStorage, TreeVerification, ::testing::ValuesIn(isa_dtype_params()), isa_dtype_name);

// Bad parents and keep arguments: attend::Error, nothing changed.
TEST(TreeVerificationInvalid, RejectedAndNothingChanges) {
  std::mt19937 rng(33);
  PagedKVCache cache({Hkv, D, 4, 16, DType::f32});
  const int64_t seq = cache.create_sequence();
  const int64_t n = 6;
  const auto q = random_values(rng, static_cast<size_t>(n * Hq * D)),
             k = random_values(rng, static_cast<size_t>(n * Hkv * D)), v = random_values(rng, k.size());
  std::vector<float> o(q.size(), 7.0f);
  const std::vector<std::vector<int32_t>> bad = {
      {-1, 0, 1},            // wrong size
      {-1, 0, 2, 1, 1, 1},   // parents[2] = 2: not earlier
      {-1, 0, 0, 5, 1, 1},   // a later index
      {-1, -2, 0, 0, 0, 0},  // below −1
      {0, 0, 0, 0, 0, 0},    // the first token cannot have a parent
  };
  for (const auto& parents : bad) {
    const SequenceChunk chunk[] = {{seq, n, parents}};
    EXPECT_THROW(paged_attention(tokens(q.data(), Hq, n), tokens(k.data(), Hkv, n), tokens(v.data(), Hkv, n), cache,
                                 chunk, tokens(o.data(), Hq, n)),
                 Error);
    EXPECT_EQ(cache.length(seq), 0);
    EXPECT_EQ(cache.free_blocks(), 4);
    for (float x : o) ASSERT_EQ(x, 7.0f);
  }
  cache.append(seq, tokens(k.data(), Hkv, n), tokens(v.data(), Hkv, n));
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> bad_keep = {
      {-1, {}}, {7, {}}, {2, {1}}, {2, {6}}, {2, {4, 3}}, {2, {3, 3}}, {0, {0, 5, 9}},
  };
  for (const auto& [first, positions] : bad_keep) {
    EXPECT_THROW(cache.keep(seq, first, positions), Error) << "first " << first;
    EXPECT_EQ(cache.length(seq), n);
  }
  EXPECT_THROW(cache.keep(seq + 100, 0, {}), Error);
  cache.keep(seq, 2, std::vector<int64_t>{});  // accept nothing: truncation to `first`
  EXPECT_EQ(cache.length(seq), 2);
}

}  // namespace
}  // namespace attend::testing
