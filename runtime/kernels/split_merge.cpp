#include "split_merge.hpp"

#include <algorithm>
#include <cmath>

#include "../numeric/convert.hpp"

namespace attend::kernels {

void merge_key_splits(const SplitMergeArgs& a) {
  const int64_t Dv = a.value_dim;
  const int64_t split_floats = split_state_floats(a.rows, Dv);
  const int64_t elem = kv_type_bytes(a.o_type);
  constexpr int64_t kChunk = 64;  // output elements merged on the stack, then stored in o_type
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t i = r / a.group, g = r % a.group;
    void* dst = static_cast<char*>(a.o) + (g * a.o_head_stride + i * a.o_row_stride) * elem;
    float m = -INFINITY;
    // A range whose state holds a NaN (a NaN logit, value or query it saw) makes the row NaN, as one
    // range would: std::max alone skips a NaN maximum, and a row whose ranges all had one output 0.
    bool poisoned = false;
    for (int64_t c = 0; c < a.splits; ++c) {
      const float* ml = a.partial + c * split_floats + a.rows * Dv + 2 * r;
      poisoned |= std::isnan(ml[0]) || std::isnan(ml[1]);
      m = std::max(m, ml[0]);
    }
    if (poisoned) m = NAN;
    float l = 0.0f;
    if (m != -INFINITY)  // else every key masked: zeros (a NaN m gives NaN sums)
      for (int64_t c = 0; c < a.splits; ++c) {
        const float* ml = a.partial + c * split_floats + a.rows * Dv;
        if (ml[2 * r + 1] != 0.0f) l += std::exp(ml[2 * r] - m) * ml[2 * r + 1];
      }
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;  // a NaN sum stays NaN
    for (int64_t d0 = 0; d0 < Dv; d0 += kChunk) {
      const int64_t n = std::min(kChunk, Dv - d0);
      float out[kChunk] = {};
      if (m != -INFINITY) {
        for (int64_t c = 0; c < a.splits; ++c) {
          const float* split_base = a.partial + c * split_floats;
          const float* ml = split_base + a.rows * Dv;
          if (ml[2 * r + 1] == 0.0f) continue;
          const float f = std::exp(ml[2 * r] - m);
          const float* acc = split_base + r * Dv + d0;
          for (int64_t d = 0; d < n; ++d) out[d] += f * acc[d];
        }
        for (int64_t d = 0; d < n; ++d) out[d] *= inv;
      }
      switch (a.o_type) {
        case KvType::f32: std::copy(out, out + n, static_cast<float*>(dst) + d0); break;
        case KvType::bf16:
          for (int64_t d = 0; d < n; ++d) static_cast<uint16_t*>(dst)[d0 + d] = numeric::to_bf16(out[d]);
          break;
        case KvType::f16:
          for (int64_t d = 0; d < n; ++d) static_cast<uint16_t*>(dst)[d0 + d] = numeric::to_f16(out[d]);
          break;
        case KvType::i8: break;  // (never an output's type)
      }
    }
  }
}

}  // namespace attend::kernels
