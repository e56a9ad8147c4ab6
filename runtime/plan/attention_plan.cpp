#include "attention_plan.hpp"

#include "../parallel/partition.hpp"

namespace attend::plan {

// Split-K aims at this many (batch, kv head, key range) items in all: enough for the threads of a
// large machine, while each range stays long. Paired A/B on the decode shapes (2 threads, LLC
// flushed, against a plain read of the same bytes): 32 items beat the former rule (always the
// most ranges of ≥ 512 keys) by 0–5 points of stream for f32 and 2–10% for bf16; 16 was no better,
// 64 worse.
constexpr int64_t kDecodeTargetItems = 32;

AttentionPlan make_plan(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                        int64_t num_queries, int64_t num_keys, int64_t head_dim, int64_t value_dim) {
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
  const auto split = parallel::split_keys(num_keys, p.row_blocks, batch * kv_heads, kDecodeTargetItems);
  p.key_splits = split.count;
  p.split_keys = split.keys;
  p.scratch_floats = table.scratch_floats(head_dim, value_dim, p.block_rows);
  return p;
}

}  // namespace attend::plan
