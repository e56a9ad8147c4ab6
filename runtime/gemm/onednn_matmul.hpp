// Dense projections y = x·W (+ b) on oneDNN 2.6 matmul primitives. The only runtime file that
// includes oneDNN (onednn_matmul.cpp); everything else sees this small interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attend::gemm {

enum class WeightType { f32, bf16 };

/// y[m, out] = x[m, in] · W[in, out] + bias. W is copied at construction into the layout oneDNN's
/// fastest kernel wants (prepacked once); primitives are created per row count m on first use and
/// cached. Executing is thread-safe: every call brings its own scratchpad (from its context) and stream.
class Linear {
 public:
  /// `w` is [out, in] row-major when `out_in` (PyTorch nn.Linear), else [in, out] (X·W).
  /// `bias` (out floats) may be null. bf16 weights compute with bf16 inputs and f32 accumulation.
  Linear(const float* w, bool out_in, int64_t in, int64_t out, const float* bias, WeightType type);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  /// Floats of scratch run() needs for m rows (oneDNN's scratchpad, and the bf16 copy of x).
  size_t scratch_floats(int64_t m) const;
  /// x: [m, in] dense; y: [m, out] dense. Uses at most `threads` OpenMP threads (0 = default) and
  /// `scratch` (scratch_floats(m) floats, 64-byte aligned, owned by this call).
  void run(const float* x, float* y, int64_t m, int threads, float* scratch) const;

  int64_t in() const;
  int64_t out() const;
  /// Bytes of the packed weights.
  size_t weight_bytes() const;
  /// oneDNN's name of the implementation used for `m` rows (for reports).
  std::string implementation(int64_t m) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend::gemm
