#include "attention_plan.hpp"

#include "../parallel/partition.hpp"

namespace attend::plan {

// Split-K aims at this many (batch, kv head, key range) items in all: enough for the threads of a
// large machine, while each range stays long. Paired A/B on the decode shapes (2 threads, LLC
// flushed, against a plain read of the same bytes): 32 items beat the former rule (always the
// most ranges of ≥ 512 keys) by 0–5 points of stream for f32 and 2–10% for bf16; 16 was no better,
// 64 worse.
constexpr int64_t kDecodeTargetItems = 32;

// The shortest key range split-K makes: 512 keys, and 4096 over an i8 cache (about the bytes of
// 1024 f32 keys): a range's fixed costs (the query rows rounded to 16 bits, the requests' ramp, a
// partial state and its merge) weigh 4× as much per byte there. Zen 4, 2 threads, D2's shape
// over an i8 cache (8 kv heads, 4096 keys), LLC flushed, alternated in one process, share of a
// plain read: 4 ranges of 1024 keys 56.2/61.2/53.8%, 2 of 2048 58.3/65.2/57.7%, one 63.5/70.7/60.1%
// (docs/performance.md, session 24). Longer contexts still split (8192 keys: 2 ranges).
constexpr int64_t min_split_keys(kernels::KvType kv_type) { return kv_type == kernels::KvType::i8 ? 4096 : 512; }

// An entry planned on its own (the paged path: its split may depend only on its own shape, for
// batch invariance) aims at kDecodeTargetItems by itself, so a batch of n entries makes up to
// n × 32 items. A continuous batch has many entries: ranges of 512 keys then only add fixed costs
// (a range restarts its K and V streams and adds a partial state and a merge; 2–3 µs an item). So
// such an entry splits no range shorter than 2048 keys (f32/bf16/f16; i8 keeps 4096). Zen 4,
// 2 threads, LLC flushed, share of a paired plain read: D3's shape through the paged cache
// 88 → 91.5% (the slot cache, planned as one batch: ~92%), 32 sequences of 1024 keys 88.5 → 92.1%
// and 91.4 → 96.3%; one sequence of 4096 keys (2 ranges instead of 4) unchanged
// (docs/performance.md, session 30).
constexpr int64_t min_entry_split_keys(kernels::KvType kv_type) { return kv_type == kernels::KvType::i8 ? 4096 : 2048; }

AttentionPlan make_plan(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                        int64_t num_queries, int64_t num_keys, int64_t head_dim, int64_t value_dim,
                        kernels::KvType kv_type, bool per_entry) {
  AttentionPlan p;
  p.table = &table;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.group = q_heads / kv_heads;
  p.num_queries = num_queries;
  p.num_keys = num_keys;
  p.head_dim = head_dim;
  p.value_dim = value_dim;
  p.group_rows = p.group * num_queries;
  const auto& g = table.geometry;
  p.block_rows = p.group_rows <= g.narrow_max_rows ? p.group_rows : g.block_rows;
  if (p.block_rows == 0) p.block_rows = 1;
  p.row_blocks = parallel::row_blocks(p.group_rows, p.block_rows);
  const int64_t min_keys = per_entry ? min_entry_split_keys(kv_type) : min_split_keys(kv_type);
  const auto split = parallel::split_keys(num_keys, p.row_blocks, batch * kv_heads, kDecodeTargetItems, min_keys);
  p.key_splits = split.count;
  p.split_keys = split.keys;
  p.scratch_floats = table.scratch_floats(head_dim, value_dim, p.block_rows);
  return p;
}

}  // namespace attend::plan
