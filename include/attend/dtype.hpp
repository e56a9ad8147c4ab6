// Storage element types.
#pragma once

#include <attend/export.hpp>
namespace attend {

/// Element type of stored data (weights, KV cache). Arithmetic is always f32.
enum class DType {
  f32,
  bf16,  ///< bfloat16: f32's exponent range, 8 bits of mantissa
  f16,   ///< IEEE half: 11 bits of mantissa, max 65504
};

/// "f32", "bf16" or "f16".
ATTEND_API const char* dtype_name(DType t);

}  // namespace attend
