// The plan of one scaled_dot_product_attention call: everything decided from the shape before any
// work starts. Plain data; nothing here knows about TensorView or threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../kernels/kernel_table.hpp"

namespace attend::plan {

struct AttentionPlan {
  const kernels::KernelTable* table = nullptr;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, group = 0;
  int64_t num_queries = 0, num_keys = 0, head_dim = 0, value_dim = 0;
  int64_t group_rows = 0;     // G · Nq stacked query rows per kv head
  int64_t block_rows = 0;     // rows per work item
  int64_t row_blocks = 0;     // blocks per kv head
  int64_t key_splits = 1;     // key ranges per block (split-K decode)
  int64_t split_keys = 0;     // keys per range
  size_t scratch_floats = 0;  // per thread
  /// The flash driver for a block of `rows` rows: narrow (decode) when the kernels' geometry allows
  /// it, else wide. The one place the path is chosen.
  kernels::FlashFn flash_for(int64_t rows) const {
    return table->geometry.narrow_fits(rows, head_dim) ? table->flash_narrow : table->flash_wide;
  }
  int64_t items() const { return batch * kv_heads * row_blocks * key_splits; }
  size_t partial_floats() const {
    return key_splits > 1 ? static_cast<size_t>(batch * kv_heads * key_splits * group_rows * (value_dim + 2)) : 0;
  }
};

/// kv_type: K/V's storage (an i8 cache's key ranges are longer: attention_plan.cpp). per_entry: the
/// plan of one entry of a batch planned entry by entry (the paged path), whose split cannot count on
/// the other entries for parallelism and so keeps its key ranges longer (attention_plan.cpp).
AttentionPlan make_plan(const kernels::KernelTable& table, int64_t batch, int64_t q_heads, int64_t kv_heads,
                        int64_t num_queries, int64_t num_keys, int64_t head_dim, int64_t value_dim,
                        kernels::KvType kv_type, bool per_entry = false);

}  // namespace attend::plan
