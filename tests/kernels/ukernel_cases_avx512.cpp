// The microkernel tester instantiated for the avx512 kernels, built with the same ISA flags as
// runtime/kernels/arch/avx512.cpp. Only this entry point leaves the translation unit.
#include "ukernel_tester.hpp"

void attend_ukernel_cases_avx512(attend::kernels::UkernelReport& report) {
  attend::kernels::tester::run_all<xsimd::avx512bw>(report);
}

// Tag dispatch on the arch hierarchy: an arch derived from avx512bw (a future AVX-512-BF16 path,
// say) inherits every AVX-512 specialisation instead of falling back to the portable code.
namespace {
struct future_avx512_arch : xsimd::avx512bw {};
static_assert(attend::kernels::vector_registers(future_avx512_arch{}) == 32);
static_assert(attend::kernels::has_avx512_ops(future_avx512_arch{}));
static_assert(attend::kernels::Tiles<xsimd::avx512bw>::kBlockKeys == 96 &&
              attend::kernels::Tiles<xsimd::avx512bw>::kScoreKeys == 6);
}  // namespace
