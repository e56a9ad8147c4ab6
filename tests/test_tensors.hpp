// What every test shares: test tensors (random data in any stride layout, with NaN-patterned guard
// regions around the storage so a kernel that writes past its tile is caught even without
// AddressSanitizer), the one random-values helper and the one tolerance rule.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <attend/tensor_view.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace attend::testing {

/// n values drawn uniformly from [lo, hi).
inline std::vector<float> random_values(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// The tolerance rule of every accuracy test: max |got − want| ≤ tol × max(1e-3, max |want|), a
/// non-finite result counting as an infinite error. Relative to the output's largest magnitude, so
/// one rule serves outputs of any size; the floor keeps an all-but-zero output from demanding
/// absolute precision beyond f32.
template <class Got, class Want>
::testing::AssertionResult close_to(const Got& got, const Want& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double scale = 1e-3, worst = 0.0;
  size_t at = 0;
  for (const auto& w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double e = std::isfinite(g) ? std::abs(g - static_cast<double>(want[i])) : INFINITY;
    if (e > worst) worst = e, at = i;
  }
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max error " << worst << " at " << at << " exceeds " << tol << " × scale "
                                       << scale;
}

// A quiet NaN with a recognisable payload: kernels never produce it, so any change is a write.
inline float guard_value() {
  const uint32_t bits = 0x7fc0bad1u;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

struct TestTensor {
  static constexpr size_t kGuard = 64;  // floats before and after the storage
  std::vector<float> storage;
  TensorView view;
  size_t used = 0;  // floats between the guards

  float* base() { return storage.data() + kGuard; }

  /// Shape [d0,d1,d2,d3] stored with dimension order `order` (outermost first) and `pad` extra
  /// floats after each innermost row, e.g. order {0,2,1,3} stores [B,H,N,D] as [B,N,H,D].
  static TestTensor make(TensorView::Dims shape, std::array<int, 4> order = {0, 1, 2, 3}, int64_t pad = 0) {
    TestTensor t;
    TensorView::Dims strides{};
    int64_t step = 1;
    for (int k = 3; k >= 0; --k) {
      const int dim = order[k];
      strides[dim] = step;
      step *= shape[dim] + (k == 3 ? pad : 0);
    }
    t.used = static_cast<size_t>(step);
    t.storage.assign(t.used + 2 * kGuard, guard_value());
    t.view = TensorView(t.base(), shape, strides);
    return t;
  }

  void fill_uniform(std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (size_t i = 0; i < used; ++i) base()[i] = dist(rng);
  }
  void fill(float value) {
    for (size_t i = 0; i < used; ++i) base()[i] = value;
  }
  TensorView cview() const { return TensorView(view.data(), view.shape(), view.strides()); }

  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (std::memcmp(&storage[i], &storage[0], 4) != 0) return false;
      if (std::memcmp(&storage[kGuard + used + i], &storage[0], 4) != 0) return false;
    }
    const float g = guard_value();
    return std::memcmp(&storage[0], &g, 4) == 0;
  }
  float at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return view.data()[a * view.stride(0) + b * view.stride(1) + c * view.stride(2) + d * view.stride(3)];
  }
  float& at(int64_t a, int64_t b, int64_t c, int64_t d) {  // (the view points into `storage`, which we own)
    return const_cast<float*>(
        view.data())[a * view.stride(0) + b * view.stride(1) + c * view.stride(2) + d * view.stride(3)];
  }
};

}  // namespace attend::testing
