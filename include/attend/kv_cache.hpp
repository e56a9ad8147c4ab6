// attend::KVCache — one attention layer's cache of keys and values for decoder-style generation.
#pragma once

#include <attend/dtype.hpp>
#include <attend/export.hpp>
#include <attend/sdpa.hpp>
#include <attend/tensor_view.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

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
  int64_t value_dim = 0;     ///< per-head dimension of V (> 0); 0 = head_dim. D ≠ Dv: MLA-style caches.
};

/// Keys and values of up to `slots` sequences, each up to `capacity` tokens.
///
/// Layout (what the decode kernel streams): K and V are two arrays [slots][kv_heads][C] of `dtype`
/// with C = capacity rounded up to a multiple of 16 tokens, times head_dim, so one (sequence, head)
/// is a contiguous run read front to back. V is row-major ([C][head_dim]). K is blocked: 16 tokens
/// per block, each block stored transposed ([head_dim][16]), so the decode kernel scores 16 keys
/// (AVX-512; 8 or 4 per vector on AVX2/SSE2/NEON) with each FMA and needs no horizontal sums.
/// Keys are stored after rotary embedding (if the layer uses it).
/// Appending converts f32 to the storage type (round to nearest even); attention widens back to
/// f32 as it loads.
///
/// Thread safety: different caches are independent. A call that modifies a cache (append,
/// truncate, reset, cached_attention, the layer's forward_cached and set_memory) claims the whole
/// cache for its duration; a second call that would modify it, or read it (cross_attend), while
/// it is claimed throws attend::Error with ErrorCode::concurrent_use instead of losing an append —
/// even when the two calls name different sequences. Calls that only read it (cross_attend) may run
/// concurrently with each other. config(), length(), remaining() and memory_bytes() read without
/// claiming: call length()/remaining() of a sequence only while no other thread modifies the cache.
class ATTEND_API KVCache {
 public:
  /// Allocates (zero-filled) storage. Throws attend::Error for a non-positive size.
  explicit KVCache(const KVCacheConfig& config);
  ~KVCache();
  KVCache(KVCache&&) noexcept;
  KVCache& operator=(KVCache&&) noexcept;

  const KVCacheConfig& config() const;

  /// Tokens stored for `seq` (0 ≤ seq < slots).
  int64_t length(int64_t seq) const;
  /// Tokens `seq` can still take: capacity − length(seq).
  int64_t remaining(int64_t seq) const;
  /// Empties `seq`.
  void reset(int64_t seq);
  /// Keeps the first `tokens` tokens of `seq` (0 ≤ tokens ≤ length(seq)): speculative-decode
  /// rollback. Appending afterwards overwrites what was dropped.
  void truncate(int64_t seq, int64_t tokens);
  /// Bytes of K and V storage (capacity rounded up to whole 16-token blocks).
  size_t memory_bytes() const;

  /// Appends `tokens` tokens to `seq` without attending: k [1, kv_heads, tokens, head_dim] and v
  /// [1, kv_heads, tokens, value_dim], f32, bf16 or f16 of one dtype (any non-negative strides, last
  /// dimension contiguous), converted to the storage type. Throws attend::Error, changing nothing, on a shape mismatch,
  /// or with ErrorCode::capacity (naming the sequence) if it would exceed its capacity.
  void append(int64_t seq, const TensorView& k, const TensorView& v);

 private:
  friend struct detail::KVCacheAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Attention over cached sequences, for callers that run their own projections: appends k_new
/// and v_new [B, Hkv, N, D] to slots seqs[b] (distinct), then computes
/// o = softmax(q·Kᵀ·scale)·V over everything each slot then holds, causally — new token i sits at
/// position length_before + i. q and o are [B, Hq, N, D] (strided views allowed, as for
/// scaled_dot_product_attention). From `options` it honours scale, window, softcap, sinks,
/// alibi_slopes, fpmath, num_threads and isa;
/// causal is implied; kv_lens and bias are rejected (lengths come from the cache); context as for
/// scaled_dot_product_attention. All or nothing: every check (shapes, negative strides, an output
/// that is read-only, overlaps q/k_new/v_new or itself, sequence ids, capacity — ErrorCode::capacity
/// naming the sequence —, a forced ISA, the workspace limit) runs before the cache or o change.
ATTEND_API void cached_attention(const TensorView& q, const TensorView& k_new, const TensorView& v_new, KVCache& cache,
                                 std::span<const int64_t> seqs, const TensorView& o, const SdpaOptions& options = {});

}  // namespace attend
