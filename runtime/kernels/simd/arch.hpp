// The vocabulary every kernel header shares: vector types for an xsimd architecture, the arch tags
// kernels overload on, scalar helpers and constants.
//
// Everything in runtime/kernels/ is a template on Arch or lives in an anonymous namespace, and is
// included only by runtime/kernels/arch/*.cpp (each compiled with its own ISA flags), so every ISA
// translation unit owns its copy: a non-template inline function compiled with -mavx512f could
// otherwise be picked by the linker for the whole program and crash an AVX2-only machine.
//
// ISA-specific code is selected by tag dispatch on xsimd's architecture hierarchy (xsimd's own
// `requires_arch` idiom): an overload taking `requires_arch<xsimd::avx512f>` also serves avx512cd,
// avx512dq, avx512bw and any arch derived from them later (an AVX-512-BF16 path, say), and the
// `requires_arch<xsimd::generic>` overload is the portable fallback. Exact type tests
// (std::is_same_v<Arch, xsimd::avx512bw>) would silently drop a new arch to the fallback.
#pragma once

#include <cstdint>
#include <limits>
#include <xsimd/xsimd.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace attend::kernels {
namespace {

template <class Arch>
using vfloat = xsimd::batch<float, Arch>;
template <class Arch>
using vint = xsimd::batch<int32_t, Arch>;

/// The tag an ISA-specific overload takes: binds to Arch{} for Arch and every arch derived from it.
template <class Arch>
using requires_arch = const Arch&;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/// Architectural vector registers: 32 on AVX-512 and AArch64 (NEON), 16 on SSE/AVX2.
constexpr int vector_registers(requires_arch<xsimd::generic>) { return 16; }
constexpr int vector_registers(requires_arch<xsimd::avx512f>) { return 32; }
constexpr int vector_registers(requires_arch<xsimd::neon64>) { return 32; }

/// Whether the arch has write-masked FMAs and vscalefps (AVX-512).
constexpr bool has_avx512_ops(requires_arch<xsimd::generic>) { return false; }
constexpr bool has_avx512_ops(requires_arch<xsimd::avx512f>) { return true; }

// In the microkernels every loop over a compile-time extent (R, NV) is marked ATTEND_UNROLL: GCC
// otherwise unrolls the outer of two nested loops only after scalar replacement has run, so the
// accumulator array stays in memory around the hot loop (zeroed, stored and reloaded on the stack
// every call). Unrolled early, the accumulators live in registers from start to end: +8% on P1,
// +5% on P2 (alternating runs of both builds). The narrow-path kernels' accumulators were checked
// (objdump) to stay in registers without it.
#define ATTEND_UNROLL _Pragma("GCC unroll 32")

}  // namespace
}  // namespace attend::kernels
