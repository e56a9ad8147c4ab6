// ISA selection: the active path is supported, every supported path is compiled, forcing works,
// and ATTEND_ISA caps the automatic choice (ctest runs this binary again with the variable set and
// ATTEND_EXPECT_ISA naming the path it must produce).
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cstdlib>
#include <string>

namespace attend {
namespace {

bool contains(const std::vector<Isa>& v, Isa x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(Dispatch, ActiveIsSupportedAndSupportedIsCompiled) {
  const auto compiled = compiled_isas();
  const auto supported = supported_isas();
  EXPECT_TRUE(contains(supported, Isa::generic));
  for (Isa s : supported) EXPECT_TRUE(contains(compiled, s)) << isa_name(s);
  EXPECT_TRUE(contains(supported, active_isa()));
}

TEST(Dispatch, AutomaticPicksTheBestSupportedUnlessCapped) {
  if (std::getenv("ATTEND_ISA")) GTEST_SKIP() << "capped by ATTEND_ISA; see CappedByEnvironment";
  EXPECT_EQ(active_isa(), supported_isas().back());
}

TEST(Dispatch, CappedByEnvironment) {
  const char* expect = std::getenv("ATTEND_EXPECT_ISA");
  if (!expect) GTEST_SKIP() << "run by ctest with ATTEND_ISA and ATTEND_EXPECT_ISA set";
  EXPECT_EQ(std::string(isa_name(active_isa())), expect);
}

TEST(Dispatch, ForcingAnUncompiledOrUnsupportedPathThrows) {
  const auto supported = supported_isas();
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    if (contains(supported, isa)) continue;
    float x[16] = {};
    float y[16] = {};
    SdpaOptions opt;
    opt.isa = isa;
    try {
      scaled_dot_product_attention(TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(y, {1, 1, 1, 16}), opt);
      ADD_FAILURE() << "forcing " << isa_name(isa) << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
  }
}

TEST(Dispatch, CpuModelIsNamed) { EXPECT_FALSE(cpu_model().empty()); }

}  // namespace
}  // namespace attend
