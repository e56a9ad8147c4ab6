// A view of a PagedKVCache's block tables (runtime-internal; the tests check where blocks go).
#pragma once

#include <attend/paged_kv_cache.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "../context/internal_api.hpp"

namespace attend::detail {

struct ATTEND_INTERNAL PagedKVCacheAccess {
  /// The pool blocks `seq` holds, in token order (throws attend::Error for an unknown id).
  static std::vector<int32_t> block_table(const PagedKVCache& c, int64_t seq);
  /// Where `seq`'s tokens lie in the pool (its blocks, every kv head: K, V, an i8 cache's scales),
  /// appended to `out` as (address, bytes): what a decode over `seq` reads.
  static void storage_ranges(const PagedKVCache& c, int64_t seq, std::vector<std::pair<const void*, size_t>>& out);
};

}  // namespace attend::detail
