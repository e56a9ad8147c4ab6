// attend::PagedKVCache — one attention layer's keys and values for a serving engine: fixed-size
// blocks from one shared pool, sequences created, forked (copy-on-write prefix sharing), truncated
// and released at will; paged_attention runs one continuous-batching step (prompt chunks and decode
// tokens of many sequences) in one call.
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
class PagedStep;
struct PagedKVCacheAccess;
}  // namespace detail

struct PagedKVCacheConfig {
  int64_t kv_heads = 0, head_dim = 0;  ///< of the layer (> 0)
  int64_t num_blocks = 0;              ///< blocks in the pool (> 0, below 2^31)
  int64_t block_tokens = 32;           ///< tokens per block: a positive multiple of 16
  DType dtype = DType::f32;            ///< storage type (f32, bf16, f16, i8), as for KVCache
  int64_t value_dim = 0;               ///< per-head dimension of V; 0 = head_dim
};

/// `tokens` new tokens of sequence `seq`, packed along the token dimension of a paged call.
struct SequenceChunk {
  int64_t seq;
  int64_t tokens;
  /// Tree verification (speculative decoding with a draft tree): empty (the default) for the
  /// ordinary causal chain, else `tokens` entries: parents[t] is the index within the chunk of token
  /// t's parent (an earlier index, < t) or −1 for a root. Token t then sees the sequence's earlier
  /// tokens and exactly its ancestors in the chunk (and itself). Its position — for RoPE in the
  /// layer, the window and ALiBi — is length_before + depth(t) (a root has depth 0), so an accepted
  /// path computes what a chain of those tokens would. All chunk tokens are stored at their packed
  /// index (length_before + t): PagedKVCache::keep then keeps the accepted ones. The span must stay
  /// valid for the duration of the call.
  std::span<const int32_t> parents{};
};

/// A pool of `num_blocks` blocks of `block_tokens` tokens; a sequence holds ceil(length /
/// block_tokens) blocks, minus those it shares with others.
///
/// Layout: the same as KVCache's, per block: for each kv head, K blocked ([D][16] per 16 tokens) and
/// V row-major [block_tokens][D], in `dtype`; the pool is head-major (one kv head's blocks are
/// adjacent), so blocks a sequence takes in one call are read by decode as one run. The pool is
/// mapped once, zero-filled and lazily (the operating system backs a block's pages when it is first
/// written); nothing is allocated per call except a sequence's block table growing (amortised, like
/// std::vector).
///
/// Sharing: fork(seq) makes a new sequence holding the same blocks (no K/V copied). Appending to a
/// sequence whose last, partially filled block is shared first copies that one block
/// (copy-on-write); full blocks of a shared prefix are never copied. A block returns to the pool
/// when no sequence holds it any more.
///
/// Errors: attend::Error, and the call changes nothing (lengths, blocks, pool, outputs). An unknown
/// sequence id or bad argument is ErrorCode::invalid_argument; a pool that cannot supply the blocks
/// a call needs is ErrorCode::capacity with Error::blocks_missing() set.
///
/// Thread safety: different caches are independent. Calls on *disjoint* sequences of one cache
/// may run concurrently from several threads (paged_attention, append, truncate, fork, release,
/// create_sequence): the pool and the sequence table are locked briefly, and a block shared by two
/// sequences is never written. A call that modifies or reads a sequence another call is modifying
/// throws ErrorCode::concurrent_use (never silent corruption): each call claims its sequences for
/// its duration. length(), blocks(), free_blocks(), memory_bytes() and config() read without
/// claiming (a length read while another thread appends to that sequence is either value).
class ATTEND_API PagedKVCache {
 public:
  /// Maps the pool. Throws attend::Error for a non-positive size or a block_tokens that is not a
  /// multiple of 16.
  explicit PagedKVCache(const PagedKVCacheConfig& config);
  ~PagedKVCache();
  PagedKVCache(PagedKVCache&&) noexcept;
  PagedKVCache& operator=(PagedKVCache&&) noexcept;

  const PagedKVCacheConfig& config() const;

  /// A new, empty sequence id (ids are never reused).
  int64_t create_sequence();
  /// A new sequence sharing all of seq's tokens (copy-on-write). Costs no K/V memory until one of
  /// the two appends past a partially filled shared block.
  int64_t fork(int64_t seq);
  /// Forgets `seq`; its blocks return to the pool once no sequence shares them.
  void release(int64_t seq);
  /// Tokens `seq` holds.
  int64_t length(int64_t seq) const;
  /// Keeps the first `tokens` tokens of `seq` (0 ≤ tokens ≤ length): blocks past them are released
  /// (speculative-decode rollback, or freeing a preempted sequence's tail).
  void truncate(int64_t seq, int64_t tokens);
  /// Rollback after tree verification: keeps the tokens of `seq` at `positions` (strictly
  /// ascending, each in [first, length)), moved to first, first + 1, …, and drops every other token
  /// from `first` on; the sequence then holds first + positions.size() tokens. Tokens before `first`
  /// stay. A block shared with another sequence that a moved token lands in is copied first
  /// (copy-on-write; ErrorCode::capacity with Error::blocks_missing if the pool is short). Bad
  /// arguments throw attend::Error and change nothing.
  void keep(int64_t seq, int64_t first, std::span<const int64_t> positions);
  /// Appends k ([1, kv_heads, n, head_dim]) and v ([1, kv_heads, n, value_dim]) — f32, bf16 or f16
  /// of one dtype, any non-negative strides, last dimension contiguous — to `seq` without
  /// attending. All or nothing, like paged_attention.
  void append(int64_t seq, const TensorView& k, const TensorView& v);

  /// Blocks not held by any sequence.
  int64_t free_blocks() const;
  /// Blocks held by `seq` (shared ones included).
  int64_t blocks(int64_t seq) const;
  /// Free blocks a call appending these chunks would take now (new blocks plus copy-on-write
  /// copies): what a scheduler checks against free_blocks() before admitting a step.
  int64_t blocks_needed(std::span<const SequenceChunk> chunks) const;
  /// Live sequences.
  int64_t sequences() const;
  /// Bytes of the pool (K and V of all blocks).
  size_t memory_bytes() const;
  /// Bytes of the blocks sequences hold now (each shared block counted once).
  size_t used_bytes() const;

 private:
  friend class detail::PagedStep;
  friend struct detail::PagedKVCacheAccess;

 public:
  struct Impl;  // (opaque)

 private:
  std::unique_ptr<Impl> impl_;
};

/// One continuous-batching step over a paged cache. The chunks' tokens are packed along the token
/// dimension in chunk order: q [1, Hq, T, D], k_new and v_new [1, Hkv, T, D], o [1, Hq, T, D] with
/// T = Σ tokens (any non-negative strides with a contiguous last dimension, so the token-major
/// [T, H, D] output of a projection is read in place). Each chunk's K/V are appended to its
/// sequence, then its queries attend causally to everything the sequence holds: token t of a chunk
/// sits at position length_before + t. tokens = 1 is a decode step, more a prompt chunk, 0 nothing;
/// any mix in one call. Sequence ids in one call are distinct.
///
/// From `options`: scale, window, softcap, sinks, alibi_slopes, fpmath, num_threads, isa and context;
/// kv_lens and bias are rejected.
///
/// Batch invariance: a chunk's output rows are bitwise identical whether it is computed alone or
/// with any other chunks, for any thread count — its work is split by its own shape only.
///
/// All or nothing: bad arguments, an unknown or repeated id, a sequence in use by another call
/// (ErrorCode::concurrent_use), a pool short of blocks (ErrorCode::capacity, Error::blocks_missing)
/// or the context's workspace limit throw attend::Error before the cache or o change.
ATTEND_API void paged_attention(const TensorView& q, const TensorView& k_new, const TensorView& v_new,
                                PagedKVCache& cache, std::span<const SequenceChunk> chunks, const TensorView& o,
                                const SdpaOptions& options = {});

}  // namespace attend
