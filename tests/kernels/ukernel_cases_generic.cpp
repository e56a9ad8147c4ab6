// The microkernel tester instantiated for the generic kernels, built with the same ISA flags as
// runtime/kernels/arch/generic.cpp. Only this entry point leaves the translation unit.
#include "ukernel_tester.hpp"

#if defined(__aarch64__)
using GenericArch = xsimd::neon64;
#elif defined(__x86_64__)
using GenericArch = xsimd::sse2;
#endif
void attend_ukernel_cases_generic(attend::kernels::UkernelReport& report) {
  attend::kernels::tester::run_all<GenericArch>(report);
}
