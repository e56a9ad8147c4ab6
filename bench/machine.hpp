// Measurements of the machine itself, so attend's figures are judged against what the machine
// delivered in the same run rather than against a datasheet.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attend::bench {

/// Writes a 128 MiB buffer so the last-level cache holds none of the benchmark's data (what a
/// multi-layer decode sees: every layer's K/V comes from DRAM).
void flush_last_level_cache();
/// Part `part` of `parts` of the same flush, on the calling thread alone (no OpenMP region: for
/// threads of the caller's own that must not wake OpenMP's spinning workers).
void flush_last_level_cache_part(int part, int parts);

/// Sums `floats` floats with all threads, vectorised, and returns the sum (so it is not elided).
/// Timed, this is the plain streaming read the decode kernels are compared with.
float stream_read(const float* data, size_t floats, int threads);

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

}  // namespace attend::bench
