// One paged call's life (runtime-internal), shared by paged_attention, PagedKVCache::append and the
// layer's forward_paged: claim the chunks' sequences → reserve workspace → take blocks from the
// pool (all or nothing) and append K/V → attend.
#pragma once

#include <attend/paged_kv_cache.hpp>
#include <attend/tensor_view.hpp>
#include <cstdint>
#include <span>

#include "../context/internal_api.hpp"
#include "../context/workspace.hpp"
#include "../exec/attention.hpp"
#include "attention_call.hpp"

namespace attend::detail {

class ATTEND_INTERNAL PagedStep {
 public:
  /// Checks the chunks against the cache (ids known and distinct, tokens ≥ 0 summing to `tokens`,
  /// lengths below 2^24) and claims their sequences (ErrorCode::concurrent_use if another call has
  /// one). Nothing changes; the claims end with the object.
  PagedStep(const char* who, PagedKVCache& cache, std::span<const SequenceChunk> chunks, int64_t tokens);
  ~PagedStep();
  PagedStep(const PagedStep&) = delete;
  PagedStep& operator=(const PagedStep&) = delete;

  /// Tokens chunk i's sequence held before this call.
  int64_t length_before(size_t i) const;
  /// The position of token t of chunk i: length_before(i) + t, or + its depth in a tree chunk.
  int64_t position(size_t i, int64_t t) const;
  /// Adds the attention's workspace for q_heads query heads on `threads` threads.
  void add_needs(const kernels::KernelTable& table, int64_t q_heads, int threads, Needs& needs);
  /// Takes the blocks the chunks need (ErrorCode::capacity with Error::blocks_missing, nothing
  /// changed, if the pool is short) and copies shared partial last blocks. Nothing throws after it.
  void take_blocks();
  /// Stores k and v ([1, kv_heads, T, head_dim], one dtype, validated by the caller) in the blocks taken
  /// and sets the new lengths.
  void store(const TensorView& k, const TensorView& v, int threads);
  /// take_blocks, then store.
  void append(const TensorView& k, const TensorView& v, int threads) {
    take_blocks();
    store(k, v, threads);
  }
  /// Attention of q ([1, Hq, T, D]) over the appended sequences into o (validated by the caller), with
  /// `scale` and the window and score terms of `call` (its tensors are not read). With k_new and
  /// v_new (after take_blocks, instead of store): the attention stores them first, a decode chunk's
  /// heads in the items that read them (exec::Problem::store), and sets the new lengths.
  void attend(const TensorView& q, const TensorView& o, float scale, const AttentionCall& call,
              const kernels::KernelTable& table, const Lease& lease, const TensorView* k_new = nullptr,
              const TensorView* v_new = nullptr);

  struct Scratch;  // per-thread buffers reused across calls (no allocation once warm)

 private:
  void store_head(size_t chunk, int64_t head, const TensorView& k, const TensorView& v);
  void set_lengths();
  static void store_entry(const void* ctx, size_t chunk, int64_t head);  // exec::Problem::store

  const char* who_;
  PagedKVCache& cache_;
  std::span<const SequenceChunk> chunks_;
  Scratch& scratch_;
  size_t claimed_ = 0;
};

}  // namespace attend::detail
