// serve/<impl>: a continuous-batching trace at the Llama-3-8B attention shape (32 query heads,
// 8 kv heads, head_dim 128). 32 sequences whose context lengths are drawn log-normally (fixed seed;
// median ~1,000, at most 8,192): each step decodes one token for 31 of them while the 32nd prefills
// a 256-token chunk of a new prompt (prompts follow one another, lengths drawn the same way and
// rounded up to whole chunks). One iteration runs the trace's kSteps steps from the same state
// (the sequences are truncated back, untimed, between iterations).
//   serve/paged-f32, serve/paged-bf16  one paged_attention call per step over a PagedKVCache
//   serve/slots-f32                    the slot KVCache: one cached_attention call per distinct
//                                      token count (the 31 decodes, the prompt chunk)
//   serve/onednn                       the unfused oneDNN baseline, one call per sequence, over a
//                                      dense f32 cache per sequence
//   serve/paged-f32-decode, serve/slots-f32-decode
//                                      one decode step of all 32 sequences, paired with a plain
//                                      read of their K/V bytes (stream_pct); the paged-f32-decode*
//                                      entries also with the slot cache's step run right before
//                                      each of their steps (slots_paired: slot time / paged time)
//   serve/paged-f32-decode-grown       the same step over histories grown as a server grows them:
//                                      prompt chunks, then a token at a time side by side
// Counters: tokens_per_s (new tokens of the trace per second), pool_MiB / slots_MiB (the cache's
// storage; slots_MiB is a slot cache with a slot per sequence sized for the longest one),
// mem_vs_slots_pct, used_peak_MiB (blocks held at the end of the trace), mixed_ratio (paged-f32:
// a mixed step's time over the prompt chunk alone plus the decodes alone, same state, same run),
// vs_slots_paired, prefill_vs_slots_paired, decode_vs_slots_paired (paged-f32: the slot cache's
// trace, prompt chunks and decodes over paged's, each iteration's passes run back to back; > 1
// means paged is faster).
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "onednn_sdpa.hpp"

namespace attend::bench {
namespace {

constexpr int64_t kHq = 32, kHkv = 8, kD = 128, kSeqs = 32, kDecoders = kSeqs - 1, kChunk = 256, kSteps = 8;
constexpr int64_t kMaxLen = 8192;
constexpr int64_t kBlockTokens = 32;  // the trace's block size (PagedKVCacheConfig's default)

struct Trace {
  std::vector<int64_t> lengths;  // the decoders' lengths at the start of the trace (kDecoders)
  int64_t last_length = 0;       // the 32nd sequence's (decode-only entries)
  struct Step {
    int64_t prompt;  // index into prompts
    int64_t start;   // tokens of the prompt before this chunk
  };
  std::vector<int64_t> prompts;  // prompt lengths (multiples of kChunk)
  std::vector<Step> steps;
  int64_t longest = 0;  // the longest any sequence gets

  static const Trace& get() {
    static const Trace t = make();
    return t;
  }
  static Trace make() {
    Trace t;
    std::mt19937 rng(20261123);
    std::lognormal_distribution<double> draw(std::log(1000.0), 1.0);
    auto length = [&](int64_t hi) {
      return std::max<int64_t>(16, std::min<int64_t>(hi, static_cast<int64_t>(std::llround(draw(rng)))));
    };
    for (int64_t i = 0; i < kDecoders; ++i) t.lengths.push_back(length(kMaxLen - kSteps));
    t.last_length = length(kMaxLen - 1);
    while (static_cast<int64_t>(t.steps.size()) < kSteps) {
      const int64_t p = (length(kMaxLen) + kChunk - 1) / kChunk * kChunk;
      t.prompts.push_back(std::min(p, kMaxLen));
      for (int64_t s = 0; s < t.prompts.back() && static_cast<int64_t>(t.steps.size()) < kSteps; s += kChunk)
        t.steps.push_back({static_cast<int64_t>(t.prompts.size()) - 1, s});
    }
    for (int64_t l : t.lengths) t.longest = std::max(t.longest, l + kSteps);
    t.longest = std::max(t.longest, t.last_length + 1);
    for (const Step& s : t.steps) t.longest = std::max(t.longest, s.start + kChunk);
    return t;
  }
  int64_t decoder_tokens() const {
    int64_t n = 0;
    for (int64_t l : lengths) n += l;
    return n;
  }
};

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }
size_t elem_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

// A slot cache with one slot per sequence sized for the longest: what the paged pool is compared to.
size_t slots_bytes(DType t) {
  return 2 * static_cast<size_t>(kSeqs * kHkv * round16(Trace::get().longest) * kD) * elem_bytes(t);
}

// Token-major random K/V rows to prefill from: [kMaxLen][kHkv][kD].
const std::vector<float>& source_kv() {
  static const std::vector<float> s = [] {
    std::vector<float> v(static_cast<size_t>(kMaxLen * kHkv * kD));
    fill(v, 31);
    return v;
  }();
  return s;
}
TensorView source_view(int64_t first, int64_t n) {
  return TensorView(source_kv().data() + first * kHkv * kD, {1, kHkv, n, kD}, {0, kD, kHkv * kD, 1});
}

// One step's new rows, token-major: q [T][kHq][kD], k/v [T][kHkv][kD] for T = decoders + chunk.
struct StepData {
  int64_t T = kDecoders + kChunk;
  std::vector<float> q, k, v, o;
  StepData() {
    q.resize(static_cast<size_t>(T * kHq * kD));
    k.resize(static_cast<size_t>(T * kHkv * kD));
    v.resize(k.size());
    o.resize(q.size());
    fill(q, 41);
    fill(k, 42);
    fill(v, 43);
  }
  // Rows [first, first + n) as [1, H, n, D] views.
  TensorView qv(int64_t first, int64_t n) const {
    return TensorView(q.data() + first * kHq * kD, {1, kHq, n, kD}, {0, kD, kHq * kD, 1});
  }
  TensorView kv(int64_t first, int64_t n) const {
    return TensorView(k.data() + first * kHkv * kD, {1, kHkv, n, kD}, {0, kD, kHkv * kD, 1});
  }
  TensorView vv(int64_t first, int64_t n) const {
    return TensorView(v.data() + first * kHkv * kD, {1, kHkv, n, kD}, {0, kD, kHkv * kD, 1});
  }
  TensorView ov(int64_t first, int64_t n) {
    return TensorView(o.data() + first * kHq * kD, {1, kHq, n, kD}, {0, kD, kHq * kD, 1});
  }
  static StepData& get() {
    static StepData d;
    return d;
  }
};

// ---------------------------------------------------------------------------------------------
// Paged: the decoders' sequences (prefilled once), prompts created per pass and released after.

struct PagedWorld {
  std::unique_ptr<PagedKVCache> cache;
  std::vector<int64_t> decoders;
  int64_t last = -1;  // the 32nd sequence (decode-only entries)

  // grown: each sequence's history as a server builds it — its first half (the prompt, whole
  // 256-token chunks) in chunks interleaved across the sequences, then the rest a token at a time,
  // round robin (generation: every sequence takes its next block while the others take theirs).
  // Otherwise in interleaved 512-token pieces.
  PagedWorld(DType dtype, int64_t block_tokens, bool grown) {
    const Trace& t = Trace::get();
    int64_t blocks = 0;
    auto blocks_for = [&](int64_t n) { return (n + block_tokens - 1) / block_tokens; };
    for (int64_t l : t.lengths) blocks += blocks_for(l + kSteps);
    blocks += blocks_for(t.last_length + 1);
    int64_t prompt_blocks = 0;
    for (const Trace::Step& s : t.steps)
      prompt_blocks = std::max(prompt_blocks, blocks_for(s.start + kChunk));  // upper bound per prompt
    blocks += static_cast<int64_t>(t.prompts.size()) * prompt_blocks;
    cache = std::make_unique<PagedKVCache>(PagedKVCacheConfig{kHkv, kD, blocks, block_tokens, dtype});
    for (int64_t i = 0; i < kDecoders; ++i) decoders.push_back(cache->create_sequence());
    last = cache->create_sequence();
    auto seq_of = [&](int64_t i) { return i < kDecoders ? decoders[static_cast<size_t>(i)] : last; };
    auto length_of = [&](int64_t i) { return i < kDecoders ? t.lengths[static_cast<size_t>(i)] : t.last_length; };
    auto fill = [&](int64_t piece, auto until) {  // round robin, `piece` tokens per turn, up to until(i)
      for (bool more = true; more;) {
        more = false;
        for (int64_t i = 0; i <= kDecoders; ++i) {
          const int64_t done = cache->length(seq_of(i)), n = std::min<int64_t>(piece, until(i) - done);
          if (n <= 0) continue;
          cache->append(seq_of(i), source_view(done, n), source_view(done, n));
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
  }
  static PagedWorld& get(DType dtype, int64_t block_tokens = kBlockTokens, bool grown = false) {
    static std::map<std::tuple<DType, int64_t, bool>, std::unique_ptr<PagedWorld>> worlds;
    auto& w = worlds[{dtype, block_tokens, grown}];
    if (!w) w = std::make_unique<PagedWorld>(dtype, block_tokens, grown);
    return *w;
  }
};

enum class Part { mixed, prefill, decode };

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Runs the trace over a paged world; returns the seconds of the timed calls. `part` selects what
// each step computes: everything in one call, or only its prompt chunk / only its decodes.
double paged_pass(PagedWorld& w, Part part, size_t* used_peak) {
  const Trace& t = Trace::get();
  StepData& d = StepData::get();
  PagedKVCache& cache = *w.cache;
  std::vector<int64_t> prompt_ids(t.prompts.size(), -1);
  std::vector<SequenceChunk> chunks;
  double seconds = 0.0;
  for (const Trace::Step& s : t.steps) {
    int64_t& id = prompt_ids[static_cast<size_t>(s.prompt)];
    if (id < 0) id = cache.create_sequence();
    chunks.clear();
    if (part != Part::prefill)
      for (int64_t seq : w.decoders) chunks.push_back({seq, 1});
    if (part != Part::decode) chunks.push_back({id, kChunk});
    const int64_t T = (part != Part::prefill ? kDecoders : 0) + (part != Part::decode ? kChunk : 0);
    const int64_t at = part == Part::prefill ? kDecoders : 0;  // the same rows in every variant
    const auto t0 = std::chrono::steady_clock::now();
    paged_attention(d.qv(at, T), d.kv(at, T), d.vv(at, T), cache, chunks, d.ov(at, T));
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (used_peak) *used_peak = cache.used_bytes();
  // Back to the trace's start.
  for (size_t i = 0; i < w.decoders.size(); ++i) cache.truncate(w.decoders[i], t.lengths[i]);
  for (int64_t id : prompt_ids)
    if (id >= 0) cache.release(id);
  return seconds;
}

// ---------------------------------------------------------------------------------------------
// Slots: slot i < 31 a decoder, slot 31 the current prompt, slot 32 the decode-only entries' 32nd.

struct SlotWorld {
  std::unique_ptr<KVCache> cache;
  SlotWorld() {
    const Trace& t = Trace::get();
    cache = std::make_unique<KVCache>(KVCacheConfig{kHkv, kD, kSeqs + 1, t.longest, DType::f32});
    for (int64_t i = 0; i <= kDecoders; ++i) {
      const int64_t slot = i < kDecoders ? i : kSeqs;
      const int64_t len = i < kDecoders ? t.lengths[static_cast<size_t>(i)] : t.last_length;
      cache->append(slot, source_view(0, len), source_view(0, len));
    }
  }
  static SlotWorld& get() {
    static SlotWorld w;
    return w;
  }
};

// parts (optional): seconds of the prompt chunks' calls and of the decodes' calls.
double slots_pass(SlotWorld& w, double* parts = nullptr) {
  const Trace& t = Trace::get();
  StepData& d = StepData::get();
  KVCache& cache = *w.cache;
  std::vector<int64_t> dec(kDecoders);
  for (int64_t i = 0; i < kDecoders; ++i) dec[static_cast<size_t>(i)] = i;
  const int64_t prompt_slot[1] = {kDecoders};
  // The decodes as [31, H, 1, D] (token-major rows are the batch), the chunk as [1, H, 256, D].
  const TensorView q_dec(d.q.data(), {kDecoders, kHq, 1, kD}, {kHq * kD, kD, kHq * kD, 1});
  const TensorView k_dec(d.k.data(), {kDecoders, kHkv, 1, kD}, {kHkv * kD, kD, kHkv * kD, 1});
  const TensorView v_dec(d.v.data(), {kDecoders, kHkv, 1, kD}, {kHkv * kD, kD, kHkv * kD, 1});
  const TensorView o_dec(d.o.data(), {kDecoders, kHq, 1, kD}, {kHq * kD, kD, kHq * kD, 1});
  double seconds = 0.0;
  int64_t prompt = -1;
  for (const Trace::Step& s : t.steps) {
    if (s.prompt != prompt) {
      cache.reset(kDecoders);
      prompt = s.prompt;
    }
    const auto t0 = std::chrono::steady_clock::now();
    cached_attention(q_dec, k_dec, v_dec, cache, dec, o_dec);
    const auto t1 = std::chrono::steady_clock::now();
    cached_attention(d.qv(kDecoders, kChunk), d.kv(kDecoders, kChunk), d.vv(kDecoders, kChunk), cache, prompt_slot,
                     d.ov(kDecoders, kChunk));
    const auto t2 = std::chrono::steady_clock::now();
    seconds += std::chrono::duration<double>(t2 - t0).count();
    if (parts) {
      parts[0] += std::chrono::duration<double>(t2 - t1).count();
      parts[1] += std::chrono::duration<double>(t1 - t0).count();
    }
  }
  for (int64_t i = 0; i < kDecoders; ++i) cache.truncate(i, t.lengths[static_cast<size_t>(i)]);
  cache.reset(kDecoders);
  return seconds;
}

// The prompt-only and decode-only passes advance only their own sequences, so the decodes of a
// decode-only pass see the same lengths as in the mixed pass, and the prompt chunks the same.
// paged-f32 also runs the slot cache's trace in every iteration, right after its own passes: the
// machine's memory bandwidth moves between states for seconds at a time (docs/performance.md),
// so entries timed apart can differ by 30% on the same code; ratios of passes run back to back
// are what compare the two caches.
void bm_paged(benchmark::State& state, DType dtype) {
  PagedWorld& w = PagedWorld::get(dtype);
  size_t used = 0;
  paged_pass(w, Part::mixed, &used);  // warm-up: workspaces, first touch of the blocks
  const bool split = dtype == DType::f32;
  if (split) {
    paged_pass(w, Part::prefill, nullptr);
    paged_pass(w, Part::decode, nullptr);
  }
  SlotWorld* slots = split ? &SlotWorld::get() : nullptr;
  if (slots) slots_pass(*slots);
  std::vector<double> ratios, pres, decs, vs_trace, vs_pre, vs_dec;
  for (auto _ : state) {
    const double mixed = paged_pass(w, Part::mixed, &used);
    set_iteration_time(state, mixed);
    if (split) {
      const double pre = paged_pass(w, Part::prefill, nullptr), dec = paged_pass(w, Part::decode, nullptr);
      ratios.push_back(mixed / (pre + dec));
      pres.push_back(pre);
      decs.push_back(dec);
      double parts[2] = {0.0, 0.0};
      const double slot = slots_pass(*slots, parts);
      vs_trace.push_back(slot / mixed);
      vs_pre.push_back(parts[0] / pre);
      vs_dec.push_back(parts[1] / dec);
    }
  }
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(kSteps * (kDecoders + kChunk)),
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pool_MiB"] = static_cast<double>(w.cache->memory_bytes()) / (1 << 20);
  state.counters["used_peak_MiB"] = static_cast<double>(used) / (1 << 20);
  state.counters["slots_MiB"] = static_cast<double>(slots_bytes(dtype)) / (1 << 20);
  state.counters["mem_vs_slots_pct"] = 100.0 * static_cast<double>(w.cache->memory_bytes()) / slots_bytes(dtype);
  state.counters["workspace_MiB"] = static_cast<double>(Context::default_context().peak_workspace_bytes()) / (1 << 20);
  if (!ratios.empty()) {
    state.counters["mixed_ratio"] = median(ratios);
    state.counters["prefill_ms"] = 1e3 * median(pres);  // the trace's prompt chunks alone
    state.counters["decode_ms"] = 1e3 * median(decs);   // its decodes alone
    // The slot cache's time over paged's, per iteration, back to back (> 1: paged is faster).
    state.counters["vs_slots_paired"] = median(vs_trace);
    state.counters["prefill_vs_slots_paired"] = median(vs_pre);
    state.counters["decode_vs_slots_paired"] = median(vs_dec);
  }
}

void bm_slots(benchmark::State& state) {
  SlotWorld& w = SlotWorld::get();
  slots_pass(w);
  std::vector<double> pres, decs;
  for (auto _ : state) {
    double parts[2] = {0.0, 0.0};
    set_iteration_time(state, slots_pass(w, parts));
    pres.push_back(parts[0]);
    decs.push_back(parts[1]);
  }
  state.counters["prefill_ms"] = 1e3 * median(pres);
  state.counters["decode_ms"] = 1e3 * median(decs);
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(kSteps * (kDecoders + kChunk)),
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["slots_MiB"] = static_cast<double>(slots_bytes(DType::f32)) / (1 << 20);
}

// ---------------------------------------------------------------------------------------------
// oneDNN: a dense f32 cache per sequence ([kHkv][capacity][kD]), one SDPA call per sequence per
// step (primitives for every shape of the trace created in the warm-up pass).

struct OnednnWorld {
  std::vector<std::vector<float>> k, v;  // per decoder, then one for the prompt
  std::vector<int64_t> cap;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<OnednnSdpa>> prims;  // (Nq, Nk, capacity)
  OnednnWorld() {
    const Trace& t = Trace::get();
    for (int64_t i = 0; i <= kDecoders; ++i) {
      const int64_t c = i < kDecoders ? t.lengths[static_cast<size_t>(i)] + kSteps : t.longest;
      cap.push_back(c);
      k.emplace_back(static_cast<size_t>(kHkv * c * kD));
      v.emplace_back(k.back().size());
      if (i < kDecoders)
        for (int64_t h = 0; h < kHkv; ++h)
          for (int64_t j = 0; j < t.lengths[static_cast<size_t>(i)]; ++j) {
            const float* src = source_kv().data() + (j * kHkv + h) * kD;
            std::memcpy(&k.back()[static_cast<size_t>((h * c + j) * kD)], src, sizeof(float) * kD);
            std::memcpy(&v.back()[static_cast<size_t>((h * c + j) * kD)], src, sizeof(float) * kD);
          }
    }
  }
  OnednnSdpa& prim(int64_t nq, int64_t nk, int64_t c) {
    auto& p = prims[{nq, nk, c}];
    if (!p) p = std::make_unique<OnednnSdpa>(SdpaShape{1, kHq, kHkv, nq, nk, kD, nq > 1, c * kD});
    return *p;
  }
  static OnednnWorld& get() {
    static OnednnWorld w;
    return w;
  }
};

double onednn_pass(OnednnWorld& w) {
  const Trace& t = Trace::get();
  StepData& d = StepData::get();
  // q/o of a sequence as dense [1, H, n, D]: copied per call out of the token-major step rows, as an
  // unfused pipeline would lay them out (timed: part of the baseline's cost).
  static std::vector<float> q(static_cast<size_t>(kHq * kChunk * kD)), o(q.size());
  double seconds = 0.0;
  for (size_t step = 0; step < t.steps.size(); ++step) {
    const Trace::Step& s = t.steps[step];
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i <= kDecoders; ++i) {
      const bool prompt = i == kDecoders;
      const int64_t n = prompt ? kChunk : 1;
      const int64_t len = prompt ? s.start : t.lengths[static_cast<size_t>(i)] + static_cast<int64_t>(step);
      const int64_t c = w.cap[static_cast<size_t>(i)];
      const int64_t row0 = prompt ? kDecoders : i;
      float* kc = w.k[static_cast<size_t>(i)].data();
      float* vc = w.v[static_cast<size_t>(i)].data();
      for (int64_t tok = 0; tok < n; ++tok) {
        for (int64_t h = 0; h < kHkv; ++h) {  // append
          std::memcpy(kc + (h * c + len + tok) * kD, d.k.data() + ((row0 + tok) * kHkv + h) * kD, sizeof(float) * kD);
          std::memcpy(vc + (h * c + len + tok) * kD, d.v.data() + ((row0 + tok) * kHkv + h) * kD, sizeof(float) * kD);
        }
        for (int64_t h = 0; h < kHq; ++h)
          std::memcpy(q.data() + (h * n + tok) * kD, d.q.data() + ((row0 + tok) * kHq + h) * kD, sizeof(float) * kD);
      }
      w.prim(n, len + n, c).run(q.data(), kc, vc, o.data());
      for (int64_t tok = 0; tok < n; ++tok)
        for (int64_t h = 0; h < kHq; ++h)
          std::memcpy(d.o.data() + ((row0 + tok) * kHq + h) * kD, o.data() + (h * n + tok) * kD, sizeof(float) * kD);
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

void bm_onednn(benchmark::State& state) {
  OnednnWorld& w = OnednnWorld::get();
  onednn_pass(w);
  for (auto _ : state) set_iteration_time(state, onednn_pass(w));
  state.counters["tokens_per_s"] = benchmark::Counter(static_cast<double>(kSteps * (kDecoders + kChunk)),
                                                      benchmark::Counter::kIsIterationInvariantRate);
}

// ---------------------------------------------------------------------------------------------
// Decode only: one token for each of the 32 sequences, against a plain read of their K/V bytes where
// they lie in the cache (timed_loop_vs_own_bytes).

void decode_counters(benchmark::State& state) {
  const Trace& t = Trace::get();
  const double bytes = 2.0 * 4 * static_cast<double>((t.decoder_tokens() + kDecoders + t.last_length + 1) * kHkv * kD);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(kSeqs), benchmark::Counter::kIsIterationInvariantRate);
}

// The slot cache's decode step over the 32 sequences (slots 0…30 and 32): one cached_attention
// call, after restore() puts the sequences back at the trace's lengths.
struct SlotsDecode {
  SlotWorld& w = SlotWorld::get();
  StepData& d = StepData::get();
  std::vector<int64_t> seqs;
  TensorView q, k, v, o;
  SlotsDecode()
      : q(d.q.data(), {kSeqs, kHq, 1, kD}, {kHq * kD, kD, kHq * kD, 1}),
        k(d.k.data(), {kSeqs, kHkv, 1, kD}, {kHkv * kD, kD, kHkv * kD, 1}),
        v(d.v.data(), {kSeqs, kHkv, 1, kD}, {kHkv * kD, kD, kHkv * kD, 1}),
        o(d.o.data(), {kSeqs, kHq, 1, kD}, {kHq * kD, kD, kHq * kD, 1}) {
    for (int64_t i = 0; i < kDecoders; ++i) seqs.push_back(i);
    seqs.push_back(kSeqs);
  }
  void restore() {
    const Trace& t = Trace::get();
    for (int64_t i = 0; i < kDecoders; ++i) w.cache->truncate(i, t.lengths[static_cast<size_t>(i)]);
    w.cache->truncate(kSeqs, t.last_length);
  }
  void step() { cached_attention(q, k, v, *w.cache, seqs, o); }
};

double seconds_of(auto&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// slots_paired: before each paged step (untimed, in its prepare) the slot cache's step over the
// same sequences runs from evicted caches too, so each paged step has a slot step timed just before
// it; the counter is the median of slot time / paged time — the paged cache's bandwidth relative to
// the slot cache's on the same bytes (1 = paging costs nothing), free of the machine's bandwidth
// moving between entries. (stream_pct compares each with a read of its own storage, and the two
// storages read at different speeds: the paged pool is compact, the slots leave each slot's unused
// capacity between sequences.)
void bm_paged_decode(benchmark::State& state, int64_t block_tokens, bool grown = false) {
  PagedWorld& w = PagedWorld::get(DType::f32, block_tokens, grown);
  StepData& d = StepData::get();
  std::vector<SequenceChunk> chunks;
  for (int64_t seq : w.decoders) chunks.push_back({seq, 1});
  chunks.push_back({w.last, 1});
  const Trace& t = Trace::get();
  auto restore = [&] {
    if (w.cache->length(w.last) == t.last_length) return;
    for (size_t i = 0; i < w.decoders.size(); ++i) w.cache->truncate(w.decoders[i], t.lengths[i]);
    w.cache->truncate(w.last, t.last_length);
  };
  restore();
  std::vector<int64_t> seqs;
  for (const SequenceChunk& c : chunks) seqs.push_back(c.seq);
  SlotsDecode slots;
  slots.restore();
  const Evict slot_bytes = evict_cache(*slots.w.cache, slots.seqs);
  std::vector<double> slot_s, paged_s;  // [i]: the i-th slot step, the i-th paged step (0: warm-up)
  timed_loop_vs_own_bytes(
      state, evict_cache(*w.cache, seqs),
      [&] {
        restore();
        slots.restore();
        slot_bytes();
        slot_s.push_back(seconds_of([&] { slots.step(); }));
      },
      [&] {
        paged_s.push_back(seconds_of([&] {
          paged_attention(d.qv(0, kSeqs), d.kv(0, kSeqs), d.vv(0, kSeqs), *w.cache, chunks, d.ov(0, kSeqs));
        }));
      });
  for (size_t i = 0; i < w.decoders.size(); ++i) w.cache->truncate(w.decoders[i], t.lengths[i]);
  w.cache->truncate(w.last, t.last_length);
  slots.restore();
  std::vector<double> r;
  for (size_t i = 1; i < slot_s.size() && i < paged_s.size(); ++i) r.push_back(slot_s[i] / paged_s[i]);
  if (!r.empty()) state.counters["slots_paired"] = median(r);
  decode_counters(state);
}

void bm_slots_decode(benchmark::State& state) {
  SlotsDecode s;
  s.restore();
  timed_loop_vs_own_bytes(
      state, evict_cache(*s.w.cache, s.seqs), [&] { s.restore(); }, [&] { s.step(); });
  s.restore();
  decode_counters(state);
}

}  // namespace

void register_serve_benchmarks() {
  auto reg = [](const char* name, auto fn) { register_entry(name, fn, 3); };
  reg("serve/paged-f32", [](benchmark::State& s) { bm_paged(s, DType::f32); });
  reg("serve/paged-bf16", [](benchmark::State& s) { bm_paged(s, DType::bf16); });
  reg("serve/slots-f32", [](benchmark::State& s) { bm_slots(s); });
  reg("serve/onednn", [](benchmark::State& s) { bm_onednn(s); });
  auto reg_decode = [](const char* name, auto fn) { register_entry(name, fn); };
  reg_decode("serve/paged-f32-decode", [](benchmark::State& s) { bm_paged_decode(s, kBlockTokens); });
  reg_decode("serve/slots-f32-decode", [](benchmark::State& s) { bm_slots_decode(s); });
  // The same sequences with histories grown as a server grows them (PagedWorld's `grown`).
  reg_decode("serve/paged-f32-decode-grown",
             [](benchmark::State& s) { bm_paged_decode(s, kBlockTokens, /*grown=*/true); });
  // The same decode step over pools of larger blocks: what the block size costs in bandwidth.
  for (int64_t bt : {64, 128, 256})
    reg_decode(("serve/paged-f32-decode-b" + std::to_string(bt)).c_str(),
               [bt](benchmark::State& s) { bm_paged_decode(s, bt); });
}

void print_serve_summary(const SummaryReporter& rep, FILE* out) {
  const auto* paged = rep.find("serve/paged-f32");
  if (!paged) return;
  const auto *bf16 = rep.find("serve/paged-bf16"), *slots = rep.find("serve/slots-f32"),
             *dnn = rep.find("serve/onednn"), *pd = rep.find("serve/paged-f32-decode"),
             *sd = rep.find("serve/slots-f32-decode");
  const Trace& t = Trace::get();
  const double tokens = static_cast<double>(kSteps * (kDecoders + kChunk));
  std::fprintf(out,
               "\nServing trace (Llama-3-8B attention: 32 q heads, 8 kv heads, D 128; %lld steps of 31 decodes + a "
               "256-token prompt chunk; decoder lengths median %lld, longest %lld; medians)\n",
               static_cast<long long>(kSteps), static_cast<long long>([&] {
                 std::vector<int64_t> l = t.lengths;
                 std::sort(l.begin(), l.end());
                 return l[l.size() / 2];
               }()),
               static_cast<long long>(t.longest));
  std::fprintf(out, "%-18s %10s %12s %10s %11s %10s\n", "impl", "trace ms", "tokens/s", "vs slots", "prefill ms",
               "decode ms");
  auto row = [&](const char* name, const SummaryReporter::Entry* e) {
    if (!e) return;
    std::fprintf(out, "%-18s %10.2f %12.0f %9.2fx %11.2f %10.2f\n", name, e->seconds * 1e3, tokens / e->seconds,
                 slots ? slots->seconds / e->seconds : 0.0, e->counter("prefill_ms"), e->counter("decode_ms"));
  };
  row("paged-f32", paged);
  row("paged-bf16", bf16);
  row("slots-f32", slots);
  row("onednn", dnn);
  if (paged->counter("mixed_ratio") > 0)
    std::fprintf(out,
                 "paged-f32: a mixed step takes %.3fx the prompt chunk alone plus the decodes alone; pool %.0f MiB "
                 "(%.1f%% of %.0f MiB for slots sized for the longest), %.0f MiB held at the trace's end\n",
                 paged->counter("mixed_ratio"), paged->counter("pool_MiB"), paged->counter("mem_vs_slots_pct"),
                 paged->counter("slots_MiB"), paged->counter("used_peak_MiB"));
  if (paged->counter("vs_slots_paired") > 0)
    std::fprintf(out,
                 "paged-f32 against slots-f32 run back to back in each iteration (slots time / paged time, median; "
                 "robust to the machine's bandwidth states): trace %.3fx, prompt chunks %.3fx, decodes %.3fx\n",
                 paged->counter("vs_slots_paired"), paged->counter("prefill_vs_slots_paired"),
                 paged->counter("decode_vs_slots_paired"));
  if (pd && sd && sd->stream_pct > 0) {
    // Bandwidth relative to the slot cache from the paired figures (each entry's share of a plain read
    // timed right after it), which hold when the machine's bandwidth moves between entries.
    std::fprintf(out,
                 "decode step of 32 (share of a plain read; relative to the slot cache): slots %.3f ms %.1f%%; "
                 "paged, %lld-token blocks: %.3f ms %.1f%% (%.2f)",
                 sd->seconds * 1e3, sd->stream_pct, static_cast<long long>(kBlockTokens), pd->seconds * 1e3,
                 pd->stream_pct, pd->stream_pct / sd->stream_pct);
    for (int64_t bt : {64, 128, 256})
      if (const auto* e = rep.find("serve/paged-f32-decode-b" + std::to_string(bt)))
        std::fprintf(out, "; %lld: %.1f%% (%.2f)", static_cast<long long>(bt), e->stream_pct,
                     e->stream_pct / sd->stream_pct);
    if (const auto* e = rep.find("serve/paged-f32-decode-grown"))
      std::fprintf(out, "; grown a token at a time: %.1f%% (%.2f)", e->stream_pct, e->stream_pct / sd->stream_pct);
    std::fprintf(out, "\n");
  }
  if (pd && pd->counter("slots_paired") > 0) {
    std::fprintf(out,
                 "decode step of 32, the slot cache's step timed right before each paged one (slots time / paged "
                 "time, median: the paged cache's bandwidth relative to the slot cache's on the same bytes): "
                 "%lld-token blocks %.3f",
                 static_cast<long long>(kBlockTokens), pd->counter("slots_paired"));
    for (int64_t bt : {64, 128, 256})
      if (const auto* e = rep.find("serve/paged-f32-decode-b" + std::to_string(bt)))
        std::fprintf(out, "; %lld: %.3f", static_cast<long long>(bt), e->counter("slots_paired"));
    if (const auto* e = rep.find("serve/paged-f32-decode-grown"))
      std::fprintf(out, "; grown a token at a time: %.3f", e->counter("slots_paired"));
    std::fprintf(out, "\n");
  }
}

}  // namespace attend::bench
