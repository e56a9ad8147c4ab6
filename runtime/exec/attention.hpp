// Runs attention over per-entry K/V storage: the executor behind scaled_dot_product_attention, the
// KV-cache paths and paged attention. Plain data in, no public types: the api/ layer translates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "../context/workspace.hpp"
#include "../kernels/kernel_table.hpp"

namespace attend::exec {

/// One sequence of the job: a batch entry of sdpa or a slot cache call, a chunk of a paged call.
/// Its tensors start at head 0.
struct BatchEntry {
  const void* q;  // elements of Problem::q_type
  const void* k;  // elements of Problem::kv_type (paged: this sequence's keys in pool page 0)
  const void* v;
  void* o;               // elements of Problem::o_type
  const float* bias;     // (b, head 0) of the bias, or null
  const int32_t* pages;  // paged K/V: the sequence's pool pages (kernels::FlashWork::pages), or null
  // i8 K/V: the K and V scales of head 0 (paged: pool page 0), kernels::FlashWork::k_scale; else null.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int64_t num_queries;  // Nq of this entry
  int64_t num_keys;     // Nk of this entry (causal alignment is bottom-right against it unless top_left)
  int64_t valid_keys;   // keys >= valid_keys are masked (<= num_keys)
  // Its last new_keys keys are this call's, stored by Problem::store before any item reads them.
  int64_t new_keys = 0;
  // A tree chunk (kernels::FlashWork::tree, tree_words, tree_depth), or null.
  const uint64_t* tree = nullptr;
  int64_t tree_words = 0;
  const int32_t* tree_depth = nullptr;
};

struct Problem {
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
  // Element strides (heads, rows), counting elements of q_type, kv_type and o_type.
  int64_t q_head_stride = 0, q_row_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_head_stride = 0, v_row_stride = 0, o_head_stride = 0, o_row_stride = 0;
  int64_t bias_head_stride = 0, bias_row_stride = 0, bias_key_stride = 0;
  kernels::KvType kv_type = kernels::KvType::f32;
  kernels::KvType q_type = kernels::KvType::f32, o_type = kernels::KvType::f32;
  bool k_blocked = false;                    // K in the blocked layout of a KV cache (kernels::FlashWork::k_blocked)
  int64_t page_tokens = 0, page_stride = 0;  // paged entries (kernels::FlashWork)
  int64_t scale_head_stride = 0;             // i8: floats between one kv head's scales and the next
  bool causal = false;
  // Query i sits at key position i (true) instead of i + Nk − Nq (kernels::FlashWork::first_position):
  // for the causal mask, the window and ALiBi.
  bool top_left = false;
  int64_t window = 0;
  float scale = 1.0f;  // already resolved (no 0 = 1/√D here)
  // Score terms (kernels::FlashWork): softcap (0 = none), and per query head ALiBi slopes and sink
  // logits (null = none).
  float softcap = 0.0f;
  const float* alibi = nullptr;
  const float* sinks = nullptr;
  /// How work is split. false (sdpa, the slot cache): the batch is planned as one — every entry
  /// gets the plan of the longest, with split-K sized for the whole batch; entries have one
  /// num_queries. true (paged calls): each entry is planned from its own shape alone, so its
  /// result does not depend on the other entries (batch invariance), with split-K's longer
  /// per-entry ranges (plan::make_plan's per_entry).
  bool plan_each_entry = false;
  std::vector<BatchEntry> entries;
  /// The caches' append, when the call brings new K/V: store(store_ctx, entry, kv_head) writes
  /// one kv head of the entry's new_keys last keys into its storage. run_attention calls it once per
  /// (entry with new keys, kv head), before any item reads those keys: for a decode-shaped entry
  /// (one row block) whose new keys fall in one key range, inside the item of that range, so the
  /// stores are spread over the threads and overlap the others' streaming; for the rest, on all
  /// threads before the items start. It must not throw.
  void (*store)(const void* ctx, size_t entry, int64_t kv_head) = nullptr;
  const void* store_ctx = nullptr;
};

/// Adds to `needs` the workspace run_attention takes for a uniform batch of these sizes on
/// `threads` threads: per-thread tile scratch and the split-K partial states.
void add_attention_needs(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                         int64_t num_queries, int64_t max_keys, int64_t head_dim, int64_t value_dim, int threads,
                         detail::Needs& needs);
/// The same for a built problem (entries' shapes and plan_each_entry are what count).
void add_attention_needs(const kernels::KernelTable& table, const Problem& p, int threads, detail::Needs& needs);

/// Stores every entry's new keys (Problem::store) and computes every output row of `p` with `table`'s kernels on
/// lease.threads() threads, with the lease's workspace (reserved with at least add_attention_needs). Deterministic for
/// any thread count; with plan_each_entry, an entry's bits do not depend on the other entries either.
void run_attention(const Problem& p, const kernels::KernelTable& table, const detail::Lease& lease);

}  // namespace attend::exec
