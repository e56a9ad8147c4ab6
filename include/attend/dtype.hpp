// Element types of tensors and stored data.
#pragma once

#include <attend/export.hpp>
#include <cstddef>

namespace attend {

/// Element type of a tensor (TensorView) or of stored data (weights, KV cache). bf16 and f16
/// elements are their 16-bit patterns (`uint16_t` storage). Arithmetic is f32 unless
/// SdpaOptions::fpmath allows bf16 products.
enum class DType {
  f32,
  bf16,  ///< bfloat16: f32's exponent range, 8 bits of mantissa
  f16,   ///< IEEE half: 11 bits of mantissa, max 65504
};

/// "f32", "bf16" or "f16" ("unknown" for a value outside the enum).
ATTEND_API const char* dtype_name(DType t);

/// Bytes per element: 4 or 2 (0 for a value outside the enum).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
  }
  return 0;
}

}  // namespace attend
