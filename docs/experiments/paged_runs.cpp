// Session 63: where PagedKVCache puts the serving trace's sequences. Builds the pool of
// bench/serve_bench.cpp's paged worlds (the same trace: seed, log-normal lengths, pool sized to
// the trace) the way the bench fills them — interleaved 512-token pieces, or "grown" (prompt
// halves in 256-token chunks, then a token at a time, round robin) — and prints how the
// sequences' blocks fall into runs of adjacent blocks (a decode step reads one run per head as one
// stream). Not built by the project. From the repository root after a build:
//   g++ -std=c++20 -O2 -I. -Iinclude -Ibuild/runtime/include docs/experiments/paged_runs.cpp \
//       -o /tmp/paged_runs build/lib/libattend_core.a -lnuma -fopenmp
//   /tmp/paged_runs [block_tokens]
#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "runtime/api/paged_kv_cache_access.hpp"

using namespace attend;

namespace {
constexpr int64_t kHkv = 8, kD = 128, kSeqs = 32, kDecoders = kSeqs - 1, kChunk = 256, kSteps = 8, kMaxLen = 8192;

struct Trace {  // bench/serve_bench.cpp's Trace::make
  std::vector<int64_t> lengths, prompts;
  int64_t last_length = 0, prompt_blocks_tokens = 0;
  Trace() {
    std::mt19937 rng(20261123);
    std::lognormal_distribution<double> draw(std::log(1000.0), 1.0);
    auto length = [&](int64_t hi) {
      return std::max<int64_t>(16, std::min<int64_t>(hi, static_cast<int64_t>(std::llround(draw(rng)))));
    };
    for (int64_t i = 0; i < kDecoders; ++i) lengths.push_back(length(kMaxLen - kSteps));
    last_length = length(kMaxLen - 1);
    int64_t steps = 0;
    while (steps < kSteps) {
      const int64_t p = (length(kMaxLen) + kChunk - 1) / kChunk * kChunk;
      prompts.push_back(std::min(p, kMaxLen));
      for (int64_t s = 0; s < prompts.back() && steps < kSteps; s += kChunk, ++steps)
        prompt_blocks_tokens = std::max(prompt_blocks_tokens, s + kChunk);
    }
  }
};

void report(const char* name, PagedKVCache& cache, const std::vector<int64_t>& seqs, int64_t bt) {
  int64_t runs = 0, tokens = 0, weighted = 0, short_runs = 0, min_run = 1 << 30;
  std::vector<int64_t> all;
  for (int64_t s : seqs) {
    const auto t = detail::PagedKVCacheAccess::block_table(cache, s);
    const int64_t len = cache.length(s);
    for (size_t i = 0; i < t.size();) {
      size_t j = i + 1;
      while (j < t.size() && t[j] == t[j - 1] + 1) ++j;
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(j - i) * bt, len - static_cast<int64_t>(i) * bt);
      ++runs;
      tokens += n;
      weighted += n * n;
      all.push_back(n);
      if (j < t.size()) {  // an interior run (not a sequence's last)
        min_run = std::min(min_run, n);
        if (n < 512) ++short_runs;
      }
      i = j;
    }
  }
  std::sort(all.begin(), all.end());
  std::printf(
      "%-8s runs %4lld for %lld sequences, token-weighted mean run %6.0f tokens, median run %5lld, "
      "interior runs < 512 tokens: %lld (shortest %lld)\n",
      name, static_cast<long long>(runs), static_cast<long long>(seqs.size()),
      static_cast<double>(weighted) / static_cast<double>(tokens), static_cast<long long>(all[all.size() / 2]),
      static_cast<long long>(short_runs), static_cast<long long>(min_run == (1 << 30) ? 0 : min_run));
}

void world(const Trace& t, int64_t bt, bool grown) {
  auto blocks_for = [&](int64_t n) { return (n + bt - 1) / bt; };
  int64_t blocks = 0;
  for (int64_t l : t.lengths) blocks += blocks_for(l + kSteps);
  blocks += blocks_for(t.last_length + 1);
  blocks += static_cast<int64_t>(t.prompts.size()) * blocks_for(t.prompt_blocks_tokens);
  PagedKVCache cache(PagedKVCacheConfig{kHkv, kD, blocks, bt, DType::f32});
  std::vector<int64_t> seqs;
  for (int64_t i = 0; i <= kDecoders; ++i) seqs.push_back(cache.create_sequence());
  auto length_of = [&](int64_t i) { return i < kDecoders ? t.lengths[static_cast<size_t>(i)] : t.last_length; };
  std::vector<float> kv(static_cast<size_t>(kChunk * 2 * kHkv * kD), 0.5f);
  auto fill = [&](int64_t piece, auto until) {
    for (bool more = true; more;) {
      more = false;
      for (int64_t i = 0; i <= kDecoders; ++i) {
        const int64_t done = cache.length(seqs[static_cast<size_t>(i)]);
        const int64_t n = std::min<int64_t>(piece, until(i) - done);
        if (n <= 0) continue;
        for (int64_t at = 0; at < n; at += kChunk) {  // (the rows' values do not matter here)
          const int64_t m = std::min<int64_t>(kChunk, n - at);
          const TensorView x(kv.data(), {1, kHkv, m, kD}, {0, kD, kHkv * kD, 1});
          cache.append(seqs[static_cast<size_t>(i)], x, x);
        }
        more = true;
      }
    }
  };
  if (grown) {
    fill(kChunk, [&](int64_t i) { return length_of(i) / 2 / kChunk * kChunk; });
    fill(1, length_of);
  } else {
    fill(512, length_of);
  }
  std::printf("block_tokens %lld, pool %lld blocks, %lld free after the fill\n", static_cast<long long>(bt),
              static_cast<long long>(blocks), static_cast<long long>(cache.free_blocks()));
  report(grown ? "grown" : "pieces", cache, seqs, bt);
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t bt = argc > 1 ? std::atoll(argv[1]) : 32;
  const Trace t;
  world(t, bt, false);
  world(t, bt, true);
}
