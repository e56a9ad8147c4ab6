// Every invalid input throws attend::Error with a message naming the problem, and the output is
// left exactly as it was (checked bit for bit, guards included).
#include <gtest/gtest.h>

#include <attend/attend.hpp>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../test_tensors.hpp"

namespace attend::testing {
namespace {

struct Inputs {
  TestTensor q = TestTensor::make({2, 4, 8, 16});
  TestTensor k = TestTensor::make({2, 2, 10, 16});
  TestTensor v = TestTensor::make({2, 2, 10, 16});
  TestTensor o = TestTensor::make({2, 4, 8, 16});
  Inputs() {
    std::mt19937 rng(3);
    q.fill_uniform(rng);
    k.fill_uniform(rng);
    v.fill_uniform(rng);
    o.fill(12345.0f);
  }
};

// Runs `call`, expects attend::Error whose message contains `needle`, and that `o` is unchanged.
void expect_rejected(Inputs& in, const std::function<void(Inputs&)>& call, const std::string& needle) {
  const std::vector<float> before = in.o.storage;
  try {
    call(in);
    ADD_FAILURE() << "no attend::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
  EXPECT_EQ(0, std::memcmp(before.data(), in.o.storage.data(), before.size() * sizeof(float)))
      << "output changed by a rejected call (" << needle << ")";
}

void sdpa(Inputs& in, const SdpaOptions& opt = {}) {
  scaled_dot_product_attention(in.q.cview(), in.k.cview(), in.v.cview(), in.o.view, opt);
}

TEST(SdpaInvalid, ShapeMismatches) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(x.q.cview(), TensorView(x.k.base(), {2, 2, 10, 8}, {320, 160, 16, 1}), x.v.cview(),
                                     x.o.view);
      },
      "k head dim");
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), TensorView(x.v.base(), {2, 2, 9, 16}, {320, 160, 16, 1}),
                                     x.o.view);
      },
      "v heads/keys");
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), x.v.cview(),
                                     TensorView(x.o.base(), {2, 4, 7, 16}, {512, 128, 16, 1}));
      },
      "o must be");
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(TensorView(x.q.base(), {1, 4, 8, 16}, {512, 128, 16, 1}), x.k.cview(), x.v.cview(),
                                     x.o.view);
      },
      "batch sizes differ");
}

TEST(SdpaInvalid, HeadsNotAMultiple) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        TestTensor k3 = TestTensor::make({2, 3, 10, 16});
        TestTensor v3 = TestTensor::make({2, 3, 10, 16});
        k3.fill(0.0f);
        v3.fill(0.0f);
        scaled_dot_product_attention(x.q.cview(), k3.cview(), v3.cview(), x.o.view);
      },
      "multiple of kv heads");
}

TEST(SdpaInvalid, NullData) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(TensorView(static_cast<const float*>(nullptr), {2, 4, 8, 16}, {512, 128, 16, 1}),
                                     x.k.cview(), x.v.cview(), x.o.view);
      },
      "q data is null");
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), x.v.cview(),
                                     TensorView(static_cast<float*>(nullptr), {2, 4, 8, 16}, {512, 128, 16, 1}));
      },
      "o data is null");
}

TEST(SdpaInvalid, ZeroHeadDim) {
  Inputs in;
  float dummy[4] = {};
  expect_rejected(
      in,
      [&](Inputs& x) {
        scaled_dot_product_attention(TensorView(dummy, {2, 4, 8, 0}, {0, 0, 0, 1}),
                                     TensorView(dummy, {2, 2, 10, 0}, {0, 0, 0, 1}), x.v.cview(), x.o.view);
      },
      "head dim D must be > 0");
}

TEST(SdpaInvalid, KvLens) {
  Inputs in;
  const int64_t wrong_size[1] = {5};
  expect_rejected(
      in,
      [&](Inputs& x) {
        SdpaOptions o;
        o.kv_lens = wrong_size;
        sdpa(x, o);
      },
      "kv_lens has 1 entries");
  const int64_t too_long[2] = {5, 11};
  expect_rejected(
      in,
      [&](Inputs& x) {
        SdpaOptions o;
        o.kv_lens = too_long;
        sdpa(x, o);
      },
      "kv_lens[1] = 11");
  const int64_t negative[2] = {-1, 3};
  expect_rejected(
      in,
      [&](Inputs& x) {
        SdpaOptions o;
        o.kv_lens = negative;
        sdpa(x, o);
      },
      "kv_lens[0] = -1");
}

TEST(SdpaInvalid, Options) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.window = -1;
        sdpa(x, o);
      },
      "window");
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.scale = std::numeric_limits<float>::infinity();
        sdpa(x, o);
      },
      "scale");
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.num_threads = -2;
        sdpa(x, o);
      },
      "num_threads");
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.fpmath = static_cast<FpMath>(7);
        sdpa(x, o);
      },
      "fpmath");
}

TEST(SdpaInvalid, OutputOverlapsInput) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        // o aliases q's storage.
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), x.v.cview(),
                                     TensorView(x.q.base(), {2, 4, 8, 16}, {512, 128, 16, 1}));
      },
      "overlaps an input");
  expect_rejected(
      in,
      [](Inputs& x) {
        // Partial overlap: o starts inside v.
        TestTensor big = TestTensor::make({1, 1, 1, 4096});
        big.fill(0.0f);
        TensorView v(big.base(), {2, 2, 10, 16}, {320, 160, 16, 1});
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), TensorView(big.view.data(), v.shape(), v.strides()),
                                     TensorView(big.base() + 600, {2, 4, 8, 16}, {512, 128, 16, 1}));
      },
      "overlaps an input");
}

TEST(SdpaInvalid, OutputStridesAlias) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(x.q.cview(), x.k.cview(), x.v.cview(),
                                     TensorView(x.o.base(), {2, 4, 8, 16}, {512, 0, 16, 1}));
      },
      "alias");
}

TEST(SdpaInvalid, ReadOnlyOutput) {
  Inputs in;
  expect_rejected(
      in, [](Inputs& x) { scaled_dot_product_attention(x.q.cview(), x.k.cview(), x.v.cview(), x.o.cview()); },
      "read-only");
}

TEST(SdpaInvalid, NonContiguousLastDimension) {
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        scaled_dot_product_attention(TensorView(x.q.view.data(), {2, 4, 8, 8}, {512, 128, 16, 2}), x.k.cview(),
                                     x.v.cview(), x.o.view);
      },
      "contiguous");
}

TEST(SdpaInvalid, BiasDoesNotBroadcast) {
  Inputs in;
  TestTensor bias = TestTensor::make({2, 4, 8, 9});
  bias.fill(0.0f);
  expect_rejected(
      in,
      [&](Inputs& x) {
        SdpaOptions o;
        o.bias = bias.cview();
        sdpa(x, o);
      },
      "does not broadcast");
}

TEST(SdpaInvalid, ValidCallStillWorksAfterRejections) {
  // Rejected calls must not leave state behind (ctest runs each test in its own process, so the
  // rejections are made here): a valid call afterwards succeeds and writes.
  Inputs in;
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.window = -1;
        sdpa(x, o);
      },
      "window");
  expect_rejected(
      in,
      [](Inputs& x) {
        SdpaOptions o;
        o.num_threads = -2;
        sdpa(x, o);
      },
      "num_threads");
  sdpa(in);
  EXPECT_NE(in.o.at(0, 0, 0, 0), 12345.0f);
  EXPECT_TRUE(in.o.guards_intact());
}

}  // namespace
}  // namespace attend::testing

namespace attend::testing {
namespace {

TEST(SdpaWorkspace, IndependentOfSequenceLengthForPrefill) {
  // O(threads × tile): doubling N leaves the prefill workspace unchanged.
  float x = 0.0f;
  auto bytes = [&](int64_t n) {
    SdpaOptions opt;
    opt.num_threads = 2;
    return sdpa_workspace_bytes(TensorView(&x, {1, 8, n, 64}, {0, 0, 0, 1}),
                                TensorView(&x, {1, 8, n, 64}, {0, 0, 0, 1}),
                                TensorView(&x, {1, 8, n, 64}, {0, 0, 0, 1}), opt);
  };
  EXPECT_GT(bytes(1024), 0u);
  EXPECT_EQ(bytes(1024), bytes(8192));
  EXPECT_LT(bytes(8192), size_t{2} << 20);
}

TEST(SdpaWorkspace, DecodeSplitsAreBounded) {
  // Split-K partials are capped at 16 splits, so a 16× longer cache costs at most a bounded amount more.
  float x = 0.0f;
  auto bytes = [&](int64_t nk) {
    SdpaOptions opt;
    opt.num_threads = 2;
    return sdpa_workspace_bytes(TensorView(&x, {1, 32, 1, 128}, {0, 0, 0, 1}),
                                TensorView(&x, {1, 32, nk, 128}, {0, 0, 0, 1}),
                                TensorView(&x, {1, 32, nk, 128}, {0, 0, 0, 1}), opt);
  };
  EXPECT_EQ(bytes(16384), bytes(1 << 20));
}

}  // namespace
}  // namespace attend::testing
