// The microkernel tester instantiated for the avx2 kernels, built with the same ISA flags as
// runtime/kernels/arch/avx2.cpp. Only this entry point leaves the translation unit.
#include "ukernel_tester.hpp"

void attend_ukernel_cases_avx2(attend::kernels::UkernelReport& report) {
  attend::kernels::tester::run_all<xsimd::fma3<xsimd::avx2>>(report);
}
