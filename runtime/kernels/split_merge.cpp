#include "split_merge.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../numeric/convert.hpp"

namespace attend::kernels {

void merge_key_splits(const SplitMergeArgs& a) {
  const int64_t Dv = a.value_dim;
  const int64_t split_floats = split_state_floats(a.rows, Dv);
  thread_local std::vector<float> row;  // one merged row, stored in o_type at the end
  row.resize(static_cast<size_t>(Dv));
  float* out = row.data();
  const int64_t elem = kv_type_bytes(a.o_type);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t i = r / a.group, g = r % a.group;
    float m = -INFINITY;
    for (int64_t c = 0; c < a.splits; ++c) m = std::max(m, a.partial[c * split_floats + a.rows * Dv + 2 * r]);
    for (int64_t d = 0; d < Dv; ++d) out[d] = 0.0f;
    if (m != -INFINITY) {  // else every key masked: zeros
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
    void* dst = static_cast<char*>(a.o) + (g * a.o_head_stride + i * a.o_row_stride) * elem;
    switch (a.o_type) {
      case KvType::f32: std::copy(out, out + Dv, static_cast<float*>(dst)); break;
      case KvType::bf16:
        for (int64_t d = 0; d < Dv; ++d) static_cast<uint16_t*>(dst)[d] = numeric::to_bf16(out[d]);
        break;
      case KvType::f16:
        for (int64_t d = 0; d < Dv; ++d) static_cast<uint16_t*>(dst)[d] = numeric::to_f16(out[d]);
        break;
    }
  }
}

}  // namespace attend::kernels
