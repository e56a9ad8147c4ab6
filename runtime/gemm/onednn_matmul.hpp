// Dense projections y = x·W (+ b) on oneDNN 2.6 matmul primitives. The only runtime file that
// includes oneDNN (onednn_matmul.cpp); everything else sees this small interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attend::gemm {

enum class WeightType { f32, bf16 };
/// Element type of the activations a projection reads (x) or writes (y); 16-bit ones are uint16_t
/// patterns.
enum class ActType { f32, bf16, f16 };

/// Paths a Linear takes on its own only on some CPUs, forced (tests run them on every machine).
struct LinearForce {
  bool tiled = false;          ///< fixed tiles, one thread each (automatic where oneDNN has no brgemm matmul)
  bool widened_bf16 = false;   ///< bf16 weights held as f32 values (automatic without a bf16 matmul)
  bool onednn_decode = false;  ///< a few rows on oneDNN's matmul even where attend's bf16 GEMV would take them
};

/// y[m, out] = x[m, in] · W[in, out] + bias. W is copied at construction into the layout oneDNN's
/// fastest kernel wants (prepacked once); primitives are created per row count m on first use and
/// cached. Executing is thread-safe: every call brings its own scratchpad (from its context) and stream.
class Linear {
 public:
  /// `w` is [out, in] row-major when `out_in` (PyTorch nn.Linear), else [in, out] (X·W).
  /// `bias` (out floats) may be null.
  /// bf16 weights compute with bf16 inputs and f32 accumulation; where oneDNN has no bf16 matmul
  /// (CPUs without AVX-512) they are held as their bf16 values in f32 and x is rounded to bf16
  /// values, giving the same products (twice the weight memory). Where oneDNN's implementation may
  /// split the reduction across threads (its gemm:jit, taken without AVX-512), run() cuts the
  /// product into tiles sized by the shape alone, one thread each, so the bits never depend on the
  /// thread count.
  Linear(const float* w, bool out_in, int64_t in, int64_t out, const float* bias, WeightType type,
         LinearForce force = {});
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  /// Floats of scratch run() needs for m rows of x of type `xt` into y of type `yt` (oneDNN's
  /// scratchpad, and the converted copies of x or y where oneDNN cannot take them as they are).
  size_t scratch_floats(int64_t m, ActType xt = ActType::f32, ActType yt = ActType::f32) const;
  /// x: [m, in] dense; y: [m, out] dense. Uses at most `threads` OpenMP threads (0 = default) and
  /// `scratch` (scratch_floats(m, xt, yt) floats, 64-byte aligned, owned by this call).
  /// f32 weights read f32 x (16-bit x is widened first); bf16 weights read bf16 x as it is (f32 x is
  /// rounded, f16 x converted, first). y comes straight out of oneDNN when it is f32, or bf16 with
  /// bf16 weights; otherwise through an f32 copy rounded to y's type.
  /// bf16 weights and up to detail::bf16_decode_gemv_rows() rows (decode) run attend's bf16 GEMV
  /// instead of oneDNN's matmul where the CPU has AVX512_BF16 (detail::bf16_decode_gemv): over the same packed
  /// weights, each output summed in reduction order (the bits do not depend on `threads` either).
  void run(const void* x, ActType xt, void* y, ActType yt, int64_t m, int threads, float* scratch) const;
  void run(const float* x, float* y, int64_t m, int threads, float* scratch) const {
    run(x, ActType::f32, y, ActType::f32, m, threads, scratch);
  }

  int64_t in() const;
  int64_t out() const;
  /// Bytes of the packed weights.
  size_t weight_bytes() const;
  /// The packed weights (weight_bytes() of them): what a decode step streams (the bench evicts them).
  const void* weight_data() const;
  /// oneDNN's name of the implementation used for `m` rows (for reports).
  std::string implementation(int64_t m) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend::gemm
