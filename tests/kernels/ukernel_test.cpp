// Runs the microkernel tester (ukernel_tester.hpp) for every ISA path this machine can run: one
// test per ISA, each checking every microkernel over the boundary classes of that ISA's tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cstdio>

#include "ukernel_report.hpp"

void attend_ukernel_cases_generic(attend::kernels::UkernelReport& report);
#if defined(__x86_64__)
void attend_ukernel_cases_avx2(attend::kernels::UkernelReport& report);
void attend_ukernel_cases_avx512(attend::kernels::UkernelReport& report);
#endif

namespace attend::kernels {

namespace {

class Ukernels : public ::testing::TestWithParam<Isa> {};

TEST_P(Ukernels, MatchTheReferenceOverTheirTileBoundaries) {
  UkernelReport report;
  switch (GetParam()) {
    case Isa::generic: attend_ukernel_cases_generic(report); break;
#if defined(__x86_64__)
    case Isa::avx2: attend_ukernel_cases_avx2(report); break;
    case Isa::avx512: attend_ukernel_cases_avx512(report); break;
    // The avx512_bf16 table runs the avx512 microkernels (its vdpbf16ps ones are checked end to end
    // against the reference by SdpaBf16Math).
    case Isa::avx512_bf16: attend_ukernel_cases_avx512(report); break;
#endif
    default: GTEST_SKIP() << "not compiled";
  }
  EXPECT_EQ(report.failures, 0) << report.text;
  EXPECT_GT(report.cases, 1000) << "the tester checked almost nothing";
  std::printf("%s: %ld cases\n", isa_name(GetParam()), report.cases);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, Ukernels, ::testing::ValuesIn(supported_isas()),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace attend::kernels
