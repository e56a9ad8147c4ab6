// PagedKVCache and paged_attention: every ISA path and storage type against the double reference
// over what each sequence holds (pages scattered through the pool), mixed prefill/decode chunks,
// split-K decode, windows, copy-on-write forks, truncation, memory accounting, batch invariance
// (bits independent of the other chunks and of the thread count), all-or-nothing rejections and
// the thread-safety promise (disjoint sequences concurrently; the same sequence detected).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <attend/attend.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../runtime/api/paged_kv_cache_access.hpp"
#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"
#include "cache_test_params.hpp"

// Every heap allocation of the process is counted while `counting` is set (the no-allocation test).
// GCC 12 sees malloc behind operator new and flags the matching free (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace attend::testing {
namespace {

// Packed tensors of one call, token-major ([T, H, D] in memory, viewed as [1, H, T, D]) as a
// projection would produce them.
struct Packed {
  int64_t T, Hq, Hkv, D;
  std::vector<float> q, k, v, o;
  Packed(std::mt19937& rng, int64_t T_, int64_t Hq_, int64_t Hkv_, int64_t D_) : T(T_), Hq(Hq_), Hkv(Hkv_), D(D_) {
    q = random_values(rng, static_cast<size_t>(T * Hq * D));
    k = random_values(rng, static_cast<size_t>(T * Hkv * D));
    v = random_values(rng, k.size());
    o.assign(q.size(), 0.0f);
  }
  static TensorView view(const float* p, int64_t H, int64_t T, int64_t D) {
    return TensorView(p, {1, H, T, D}, {0, D, H * D, 1});
  }
  TensorView qv() const { return view(q.data(), Hq, T, D); }
  TensorView kv() const { return view(k.data(), Hkv, T, D); }
  TensorView vv() const { return view(v.data(), Hkv, T, D); }
  TensorView ov() { return TensorView(o.data(), {1, Hq, T, D}, {0, D, Hq * D, 1}); }
};

// What each sequence holds, as the cache stores it (rounded to its type): [Hkv][len][D].
struct History {
  int64_t Hkv, D;
  DType dtype;
  std::map<int64_t, std::vector<std::vector<float>>> k, v;  // seq → head → tokens × D

  void add(int64_t seq, const float* kp, const float* vp, int64_t head_stride, int64_t token_stride, int64_t n) {
    auto& ks = k[seq];
    auto& vs = v[seq];
    ks.resize(static_cast<size_t>(Hkv));
    vs.resize(static_cast<size_t>(Hkv));
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t t = 0; t < n; ++t)
        for (auto [src, dst] : {std::pair{kp, &ks}, std::pair{vp, &vs}}) {
          std::copy(src + h * head_stride + t * token_stride, src + h * head_stride + t * token_stride + D,
                    row.begin());
          round_trip_row(row.data(), D, dtype);
          (*dst)[static_cast<size_t>(h)].insert((*dst)[static_cast<size_t>(h)].end(), row.begin(), row.end());
        }
  }
  int64_t length(int64_t seq) { return k[seq].empty() ? 0 : static_cast<int64_t>(k[seq][0].size()) / D; }
  void truncate(int64_t seq, int64_t n) {
    for (auto* m : {&k, &v})
      for (auto& h : (*m)[seq]) h.resize(static_cast<size_t>(n * D));
  }
  // Dense [1, Hkv, len, D] copies.
  std::vector<float> dense(std::map<int64_t, std::vector<std::vector<float>>>& m, int64_t seq) {
    std::vector<float> out;
    for (auto& h : m[seq]) out.insert(out.end(), h.begin(), h.end());
    return out;
  }
};

// The reference rows of one chunk (queries rows [first, first + n) of the packed q) attending over
// the sequence's whole history (which already includes the chunk).
std::vector<double> reference_chunk(History& hist, const Packed& p, int64_t seq, int64_t first, int64_t n,
                                    int64_t window) {
  const int64_t len = hist.length(seq);
  const std::vector<float> k = hist.dense(hist.k, seq), v = hist.dense(hist.v, seq);
  SdpaOptions ref;
  ref.causal = true;
  ref.window = window;
  return reference_attention(Packed::view(p.q.data() + first * p.Hq * p.D, p.Hq, n, p.D),
                             TensorView::dense(k.data(), {1, p.Hkv, len, p.D}),
                             TensorView::dense(v.data(), {1, p.Hkv, len, p.D}), ref);
}

// The output rows of one chunk as [Hq][n][D] (the reference's order).
std::vector<float> chunk_rows(const Packed& p, int64_t first, int64_t n) {
  std::vector<float> out;
  for (int64_t h = 0; h < p.Hq; ++h)
    for (int64_t t = first; t < first + n; ++t)
      out.insert(out.end(), p.o.begin() + (t * p.Hq + h) * p.D, p.o.begin() + (t * p.Hq + h + 1) * p.D);
  return out;
}

// Appends `n` random tokens to `seq` through PagedKVCache::append, recording them.
void append_random(PagedKVCache& cache, History& hist, std::mt19937& rng, int64_t seq, int64_t n) {
  const int64_t Hkv = hist.Hkv, D = hist.D;
  const auto k = random_values(rng, static_cast<size_t>(Hkv * n * D)), v = random_values(rng, k.size());
  cache.append(seq, TensorView::dense(k.data(), {1, Hkv, n, D}), TensorView::dense(v.data(), {1, Hkv, n, D}));
  hist.add(seq, k.data(), v.data(), n * D, D, n);
}

void record_call(History& hist, const Packed& p, std::span<const SequenceChunk> chunks) {
  int64_t first = 0;
  for (const SequenceChunk& c : chunks) {
    hist.add(c.seq, p.k.data() + first * p.Hkv * p.D, p.v.data() + first * p.Hkv * p.D, p.D, p.Hkv * p.D, c.tokens);
    first += c.tokens;
  }
}

class PagedAttention : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

void mixed_chunks_match_reference(Isa isa, DType dtype, FpMath fpmath, double tol) {
  struct Shape {
    int64_t Hq, Hkv, D, block_tokens, window;
  };
  // Query heads per kv head 1, 2, 8 (every decode row pack up to the AVX-512 limit, and past it:
  // 8 rows × 7 tokens take the wide path); D 64 (narrow decode) and 40 (padded rows); blocks of
  // 16, 32 and 48 tokens; with and without a window; 20 kv heads (the paged decode kernel keeps
  // state for 16 heads at a time: a group of 16 and one of 4).
  for (const Shape s : {Shape{2, 2, 64, 32, 0}, Shape{4, 2, 40, 16, 0}, Shape{8, 1, 64, 48, 37},
                        Shape{4, 2, 64, 16, 300}, Shape{20, 20, 16, 32, 0}}) {
    SCOPED_TRACE("Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) + " D=" + std::to_string(s.D) +
                 " block_tokens=" + std::to_string(s.block_tokens) + " window=" + std::to_string(s.window));
    PagedKVCache cache({s.Hkv, s.D, 900, s.block_tokens, dtype});
    History hist{s.Hkv, s.D, dtype, {}, {}};
    std::mt19937 rng(static_cast<uint32_t>(s.D * 7 + s.block_tokens));
    // Prefixes 0, 1, 17, 513 and 4200 tokens (split-K: a paged f32/16-bit entry splits from 4096
    // keys), appended in interleaved pieces next to a filler sequence that is released afterwards,
    // so every sequence's blocks are scattered through the pool out of order.
    const int64_t prefixes[] = {0, 1, 17, 513, 4200};
    std::vector<int64_t> ids;
    for (size_t i = 0; i < 5; ++i) ids.push_back(cache.create_sequence());
    const int64_t filler = cache.create_sequence();
    for (int64_t done = 0; done < 4200; done += 37)
      for (size_t i = 0; i < 5; ++i) {
        const int64_t n = std::min<int64_t>(37, prefixes[i] - done);
        if (n > 0) append_random(cache, hist, rng, ids[i], n);
        append_random(cache, hist, rng, filler, 5);
      }
    cache.release(filler);
    // Decodes and prompt chunks of 7 and 33 tokens, in one call, twice (the second call sees the
    // first one's tokens).
    for (int step = 0; step < 2; ++step) {
      const std::vector<SequenceChunk> chunks = {{ids[3], 1}, {ids[0], 33}, {ids[4], 1}, {ids[2], 7}, {ids[1], 1}};
      int64_t T = 0;
      for (const auto& c : chunks) T += c.tokens;
      Packed p(rng, T, s.Hq, s.Hkv, s.D);
      SdpaOptions opt;
      opt.isa = isa;
      opt.window = s.window;
      opt.fpmath = fpmath;
      paged_attention(p.qv(), p.kv(), p.vv(), cache, chunks, p.ov(), opt);
      record_call(hist, p, chunks);
      int64_t first = 0;
      for (const auto& c : chunks) {
        SCOPED_TRACE("step " + std::to_string(step) + " seq " + std::to_string(c.seq) + " tokens " +
                     std::to_string(c.tokens));
        EXPECT_EQ(cache.length(c.seq), hist.length(c.seq));
        EXPECT_TRUE(
            close_to(chunk_rows(p, first, c.tokens), reference_chunk(hist, p, c.seq, first, c.tokens, s.window), tol));
        first += c.tokens;
      }
    }
  }
}

TEST_P(PagedAttention, MixedChunksMatchReference) {
  const auto [isa, dtype] = GetParam();
  mixed_chunks_match_reference(isa, dtype, FpMath::strict, stored_values_tolerance(isa, dtype));
}

// An i8 sequence long enough for split-K (an i8 cache splits decode from 8192 cached keys, in
// ranges of at least 4096): its pages scattered through the pool, decoded for a GQA group of 4
// (the integer kernels on the avx512_bf16 tier) and for one row per kv head, on every ISA, against
// the reference over the stored values — the ranges' partial states merged across pages.
TEST(PagedAttentionI8, LongDecodeSplitsItsKeys) {
  for (Isa isa : supported_isas())
    for (int64_t G : {4, 1}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " G=" + std::to_string(G));
      const int64_t Hkv = 2, Hq = G * Hkv, D = 64, len = 8300;
      PagedKVCache cache({Hkv, D, 300, 32, DType::i8});
      History hist{Hkv, D, DType::i8, {}, {}};
      std::mt19937 rng(static_cast<uint32_t>(G * 11 + static_cast<int>(isa)));
      const int64_t seq = cache.create_sequence(), filler = cache.create_sequence();
      for (int64_t done = 0; done < len - 1; done += 500) {  // pages interleaved with the filler's
        append_random(cache, hist, rng, seq, std::min<int64_t>(500, len - 1 - done));
        append_random(cache, hist, rng, filler, 20);
      }
      cache.release(filler);
      Packed p(rng, 1, Hq, Hkv, D);
      const std::vector<SequenceChunk> chunks = {{seq, 1}};
      SdpaOptions opt;
      opt.isa = isa;
      paged_attention(p.qv(), p.kv(), p.vv(), cache, chunks, p.ov(), opt);
      record_call(hist, p, chunks);
      EXPECT_EQ(cache.length(seq), len);
      EXPECT_TRUE(close_to(chunk_rows(p, 0, 1), reference_chunk(hist, p, seq, 0, 1, 0),
                           stored_values_tolerance(isa, DType::i8)));
    }
}

// fpmath = bf16 through the paged path: prompt chunks take the bf16 wide driver over blocked,
// scattered pages of every storage type; within the README's bound (1e-2 of the output's scale).
TEST_P(PagedAttention, MixedChunksMatchReferenceBf16Math) {
  const auto [isa, dtype] = GetParam();
  mixed_chunks_match_reference(isa, dtype, FpMath::bf16, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(EveryIsaAndType, PagedAttention, ::testing::ValuesIn(isa_dtype_params()), isa_dtype_name);
// fpmath = bf16 decode over a bf16 cache: on a CPU whose vdpbf16ps runs natively (and no AMX tiles,
// whose Xeons keep decode f32), the narrow path's scores and P·V run on vdpbf16ps with the queries
// and weights rounded to bf16 (bf16_dot_decode.hpp). Every row pack (1–8 rows per kv head, with
// padding rows), odd key counts (a last key pair with one key), one to several tiles, value widths
// that take the dot-product P·V (multiples of 32) and ones that do not, pages of 16 and 48 tokens,
// a window (masked tiles take the f32 P·V): within the bf16-math bound against the reference, and
// not the strict bits where the path runs (the same bits where it does not).
TEST(PagedAttentionBf16Dot, DecodeMatchesReferenceAndLeavesStrictBits) {
  struct Shape {
    int64_t group, D, block_tokens, window;
  };
  for (Isa isa : supported_isas()) {
    const bool dot = bf16_math_native(isa) && !bf16_math_amx(isa);
    for (const Shape s : {Shape{4, 128, 32, 0}, Shape{1, 128, 16, 0}, Shape{3, 64, 48, 0}, Shape{8, 32, 32, 0},
                          Shape{2, 96, 16, 0}, Shape{5, 80, 32, 0}, Shape{4, 256, 16, 0}, Shape{4, 64, 32, 100}})
      for (const int64_t len : {1, 2, 17, 31, 514, 1025, 2049}) {
        const int64_t Hkv = 2, Hq = Hkv * s.group;
        SCOPED_TRACE(std::string(isa_name(isa)) + " group=" + std::to_string(s.group) + " D=" + std::to_string(s.D) +
                     " block_tokens=" + std::to_string(s.block_tokens) + " window=" + std::to_string(s.window) +
                     " len=" + std::to_string(len));
        PagedKVCache cache({Hkv, s.D, (len + s.block_tokens - 1) / s.block_tokens + 2, s.block_tokens, DType::bf16});
        History hist{Hkv, s.D, DType::bf16, {}, {}};
        std::mt19937 rng(static_cast<uint32_t>(len * 131 + s.D + s.group));
        const int64_t seq = cache.create_sequence();
        if (len > 1) append_random(cache, hist, rng, seq, len - 1);
        Packed p(rng, 1, Hq, Hkv, s.D);
        const std::vector<SequenceChunk> chunks = {{seq, 1}};
        SdpaOptions opt;
        opt.isa = isa;
        opt.window = s.window;
        opt.fpmath = FpMath::strict;
        const int64_t fork = cache.fork(seq);  // the strict call appends to a fork: the same history
        paged_attention(p.qv(), p.kv(), p.vv(), cache, std::vector<SequenceChunk>{{fork, 1}}, p.ov(), opt);
        const std::vector<float> strict = chunk_rows(p, 0, 1);
        opt.fpmath = FpMath::bf16;
        paged_attention(p.qv(), p.kv(), p.vv(), cache, chunks, p.ov(), opt);
        record_call(hist, p, chunks);
        const std::vector<float> got = chunk_rows(p, 0, 1);
        EXPECT_TRUE(close_to(got, reference_chunk(hist, p, seq, 0, 1, s.window), 1e-2));
        // One key: its weight is 1 and its row exact in bf16, so the dot products give the strict bits.
        if (dot && len > 1) {
          EXPECT_NE(got, strict) << "the bf16 dot-product decode did not run";
        } else if (!dot) {
          EXPECT_EQ(got, strict) << "fpmath=bf16 decode must be the strict bits where vdpbf16ps is not native";
        }
      }
  }
}

// A chunk's rows are the same bits alone or with any other chunks, in any order, on 1, 2, 3 or 16
// threads. Each configuration runs on forks of the same base sequences (identical contents, other
// blocks), so every run starts from the same state.
TEST(PagedAttentionInvariance, ChunkBitsIndependentOfBatchAndThreads) {
  // A long decode (12,000 keys, 8 kv heads): split-K sized for the batch (32 items in all) would
  // give it 4 key ranges alone and 2 in a batch of three; planned by its own shape it gets 4 in
  // both.
  constexpr int64_t Hq = 16, Hkv = 8, D = 64;
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    PagedKVCache cache({Hkv, D, 2000, 32, DType::f32});
    History hist{Hkv, D, DType::f32, {}, {}};
    std::mt19937 rng(3);
    // Base sequences: a long decode (split-K), a short decode, a prompt continuing at 100.
    const int64_t base[3] = {cache.create_sequence(), cache.create_sequence(), cache.create_sequence()};
    append_random(cache, hist, rng, base[0], 12000);
    append_random(cache, hist, rng, base[1], 45);
    append_random(cache, hist, rng, base[2], 100);
    const int64_t tokens[3] = {1, 1, 70};
    // Per chunk its own q/k/v rows (the same in every configuration).
    std::vector<Packed> own;
    for (int i = 0; i < 3; ++i) own.emplace_back(rng, tokens[i], Hq, Hkv, D);
    FpMath fpmath = FpMath::strict;
    // Runs `order` (indices of chunks) on `threads` threads; returns each chunk's rows.
    auto run = [&](std::vector<int> order, int threads) {
      std::vector<SequenceChunk> chunks;
      int64_t T = 0;
      for (int i : order) T += tokens[i];
      Packed p(rng, T, Hq, Hkv, D);
      int64_t first = 0;
      std::vector<int64_t> forks;
      for (int i : order) {
        const int64_t f = cache.fork(base[i]);
        forks.push_back(f);
        chunks.push_back({f, tokens[i]});
        for (int64_t t = 0; t < tokens[i]; ++t) {
          std::memcpy(&p.q[static_cast<size_t>((first + t) * Hq * D)], &own[static_cast<size_t>(i)].q[t * Hq * D],
                      sizeof(float) * Hq * D);
          std::memcpy(&p.k[static_cast<size_t>((first + t) * Hkv * D)], &own[static_cast<size_t>(i)].k[t * Hkv * D],
                      sizeof(float) * Hkv * D);
          std::memcpy(&p.v[static_cast<size_t>((first + t) * Hkv * D)], &own[static_cast<size_t>(i)].v[t * Hkv * D],
                      sizeof(float) * Hkv * D);
        }
        first += tokens[i];
      }
      SdpaOptions opt;
      opt.isa = isa;
      opt.num_threads = threads;
      opt.fpmath = fpmath;
      paged_attention(p.qv(), p.kv(), p.vv(), cache, chunks, p.ov(), opt);
      std::vector<std::vector<float>> rows(3);
      first = 0;
      for (int i : order) {
        rows[static_cast<size_t>(i)] = chunk_rows(p, first, tokens[i]);
        first += tokens[i];
      }
      for (int64_t f : forks) cache.release(f);
      return rows;
    };
    // bf16 math: the 70-token prompt (140 rows, two blocks) keeps each kv head's packed K/V across
    // its blocks on a thread (1 thread: both blocks, the buffer started over for each head).
    for (const FpMath f : {FpMath::strict, FpMath::bf16}) {
      fpmath = f;
      const double tol = f == FpMath::strict ? 1e-5 : 1e-2;
      std::vector<std::vector<float>> alone(3);
      for (int i = 0; i < 3; ++i) alone[static_cast<size_t>(i)] = run({i}, 1)[static_cast<size_t>(i)];
      // Correct, not just stable: the lone runs against the reference.
      for (int i = 0; i < 3; ++i) {
        Packed p = own[static_cast<size_t>(i)];
        History h = hist;
        h.add(base[i], p.k.data(), p.v.data(), D, Hkv * D, tokens[i]);
        EXPECT_TRUE(close_to(alone[static_cast<size_t>(i)], reference_chunk(h, p, base[i], 0, tokens[i], 0), tol));
      }
      for (int threads : {1, 2, 3, 16})
        for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, std::vector<int>{2, 1, 0},
                                              std::vector<int>{1, 0}, std::vector<int>{2, 0}, std::vector<int>{2}}) {
          const auto rows = run(order, threads);
          for (int i : order)
            EXPECT_EQ(0, std::memcmp(rows[static_cast<size_t>(i)].data(), alone[static_cast<size_t>(i)].data(),
                                     sizeof(float) * alone[static_cast<size_t>(i)].size()))
                << fpmath_name(fpmath) << " chunk " << i << " threads " << threads << " batch of " << order.size();
        }
    }
    EXPECT_EQ(cache.free_blocks(), 2000 - cache.blocks(base[0]) - cache.blocks(base[1]) - cache.blocks(base[2]));
  }
}

// Decode rows of `seq` for a fixed query after appending a fixed token: a fingerprint of its contents.
std::vector<float> probe(PagedKVCache& cache, int64_t seq, std::mt19937::result_type seed) {
  const PagedKVCacheConfig& c = cache.config();
  std::mt19937 rng(seed);
  Packed p(rng, 1, 2 * c.kv_heads, c.kv_heads, c.head_dim);
  const SequenceChunk chunk{seq, 1};
  paged_attention(p.qv(), p.kv(), p.vv(), cache, std::span<const SequenceChunk>(&chunk, 1), p.ov());
  cache.truncate(seq, cache.length(seq) - 1);
  return p.o;
}

TEST(PagedKVCache, ForkSharesBlocksAndCopiesOnlyThePartialOne) {
  PagedKVCache cache({2, 16, 64, 32, DType::f32});
  History hist{2, 16, DType::f32, {}, {}};
  std::mt19937 rng(1);
  const int64_t a = cache.create_sequence();
  append_random(cache, hist, rng, a, 40);  // one full block and 8 tokens of a second
  EXPECT_EQ(cache.blocks(a), 2);
  EXPECT_EQ(cache.free_blocks(), 62);
  const std::vector<float> before = probe(cache, a, 9);
  const int64_t b = cache.fork(a);
  EXPECT_EQ(cache.length(b), 40);
  EXPECT_EQ(cache.free_blocks(), 62);  // a fork costs no blocks
  EXPECT_EQ(cache.used_bytes(), cache.memory_bytes() / 64 * 2);
  EXPECT_EQ(cache.blocks_needed(std::vector<SequenceChunk>{{b, 1}}), 1);  // the shared partial block
  EXPECT_EQ(cache.blocks_needed(std::vector<SequenceChunk>{{b, 30}}), 2);
  // Diverge: b gets different tokens. Only the partial block is copied.
  hist.k[b] = hist.k[a];
  hist.v[b] = hist.v[a];
  append_random(cache, hist, rng, b, 5);
  EXPECT_EQ(cache.free_blocks(), 61);
  // a still reads its own tokens; a now owns its partial block alone, so appending to a copies nothing.
  EXPECT_EQ(probe(cache, a, 9), before);
  append_random(cache, hist, rng, a, 3);
  EXPECT_EQ(cache.free_blocks(), 61);
  // Both match the reference over their own histories.
  for (int64_t s : {a, b}) {
    std::mt19937 r2(5);
    Packed p(r2, 2, 4, 2, 16);
    const std::vector<SequenceChunk> chunk = {{s, 2}};
    paged_attention(p.qv(), p.kv(), p.vv(), cache, chunk, p.ov());
    record_call(hist, p, chunk);
    EXPECT_TRUE(close_to(chunk_rows(p, 0, 2), reference_chunk(hist, p, s, 0, 2, 0), 1e-5));
  }
  // A fork at a block boundary shares every block and copies nothing when it grows.
  const int64_t c = cache.create_sequence();
  append_random(cache, hist, rng, c, 64);
  const int64_t d = cache.fork(c);
  const int64_t free_before = cache.free_blocks();
  hist.k[d] = hist.k[c];
  hist.v[d] = hist.v[c];
  append_random(cache, hist, rng, d, 1);
  EXPECT_EQ(cache.free_blocks(), free_before - 1);  // one new block, no copy
  // Releasing returns blocks only once nobody holds them.
  cache.release(c);
  EXPECT_EQ(cache.free_blocks(), free_before - 1);  // c's blocks are d's too
  cache.release(d);
  cache.release(a);
  cache.release(b);
  EXPECT_EQ(cache.free_blocks(), 64);
  EXPECT_EQ(cache.sequences(), 0);
  EXPECT_EQ(cache.used_bytes(), 0u);
  EXPECT_THROW(cache.length(a), Error);
}

TEST(PagedKVCache, HoldsCeilTokensOverBlockTokensAndTruncates) {
  PagedKVCache cache({1, 16, 100, 48, DType::bf16});
  History hist{1, 16, DType::bf16, {}, {}};
  std::mt19937 rng(2);
  EXPECT_EQ(cache.memory_bytes(), size_t{2} * 100 * 48 * 16 * 2);
  const int64_t s = cache.create_sequence();
  for (int64_t n : {1, 47, 1, 95, 1}) {
    append_random(cache, hist, rng, s, n);
    EXPECT_EQ(cache.blocks(s), (cache.length(s) + 47) / 48);
    EXPECT_EQ(cache.free_blocks(), 100 - cache.blocks(s));
  }
  cache.truncate(s, 50);  // keeps two blocks
  hist.truncate(s, 50);
  EXPECT_EQ(cache.blocks(s), 2);
  cache.truncate(s, 48);
  hist.truncate(s, 48);
  EXPECT_EQ(cache.blocks(s), 1);
  EXPECT_THROW(cache.truncate(s, 49), Error);
  // Appending after a truncate overwrites what was dropped.
  std::mt19937 r2(8);
  Packed p(r2, 3, 2, 1, 16);
  const std::vector<SequenceChunk> chunk = {{s, 3}};
  paged_attention(p.qv(), p.kv(), p.vv(), cache, chunk, p.ov());
  record_call(hist, p, chunk);
  EXPECT_TRUE(close_to(chunk_rows(p, 0, 3), reference_chunk(hist, p, s, 0, 3, 0), 1e-2));
  cache.truncate(s, 0);
  EXPECT_EQ(cache.blocks(s), 0);
  EXPECT_EQ(cache.free_blocks(), 100);
}

// New blocks follow the sequence's last block when it is free, else come as one stretch placed in
// the pool's largest free run: at its start, or halfway along it when another sequence's last
// block comes right before it (that sequence keeps the first half to grow into). A prompt chunk
// is still read as one run in a pool fragmented by sequences growing side by side.
TEST(PagedKVCache, NewBlocksFollowTheSequenceOrComeAsOneRun) {
  using detail::PagedKVCacheAccess;
  PagedKVCache cache({1, 16, 32, 16, DType::f32});
  History hist{1, 16, DType::f32, {}, {}};
  std::mt19937 rng(5);
  const int64_t a = cache.create_sequence(), b = cache.create_sequence();
  for (int round = 0; round < 4; ++round) {  // a from 0; b halfway along [1, 32): 1 + 15
    append_random(cache, hist, rng, a, 16);
    append_random(cache, hist, rng, b, 16);
  }
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, a), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, b), (std::vector<int32_t>{16, 17, 18, 19}));
  cache.release(a);  // free: [0, 16), [20, 32)
  const int64_t c = cache.create_sequence();
  append_random(cache, hist, rng, c, 50);  // 4 blocks at once: the start of the largest run (no one ends before it)
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, c), (std::vector<int32_t>{0, 1, 2, 3}));
  append_random(cache, hist, rng, c, 30);  // 4 is free: it follows 3
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, c), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const int64_t d = cache.create_sequence();
  append_random(cache, hist, rng, d, 1);  // [20, 32) (12) is larger than [5, 16) (11); after b's 19: 20 + 6
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, d), (std::vector<int32_t>{26}));
  cache.release(b);  // [5, 26) free
  append_random(cache, hist, rng, d, 16);
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, d), (std::vector<int32_t>{26, 27}));
  cache.truncate(c, 16);  // 1–4 back: [1, 26) and [28, 32) free
  // Everything free, taken in one call: the largest run whole, then the next; ascending.
  const int64_t e = cache.create_sequence();
  const int64_t rest = cache.free_blocks();
  append_random(cache, hist, rng, e, rest * 16);
  const std::vector<int32_t> table = PagedKVCacheAccess::block_table(cache, e);
  ASSERT_EQ(static_cast<int64_t>(table.size()), rest);
  ASSERT_EQ(rest, 29);
  EXPECT_EQ(table.front(), 1);
  EXPECT_EQ(table[24], 25);
  EXPECT_EQ(table[25], 28);
  EXPECT_TRUE(std::is_sorted(table.begin(), table.end()));
  EXPECT_EQ(std::adjacent_find(table.begin(), table.end()), table.end());
  EXPECT_EQ(cache.free_blocks(), 0);
  EXPECT_THROW(PagedKVCacheAccess::block_table(cache, 99), Error);
}

// The free runs' search across the bitmap's 64-block words: a run may straddle two words, isolated
// free blocks are runs of one, and a call that finds no run of what it needs takes the largest runs
// whole, the lowest of equal ones first. (Every block here ends a one-block sequence, so a stretch
// shorter than its run starts halfway along it.)
TEST(PagedKVCache, FreeRunsAcrossWordsAndIsolatedBlocks) {
  using detail::PagedKVCacheAccess;
  PagedKVCache cache({1, 16, 200, 16, DType::f32});
  History hist{1, 16, DType::f32, {}, {}};
  std::mt19937 rng(6);
  std::vector<int64_t> one(200, -1);  // the sequence holding block b
  for (int64_t i = 0; i < 200; ++i) {
    const int64_t s = cache.create_sequence();
    append_random(cache, hist, rng, s, 16);
    const std::vector<int32_t> table = PagedKVCacheAccess::block_table(cache, s);
    ASSERT_EQ(table.size(), 1u);
    ASSERT_EQ(one[static_cast<size_t>(table[0])], -1);
    one[static_cast<size_t>(table[0])] = s;
  }
  EXPECT_EQ(cache.free_blocks(), 0);
  std::vector<int64_t> freed = {10, 12, 14, 199};
  for (int64_t b = 61; b < 67; ++b) freed.push_back(b);    // 6 blocks across words 0 and 1
  for (int64_t b = 130; b < 135; ++b) freed.push_back(b);  // 5
  for (int64_t b : freed) cache.release(one[static_cast<size_t>(b)]);
  auto taken = [&](int64_t tokens) {
    const int64_t s = cache.create_sequence();
    append_random(cache, hist, rng, s, tokens);
    return PagedKVCacheAccess::block_table(cache, s);
  };
  EXPECT_EQ(taken(96), (std::vector<int32_t>{61, 62, 63, 64, 65, 66}));  // the largest run, whole
  EXPECT_EQ(taken(48), (std::vector<int32_t>{132, 133, 134}));           // [130, 135): 130 + min(2, 2)
  EXPECT_EQ(taken(1), (std::vector<int32_t>{131}));                      // [130, 132): 130 + 1
  EXPECT_EQ(taken(64), (std::vector<int32_t>{10, 12, 14, 130}));         // no run of 4: runs of one
  EXPECT_EQ(cache.free_blocks(), 1);
  EXPECT_EQ(taken(16), (std::vector<int32_t>{199}));
  EXPECT_EQ(cache.free_blocks(), 0);
}

// Sequences growing side by side a block at a time: each new stretch halves the largest free run
// after the last block of the sequence before it, so each grows into its own run (decode then
// reads it as one run per head) until it meets the next one; every free block can be taken.
TEST(PagedKVCache, GrowingSequencesSplitTheLargestRun) {
  using detail::PagedKVCacheAccess;
  PagedKVCache cache({1, 16, 160, 16, DType::f32});
  History hist{1, 16, DType::f32, {}, {}};
  std::mt19937 rng(7);
  auto ascending = [](int32_t from, int32_t n) {
    std::vector<int32_t> r(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = from + i;
    return r;
  };
  const int64_t a = cache.create_sequence(), b = cache.create_sequence();
  for (int round = 0; round < 20; ++round) {  // a from 0, b from 1 + 159 / 2
    append_random(cache, hist, rng, a, 16);
    append_random(cache, hist, rng, b, 16);
  }
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, a), ascending(0, 20));
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, b), ascending(80, 20));
  const int64_t c = cache.create_sequence();
  append_random(cache, hist, rng, c, 16);  // [20, 80) and [100, 160) tie: the lower, halfway
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, c), std::vector<int32_t>{50});
  append_random(cache, hist, rng, a, 30 * 16);  // a fills its half up to c's 50…
  append_random(cache, hist, rng, a, 16);       // …then the largest run, [100, 160), halfway
  std::vector<int32_t> expect_a = ascending(0, 50);
  expect_a.push_back(130);
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, a), expect_a);
  const int64_t d = cache.create_sequence();
  append_random(cache, hist, rng, d, 16);  // [100, 130) after b's 99: 100 + 15
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, d), std::vector<int32_t>{115});
  // Filling the pool: every free block can be taken.
  while (cache.free_blocks() > 0) {
    append_random(cache, hist, rng, a, 16);
    if (cache.free_blocks() > 0) append_random(cache, hist, rng, b, 16);
  }
  std::vector<int> held(160, 0);
  for (int64_t s : {a, b, c, d})
    for (int32_t blk : PagedKVCacheAccess::block_table(cache, s)) ++held[static_cast<size_t>(blk)];
  EXPECT_EQ(std::count(held.begin(), held.end(), 1), 160);
  // A fork's last block is its own too: with the original released, a new stretch still leaves
  // room after it; truncated, a sequence's last block is its new end.
  PagedKVCache fresh({1, 16, 160, 16, DType::f32});
  History hist2{1, 16, DType::f32, {}, {}};
  const int64_t x = fresh.create_sequence();
  append_random(fresh, hist2, rng, x, 16);
  const int64_t y = fresh.fork(x);
  fresh.release(x);
  const int64_t z = fresh.create_sequence();
  append_random(fresh, hist2, rng, z, 3 * 16);
  EXPECT_EQ(PagedKVCacheAccess::block_table(fresh, y), std::vector<int32_t>{0});
  EXPECT_EQ(PagedKVCacheAccess::block_table(fresh, z), ascending(80, 3));
  fresh.truncate(z, 16);  // [1, 80) after y's 0 and [81, 160) after z's 80 tie: the lower, halfway
  const int64_t w = fresh.create_sequence();
  append_random(fresh, hist2, rng, w, 16);
  EXPECT_EQ(PagedKVCacheAccess::block_table(fresh, w), std::vector<int32_t>{40});
}

// The largest free run over random free blocks (a 300-block pool: five bitmap words, the last one
// partial; densities from isolated blocks to whole free words, runs across words), against a
// brute-force search: a new sequence's first block is that run's start, or halfway along it after
// a sequence's last block (every held block here ends a one-block sequence), the lowest run of
// equal ones first.
TEST(PagedKVCache, PlacementTakesTheLargestRunAnywhere) {
  using detail::PagedKVCacheAccess;
  constexpr int64_t kBlocks = 300;
  std::mt19937 rng(9);
  History hist{1, 16, DType::f32, {}, {}};
  for (int trial = 0; trial < 120; ++trial) {
    PagedKVCache cache({1, 16, kBlocks, 16, DType::f32});
    std::vector<int64_t> owner(kBlocks, -1);
    for (int64_t i = 0; i < kBlocks; ++i) {
      const int64_t s = cache.create_sequence();
      append_random(cache, hist, rng, s, 16);
      owner[static_cast<size_t>(PagedKVCacheAccess::block_table(cache, s)[0])] = s;
    }
    ASSERT_EQ(cache.free_blocks(), 0) << trial;
    const double density = std::array<double, 4>{0.05, 0.3, 0.7, 0.95}[trial % 4];
    std::vector<bool> is_free(kBlocks, false);
    for (int64_t b = 0; b < kBlocks; ++b) is_free[static_cast<size_t>(b)] = std::bernoulli_distribution(density)(rng);
    if (trial % 3 == 0) {  // a long run somewhere, often across a word boundary
      const int64_t from = std::uniform_int_distribution<int64_t>(0, kBlocks - 1)(rng);
      const int64_t len = std::uniform_int_distribution<int64_t>(1, 140)(rng);
      for (int64_t b = from; b < std::min(kBlocks, from + len); ++b) is_free[static_cast<size_t>(b)] = true;
    }
    if (std::count(is_free.begin(), is_free.end(), true) == 0) is_free[static_cast<size_t>(trial % kBlocks)] = true;
    for (int64_t b = 0; b < kBlocks; ++b)
      if (is_free[static_cast<size_t>(b)]) cache.release(owner[static_cast<size_t>(b)]);
    int64_t a = -1, len = 0;  // brute force: the first of the longest runs
    for (int64_t b = 0; b < kBlocks;) {
      if (!is_free[static_cast<size_t>(b)]) {
        ++b;
        continue;
      }
      int64_t e = b;
      while (e < kBlocks && is_free[static_cast<size_t>(e)]) ++e;
      if (e - b > len) a = b, len = e - b;
      b = e;
    }
    const int64_t n = 1 + trial % 8;
    const int64_t expect = len <= n || a == 0 ? a : a + std::min(len / 2, len - n);
    const int64_t s = cache.create_sequence();
    append_random(cache, hist, rng, s, std::min(n, cache.free_blocks()) * 16);
    EXPECT_EQ(PagedKVCacheAccess::block_table(cache, s)[0], expect)
        << "trial " << trial << ": largest run [" << a << ", " << a + len << "), " << n << " blocks";
  }
}

// A copy-on-write's copy comes first in the stretch the append takes, so the blocks after it follow
// it: a fork that diverges from a partial shared block is read as one run from there.
TEST(PagedKVCache, CopyOnWriteCopyLeadsItsStretch) {
  using detail::PagedKVCacheAccess;
  PagedKVCache cache({1, 16, 64, 16, DType::f32});
  History hist{1, 16, DType::f32, {}, {}};
  std::mt19937 rng(8);
  const int64_t x = cache.create_sequence();
  append_random(cache, hist, rng, x, 24);  // blocks 0, 1 (1 partial)
  const int64_t y = cache.fork(x);
  append_random(cache, hist, rng, y, 40);  // copy of 1, then 2 more: one stretch halfway along [2, 64)
  const std::vector<int32_t> t = PagedKVCacheAccess::block_table(cache, y);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0], 0);
  EXPECT_EQ(t[1], 2 + 31);
  EXPECT_EQ(t[2], t[1] + 1);
  EXPECT_EQ(t[3], t[1] + 2);
  EXPECT_EQ(PagedKVCacheAccess::block_table(cache, x), (std::vector<int32_t>{0, 1}));
}

// A call reserves its workspace for its own cache's storage type, whatever cache the thread served
// before: the per-thread step scratch kept the last call's type, so an f32 call after an i8 one
// planned its reservation with the i8 cache's longer key ranges and reserved no split-K states for
// the ranges f32 splits into (written past the reservation).
TEST(PagedAttentionMemory, ReservationFollowsThisCallsStorageType) {
  const int64_t Hq = 4, Hkv = 2, D = 64, cached = 4095;  // f32: split into ranges; i8: one range
  auto decode_step = [&](DType dtype, Context* context) {
    PagedKVCache cache({Hkv, D, 160, 32, dtype});
    History hist{Hkv, D, dtype, {}, {}};
    std::mt19937 rng(9);
    const int64_t s = cache.create_sequence();
    append_random(cache, hist, rng, s, cached);
    Packed p(rng, 1, Hq, Hkv, D);
    SdpaOptions opt;
    opt.context = context;
    opt.num_threads = 2;
    const std::vector<SequenceChunk> chunk = {{s, 1}};
    paged_attention(p.qv(), p.kv(), p.vv(), cache, chunk, p.ov(), opt);
    record_call(hist, p, chunk);
    return close_to(chunk_rows(p, 0, 1), reference_chunk(hist, p, s, 0, 1, 0), 1e-2);
  };
  Context first, after_i8;
  bool fresh_ok = false;
  std::thread([&] { fresh_ok = decode_step(DType::f32, &first); }).join();  // a thread with no history
  EXPECT_TRUE(fresh_ok);
  EXPECT_TRUE(decode_step(DType::i8, nullptr));
  EXPECT_TRUE(decode_step(DType::f32, &after_i8));
  EXPECT_GT(first.peak_workspace_bytes(), 0u);
  EXPECT_EQ(after_i8.peak_workspace_bytes(), first.peak_workspace_bytes());
}

// A fixture for rejections: lengths, block ownership, the pool and the output must be unchanged.
struct State {
  std::vector<int64_t> lengths, blocks;
  int64_t free = 0;
  std::vector<float> out;
  bool operator==(const State&) const = default;
};

TEST(PagedAttentionInvalid, RejectionsChangeNothing) {
  constexpr int64_t Hq = 4, Hkv = 2, D = 16;
  PagedKVCache cache({Hkv, D, 6, 16, DType::f32});
  History hist{Hkv, D, DType::f32, {}, {}};
  std::mt19937 rng(4);
  const int64_t a = cache.create_sequence(), b = cache.create_sequence();
  append_random(cache, hist, rng, a, 20);  // 2 blocks
  append_random(cache, hist, rng, b, 16);  // 1 block; 3 free
  Packed p(rng, 3, Hq, Hkv, D);
  std::fill(p.o.begin(), p.o.end(), 7.0f);
  auto state = [&] {
    return State{{cache.length(a), cache.length(b)}, {cache.blocks(a), cache.blocks(b)}, cache.free_blocks(), p.o};
  };
  const State before = state();
  auto rejects = [&](const char* what, ErrorCode code, auto&& call) {
    SCOPED_TRACE(what);
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
    }
    EXPECT_TRUE(state() == before);
  };
  const std::vector<SequenceChunk> ok = {{a, 1}, {b, 2}};
  using C = std::vector<SequenceChunk>;
  rejects("unknown id", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, C{{a, 1}, {99, 2}}, p.ov());
  });
  rejects("repeated id", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, C{{a, 1}, {a, 2}}, p.ov());
  });
  rejects("tokens do not add up", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, C{{a, 1}, {b, 1}}, p.ov());
  });
  rejects("negative tokens", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, C{{a, 4}, {b, -1}}, p.ov());
  });
  rejects("kv_lens", ErrorCode::invalid_argument, [&] {
    const int64_t lens[1] = {1};
    SdpaOptions o;
    o.kv_lens = lens;
    paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, p.ov(), o);
  });
  rejects("bias", ErrorCode::invalid_argument, [&] {
    SdpaOptions o;
    o.bias = TensorView::dense(p.q.data(), {1, 1, 1, 1});
    paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, p.ov(), o);
  });
  rejects("batch of 2", ErrorCode::invalid_argument, [&] {
    paged_attention(TensorView(p.q.data(), {2, Hq, 1, D}, {D, D, Hq * D, 1}),
                    TensorView(p.k.data(), {2, Hkv, 1, D}, {D, D, Hkv * D, 1}),
                    TensorView(p.v.data(), {2, Hkv, 1, D}, {D, D, Hkv * D, 1}), cache, C{{a, 1}, {b, 1}},
                    TensorView(p.o.data(), {2, Hq, 1, D}, {D, D, Hq * D, 1}));
  });
  rejects("kv heads differ from the cache", ErrorCode::invalid_argument, [&] {
    paged_attention(Packed::view(p.q.data(), Hq, 3, D), Packed::view(p.k.data(), 1, 3, D),
                    Packed::view(p.v.data(), 1, 3, D), cache, ok, p.ov());
  });
  rejects("o overlaps q", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, TensorView(p.q.data(), {1, Hq, 3, D}, {0, D, Hq * D, 1}));
  });
  rejects("read-only o", ErrorCode::invalid_argument, [&] {
    paged_attention(p.qv(), p.kv(), p.vv(), cache, ok,
                    TensorView(static_cast<const float*>(p.o.data()), {1, Hq, 3, D}, {0, D, Hq * D, 1}));
  });
  rejects("forced ISA that does not exist", ErrorCode::unsupported, [&] {
    SdpaOptions o;
    o.isa = static_cast<Isa>(99);
    paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, p.ov(), o);
  });
  // Pool exhaustion: 3 free blocks; a (20 tokens) + 30 needs 2 more, b (16) + 40 needs 3: 2 missing.
  {
    Packed big(rng, 70, Hq, Hkv, D);
    std::fill(big.o.begin(), big.o.end(), 7.0f);
    const std::vector<float> o_before = big.o;
    try {
      paged_attention(big.qv(), big.kv(), big.vv(), cache, C{{a, 30}, {b, 40}}, big.ov());
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::capacity) << e.what();
      EXPECT_EQ(e.blocks_missing(), 2) << e.what();
    }
    EXPECT_TRUE(state() == before);
    EXPECT_EQ(big.o, o_before);
    EXPECT_EQ(cache.blocks_needed(C{{a, 30}, {b, 40}}), 5);
  }
  // The workspace limit of a context.
  {
    Context tiny(ContextConfig{1, 1});
    SdpaOptions o;
    o.context = &tiny;
    rejects("workspace limit", ErrorCode::capacity,
            [&] { paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, p.ov(), o); });
  }
  // Construction.
  EXPECT_THROW(PagedKVCache({Hkv, D, 6, 24, DType::f32}), Error);
  EXPECT_THROW(PagedKVCache({Hkv, D, 0, 16, DType::f32}), Error);
  EXPECT_THROW(PagedKVCache({0, D, 6, 16, DType::f32}), Error);
  EXPECT_THROW(cache.fork(42), Error);
  EXPECT_THROW(cache.release(42), Error);
  EXPECT_TRUE(state() == before);
  // And the cache still works, with the contents it had.
  paged_attention(p.qv(), p.kv(), p.vv(), cache, ok, p.ov());
  record_call(hist, p, ok);
  EXPECT_TRUE(close_to(chunk_rows(p, 0, 1), reference_chunk(hist, p, a, 0, 1, 0), 1e-5));
  EXPECT_TRUE(close_to(chunk_rows(p, 1, 2), reference_chunk(hist, p, b, 1, 2, 0), 1e-5));
}

// The README's promise: calls on disjoint sequences of one cache may run concurrently (results as
// if serial); calls on the same sequence from two threads are detected (concurrent_use), never lost.
TEST(PagedKVCacheThreads, DisjointSequencesConcurrentlySameSequenceDetected) {
  constexpr int64_t Hq = 4, Hkv = 2, D = 32;
  constexpr int kThreads = 4, kSteps = 60;
  PagedKVCache cache({Hkv, D, 4096, 16, DType::f32});
  std::mt19937 rng(6);
  // A shared prefix forked into every thread's sequence: copy-on-write under concurrency.
  const int64_t root = cache.create_sequence();
  History hist{Hkv, D, DType::f32, {}, {}};
  append_random(cache, hist, rng, root, 40);
  std::vector<int64_t> mine(kThreads);
  for (int t = 0; t < kThreads; ++t) mine[static_cast<size_t>(t)] = cache.fork(root);
  std::vector<Packed> data;
  for (int i = 0; i < kSteps; ++i) data.emplace_back(rng, 3, Hq, Hkv, D);
  std::vector<std::vector<float>> got(kThreads * kSteps);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kSteps; ++i) {
        Packed p = data[static_cast<size_t>(i)];
        const std::vector<SequenceChunk> chunk = {{mine[static_cast<size_t>(t)], i % 2 ? 1 : 3}};
        const int64_t n = chunk[0].tokens;
        Packed q = p;
        try {
          paged_attention(Packed::view(p.q.data(), Hq, n, D), Packed::view(p.k.data(), Hkv, n, D),
                          Packed::view(p.v.data(), Hkv, n, D), cache, chunk,
                          TensorView(q.o.data(), {1, Hq, n, D}, {0, D, Hq * D, 1}), SdpaOptions{.num_threads = 1});
        } catch (...) {
          ++errors;
        }
        got[static_cast<size_t>(t * kSteps + i)] = q.o;
        if (i % 10 == 9) cache.truncate(mine[static_cast<size_t>(t)], 40 + i);  // release blocks meanwhile
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  for (int t = 1; t < kThreads; ++t)
    for (int i = 0; i < kSteps; ++i)
      EXPECT_EQ(got[static_cast<size_t>(t * kSteps + i)], got[static_cast<size_t>(i)])
          << "thread " << t << " step " << i;

  // Two threads on one sequence: every call either completes or throws concurrent_use.
  const int64_t shared = cache.fork(root);
  std::atomic<int64_t> ok{0};
  std::atomic<int> other{0};
  std::vector<float> row(Hkv * D, 0.25f);
  threads.clear();
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        try {
          cache.append(shared, TensorView::dense(row.data(), {1, Hkv, 1, D}),
                       TensorView::dense(row.data(), {1, Hkv, 1, D}));
          ++ok;
        } catch (const Error& e) {
          if (e.code() != ErrorCode::concurrent_use) ++other;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(cache.length(shared), 40 + ok.load());
  EXPECT_EQ(cache.blocks(shared), (cache.length(shared) + 15) / 16);
}

// "No per-call allocation on the hot path once warm": a continuous-batching step (decodes, one with
// a split-K range, and a prompt chunk) repeated from the same state allocates nothing — not the
// cache, the executor, the scheduler nor the kernels.
TEST(PagedAttentionMemory, WarmStepAllocatesNothing) {
  constexpr int64_t Hq = 8, Hkv = 2, D = 64;
  for (DType dtype : {DType::f32, DType::bf16, DType::i8}) {  // (i8: the append quantises in place)
    PagedKVCache cache({Hkv, D, 512, 32, dtype});
    History hist{Hkv, D, dtype, {}, {}};
    std::mt19937 rng(12);
    const int64_t a = cache.create_sequence(), b = cache.create_sequence(), c = cache.create_sequence();
    append_random(cache, hist, rng, a, 4500);  // f32/bf16: 2 key ranges
    append_random(cache, hist, rng, b, 40);
    append_random(cache, hist, rng, c, 100);
    const std::vector<SequenceChunk> step = {{a, 1}, {b, 1}, {c, 64}};
    Packed p(rng, 66, Hq, Hkv, D);
    auto run = [&] {
      paged_attention(p.qv(), p.kv(), p.vv(), cache, step, p.ov());
      cache.truncate(a, 4500);
      cache.truncate(b, 40);
      cache.truncate(c, 100);
    };
    run();  // warm: workspace, per-thread buffers, block tables
    run();
    allocations = 0;
    counting = true;
    for (int i = 0; i < 3; ++i) run();
    counting = false;
    EXPECT_EQ(allocations.load(), 0) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace attend::testing
