// What a KV cache of each storage type holds for a value: the references of the cache tests and
// the API fuzzer compare against these (no gtest here: the fuzzer includes it too).
#pragma once

#include <attend/dtype.hpp>
#include <cstdint>
#include <vector>

#include "../../runtime/numeric/convert.hpp"

namespace attend::testing {

/// x as stored in a cache of type t (round to nearest even) and read back.
inline float round_trip(float x, DType t) {
  switch (t) {
    case DType::bf16: return numeric::from_bf16(numeric::to_bf16(x));
    case DType::f16: return numeric::from_f16(numeric::to_f16(x));
    default: return x;
  }
}

/// One token's K or V row of n values (one kv head), as a cache of type t stores it and reads it
/// back: rounded element by element, or (i8) quantised with the row's own scale.
inline void round_trip_row(float* x, int64_t n, DType t) {
  if (t != DType::i8) {
    for (int64_t d = 0; d < n; ++d) x[d] = round_trip(x[d], t);
    return;
  }
  std::vector<int8_t> q(static_cast<size_t>(n));
  const float s = numeric::quantize_i8_row(x, n, q.data());
  for (int64_t d = 0; d < n; ++d) x[d] = static_cast<float>(q[static_cast<size_t>(d)]) * s;
}

}  // namespace attend::testing
