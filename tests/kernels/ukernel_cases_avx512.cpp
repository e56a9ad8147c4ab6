// The microkernel tester instantiated for the avx512 kernels, built with the same ISA flags as
// runtime/kernels/arch/avx512.cpp. Only this entry point leaves the translation unit.
#include "ukernel_tester.hpp"

void attend_ukernel_cases_avx512(attend::kernels::UkernelReport& report) {
  attend::kernels::tester::run_all<xsimd::avx512bw>(report);
}
