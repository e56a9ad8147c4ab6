// Where a MultiHeadAttention's packed weights lie (runtime-internal; the bench evicts them).
#pragma once

#include <attend/mha.hpp>
#include <cstddef>
#include <utility>
#include <vector>

#include "../context/internal_api.hpp"

namespace attend::detail {

struct ATTEND_INTERNAL MhaAccess {
  /// The packed projection weights (every projection this layer holds), appended to `out` as
  /// (address, bytes): what a decode step streams besides the KV cache.
  static void weight_ranges(const MultiHeadAttention& layer, std::vector<std::pair<const void*, size_t>>& out);
};

}  // namespace attend::detail
