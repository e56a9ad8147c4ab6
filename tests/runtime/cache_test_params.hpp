// What the KV-cache tests share: a value as a cache of a storage type holds it, and the (ISA, storage
// type) grid they run over.
#pragma once

#include <attend/attend.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "../reference/stored_values.hpp"

namespace attend::testing {

/// Every ISA this machine runs × every storage type.
inline std::vector<std::tuple<Isa, DType>> isa_dtype_params() {
  std::vector<std::tuple<Isa, DType>> p;
  for (Isa isa : supported_isas())
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i8}) p.emplace_back(isa, t);
  return p;
}

/// The bound (× the output's largest magnitude) a cache call on `isa` is tested at against the double
/// reference over the values a cache of type t holds: 1e-5 (f32 arithmetic), and 1e-4 for an 8-bit
/// cache on the avx512_bf16 tier, whose decode of two or more rows per kv head is integer
/// arithmetic on the queries and the weights rounded to 16 bits (README, Guarantees).
inline double stored_values_tolerance(Isa isa, DType t) {
  return t == DType::i8 && isa == Isa::avx512_bf16 ? 1e-4 : 1e-5;
}

inline std::string isa_dtype_name(const ::testing::TestParamInfo<std::tuple<Isa, DType>>& i) {
  return std::string(isa_name(std::get<0>(i.param))) + "_" + dtype_name(std::get<1>(i.param));
}

}  // namespace attend::testing
