// Measurements of the machine itself, so attend's figures are judged against what the machine
// delivered in the same run rather than against a datasheet.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attend::bench {

/// The flush's size when ATTEND_BENCH_FLUSH_MIB is not set: 4× a 32 MiB L3. A machine with more
/// cache (a 3D V-Cache part) needs more. On the 2-core EPYC VMs this project runs on (sysfs: a
/// 32 MiB L3) data re-read after 128–384 MiB of other traffic still came at 58–75 GB/s, against 36
/// from DRAM after 512 MiB or more; yet a 512 MiB flush moved no decode share beyond the machine's
/// swings and doubled the bench's time (docs/performance.md, session 28).
constexpr size_t kDefaultFlushMiB = 128;
/// The flush's size in MiB: ATTEND_BENCH_FLUSH_MIB (a whole number ≥ 1; a bad value exits with a
/// message), else kDefaultFlushMiB.
size_t flush_mib();

/// Writes a line of every 64 bytes of a flush_mib() buffer so the caches hold none of the
/// benchmark's data (what a multi-layer decode sees: every layer's K/V comes from DRAM).
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
/// The same for AMX tiles (tdpbf16ps, 16,384 FLOPs each) where FpMath::bf16 runs on them
/// (attend::bf16_math_amx()), else 0.
double amx_bf16_gflops(int threads, int64_t iterations);
double measure_amx_peak_gflops(int threads);

}  // namespace attend::bench
