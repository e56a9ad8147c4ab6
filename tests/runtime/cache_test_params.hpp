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

/// Every ISA this machine runs × every storage type.
inline std::vector<std::tuple<Isa, DType>> isa_dtype_params() {
  std::vector<std::tuple<Isa, DType>> p;
  for (Isa isa : supported_isas())
    for (DType t : {DType::f32, DType::bf16, DType::f16}) p.emplace_back(isa, t);
  return p;
}

inline std::string isa_dtype_name(const ::testing::TestParamInfo<std::tuple<Isa, DType>>& i) {
  return std::string(isa_name(std::get<0>(i.param))) + "_" + dtype_name(std::get<1>(i.param));
}

}  // namespace attend::testing
