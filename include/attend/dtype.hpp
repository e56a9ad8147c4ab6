// Element types of tensors and stored data.
#pragma once

#include <attend/export.hpp>
#include <cstddef>

namespace attend {

/// Element type of a tensor (TensorView: f32, bf16, f16) or of stored data (weights: f32, bf16; KV
/// caches: all four). bf16 and f16 elements are their 16-bit patterns (`uint16_t` storage).
/// Arithmetic is f32 unless SdpaOptions::fpmath allows bf16 products.
enum class DType {
  f32,
  bf16,  ///< bfloat16: f32's exponent range, 8 bits of mantissa
  f16,   ///< IEEE half: 11 bits of mantissa, max 65504
  /// Signed 8-bit KV-cache storage (KVCache, PagedKVCache only): each token's K row and V row of
  /// each kv head is quantised symmetrically with its own f32 scale s = max|x| / 127 (x ≈ q · s,
  /// q = round(x / s) in [−127, 127], round to nearest even). A quarter of f32's bytes.
  i8,
};

/// "f32", "bf16", "f16" or "i8" ("unknown" for a value outside the enum).
ATTEND_API const char* dtype_name(DType t);

/// Bytes per element: 4, 2 or 1 (0 for a value outside the enum). An i8 cache also keeps one f32
/// scale per token row of K and of V.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::i8: return 1;
  }
  return 0;
}

}  // namespace attend
