// Pieces shared by attend-bench's benchmark groups.
#pragma once

#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "../runtime/api/kv_cache_access.hpp"
#include "../runtime/api/mha_access.hpp"
#include "../runtime/api/paged_kv_cache_access.hpp"
#include "../runtime/numeric/convert.hpp"
#include "machine.hpp"
#include "progress.hpp"

namespace attend::bench {

/// Memory on transparent huge pages where the kernel allows them (madvise before first touch), like
/// the caches' pools: the plain reads a decode step is paired with read this, so the kernel and its
/// reference see the same kind of pages (a 4 KiB-page reference would flatter the caches by ~7 points).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};
/// A decode entry's dense K or V reference (and the oneDNN baseline's cache), sdpa's and the
/// layer's inputs: every buffer a decode entry or its reference streams sits in 2 MiB pages like
/// attend's caches. (On an AMX Xeon a plain read of 4 KiB pages ran at 17 GB/s against 30 in 2 MiB
/// pages — its prefetchers stop at each page — and attend's decode, which requests lines across
/// pages itself, read sdpa's 4 KiB-page K/V above 100% of such a read.)
using KvBuffer = std::vector<float, HugePageAllocator<float>>;
using Bf16Buffer = std::vector<uint16_t, HugePageAllocator<uint16_t>>;

/// Deterministic, cheap pseudo-random fill in [-1, 1) (large buffers are filled in milliseconds).
template <class Vec>
void fill(Vec& x, uint32_t seed, float scale = 1.0f) {
  uint32_t state = seed * 2654435761u + 1;
  for (float& f : x) {
    state = state * 1664525u + 1013904223u;
    f = scale * static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) * (1.0f / (1 << 23));
  }
}

/// bf16 copies (round to nearest even) of f32 data, and back.
template <class Out = std::vector<uint16_t>, class Vec>
Out to_bf16(const Vec& x) {
  Out r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = numeric::to_bf16(x[i]);
  return r;
}
template <class Out = std::vector<float>, class Vec>
Out from_bf16(const Vec& x) {
  Out r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = numeric::from_bf16(x[i]);
  return r;
}

/// The Evict of a dense K and V (sdpa's inputs, the oneDNN baseline's cache).
template <class Vec>
Evict evict_kv(const Vec& k, const Vec& v) {
  Evict e;
  e.add_all(k).add_all(v);
  return e;
}
/// The Evict of sequences of a slot or paged cache: their tokens' storage, every kv head (what a
/// decode over them reads), as they stand now.
template <class Cache, class Seqs>
Evict evict_cache(const Cache& c, const Seqs& seqs) {
  using Access = std::conditional_t<std::is_same_v<Cache, attend::KVCache>, attend::detail::KVCacheAccess,
                                    attend::detail::PagedKVCacheAccess>;
  std::vector<std::pair<const void*, size_t>> r;
  for (const int64_t s : seqs) Access::storage_ranges(c, s, r);
  Evict e;
  e.add(r);
  return e;
}
/// A layer's packed projection weights.
inline Evict& add_weights(Evict& e, const attend::MultiHeadAttention& layer) {
  std::vector<std::pair<const void*, size_t>> r;
  attend::detail::MhaAccess::weight_ranges(layer, r);
  return e.add(r);
}
/// Bytes one element of a KV cache of type t takes, its scales included (i8: one f32 per token row
/// of `head_dim` elements).
inline double kv_element_bytes(attend::DType t, int64_t head_dim) {
  return t == attend::DType::i8 ? 1.0 + 4.0 / static_cast<double>(head_dim)
                                : static_cast<double>(attend::dtype_size(t));
}

/// Times `body` per iteration with manual timing; `evict` (if any) empties the caches of the bytes
/// it names first and `prepare` runs untimed before each iteration. One untimed warm-up call comes
/// first, so lazily created state (oneDNN primitives per token count, thread pools, first-touch
/// pages) is never timed — for any impl.
template <class Prepare, class F>
void timed_loop(benchmark::State& state, const Evict* evict, Prepare&& prepare, F&& body) {
  prepare();
  body();
  for (auto _ : state) {
    prepare();
    if (evict) (*evict)();
    const auto t0 = std::chrono::steady_clock::now();
    body();
    set_iteration_time(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}
template <class F>
void timed_loop(benchmark::State& state, const Evict* evict, F&& body) {
  timed_loop(
      state, evict, [] {}, body);
}

/// timed_loop that pairs every timed call with a measurement of the machine's limit taken right
/// after it: `ideal_seconds()` returns how long the call's work would take at that limit, measured
/// then. Counter `counter` = median over iterations of ideal / call time × 100, the call's share of
/// what the machine delivered at that moment. Pairing per iteration keeps the figure steady when the
/// machine's bandwidth or compute swings between entries (a shared machine's do, ±15 points from run
/// to run); the probe is not part of the timed call.
template <class Prepare, class F, class I>
void timed_loop_paired(benchmark::State& state, const Evict* evict, Prepare&& prepare, F&& body, I&& ideal_seconds,
                       const char* counter) {
  using clock = std::chrono::steady_clock;
  prepare();
  body();
  std::vector<double> ratios;
  for (auto _ : state) {
    prepare();
    if (evict) (*evict)();
    const auto t0 = clock::now();
    body();
    const double t = std::chrono::duration<double>(clock::now() - t0).count();
    set_iteration_time(state, t);
    ratios.push_back(ideal_seconds() / t);
  }
  if (ratios.empty()) return;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  state.counters[counter] = 100.0 * (n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]));
}

/// Whether the three reference reads of `bytes` see the same words (their XORs agree: none skips or
/// overruns a byte); otherwise the entry is reported as an error.
inline bool reference_reads_agree(benchmark::State& state, const Evict& bytes) {
  const uint32_t plain = bytes.read();
  if (plain == bytes.read_requested() && plain == bytes.read_wide()) return true;
  state.SkipWithError("the reference reads of the entry's bytes differ (Evict::read_requested, Evict::read_wide)");
  return false;
}

/// Decode (the bytes `evict` names evicted before each call): the limit is a plain read of the bytes
/// `reference` names, timed right after each call: the fastest of three read loops, each after its
/// own eviction (Evict::reference_seconds). Counter `stream_pct`; `read_req_pct` and `read_wide_pct`:
/// the shares of calls whose reference was the read with software requests (Evict::read_requested)
/// and the 512-bit read without them (Evict::read_wide).
template <class Prepare, class F>
void timed_loop_vs_stream(benchmark::State& state, const Evict& evict, Prepare&& prepare, F&& body,
                          const Evict& reference) {
  if (!reference_reads_agree(state, reference)) return;
  uint32_t sink = 0;
  int64_t calls = 0, requested = 0, wide = 0;
  timed_loop_paired(
      state, &evict, prepare, body,
      [&] {
        Evict::ReferenceRead fastest{};
        const double t = reference.reference_seconds(sink, fastest);
        ++calls;
        requested += fastest == Evict::ReferenceRead::requested;
        wide += fastest == Evict::ReferenceRead::wide;
        return t;
      },
      "stream_pct");
  benchmark::DoNotOptimize(sink);
  if (calls) {
    state.counters["read_req_pct"] = 100.0 * static_cast<double>(requested) / static_cast<double>(calls);
    state.counters["read_wide_pct"] = 100.0 * static_cast<double>(wide) / static_cast<double>(calls);
  }
}

/// The same without a per-iteration `prepare`.
template <class F>
void timed_loop_vs_stream(benchmark::State& state, const Evict& evict, F&& body, const Evict& reference) {
  timed_loop_vs_stream(
      state, evict, [] {}, body, reference);
}

/// The stream/read entries: each iteration's time is the decode entries' reference for `bytes`
/// (Evict::reference_seconds: the fastest of three plain reads, each after its own eviction).
inline void timed_reference_reads(benchmark::State& state, const Evict& bytes) {
  if (!reference_reads_agree(state, bytes)) return;
  uint32_t sink = 0;
  Evict::ReferenceRead fastest{};
  bytes.reference_seconds(sink, fastest);  // untimed warm-up, as timed_loop
  for (auto _ : state) set_iteration_time(state, bytes.reference_seconds(sink, fastest));
  benchmark::DoNotOptimize(sink);
}

/// Compute-bound calls of `flops` floating-point operations (warm caches): the limit is the FMA
/// throughput of a ~3 ms probe (fma_gflops) run right after each call on the same threads.
/// Counter `peak_pct`: the call's GFLOP/s as a share of the probe's (0 on a CPU without FMA).
/// `bf16_probe`: the limit is the vdpbf16ps probe (bf16_dot_gflops, half the iterations: the same
/// ~3 ms) instead, for calls that compute in bf16.
template <class F>
void timed_loop_vs_peak(benchmark::State& state, double flops, F&& body, bool bf16_probe = false) {
  const int threads = omp_get_max_threads();
  timed_loop_paired(
      state, nullptr, [] {}, body,
      [&] {
        const double gflops =
            bf16_probe ? bf16_dot_gflops(threads, kFmaProbeIterations / 2) : fma_gflops(threads, kFmaProbeIterations);
        return gflops > 0 ? flops / (gflops * 1e9) : 0.0;
      },
      "peak_pct");
}

/// timed_loop_vs_stream whose reference is a plain read of exactly the bytes the call streams, where
/// they lie (`bytes`, Evict::reference_seconds): a cache's storage, a layer's packed weights.
template <class Prepare, class F>
void timed_loop_vs_own_bytes(benchmark::State& state, const Evict& bytes, Prepare&& prepare, F&& body) {
  timed_loop_vs_stream(state, bytes, prepare, body, bytes);
}

/// Times one decode step per iteration on a cache whose `batch` sequences (slots 0…batch−1) hold
/// `length` tokens: each iteration first truncates them back to length − 1 (untimed) and evicts
/// the bytes `bytes` names, then times `step` (which appends the step's token), paired with a
/// plain read of those bytes (timed_loop_vs_own_bytes).
template <class Cache, class Step>
void timed_decode_steps(benchmark::State& state, Cache& cache, int64_t batch, int64_t length, const Evict& bytes,
                        Step&& step) {
  timed_loop_vs_own_bytes(
      state, bytes,
      [&] {
        for (int64_t b = 0; b < batch; ++b) cache.truncate(b, length - 1);
      },
      step);
}

/// Collects the median of every entry for the summary tables.
class SummaryReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(benchmark::BenchmarkReporter* inner) : inner_(inner) {}
  bool ReportContext(const Context& c) override {
    hide_progress();
    const bool ok = inner_->ReportContext(c);
    std::fflush(stdout);
    show_progress();
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    hide_progress();
    for (const Run& r : runs) {
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      const bool single = r.run_type == Run::RT_Iteration && r.repetitions <= 1;
      if ((median || single) && !r.error_occurred) {
        Entry& e = entries_[r.run_name.function_name];
        e.seconds = r.GetAdjustedRealTime() / 1e3;  // reported in ms
        auto f = r.counters.find("FLOPS");
        e.gflops = f != r.counters.end() ? f->second.value * 1e-9 : 0.0;
        auto b = r.counters.find("bytes_per_second");
        e.gbps = b != r.counters.end() ? b->second.value * 1e-9 : 0.0;
        auto sp = r.counters.find("stream_pct");
        e.stream_pct = sp != r.counters.end() ? sp->second.value : 0.0;
        auto pp = r.counters.find("peak_pct");
        e.peak_pct = pp != r.counters.end() ? pp->second.value : 0.0;
        for (const auto& [name, c] : r.counters) e.counters[name] = c.value;
      }
    }
    inner_->ReportRuns(runs);
    std::fflush(stdout);
    show_progress();
  }
  void Finalize() override { inner_->Finalize(); }

  struct Entry {
    double seconds = 0, gflops = 0, gbps = 0;
    double stream_pct = 0;  // paired share of a plain read's bandwidth (timed_loop_vs_stream), 0 if none
    double peak_pct = 0;    // paired share of the FMA probe's throughput (timed_loop_vs_peak), 0 if none
    std::map<std::string, double> counters;  // every counter's median
    double counter(const std::string& name) const {
      auto it = counters.find(name);
      return it == counters.end() ? 0.0 : it->second;
    }
  };
  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

 private:
  benchmark::BenchmarkReporter* inner_;
  std::map<std::string, Entry> entries_;
};

/// Each group registers its benchmarks and prints its summary from the collected medians.
void register_sdpa_benchmarks();
void print_sdpa_summary(const SummaryReporter& rep, double peak, FILE* out);
void print_bf16math_summary(const SummaryReporter& rep, double bf16_peak, FILE* out);
void print_terms_summary(const SummaryReporter& rep, FILE* out);
void register_mla_benchmarks();
void print_mla_summary(const SummaryReporter& rep, double peak, FILE* out);
void register_cache_benchmarks();
void print_cache_summary(const SummaryReporter& rep, FILE* out);
void register_layer_benchmarks();
void print_layer_summary(const SummaryReporter& rep, double peak, FILE* out);
void register_serve_benchmarks();
void print_serve_summary(const SummaryReporter& rep, FILE* out);

}  // namespace attend::bench
