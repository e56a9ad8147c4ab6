// Split-K merge: combines the partial (max, sum, accumulator) states that the flash drivers write
// for the key ranges of one (batch, kv head) into the normalised output rows.
#pragma once

#include <cstdint>

#include "kernel_table.hpp"

namespace attend::kernels {

struct SplitMergeArgs {
  // [split][rows × value_dim accumulators, then rows × (max, sum) pairs], `split_floats` apart.
  const float* partial;
  int64_t splits, rows, value_dim, group;
  // Stacked row r is query position r / group of head r % group: o[g·o_head_stride + i·o_row_stride],
  // elements of o_type.
  void* o;
  int64_t o_head_stride, o_row_stride;
  KvType o_type;
};

/// O = Σ_c e^(m_c − M)·acc_c / Σ_c e^(m_c − M)·l_c, merged in split order (fixed, so the result does
/// not depend on which thread computed which split). Rows that saw no key get zeros; a NaN sum
/// stays NaN.
void merge_key_splits(const SplitMergeArgs& a);

/// Floats one split's partial state takes.
constexpr int64_t split_state_floats(int64_t rows, int64_t value_dim) { return rows * (value_dim + 2); }

}  // namespace attend::kernels
