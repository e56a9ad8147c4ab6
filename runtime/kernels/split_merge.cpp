#include "split_merge.hpp"

#include <algorithm>
#include <cmath>

namespace attend::kernels {

void merge_key_splits(const SplitMergeArgs& a) {
  const int64_t Dv = a.value_dim;
  const int64_t split_floats = split_state_floats(a.rows, Dv);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t i = r / a.group, g = r % a.group;
    float* out = a.o + g * a.o_head_stride + i * a.o_row_stride;
    float m = -INFINITY;
    for (int64_t c = 0; c < a.splits; ++c) m = std::max(m, a.partial[c * split_floats + a.rows * Dv + 2 * r]);
    for (int64_t d = 0; d < Dv; ++d) out[d] = 0.0f;
    if (m == -INFINITY) continue;  // every key masked: zeros
    float l = 0.0f;
    for (int64_t c = 0; c < a.splits; ++c) {
      const float* split_base = a.partial + c * split_floats;
      const float* ml = split_base + a.rows * Dv;
      if (ml[2 * r + 1] == 0.0f) continue;
      const float f = std::exp(ml[2 * r] - m);
      l += f * ml[2 * r + 1];
      const float* acc = split_base + r * Dv;
      for (int64_t d = 0; d < Dv; ++d) out[d] += f * acc[d];
    }
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;  // a NaN sum stays NaN
    for (int64_t d = 0; d < Dv; ++d) out[d] *= inv;
  }
}

}  // namespace attend::kernels
