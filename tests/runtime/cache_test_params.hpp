// What the KV-cache tests share: a value as a cache of a storage type holds it, and the (ISA, storage
// type) grid they run over.
#pragma once

#include <attend/attend.hpp>
#include <string>
#include <tuple>
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

/// Every ISA this machine runs × every storage type.
inline std::vector<std::tuple<Isa, DType>> isa_dtype_params() {
  std::vector<std::tuple<Isa, DType>> p;
  for (Isa isa : supported_isas())
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i8}) p.emplace_back(isa, t);
  return p;
}

inline std::string isa_dtype_name(const ::testing::TestParamInfo<std::tuple<Isa, DType>>& i) {
  return std::string(isa_name(std::get<0>(i.param))) + "_" + dtype_name(std::get<1>(i.param));
}

}  // namespace attend::testing
