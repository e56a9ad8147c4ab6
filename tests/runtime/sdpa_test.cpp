// scaled_dot_product_attention against the double-precision reference, on every ISA path this
// machine can run (each test is instantiated once per path, forced through SdpaOptions::isa).
//
// Shapes are chosen around the kernels' tile edges: N ∈ {1, 2, 7, 17, 63, 64, 65, 513} hits the
// four boundary classes (less than, equal to, a multiple of, more than a tile) of the 64-row /
// 64-key wide tiles, the 16/8/4-lane vectors and the 256-key narrow tiles; D ∈ {1, 3, …, 256}
// covers head dims below, at and between vector widths.
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../reference/reference_attention.hpp"
#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

struct Case {
  int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, D = 16, Dv = -1;  // Dv -1: same as D
  bool causal = false;
  int64_t window = 0;
  std::vector<int64_t> kv_lens;
  bool bnhd = false;  // store q/k/v/o as [B, N, H, D] with padding (strided views)
  float input_scale = 1.0f;
  float scale = 0.0f;
  bool bias = false;
  TensorView::Dims bias_shape{1, 1, 1, 1};
  int threads = 0;
  FpMath fpmath = FpMath::strict;

  std::string describe() const {
    return "B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) +
           " Nq=" + std::to_string(Nq) + " Nk=" + std::to_string(Nk) + " D=" + std::to_string(D) +
           " Dv=" + std::to_string(Dv < 0 ? D : Dv) + (causal ? " causal" : "") +
           (window ? " window=" + std::to_string(window) : "") + (kv_lens.empty() ? "" : " kv_lens") +
           (bnhd ? " strided" : "") + (bias ? " bias" : "") + (fpmath == FpMath::bf16 ? " fpmath=bf16" : "");
  }
};

struct Outcome {
  TestTensor q, k, v, o, bias;
  std::vector<double> expected;
};

Outcome run_case(const Case& c, Isa isa, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  const int64_t Dv = c.Dv < 0 ? c.D : c.Dv;
  const std::array<int, 4> order = c.bnhd ? std::array<int, 4>{0, 2, 1, 3} : std::array<int, 4>{0, 1, 2, 3};
  const int64_t pad = c.bnhd ? 5 : 0;
  Outcome r;
  r.q = TestTensor::make({c.B, c.Hq, c.Nq, c.D}, order, pad);
  r.k = TestTensor::make({c.B, c.Hkv, c.Nk, c.D}, order, pad);
  r.v = TestTensor::make({c.B, c.Hkv, c.Nk, Dv}, order, pad);
  r.o = TestTensor::make({c.B, c.Hq, c.Nq, Dv}, order, pad);
  r.q.fill_uniform(rng, -c.input_scale, c.input_scale);
  r.k.fill_uniform(rng, -c.input_scale, c.input_scale);
  r.v.fill_uniform(rng);
  SdpaOptions opt;
  opt.causal = c.causal;
  opt.window = c.window;
  opt.kv_lens = c.kv_lens;
  opt.scale = c.scale;
  opt.num_threads = c.threads;
  opt.isa = isa;
  opt.fpmath = c.fpmath;
  if (c.bias) {
    r.bias = TestTensor::make(c.bias_shape);
    r.bias.fill_uniform(rng, -2.0f, 2.0f);
    opt.bias = r.bias.cview();
  }
  scaled_dot_product_attention(r.q.cview(), r.k.cview(), r.v.cview(), r.o.view, opt);
  r.expected = reference_attention(r.q.cview(), r.k.cview(), r.v.cview(), opt);
  return r;
}

// The tolerance rule of every test (close_to: max error ≤ 1e-5 × the output's largest magnitude,
// at least 1e-3), and fully masked rows exactly zero.
void expect_matches(const Case& c, const Outcome& r, double tol = 1e-5) {
  const int64_t B = c.B, H = c.Hq, N = c.Nq, Dv = c.Dv < 0 ? c.D : c.Dv;
  std::vector<float> got(r.expected.size());
  int64_t bad = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t d = 0; d < Dv; ++d) {
          const size_t at = static_cast<size_t>(((b * H + h) * N + i) * Dv + d);
          got[at] = r.o.at(b, h, i, d);
          // A fully masked row must be exactly zero, not merely close.
          if (r.expected[at] == 0.0 && got[at] != 0.0) ++bad;
        }
  EXPECT_TRUE(close_to(got, r.expected, tol)) << c.describe();
  EXPECT_EQ(bad, 0) << "fully masked rows must be exactly zero: " << c.describe();
  EXPECT_TRUE(r.o.guards_intact()) << "write outside the output storage: " << c.describe();
}

class Sdpa : public ::testing::TestWithParam<Isa> {
 protected:
  void check(const Case& c) {
    SCOPED_TRACE(c.describe());
    const Outcome r = run_case(c, GetParam());
    expect_matches(c, r);
  }
};

TEST_P(Sdpa, SequenceLengthsAcrossTileEdges) {
  for (int64_t n : {1, 2, 7, 17, 63, 64, 65, 513})
    for (int64_t d : {16, 64})
      for (bool causal : {false, true}) {
        Case c;
        c.Hq = c.Hkv = 2;
        c.Nq = c.Nk = n;
        c.D = d;
        c.causal = causal;
        check(c);
      }
}

TEST_P(Sdpa, HeadDims) {
  for (int64_t d : {1, 3, 16, 40, 64, 80, 96, 128, 256})
    for (int64_t n : {7, 65}) {
      Case c;
      c.Hq = c.Hkv = 2;
      c.Nq = c.Nk = n;
      c.D = d;
      check(c);
      c.Nq = 1;  // the narrow (decode) path
      check(c);
    }
}

TEST_P(Sdpa, ValueDimDiffersFromHeadDim) {
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{64, 32}, {16, 80}, {3, 17}, {128, 1}})
    for (int64_t nq : {1, 33}) {
      Case c;
      c.Nq = nq;
      c.Nk = 70;
      c.D = d;
      c.Dv = dv;
      check(c);
    }
}

TEST_P(Sdpa, FewerOrMoreQueriesThanKeys) {
  for (auto [nq, nk] : {std::pair<int64_t, int64_t>{1, 513}, {7, 65}, {65, 7}, {17, 200}, {100, 300}})
    for (bool causal : {false, true}) {
      Case c;
      c.B = 2;
      c.Hq = c.Hkv = 2;
      c.Nq = nq;
      c.Nk = nk;
      c.D = 64;
      c.causal = causal;
      check(c);
    }
}

TEST_P(Sdpa, GroupedQueryAttention) {
  for (int64_t ratio : {1, 2, 3, 4, 6, 7, 8})  // 3, 6, 7: the narrow softmax takes rows 4 + 2 + 1
    for (auto [nq, nk] : {std::pair<int64_t, int64_t>{1, 300}, {5, 77}, {70, 70}, {1, 2100}})
      for (bool causal : {false, true}) {
        Case c;
        c.Hkv = 2;
        c.Hq = 2 * ratio;
        c.Nq = nq;
        c.Nk = nk;
        c.D = 64;
        c.causal = causal;
        check(c);
      }
}

TEST_P(Sdpa, DecodeSplitsLongKeyRanges) {
  // Nk ≥ 1024 with one row block splits the keys; the merge must equal the unsplit reference.
  for (int64_t nk : {1024, 1100, 4097})
    for (int64_t d : {64, 128, 40}) {
      Case c;
      c.B = 2;
      c.Hq = 4;
      c.Hkv = 2;
      c.Nq = 1;
      c.Nk = nk;
      c.D = d;
      c.kv_lens = {nk, nk / 3};
      check(c);
    }
}

TEST_P(Sdpa, StridedViews) {
  for (int64_t nq : {1, 40})
    for (bool causal : {false, true}) {
      Case c;
      c.B = 2;
      c.Hq = 4;
      c.Hkv = 2;
      c.Nq = nq;
      c.Nk = 90;
      c.D = 32;
      c.bnhd = true;
      c.causal = causal;
      check(c);
    }
}

TEST_P(Sdpa, SlidingWindow) {
  for (int64_t w : {1, 5, 64, 100})
    for (bool causal : {false, true})
      for (auto [nq, nk] : {std::pair<int64_t, int64_t>{130, 130}, {1, 1500}, {20, 150}}) {
        Case c;
        c.Nq = nq;
        c.Nk = nk;
        c.D = 16;
        c.window = w;
        c.causal = causal;
        check(c);
      }
}

TEST_P(Sdpa, KvLengths) {
  for (bool causal : {false, true})
    for (int64_t nq : {1, 9, 70}) {
      Case c;
      c.B = 4;
      c.Hq = 2;
      c.Hkv = 1;
      c.Nq = nq;
      c.Nk = 130;
      c.D = 16;
      c.kv_lens = {130, 1, 64, 0};  // includes an empty sequence: fully masked rows
      c.causal = causal;
      check(c);
    }
}

TEST_P(Sdpa, AdditiveBiasBroadcasts) {
  for (TensorView::Dims shape : {TensorView::Dims{2, 4, 33, 80}, TensorView::Dims{1, 1, 33, 80},
                                 TensorView::Dims{2, 1, 1, 80}, TensorView::Dims{1, 4, 33, 1}}) {
    for (int64_t nq : {33}) {
      Case c;
      c.B = 2;
      c.Hq = 4;
      c.Hkv = 2;
      c.Nq = nq;
      c.Nk = 80;
      c.D = 16;
      c.bias = true;
      c.bias_shape = shape;
      c.causal = true;
      check(c);
    }
  }
  Case decode;  // bias on the narrow path
  decode.Hq = 4;
  decode.Hkv = 2;
  decode.Nq = 1;
  decode.Nk = 300;
  decode.D = 32;
  decode.bias = true;
  decode.bias_shape = {1, 4, 1, 300};
  check(decode);
}

TEST_P(Sdpa, FullyMaskedRowsAreZero) {
  // Causal with Nq > Nk: the first Nq − Nk queries see no key at all.
  Case c;
  c.Nq = 40;
  c.Nk = 10;
  c.D = 16;
  c.causal = true;
  const Outcome r = run_case(c, GetParam());
  for (int64_t i = 0; i < 30; ++i)
    for (int64_t d = 0; d < 16; ++d) ASSERT_EQ(r.o.at(0, 0, i, d), 0.0f) << "row " << i;
  expect_matches(c, r);
  // All keys padded away.
  Case e;
  e.B = 1;
  e.Nq = 3;
  e.Nk = 50;
  e.kv_lens = {0};
  const Outcome re = run_case(e, GetParam());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t d = 0; d < e.D; ++d) ASSERT_EQ(re.o.at(0, 0, i, d), 0.0f);
}

TEST_P(Sdpa, LargeLogitsStayFinite) {
  // |q·k·scale| up to ~1e4: the online max subtraction must keep every exponent ≤ 0.
  for (int64_t nq : {1, 70}) {
    Case c;
    c.Nq = nq;
    c.Nk = 300;
    c.D = 64;
    c.input_scale = 40.0f;
    c.scale = 0.1f;
    c.causal = nq > 1;
    check(c);
  }
}

TEST_P(Sdpa, SameBitsForEveryThreadCount) {
  // Work is split by shape only, so 1, 2 and 3 threads give identical bits, split-K included.
  auto make = [](int64_t B, int64_t Hq, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t D, bool causal) {
    Case c;
    c.B = B;
    c.Hq = Hq;
    c.Hkv = Hkv;
    c.Nq = Nq;
    c.Nk = Nk;
    c.D = D;
    c.causal = causal;
    return c;
  };
  for (Case c :
       {make(1, 8, 8, 200, 200, 64, true), make(2, 8, 2, 1, 5000, 128, false), make(1, 4, 4, 3, 700, 40, true)}) {
    std::vector<std::vector<float>> outs;
    for (int t : {1, 2, 3}) {
      c.threads = t;
      const Outcome r = run_case(c, GetParam(), 7);
      outs.emplace_back(r.o.storage);
      if (t == 1) expect_matches(c, r);
    }
    for (size_t i = 1; i < outs.size(); ++i)
      EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[i].data(), outs[0].size() * sizeof(float))) << c.describe();
  }
}

// FpMath::bf16: Q, K, P and V are rounded to bf16 (relative error ≤ 2⁻⁹ each) before products
// accumulated in f32. The bound (README, Guarantees): max error ≤ 1e-2 × the output's largest
// magnitude, on inputs of scores within ±8 (the tests draw up to that); measured worst over these
// cases 7.3e-3 (D = 128, scores up to ±5). Paths without AVX512_BF16 run strict: bitwise the f32
// result.
constexpr double kBf16MathTol = 1e-2;

class SdpaBf16Math : public ::testing::TestWithParam<Isa> {
 protected:
  void check(Case c) {
    c.fpmath = FpMath::bf16;
    SCOPED_TRACE(c.describe());
    const Outcome r = run_case(c, GetParam());
    expect_matches(c, r, kBf16MathTol);
    c.fpmath = FpMath::strict;
    const Outcome strict = run_case(c, GetParam());
    const bool same = std::memcmp(r.o.storage.data(), strict.o.storage.data(), r.o.storage.size() * sizeof(float)) == 0;
    // Prefill-shaped work (rows beyond the narrow path) runs vdpbf16ps exactly on avx512_bf16.
    // (the narrow path takes ≤ 8 rows per kv head when D is a multiple of the 16-lane vector)
    const bool wide = c.Nq * (c.Hq / c.Hkv) > 8 || c.D % 16 != 0;
    if (bf16_math_native(GetParam()) && wide)
      EXPECT_FALSE(same) << "fpmath=bf16 gave the strict bits on a path with AVX512_BF16";
    else
      EXPECT_TRUE(same) << "fpmath=bf16 must equal strict where it is not native or the call is decode-shaped";
  }
};

TEST_P(SdpaBf16Math, TileEdgesMasksAndHeadDims) {
  for (int64_t n : {1, 2, 7, 17, 63, 64, 65, 97, 127, 128, 129, 193, 257, 513})
    for (int64_t d : {16, 64, 3, 40, 80, 128})
      for (bool causal : {false, true}) {
        if (n > 200 && d != 64) continue;
        Case c;
        c.Hq = c.Hkv = 2;
        c.Nq = c.Nk = n;
        c.D = d;
        c.causal = causal;
        c.input_scale = 2.0f;
        check(c);
      }
}

TEST_P(SdpaBf16Math, EveryOption) {
  Case gqa;  // GQA, more keys than queries, window
  gqa.B = 2;
  gqa.Hq = 8;
  gqa.Hkv = 2;
  gqa.Nq = 70;
  gqa.Nk = 300;
  gqa.D = 64;
  gqa.causal = true;
  gqa.window = 100;
  check(gqa);
  Case lens = gqa;  // padding lengths, no window
  lens.window = 0;
  lens.causal = false;
  lens.kv_lens = {300, 77};
  check(lens);
  Case bias = gqa;  // a bias forces the masked (f32) P·V on every tile
  bias.window = 0;
  bias.bias = true;
  bias.bias_shape = {2, 8, 70, 300};
  check(bias);
  Case strided = gqa;  // [B, N, H, D] views with padding
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
  Case decode = gqa;  // decode-shaped: the f32 narrow path either way
  decode.Nq = 1;
  decode.Nk = 2100;
  check(decode);
}

// A NaN or an infinity in the K/V of keys a row cannot see never reaches that row, with bf16 math
// too (a masked weight is 0, and 0·inf is NaN inside a vdpbf16ps pair). Lengths whose last row
// block has more than 8 rows (a remainder of ≤ 8 rows takes the f32 narrow path).
TEST_P(SdpaBf16Math, NonFiniteMaskedKeysStayOut) {
  for (int64_t n : {100, 150}) {
    const int64_t H = 2, D = 64;
    std::mt19937 rng(5);
    TestTensor q = TestTensor::make({1, H, n, D}), k = TestTensor::make({1, H, n, D}),
               v = TestTensor::make({1, H, n, D}), o = TestTensor::make({1, H, n, D});
    q.fill_uniform(rng);
    k.fill_uniform(rng);
    v.fill_uniform(rng);
    SdpaOptions opt;
    opt.causal = true;
    opt.isa = GetParam();
    opt.fpmath = FpMath::bf16;
    const std::vector<double> want = reference_attention(q.cview(), k.cview(), v.cview(), opt);
    const int64_t last = n - 1;  // seen only by the last row
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        v.at(0, h, last, d) = d % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
        k.at(0, h, last, d) = std::numeric_limits<float>::infinity();
      }
    scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), o.view, opt);
    std::vector<float> got;
    std::vector<double> ref;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < last; ++i)
        for (int64_t d = 0; d < D; ++d) {
          got.push_back(o.at(0, h, i, d));
          ref.push_back(want[static_cast<size_t>(((h * n) + i) * D + d)]);
        }
    EXPECT_TRUE(close_to(got, ref, kBf16MathTol)) << "n=" << n;
  }
}

// bf16 math keeps each kv head's K/V packed across the head's row blocks on a thread (a buffer per
// thread, FlashWork::packed_k): a block gives the bits it gives packing its own tiles. A call of two
// 128-row blocks (one thread: the first reusing what the second packed) against each block's rows
// alone (one block: packing per tile), over windows (a block's keys starting at odd
// ones), causal and not, key counts off the 128-key units, padded head dims, GQA, a padding length,
// and a NaN/infinity in V (the V pairs then not kept, K still).
TEST_P(SdpaBf16Math, KeptPackingKeepsEachBlocksBits) {
  struct Shape {
    int64_t Hq, Hkv, Nk, D, Dv, window, kv_len;
    bool causal, bad_v;
  };
  for (const Shape s : {Shape{2, 2, 300, 64, 64, 0, 0, true, false}, Shape{3, 3, 1000, 40, 72, 0, 0, false, false},
                        Shape{2, 1, 513, 128, 128, 256, 0, true, false}, Shape{4, 1, 777, 64, 16, 255, 0, true, false},
                        Shape{2, 2, 900, 80, 80, 0, 451, false, false}, Shape{2, 2, 600, 64, 64, 0, 0, true, true},
                        Shape{2, 2, 600, 64, 64, 0, 0, false, true}}) {
    SCOPED_TRACE("Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) + " Nk=" + std::to_string(s.Nk) +
                 " D=" + std::to_string(s.D) + " Dv=" + std::to_string(s.Dv) + " window=" + std::to_string(s.window) +
                 " kv_len=" + std::to_string(s.kv_len) + " causal=" + std::to_string(s.causal) +
                 " bad_v=" + std::to_string(s.bad_v));
    const int64_t R = 128 / (s.Hq / s.Hkv);  // query positions per 128-row block
    std::mt19937 rng(static_cast<uint32_t>(s.Nk));
    TestTensor q = TestTensor::make({1, s.Hq, 2 * R, s.D}), k = TestTensor::make({1, s.Hkv, s.Nk, s.D}),
               v = TestTensor::make({1, s.Hkv, s.Nk, s.Dv}), both = TestTensor::make({1, s.Hq, 2 * R, s.Dv});
    TestTensor alone[2] = {TestTensor::make({1, s.Hq, R, s.Dv}), TestTensor::make({1, s.Hq, R, s.Dv})};
    q.fill_uniform(rng, -2.0f, 2.0f);
    k.fill_uniform(rng);
    v.fill_uniform(rng);
    if (s.bad_v) {  // a key late in the sequence (causal: seen by the last rows only)
      v.base()[(s.Nk - 3) * s.Dv] = std::numeric_limits<float>::infinity();
      v.base()[(s.Nk - 3) * s.Dv + 1] = std::numeric_limits<float>::quiet_NaN();
    }
    SdpaOptions opt;
    opt.isa = GetParam();
    opt.fpmath = FpMath::bf16;
    opt.causal = s.causal;
    opt.window = s.window;
    const std::vector<int64_t> lens{s.kv_len};
    if (s.kv_len) opt.kv_lens = lens;
    // Each block's rows alone: the second block's positions with every key; the first block's with
    // R keys fewer when causal (its rows' positions then the same; it sees none of those keys).
    for (int block : {0, 1}) {
      const int64_t keys = s.causal && block == 0 ? s.Nk - R : s.Nk;
      const TensorView qb(q.view.data() + block * R * s.D, {1, s.Hq, R, s.D}, q.view.strides()),
          kb(k.view.data(), {1, s.Hkv, keys, s.D}, k.view.strides()),
          vb(v.view.data(), {1, s.Hkv, keys, s.Dv}, v.view.strides());
      scaled_dot_product_attention(qb, kb, vb, alone[block].view, opt);
    }
    // (1 thread: the first block reuses what the second packed, the buffer started over for each
    // head; 3: a head's blocks on different threads)
    for (int threads : {1, 3}) {
      opt.num_threads = threads;
      scaled_dot_product_attention(q.cview(), k.cview(), v.cview(), both.view, opt);
      for (int block : {0, 1}) {
        int64_t differ = 0;
        for (int64_t h = 0; h < s.Hq; ++h)
          for (int64_t i = 0; i < R; ++i)
            for (int64_t d = 0; d < s.Dv; ++d) {
              const float a = both.at(0, h, block * R + i, d), b = alone[block].at(0, h, i, d);
              differ += std::memcmp(&a, &b, sizeof(float)) != 0;
            }
        EXPECT_EQ(differ, 0) << "block " << block << ", " << threads << " threads";
      }
    }
  }
}

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return isa_name(info.param); }

INSTANTIATE_TEST_SUITE_P(EveryIsa, Sdpa, ::testing::ValuesIn(supported_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(EveryIsa, SdpaBf16Math, ::testing::ValuesIn(supported_isas()), isa_param_name);

}  // namespace
}  // namespace attend::testing
