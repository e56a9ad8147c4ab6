// 16-bit tensors in and out (TensorView dtypes bf16 and f16) through scaled_dot_product_attention,
// cached_attention and paged_attention, on every ISA path this machine can run.
//
// A 16-bit input is exactly its widened f32 value, and the kernels widen inside their tiles, so
// the contract is bitwise: a call on bf16/f16 q, k, v gives the bits of the same call on f32
// tensors holding the widened values, and a 16-bit o holds those f32 results rounded to nearest
// even. Each case also checks against the double-precision reference (output rounding included in
// the bound) and the guard regions around every output.
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/numeric/convert.hpp"
#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

uint16_t to_bits(float x, DType t) { return t == DType::bf16 ? numeric::to_bf16(x) : numeric::to_f16(x); }
float from_bits(uint16_t h, DType t) { return t == DType::bf16 ? numeric::from_bf16(h) : numeric::from_f16(h); }

// Relative rounding error of one 16-bit store (half an ulp): the output bound grows by it.
double rounding(DType t) { return t == DType::bf16 ? 0x1p-8 : t == DType::f16 ? 0x1p-11 : 0.0; }

// A 16-bit tensor with guards, in the same layouts as TestTensor; `wide` holds its widened values
// as an f32 TestTensor of the same layout.
struct HalfTensor {
  static constexpr size_t kGuard = 64;
  static constexpr uint16_t kGuardBits = 0x7ebd;  // a NaN in both formats that no kernel writes
  DType dtype = DType::bf16;
  std::vector<uint16_t> storage;
  TensorView view;
  size_t used = 0;

  static HalfTensor like(const TestTensor& t, DType dtype) {
    HalfTensor h;
    h.dtype = dtype;
    h.used = t.used;
    h.storage.assign(h.used + 2 * kGuard, kGuardBits);
    h.view = TensorView(static_cast<void*>(h.storage.data() + kGuard), dtype, t.view.shape(), t.view.strides());
    return h;
  }
  // Rounds `t` into this tensor and replaces t's values by their widened 16-bit values.
  void take_from(TestTensor& t) {
    for (size_t i = 0; i < used; ++i) {
      storage[kGuard + i] = to_bits(t.base()[i], dtype);
      t.base()[i] = from_bits(storage[kGuard + i], dtype);
    }
  }
  TensorView cview() const { return TensorView(view.data_ptr(), dtype, view.shape(), view.strides()); }
  uint16_t bits(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return storage[kGuard + static_cast<size_t>(a * view.stride(0) + b * view.stride(1) + c * view.stride(2) +
                                                d * view.stride(3))];
  }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (storage[i] != kGuardBits || storage[kGuard + used + i] != kGuardBits) return false;
    return true;
  }
};

struct Case {
  int64_t B = 1, Hq = 2, Hkv = 2, Nq = 1, Nk = 1, D = 16, Dv = -1;
  bool causal = false;
  int64_t window = 0;
  std::vector<int64_t> kv_lens;
  bool bnhd = false;
  bool bias = false;
  FpMath fpmath = FpMath::strict;
  std::string describe() const {
    return "B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
           " Nq=" + std::to_string(Nq) + " Nk=" + std::to_string(Nk) + " D=" + std::to_string(D) +
           " Dv=" + std::to_string(Dv < 0 ? D : Dv) + (causal ? " causal" : "") +
           (window ? " window=" + std::to_string(window) : "") + (kv_lens.empty() ? "" : " kv_lens") +
           (bnhd ? " strided" : "") + (bias ? " bias" : "") + (fpmath == FpMath::bf16 ? " fpmath=bf16" : "");
  }
};

struct Param {
  Isa isa;
  DType in;
};

class SdpaDtypes : public ::testing::TestWithParam<Param> {
 protected:
  // Runs c with 16-bit q/k/v into an f32 o and into a 16-bit o, and with f32 tensors of the
  // widened values; checks bits, reference and guards.
  void check(const Case& c) {
    const DType dt = GetParam().in;
    SCOPED_TRACE(c.describe() + " in=" + dtype_name(dt));
    std::mt19937 rng(7);
    const int64_t Dv = c.Dv < 0 ? c.D : c.Dv;
    const std::array<int, 4> order = c.bnhd ? std::array<int, 4>{0, 2, 1, 3} : std::array<int, 4>{0, 1, 2, 3};
    const int64_t pad = c.bnhd ? 3 : 0;
    TestTensor q = TestTensor::make({c.B, c.Hq, c.Nq, c.D}, order, pad);
    TestTensor k = TestTensor::make({c.B, c.Hkv, c.Nk, c.D}, order, pad);
    TestTensor v = TestTensor::make({c.B, c.Hkv, c.Nk, Dv}, order, pad);
    TestTensor o32 = TestTensor::make({c.B, c.Hq, c.Nq, Dv}, order, pad);
    TestTensor want32 = TestTensor::make({c.B, c.Hq, c.Nq, Dv}, order, pad);
    q.fill_uniform(rng, -2.0f, 2.0f);
    k.fill_uniform(rng, -2.0f, 2.0f);
    v.fill_uniform(rng);
    HalfTensor qh = HalfTensor::like(q, dt), kh = HalfTensor::like(k, dt), vh = HalfTensor::like(v, dt);
    HalfTensor o16 = HalfTensor::like(o32, dt);
    qh.take_from(q);
    kh.take_from(k);
    vh.take_from(v);
    SdpaOptions opt;
    opt.causal = c.causal;
    opt.window = c.window;
    opt.kv_lens = c.kv_lens;
    opt.isa = GetParam().isa;
    opt.fpmath = c.fpmath;
    TestTensor bias;
    if (c.bias) {
      bias = TestTensor::make({c.B, c.Hq, c.Nq, c.Nk});
      bias.fill_uniform(rng, -2.0f, 2.0f);
      opt.bias = bias.cview();
    }
    scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), want32.view, opt);
    scaled_dot_product_attention(qh.cview(), kh.cview(), vh.cview(), o32.view, opt);
    scaled_dot_product_attention(qh.cview(), kh.cview(), vh.cview(), o16.view, opt);
    const std::vector<double> ref = reference_attention(q.cview(), k.cview(), v.cview(), opt);

    int64_t bits_f32 = 0, bits_16 = 0;
    std::vector<float> got32, got16;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < c.Nq; ++i)
          for (int64_t d = 0; d < Dv; ++d) {
            const float w = want32.at(b, h, i, d), g = o32.at(b, h, i, d);
            if (std::memcmp(&w, &g, 4) != 0) ++bits_f32;
            const uint16_t want16 = to_bits(w, dt), got = o16.bits(b, h, i, d);
            // (NaN payloads may differ between the vector and scalar roundings; none here)
            if (want16 != got) ++bits_16;
            got32.push_back(g);
            got16.push_back(from_bits(got, dt));
          }
    EXPECT_EQ(bits_f32, 0) << "16-bit inputs must give the bits of f32 inputs holding the same values";
    EXPECT_EQ(bits_16, 0) << "a 16-bit o must hold the f32 result rounded to nearest even";
    const double tol = c.fpmath == FpMath::bf16 ? 1e-2 : 1e-5;
    EXPECT_TRUE(close_to(got32, ref, tol));
    EXPECT_TRUE(close_to(got16, ref, tol + rounding(dt)));
    EXPECT_TRUE(o32.guards_intact());
    EXPECT_TRUE(o16.guards_intact()) << "write outside the 16-bit output";
    EXPECT_TRUE(qh.guards_intact() && kh.guards_intact() && vh.guards_intact());
  }
};

TEST_P(SdpaDtypes, TileEdgesAndHeadDims) {
  for (int64_t n : {1, 7, 17, 64, 65, 129, 513})
    for (int64_t d : {3, 16, 64, 80, 128})
      for (bool causal : {false, true}) {
        if (n > 200 && d != 64) continue;
        Case c;
        c.Nq = c.Nk = n;
        c.D = d;
        c.causal = causal;
        check(c);
      }
}

TEST_P(SdpaDtypes, EveryOption) {
  Case gqa;
  gqa.B = 2;
  gqa.Hq = 8;
  gqa.Hkv = 2;
  gqa.Nq = 70;
  gqa.Nk = 300;
  gqa.D = 64;
  gqa.causal = true;
  gqa.window = 100;
  check(gqa);
  Case lens = gqa;
  lens.window = 0;
  lens.causal = false;
  lens.kv_lens = {300, 77};
  check(lens);
  Case bias = gqa;
  bias.window = 0;
  bias.bias = true;
  check(bias);
  Case strided = gqa;
  strided.bnhd = true;
  check(strided);
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{64, 32}, {16, 80}, {3, 17}, {128, 1}}) {
    Case c;
    c.Nq = 33;
    c.Nk = 70;
    c.D = d;
    c.Dv = dv;
    check(c);
  }
  Case decode = gqa;  // split-K decode: the merge writes the 16-bit o
  decode.Nq = 1;
  decode.Nk = 2100;
  decode.window = 0;
  check(decode);
  decode.bnhd = true;
  check(decode);
  Case bf16math = gqa;
  bf16math.fpmath = FpMath::bf16;
  check(bf16math);
}

// Mixed or unknown dtypes are rejected before anything is written.
TEST_P(SdpaDtypes, BadDtypesThrowAndWriteNothing) {
  const DType dt = GetParam().in;
  const DType other = dt == DType::bf16 ? DType::f16 : DType::bf16;
  std::vector<uint16_t> q16(64), k16(64), v16(64), o16(64, 0x1234);
  std::vector<float> k32(64), o32(64, 3.0f), bias(4, 0.0f);
  const TensorView::Dims shape{1, 1, 4, 16};
  const TensorView q = TensorView::dense(static_cast<const void*>(q16.data()), dt, shape);
  const TensorView k = TensorView::dense(static_cast<const void*>(k16.data()), dt, shape);
  const TensorView v = TensorView::dense(static_cast<const void*>(v16.data()), dt, shape);
  SdpaOptions opt;
  opt.isa = GetParam().isa;
  const auto rejects = [&](const TensorView& qq, const TensorView& kk, const TensorView& vv, const TensorView& oo,
                           const SdpaOptions& o, const char* what) {
    try {
      scaled_dot_product_attention(qq, kk, vv, oo, o);
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << what;
      EXPECT_NE(std::string(e.what()).find("sdpa"), std::string::npos) << e.what();
    }
  };
  const TensorView o_same = TensorView::dense(static_cast<void*>(o16.data()), dt, shape);
  const TensorView o_other = TensorView::dense(static_cast<void*>(o16.data()), other, shape);
  const TensorView o_f32 = TensorView::dense(o32.data(), shape);
  rejects(q, TensorView::dense(k32.data(), shape), v, o_f32, opt, "f32 k with 16-bit q");
  rejects(q, k, TensorView::dense(static_cast<const void*>(v16.data()), other, shape), o_f32, opt,
          "v of another dtype");
  rejects(q, k, v, o_other, opt, "o of the other 16-bit dtype");
  rejects(TensorView::dense(static_cast<const void*>(q16.data()), static_cast<DType>(7), shape), k, v, o_f32, opt,
          "unknown dtype");
  rejects(TensorView::dense(static_cast<const void*>(q16.data()), DType::i8, shape), k, v, o_f32, opt,
          "i8 (a cache storage type) as a tensor");
  rejects(q, k, v, TensorView::dense(static_cast<const void*>(o16.data()), dt, shape), opt, "read-only 16-bit o");
  SdpaOptions with_bias = opt;
  with_bias.bias = TensorView::dense(static_cast<const void*>(bias.data()), dt, {1, 1, 1, 4});
  rejects(q, k, v, o_same, with_bias, "16-bit bias");
  // Byte-accurate overlap: a 16-bit o over the second half of a 16-bit q's bytes.
  rejects(q, k, v, TensorView::dense(static_cast<void*>(q16.data() + 32), dt, {1, 1, 2, 16}), opt, "o overlaps q");
  for (uint16_t x : o16) EXPECT_EQ(x, 0x1234);
  for (float x : o32) EXPECT_EQ(x, 3.0f);
}

// cached_attention and paged_attention on 16-bit q, k_new, v_new (and o) into caches of every
// storage type: the bits of the same calls on the widened f32 values.
TEST_P(SdpaDtypes, CachesTakeSixteenBitTensors) {
  const DType dt = GetParam().in;
  const int64_t Hq = 4, Hkv = 2, D = 64, prompt = 37;
  for (DType storage : {DType::f32, DType::bf16, DType::f16, DType::i8}) {
    SCOPED_TRACE(std::string("storage ") + dtype_name(storage));
    std::mt19937 rng(3);
    KVCacheConfig cc;
    cc.kv_heads = Hkv;
    cc.head_dim = D;
    cc.slots = 1;
    cc.capacity = 64;
    cc.dtype = storage;
    KVCache c32(cc), c16(cc);
    PagedKVCacheConfig pc;
    pc.kv_heads = Hkv;
    pc.head_dim = D;
    pc.num_blocks = 8;
    pc.block_tokens = 16;
    pc.dtype = storage;
    PagedKVCache p32(pc), p16(pc);
    const int64_t s32 = p32.create_sequence(), s16 = p16.create_sequence();
    SdpaOptions opt;
    opt.isa = GetParam().isa;
    const int64_t seq0[1] = {0};
    for (int64_t n : {prompt, int64_t{1}, int64_t{1}}) {
      TestTensor q = TestTensor::make({1, Hq, n, D}), k = TestTensor::make({1, Hkv, n, D}),
                 v = TestTensor::make({1, Hkv, n, D});
      q.fill_uniform(rng);
      k.fill_uniform(rng);
      v.fill_uniform(rng);
      HalfTensor qh = HalfTensor::like(q, dt), kh = HalfTensor::like(k, dt), vh = HalfTensor::like(v, dt);
      qh.take_from(q);
      kh.take_from(k);
      vh.take_from(v);
      TestTensor want = TestTensor::make({1, Hq, n, D}), got = TestTensor::make({1, Hq, n, D});
      HalfTensor got16 = HalfTensor::like(got, dt);
      cached_attention(q.cview(), k.cview(), v.cview(), c32, seq0, want.view, opt);
      cached_attention(qh.cview(), kh.cview(), vh.cview(), c16, seq0, got16.view, opt);
      const SequenceChunk ch32{s32, n}, ch16{s16, n};
      TestTensor pwant = TestTensor::make({1, Hq, n, D});
      paged_attention(q.cview(), k.cview(), v.cview(), p32, std::span(&ch32, 1), pwant.view, opt);
      paged_attention(qh.cview(), kh.cview(), vh.cview(), p16, std::span(&ch16, 1), got.view, opt);
      int64_t bad_cached = 0, bad_paged = 0;
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t d = 0; d < D; ++d) {
            if (got16.bits(0, h, i, d) != to_bits(want.at(0, h, i, d), dt)) ++bad_cached;
            const float a = pwant.at(0, h, i, d), b = got.at(0, h, i, d);
            if (std::memcmp(&a, &b, 4) != 0) ++bad_paged;
          }
      EXPECT_EQ(bad_cached, 0) << "cached_attention, n=" << n;
      EXPECT_EQ(bad_paged, 0) << "paged_attention, n=" << n;
      EXPECT_TRUE(got16.guards_intact() && got.guards_intact());
    }
    // Mixed dtypes between q and the new K/V are rejected, the cache unchanged.
    std::vector<uint16_t> q16(Hq * D), kv16(Hkv * D);
    std::vector<float> k32(Hkv * D), o32(Hq * D);
    const TensorView qv = TensorView::dense(static_cast<const void*>(q16.data()), dt, {1, Hq, 1, D});
    const TensorView kv = TensorView::dense(static_cast<const void*>(kv16.data()), dt, {1, Hkv, 1, D});
    EXPECT_THROW(cached_attention(qv, TensorView::dense(k32.data(), {1, Hkv, 1, D}), kv, c16, seq0,
                                  TensorView::dense(o32.data(), {1, Hq, 1, D}), opt),
                 Error);
    EXPECT_EQ(c16.length(0), prompt + 2);
    const SequenceChunk ch{s16, 1};
    EXPECT_THROW(paged_attention(qv, kv, TensorView::dense(k32.data(), {1, Hkv, 1, D}), p16, std::span(&ch, 1),
                                 TensorView::dense(o32.data(), {1, Hq, 1, D}), opt),
                 Error);
    EXPECT_EQ(p16.length(s16), prompt + 2);
    EXPECT_THROW(p16.append(s16, kv, TensorView::dense(k32.data(), {1, Hkv, 1, D})), Error);
    EXPECT_EQ(p16.length(s16), prompt + 2);
  }
}

std::vector<Param> params() {
  std::vector<Param> p;
  for (Isa isa : supported_isas())
    for (DType t : {DType::bf16, DType::f16}) p.push_back({isa, t});
  return p;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(isa_name(info.param.isa)) + "_" + dtype_name(info.param.in);
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, SdpaDtypes, ::testing::ValuesIn(params()), param_name);

}  // namespace
}  // namespace attend::testing
