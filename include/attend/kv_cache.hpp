// attend::KVCache — one attention layer's cache of keys and values for decoder-style generation.
#pragma once

#include <attend/dtype.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace attend {

namespace detail {
struct KVCacheAccess;
}

struct KVCacheConfig {
  int64_t kv_heads = 0;      ///< KV heads of the layer (> 0)
  int64_t head_dim = 0;      ///< per-head dimension (> 0)
  int64_t slots = 0;         ///< number of sequences the cache holds at once (> 0)
  int64_t capacity = 0;      ///< tokens per sequence slot (> 0)
  DType dtype = DType::f32;  ///< storage type; bf16/f16 halve memory and decode traffic
};

/// Keys and values of up to `slots` sequences, each up to `capacity` tokens.
///
/// Layout (what the decode kernel streams): K and V are two arrays
/// [slots][kv_heads][capacity][head_dim] of `dtype`, so one (sequence, head) is a contiguous run of
/// rows read front to back. Keys are stored after rotary embedding (if the layer uses it).
/// Appending converts f32 to the storage type (round to nearest even); attention widens back to
/// f32 as it loads.
///
/// Thread safety: const member functions may run concurrently; anything that modifies a cache
/// (reset, truncate, a layer appending to it) needs exclusive access to that cache. Different
/// caches are independent.
class KVCache {
 public:
  /// Allocates (zero-filled) storage. Throws attend::Error for a non-positive size.
  explicit KVCache(const KVCacheConfig& config);
  ~KVCache();
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;

  const KVCacheConfig& config() const;

  /// Tokens stored for `seq` (0 ≤ seq < slots).
  int64_t length(int64_t seq) const;
  /// Empties `seq`.
  void reset(int64_t seq);
  /// Keeps the first `tokens` tokens of `seq` (0 ≤ tokens ≤ length(seq)): speculative-decode
  /// rollback. Appending afterwards overwrites what was dropped.
  void truncate(int64_t seq, int64_t tokens);
  /// Bytes of K and V storage.
  size_t memory_bytes() const;

 private:
  friend struct detail::KVCacheAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend
