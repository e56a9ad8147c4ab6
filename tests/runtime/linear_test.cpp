// The projections' GEMM wrapper (runtime/gemm): every path a CPU may take — oneDNN's own
// (brgemm with AVX-512), fixed tiles (automatic where oneDNN would split the reduction across
// threads), bf16 weights natively or held as widened bf16 values (automatic without a bf16 matmul),
// attend's bf16 decode GEMV (automatic with AVX512_BF16 for up to 4 rows, 8 on Zen 5;
// ATTEND_BF16_GEMV_ROWS=8 runs its 5–8 row kernel on any AVX512_BF16 CPU) or oneDNN's matmul in
// its place — forced on whatever machine runs the suite, against a double-precision reference over awkward
// shapes, 16-bit activations, both weight layouts, with and without bias, and bitwise identical for
// 1, 2, 3 and 16 threads.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/dispatch/cpu_features.hpp"
#include "runtime/dispatch/registry.hpp"
#include "runtime/gemm/onednn_matmul.hpp"
#include "runtime/numeric/convert.hpp"

namespace attend::gemm {
namespace {

struct Shape {
  int64_t m, in, out;
};

// Scratch as the layer's context gives it: 64-byte aligned.
struct Scratch {
  std::vector<float> storage;
  float* get(size_t floats) {
    storage.assign(floats + 16, 0.0f);
    return storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16;
  }
};

float bf16_value(float x) { return numeric::from_bf16(numeric::to_bf16(x)); }

struct Case {
  LinearForce force;
  WeightType type;
  std::string name() const {
    return std::string(type == WeightType::bf16 ? "bf16" : "f32") + (force.tiled ? " tiled" : "") +
           (force.widened_bf16 ? " widened" : "") + (force.onednn_decode ? " onednn decode" : "");
  }
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (bool tiled : {false, true}) {
    c.push_back({{tiled, false}, WeightType::f32});
    c.push_back({{tiled, false}, WeightType::bf16});
    c.push_back({{tiled, true}, WeightType::bf16});
  }
  c.push_back({{false, false, true}, WeightType::bf16});  // native bf16 with no GEMV of attend's
  return c;
}

// Whether a Linear of these weights takes attend's bf16 GEMV for m rows.
bool own_gemv(const Linear& lin, int64_t m) {
  return lin.implementation(m).find("attend bf16 gemv") != std::string::npos;
}

// y = x·W + b in double, W given [in, out] (or [out, in] when out_in); bf16 weights round x and W
// to bf16 values first (the products are then exact in f32: only the accumulation order differs).
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, bool out_in,
                              const std::vector<float>* bias, const Shape& s, bool bf16) {
  std::vector<double> y(static_cast<size_t>(s.m * s.out));
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.out; ++j) {
      double acc = bias ? (*bias)[static_cast<size_t>(j)] : 0.0;
      for (int64_t k = 0; k < s.in; ++k) {
        float a = x[static_cast<size_t>(i * s.in + k)];
        float b = w[static_cast<size_t>(out_in ? j * s.in + k : k * s.out + j)];
        if (bf16) a = bf16_value(a), b = bf16_value(b);
        acc += static_cast<double>(a) * b;
      }
      y[static_cast<size_t>(i * s.out + j)] = acc;
    }
  return y;
}

TEST(Linear, EveryPathMatchesTheReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Shape s :
       {Shape{1, 64, 48}, Shape{7, 17, 33}, Shape{17, 96, 1000}, Shape{300, 40, 130}, Shape{513, 64, 272},
        Shape{1, 1, 5}, Shape{2, 301, 70}, Shape{5, 160, 129}, Shape{4, 513, 200}, Shape{9, 64, 64},
        // 5–8 rows (the GEMV's chunked kernel): x's odd last element alone in a chunk (in 33), at
        // the end of a partial one (333), none (1024).
        Shape{8, 33, 100}, Shape{6, 333, 130}, Shape{8, 1024, 200}, Shape{7, 17, 64}}) {
    std::vector<float> x(static_cast<size_t>(s.m * s.in)), w(static_cast<size_t>(s.in * s.out)),
        b(static_cast<size_t>(s.out));
    for (auto* v : {&x, &w, &b})
      for (float& e : *v) e = g(rng);
    for (const Case& c : cases())
      for (bool out_in : {false, true})
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(c.name() + " m " + std::to_string(s.m) + " in " + std::to_string(s.in) + " out " +
                       std::to_string(s.out) + (out_in ? " out_in" : "") + (with_bias ? " bias" : ""));
          const Linear lin(w.data(), out_in, s.in, s.out, with_bias ? b.data() : nullptr, c.type, c.force);
          const auto want = reference(x, w, out_in, with_bias ? &b : nullptr, s, c.type == WeightType::bf16);
          Scratch scratch;
          std::vector<float> y(want.size(), -7.0f);
          lin.run(x.data(), y.data(), s.m, 2, scratch.get(lin.scratch_floats(s.m)));
          double worst = 0.0, scale = 1.0;
          for (size_t i = 0; i < y.size(); ++i) {
            worst = std::max(worst, std::abs(y[i] - want[i]));
            scale = std::max(scale, std::abs(want[i]));
          }
          // f32 accumulation over `in` terms of size ~1 each.
          EXPECT_LE(worst, 1e-6 * static_cast<double>(s.in) * scale) << lin.implementation(s.m);
          if (c.force.tiled) {
            EXPECT_NE(lin.implementation(s.m).find("fixed tiles"), std::string::npos);
          }
        }
  }
}

TEST(Linear, BitsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(6);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Shape s : {Shape{1, 512, 1536}, Shape{3, 256, 384}, Shape{4, 130, 1000}, Shape{8, 130, 1000},
                        Shape{210, 256, 256}, Shape{600, 192, 200}}) {
    std::vector<float> x(static_cast<size_t>(s.m * s.in)), w(static_cast<size_t>(s.in * s.out));
    for (auto* v : {&x, &w})
      for (float& e : *v) e = g(rng);
    for (const Case& c : cases()) {
      SCOPED_TRACE(c.name() + " m " + std::to_string(s.m));
      const Linear lin(w.data(), false, s.in, s.out, nullptr, c.type, c.force);
      Scratch scratch;
      std::vector<float> one(static_cast<size_t>(s.m * s.out));
      lin.run(x.data(), one.data(), s.m, 1, scratch.get(lin.scratch_floats(s.m)));
      for (int threads : {2, 3, 16}) {
        std::vector<float> other(one.size());
        lin.run(x.data(), other.data(), s.m, threads, scratch.get(lin.scratch_floats(s.m)));
        EXPECT_EQ(0, std::memcmp(one.data(), other.data(), sizeof(float) * one.size())) << threads << " threads";
      }
    }
  }
}

// 16-bit x gives the bits of f32 x holding the same values; 16-bit y is the f32 y rounded.
TEST(Linear, SixteenBitActivations) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const Shape s : {Shape{19, 80, 300}, Shape{3, 81, 200}}) {
    std::vector<float> x(static_cast<size_t>(s.m * s.in)), w(static_cast<size_t>(s.in * s.out));
    for (auto* v : {&x, &w})
      for (float& e : *v) e = g(rng);
    for (const Case& c : cases())
      for (ActType xt : {ActType::bf16, ActType::f16}) {
        SCOPED_TRACE(c.name() + (xt == ActType::bf16 ? " x bf16" : " x f16") + " m " + std::to_string(s.m));
        const Linear lin(w.data(), false, s.in, s.out, nullptr, c.type, c.force);
        std::vector<uint16_t> x16(x.size());
        std::vector<float> xw(x.size());
        for (size_t i = 0; i < x.size(); ++i) {
          x16[i] = xt == ActType::bf16 ? numeric::to_bf16(x[i]) : numeric::to_f16(x[i]);
          xw[i] = xt == ActType::bf16 ? numeric::from_bf16(x16[i]) : numeric::from_f16(x16[i]);
        }
        Scratch scratch;
        std::vector<float> want(static_cast<size_t>(s.m * s.out)), got(want.size());
        lin.run(xw.data(), want.data(), s.m, 2, scratch.get(lin.scratch_floats(s.m)));
        lin.run(x16.data(), xt, got.data(), ActType::f32, s.m, 2, scratch.get(lin.scratch_floats(s.m, xt)));
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()));
        for (ActType yt : {ActType::bf16, ActType::f16}) {
          std::vector<uint16_t> y16(want.size());
          lin.run(x16.data(), xt, y16.data(), yt, s.m, 2, scratch.get(lin.scratch_floats(s.m, xt, yt)));
          const double ulp = yt == ActType::bf16 ? 0x1p-8 : 0x1p-11;
          int64_t bad = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            const float v = yt == ActType::bf16 ? numeric::from_bf16(y16[i]) : numeric::from_f16(y16[i]);
            if (!(std::abs(v - want[i]) <= ulp * std::max(std::abs(want[i]), yt == ActType::f16 ? 0x1p-14f : 0.0f)))
              ++bad;
          }
          EXPECT_EQ(bad, 0) << (yt == ActType::bf16 ? "y bf16" : "y f16");
        }
      }
  }
}

// bf16 weights take attend's GEMV for 1 to detail::bf16_decode_gemv_rows() rows exactly where
// dispatch offers it (AVX512_BF16, not capped by ATTEND_ISA, not turned off by ATTEND_BF16_GEMV=0;
// 4 or 8 rows as the CPU class or ATTEND_BF16_GEMV_ROWS says), never for more rows, f32 weights,
// fixed tiles or when forced onto oneDNN; and the two give the same values up to the accumulation
// order (both sum bf16 products in f32).
TEST(Linear, Bf16DecodeTakesAttendsGemvWhereTheCpuHasIt) {
  const int64_t in = 333, out = 200;
  std::mt19937 rng(8);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(in * out)), b(static_cast<size_t>(out)),
      x(static_cast<size_t>((kernels::kBf16GemvMaxRows + 1) * in));
  for (auto* v : {&w, &b, &x})
    for (float& e : *v) e = g(rng);
  const bool offered = detail::bf16_decode_gemv() != nullptr;
  const Linear lin(w.data(), true, in, out, b.data(), WeightType::bf16);
  const Linear onednn(w.data(), true, in, out, b.data(), WeightType::bf16, {false, false, true});
  const Linear f32(w.data(), true, in, out, b.data(), WeightType::f32);
  const Linear tiled(w.data(), true, in, out, b.data(), WeightType::bf16, {true, false});
  const int64_t rows = detail::bf16_decode_gemv_rows();
  EXPECT_TRUE(rows == 4 || rows == kernels::kBf16GemvMaxRows) << rows;
  if (const char* env = std::getenv("ATTEND_BF16_GEMV_ROWS")) {
    EXPECT_EQ(std::to_string(rows), env);
  } else {  // the class's rule: 8 where vdpbf16ps outruns the FMAs at full width, without AMX
    const dispatch::CpuFeatures& f = dispatch::cpu_features();
    EXPECT_EQ(rows, f.bf16_dot_fast && !f.amx_bf16 && f.avx512_bits == 512 ? 8 : 4) << f.class_name;
  }
  for (int64_t m = 1; m <= kernels::kBf16GemvMaxRows + 1; ++m) {
    SCOPED_TRACE("m " + std::to_string(m));
    EXPECT_EQ(own_gemv(lin, m), offered && m <= rows) << lin.implementation(m);
    EXPECT_FALSE(own_gemv(onednn, m) || own_gemv(f32, m) || own_gemv(tiled, m));
    Scratch s1, s2;
    std::vector<float> y1(static_cast<size_t>(m * out), -7.0f), y2(y1.size(), 7.0f);
    lin.run(x.data(), y1.data(), m, 2, s1.get(lin.scratch_floats(m)));
    onednn.run(x.data(), y2.data(), m, 2, s2.get(onednn.scratch_floats(m)));
    for (size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 1e-4 * (1.0 + std::abs(y2[i]))) << i;
  }
  if (!offered) GTEST_SKIP() << "no bf16 GEMV of attend's on this CPU/ISA cap: oneDNN's path checked only";
}

// ATTEND_BF16_GEMV accepts 0 and 1 only: anything else fails the construction of bf16 projections.
TEST(Linear, InvalidBf16GemvSettingThrows) {
  const char* env = std::getenv("ATTEND_BF16_GEMV");
  if (!env || std::string(env) != "yes") GTEST_SKIP() << "run by ctest with ATTEND_BF16_GEMV=yes";
  std::vector<float> w(64 * 64, 0.5f);
  try {
    const Linear lin(w.data(), false, 64, 64, nullptr, WeightType::bf16);
    ADD_FAILURE() << "accepted ATTEND_BF16_GEMV=yes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ATTEND_BF16_GEMV"), std::string::npos) << e.what();
  }
}

// ATTEND_BF16_GEMV_ROWS accepts 4 and 8 only: anything else fails the construction of bf16
// projections, the rule's query and decode_tuning().
TEST(Linear, InvalidBf16GemvRowsSettingThrows) {
  const char* env = std::getenv("ATTEND_BF16_GEMV_ROWS");
  if (!env || std::string(env) != "5") GTEST_SKIP() << "run by ctest with ATTEND_BF16_GEMV_ROWS=5";
  EXPECT_THROW(detail::bf16_decode_gemv_rows(), Error);
  EXPECT_THROW(decode_tuning(), Error);
  std::vector<float> w(64 * 64, 0.5f);
  try {
    const Linear lin(w.data(), false, 64, 64, nullptr, WeightType::bf16);
    ADD_FAILURE() << "accepted ATTEND_BF16_GEMV_ROWS=5";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ATTEND_BF16_GEMV_ROWS"), std::string::npos) << e.what();
  }
}

// Packed weights of 2 MiB or more start on a 2 MiB page (transparent huge pages can back them all:
// a decode step streams them) and compute the same product; smaller ones are oneDNN's allocation.
TEST(Linear, LargeWeightsStartOnA2MiBPage) {
  constexpr int64_t in = 1024, out = 768;  // 3 MiB in f32, 1.5 MiB in bf16
  std::mt19937 rng(4);
  std::vector<float> w(static_cast<size_t>(in * out));
  for (float& v : w) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  const Linear f32(w.data(), false, in, out, nullptr, WeightType::f32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f32.weight_data()) % (uintptr_t{2} << 20), 0u);
  const Linear bf16(w.data(), false, in, out, nullptr, WeightType::bf16);
  EXPECT_NE(bf16.weight_data(), nullptr);
  std::vector<float> x(static_cast<size_t>(3 * in)), y(static_cast<size_t>(3 * out));
  for (float& v : x) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  Scratch scratch;
  f32.run(x.data(), y.data(), 3, 2, scratch.get(f32.scratch_floats(3)));
  double worst = 0;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < out; ++c) {
      double want = 0;
      for (int64_t i = 0; i < in; ++i) want += static_cast<double>(x[r * in + i]) * w[i * out + c];
      worst = std::max(worst, std::abs(want - y[r * out + c]));
    }
  EXPECT_LT(worst, 1e-3);
}

// Widened bf16 weights hold half the values' bits but twice the bytes; the native path is reported
// as what it is.
TEST(Linear, WeightBytesAndImplementation) {
  std::vector<float> w(64 * 32, 0.5f);
  const Linear f32(w.data(), false, 64, 32, nullptr, WeightType::f32);
  const Linear widened(w.data(), false, 64, 32, nullptr, WeightType::bf16, {false, true});
  EXPECT_GE(f32.weight_bytes(), 64u * 32u * 4u);
  EXPECT_GE(widened.weight_bytes(), 64u * 32u * 4u);
  EXPECT_NE(widened.implementation(8).find("bf16 values in f32"), std::string::npos) << widened.implementation(8);
  EXPECT_EQ(f32.implementation(8).find("bf16 values in f32"), std::string::npos) << f32.implementation(8);
  const Linear tiled(w.data(), false, 64, 32, nullptr, WeightType::bf16, {true, true});
  EXPECT_NE(tiled.implementation(8).find("bf16 values in f32"), std::string::npos) << tiled.implementation(8);
}

}  // namespace
}  // namespace attend::gemm
