// Measurements of the machine itself, so attend's figures are judged against what the machine
// delivered in the same run rather than against a datasheet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attend::bench {

/// The bytes a decode entry streams (its K/V, a cache's storage, a layer's packed weights; and,
/// separately, the bytes its paired reference read streams). Before each timed call, operator()
/// writes back and drops every line of them from every cache level (clflushopt): the call reads
/// them from DRAM whatever the size of the last-level cache, as a multi-layer decode does (every
/// layer's K/V and weights come from DRAM), and nothing else is disturbed. The earlier way — write
/// a line of every 64 bytes of a 128 MiB buffer — left data in a larger L3 (an AMX Xeon's 480 MiB)
/// and the flush's own dirty lines in the caches, whose write-backs slowed the reads after it (that
/// machine's f32 cache D1 reference read: 27.7 GB/s after it, 30.8 after clflushopt);
/// ATTEND_BENCH_FLUSH_MIB=N still selects it (N MiB), for comparisons with runs before.
class Evict {
 public:
  Evict& add(const void* data, size_t bytes);
  template <class Vec>
  Evict& add_all(const Vec& v) {
    return add(v.data(), v.size() * sizeof(v[0]));
  }
  Evict& add(const std::vector<std::pair<const void*, size_t>>& ranges);
  Evict& add(const Evict& other);
  /// Every line, on all OpenMP threads (or the write flush when ATTEND_BENCH_FLUSH_MIB is set).
  void operator()() const;
  /// Part `part` of `parts` of the same, on the calling thread alone (no OpenMP region: for threads
  /// of the caller's own that must not wake OpenMP's spinning workers).
  void part(int part, int parts) const;
  /// A plain streaming read of exactly these bytes where they lie, in address order (ranges sorted,
  /// adjacent ones merged: a paged cache's blocks that follow each other in the pool are one run),
  /// as 32-bit integer words (any element type), on all OpenMP threads, each reading a contiguous
  /// share; returns their XOR so it is not elided. One of the decode entries' three reference reads
  /// (reference_seconds): the same bytes in the same physical pages as the call read (a separate
  /// copy can land in slower memory: one of D3's K/V read at 22 GB/s against 31 for D1's in one run
  /// on the AMX Xeon, and the caches then read "above 100%").
  uint32_t read() const;
  /// The same bytes read in the same order with 512-bit loads (AVX-512; else the compiler's vectors)
  /// into one XOR chain, each 64-byte line's successors requested 4 KiB ahead into L1 (prefetcht0)
  /// and 24 KiB ahead into L2 (prefetcht1), as decode's kernels request theirs. On the AMX Xeons the
  /// plain read leaves bandwidth unused that this one takes: an Emerald Rapids streamed evicted
  /// 32 MiB at 24.4 GB/s with read()'s loop and 29.2 with this one (docs/experiments/read_shapes.cpp).
  uint32_t read_requested() const;
  /// The same bytes in the same order with 512-bit loads (AVX-512; else read()'s loop) into one XOR
  /// chain, without requests. On a Zen 4 a 512-bit chain streamed 3–30% faster than read()'s
  /// 256-bit loop in some memory states (docs/experiments/decode_order.cpp, session 51), and the
  /// hardware prefetchers there lose 5–15% to requests ahead of a sequential read, so neither of
  /// the other two reads is that machine's fastest plain read in every state.
  uint32_t read_wide() const;
  /// Which of the three reads was the fastest (reference_seconds).
  enum class ReferenceRead { plain, requested, wide };
  /// The decode entries' reference: the fastest of read(), read_requested() and read_wide(), each
  /// timed after its own eviction of these bytes (operator()), in seconds; `fastest` says which.
  /// No read is weaker than before on any machine: the reference is the best of three plain reads.
  double reference_seconds(uint32_t& sink, ReferenceRead& fastest) const;
  size_t bytes() const { return bytes_; }

 private:
  // Makes runs_ (the ranges by address, overlapping or adjacent ones merged) and bytes_.
  Evict& merge();
  // Evicted in the order added (eviction in address order changed the paired read after it: the
  // 8-bit cache's D2 share 66–67% → 63% in alternated runs), read in address order.
  std::vector<std::pair<const unsigned char*, size_t>> ranges_, runs_;
  size_t bytes_ = 0, added_ = 0;  // of runs_, of ranges_ (overlaps counted twice)
};

/// The write flush's size in MiB (ATTEND_BENCH_FLUSH_MIB, a whole number ≥ 1; a bad value exits
/// with a message), 0 when unset: Evict's clflushopt.
size_t flush_mib();
/// How decode entries empty the caches, for the bench's context.
std::string eviction_name();
/// What the decode entries' paired reference read is, for the bench's context.
std::string reference_read_name();

/// f32 FMA throughput of `threads` threads in GFLOP/s over one run of `iterations` × 12 FMAs per
/// thread (independent chains, widest vectors: AVX-512, else AVX2+FMA; 0 without FMA).
double fma_gflops(int threads, int64_t iterations);

/// Iterations of the per-call probe of the prefill entries (timed_loop_vs_peak): ~3 ms on one
/// AVX-512 core pair.
constexpr int64_t kFmaProbeIterations = 2'000'000;

/// Peak f32 FMA throughput of `threads` threads in GFLOP/s, measured with independent FMA
/// chains on the widest vectors the CPU supports (AVX-512, else AVX2+FMA).
double measure_fma_peak_gflops(int threads);

/// The same for `vdpbf16ps` (AVX512_BF16: 32 bf16 multiply-adds per instruction, counted as 64
/// FLOPs), 12 independent chains per thread; 0 on a CPU without AVX512_BF16.
double bf16_dot_gflops(int threads, int64_t iterations);
/// Whether the CPU has AVX512_BF16 (the vdpbf16ps probe measures something).
bool has_bf16_dot();
double measure_bf16_peak_gflops(int threads);
/// The same for AMX tiles (tdpbf16ps, 16,384 FLOPs each) where FpMath::bf16 runs on them
/// (attend::bf16_math_amx()), else 0.
double amx_bf16_gflops(int threads, int64_t iterations);
double measure_amx_peak_gflops(int threads);

}  // namespace attend::bench
