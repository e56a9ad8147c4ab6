// The kernels on aarch64 (xsimd's neon64 path, attend's "generic" ISA there) against the
// double-precision reference: awkward shapes around tile edges, every mask, GQA, strided views,
// split-K decode, bf16/f16 caches (NEON widening loads) and NaN containment.
// Prints "N passed, M failed" and exits non-zero on any failure.
#include <attend/attend.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/numeric/convert.hpp"
#include "kernels/ukernel_report.hpp"
#include "reference/reference_attention.hpp"

void attend_ukernel_cases_generic(attend::kernels::UkernelReport& report);

namespace {

int passed = 0, failed = 0;

void check(bool ok, const std::string& what) {
  (ok ? passed : failed)++;
  if (!ok) std::printf("FAIL %s\n", what.c_str());
}

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double max_error(const std::vector<float>& got, const std::vector<double>& want, double& scale) {
  scale = 1e-3;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    worst = std::max(worst, std::isfinite(got[i]) ? std::abs(got[i] - want[i]) : INFINITY);
  }
  return worst;
}

void sdpa_case(int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t D, bool causal, int64_t window,
               bool lens, bool bias, bool strided) {
  const int64_t Dv = D;
  const auto q = random_vec(static_cast<size_t>(B * Hq * Nq * D), 1),
             k = random_vec(static_cast<size_t>(B * Hkv * Nk * D), 2),
             v = random_vec(static_cast<size_t>(B * Hkv * Nk * Dv), 3);
  const auto b = random_vec(static_cast<size_t>(Nq * Nk), 4);
  std::vector<float> o(static_cast<size_t>(B * Hq * Nq * Dv + 64), 7.0f);
  std::vector<int64_t> kv_lens;
  for (int64_t i = 0; i < B; ++i) kv_lens.push_back((Nk * (i + 1)) / (B + 1));
  attend::SdpaOptions opt;
  opt.causal = causal;
  opt.window = window;
  opt.isa = attend::Isa::generic;
  if (lens) opt.kv_lens = kv_lens;
  if (bias) opt.bias = attend::TensorView::dense(b.data(), {1, 1, Nq, Nk});
  // Strided: q read as [B, N, H, D] storage.
  const attend::TensorView qv = strided ? attend::TensorView(q.data(), {B, Hq, Nq, D}, {Nq * Hq * D, D, Hq * D, 1})
                                        : attend::TensorView::dense(q.data(), {B, Hq, Nq, D});
  const auto kv = attend::TensorView::dense(k.data(), {B, Hkv, Nk, D}),
             vv = attend::TensorView::dense(v.data(), {B, Hkv, Nk, Dv});
  attend::scaled_dot_product_attention(qv, kv, vv, attend::TensorView::dense(o.data(), {B, Hq, Nq, Dv}), opt);
  const auto want = attend::testing::reference_attention(qv, kv, vv, opt);
  double scale = 0;
  const double err =
      max_error(std::vector<float>(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(want.size())), want, scale);
  bool guard = true;
  for (size_t i = want.size(); i < o.size(); ++i) guard &= o[i] == 7.0f;
  char what[200];
  std::snprintf(
      what, sizeof what,
      "sdpa B=%lld Hq=%lld Hkv=%lld Nq=%lld Nk=%lld D=%lld causal=%d window=%lld lens=%d bias=%d strided=%d err=%.3g",
      (long long)B, (long long)Hq, (long long)Hkv, (long long)Nq, (long long)Nk, (long long)D, causal,
      (long long)window, lens, bias, strided, err / scale);
  check(err <= 1e-5 * scale && guard, what);
}

void cache_case(attend::DType dt, int64_t D, int64_t prefix, int64_t N) {
  const int64_t Hkv = 2, Hq = 4, total = prefix + N;
  attend::KVCache cache({Hkv, D, 1, total, dt});
  auto k = random_vec(static_cast<size_t>(Hkv * total * D), 5), v = random_vec(k.size(), 6);
  const auto q = random_vec(static_cast<size_t>(Hq * N * D), 7);
  const attend::TensorView::Dims st{0, total * D, D, 1};
  cache.append(0, attend::TensorView(k.data(), {1, Hkv, prefix, D}, st),
               attend::TensorView(v.data(), {1, Hkv, prefix, D}, st));
  std::vector<float> o(q.size());
  const int64_t seq[] = {0};
  attend::SdpaOptions opt;
  opt.isa = attend::Isa::generic;
  attend::cached_attention(attend::TensorView::dense(q.data(), {1, Hq, N, D}),
                           attend::TensorView(k.data() + prefix * D, {1, Hkv, N, D}, st),
                           attend::TensorView(v.data() + prefix * D, {1, Hkv, N, D}, st), cache, seq,
                           attend::TensorView::dense(o.data(), {1, Hq, N, D}), opt);
  // The reference reads what the cache holds: values rounded to the storage type.
  auto round = [&](float x) {
    if (dt == attend::DType::bf16) return attend::numeric::from_bf16(attend::numeric::to_bf16(x));
    if (dt == attend::DType::f16) return attend::numeric::from_f16(attend::numeric::to_f16(x));
    return x;
  };
  for (float& x : k) x = round(x);
  for (float& x : v) x = round(x);
  attend::SdpaOptions ref;
  ref.causal = true;
  const auto want = attend::testing::reference_attention(attend::TensorView::dense(q.data(), {1, Hq, N, D}),
                                                         attend::TensorView::dense(k.data(), {1, Hkv, total, D}),
                                                         attend::TensorView::dense(v.data(), {1, Hkv, total, D}), ref);
  double scale = 0;
  const double err = max_error(o, want, scale);
  check(err <= 1e-5 * scale, std::string("cached_attention ") + attend::dtype_name(dt) + " D=" + std::to_string(D) +
                                 " prefix=" + std::to_string(prefix) + " N=" + std::to_string(N));
}

void nan_case() {
  // A NaN in a masked-out V position (causal: key 20, rows < 20) changes nothing; rows >= 20 are NaN.
  const int64_t N = 40, D = 16;
  const auto q = random_vec(N * D, 8), k = random_vec(N * D, 9);
  auto v = random_vec(N * D, 10);
  attend::SdpaOptions opt;
  opt.causal = true;
  opt.isa = attend::Isa::generic;
  auto run = [&] {
    std::vector<float> o(N * D);
    attend::scaled_dot_product_attention(
        attend::TensorView::dense(q.data(), {1, 1, N, D}), attend::TensorView::dense(k.data(), {1, 1, N, D}),
        attend::TensorView::dense(v.data(), {1, 1, N, D}), attend::TensorView::dense(o.data(), {1, 1, N, D}), opt);
    return o;
  };
  const auto clean = run();
  v[20 * D + 3] = NAN;
  const auto o = run();
  bool ok = std::memcmp(o.data(), clean.data(), 20 * D * sizeof(float)) == 0;
  for (int64_t i = 20; i < N; ++i) ok &= std::isnan(o[i * D + 3]);
  check(ok, "NaN in a masked-out V position");
}

}  // namespace

int main() {
  std::printf("attend on %s: isa %s (compiled:", attend::cpu_model().c_str(), attend::isa_name(attend::active_isa()));
  for (attend::Isa i : attend::compiled_isas()) std::printf(" %s", attend::isa_name(i));
  std::printf(")\n");
  for (int64_t n : {1, 2, 7, 17, 63, 64, 65, 130})
    for (int64_t d : {1, 3, 16, 40, 64})
      for (bool causal : {false, true}) sdpa_case(1, 2, 2, n, n, d, causal, 0, false, false, false);
  for (int64_t d : {80, 128}) sdpa_case(1, 2, 2, 33, 33, d, true, 0, false, false, false);
  for (int64_t g : {1, 2, 4}) {
    sdpa_case(2, 2 * g, 2, 1, 300, 64, false, 0, true, false, false);    // narrow path
    sdpa_case(2, 2 * g, 2, 1, 2100, 32, false, 0, false, false, false);  // split-K
    sdpa_case(2, 2 * g, 2, 21, 50, 16, true, 0, true, true, true);
  }
  for (int64_t w : {1, 7}) sdpa_case(1, 1, 1, 40, 90, 16, true, w, false, false, false);
  for (attend::DType dt : {attend::DType::f32, attend::DType::bf16, attend::DType::f16})
    for (int64_t d : {16, 40}) {
      cache_case(dt, d, 100, 1);
      cache_case(dt, d, 0, 9);
    }
  nan_case();
  {
    attend::kernels::UkernelReport report;  // every microkernel over its NEON tile boundaries
    attend_ukernel_cases_generic(report);
    check(report.failures == 0 && report.cases > 1000,
          "microkernel tester (" + std::to_string(report.cases) + " cases): " + report.text);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
