// The layer's view of a KVCache's storage (runtime-internal).
#pragma once

#include <atomic>
#include <attend/kv_cache.hpp>
#include <cstdint>
#include <utility>
#include <vector>

#include "../context/internal_api.hpp"
#include "../kernels/kernel_table.hpp"

namespace attend::detail {

struct ATTEND_INTERNAL KVCacheAccess {
  /// The kernels' name for the storage type.
  static kernels::KvType kv_type(const KVCache& c);
  /// K / V of `seq`, kv head 0, token 0. Heads are head_tokens() token rows apart (× head_dim K
  /// elements, × value_dim V elements). V: token t's row at t·value_dim. K: blocked
  /// (kernels::FlashWork::k_blocked), kernels::kKeyBlock tokens per block.
  static int64_t head_tokens(const KVCache& c);
  static const void* keys(const KVCache& c, int64_t seq);
  static const void* values(const KVCache& c, int64_t seq);
  /// i8: the K / V scales of `seq`, kv head 0 (one per token; heads head_tokens() apart);
  /// null for other types.
  static const float* key_scales(const KVCache& c, int64_t seq);
  static const float* value_scales(const KVCache& c, int64_t seq);
  /// Where `seq`'s tokens lie in the storage (every kv head: K, V, an i8 cache's scales), appended to
  /// `out` as (address, bytes): what a decode over `seq` reads.
  static void storage_ranges(const KVCache& c, int64_t seq, std::vector<std::pair<const void*, size_t>>& out);
  static void set_length(KVCache& c, int64_t seq, int64_t length);
  /// Tokens of `seq` (no range check: callers validated).
  static int64_t length(const KVCache& c, int64_t seq);
  /// The cache's use marker (detail::CacheUse).
  static std::atomic<int>& use_state(const KVCache& c);
  /// Writes `count` tokens' K and V rows (head_dim / value_dim elements of type `src`, k_stride / v_stride
  /// elements apart) of kv head `head` at `pos` on, converted to the storage type. No checks:
  /// callers validated.
  static void store(KVCache& c, int64_t seq, int64_t head, int64_t pos, int64_t count, const void* k, int64_t k_stride,
                    const void* v, int64_t v_stride, kernels::KvType src);
};

}  // namespace attend::detail
