// attend::TensorView — a non-owning view of a 4-D f32 tensor with explicit element strides.
#pragma once

#include <array>
#include <cstdint>

namespace attend {

/// A non-owning, 4-D, f32 view: `data[i0*strides[0] + i1*strides[1] + i2*strides[2] + i3*strides[3]]`.
///
/// Shapes and strides are in elements (not bytes). Attention tensors use the logical layout
/// [B, H, N, D] (batch, heads, tokens, head dimension); strides let a view describe other physical
/// layouts without a copy, e.g. the [B, N, H, D] output of a fused QKV projection:
///   `TensorView(ptr, {B, H, N, D}, {N*H*D, D, H*D, 1})`.
/// Strides must be non-negative. Views built from `const float*` are read-only: passing one as an
/// output throws attend::Error.
class TensorView {
 public:
  using Dims = std::array<int64_t, 4>;

  TensorView() = default;
  TensorView(float* data, Dims shape, Dims strides) : data_(data), shape_(shape), strides_(strides), writable_(true) {}
  TensorView(const float* data, Dims shape, Dims strides)
      : data_(const_cast<float*>(data)), shape_(shape), strides_(strides), writable_(false) {}

  /// A densely packed row-major view (last dimension contiguous).
  static TensorView dense(float* data, Dims shape) { return TensorView(data, shape, dense_strides(shape)); }
  static TensorView dense(const float* data, Dims shape) { return TensorView(data, shape, dense_strides(shape)); }

  /// Row-major strides for `shape`.
  static constexpr Dims dense_strides(Dims shape) {
    return {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
  }

  const float* data() const { return data_; }
  /// The mutable pointer; null for views created from `const float*`.
  float* mutable_data() const { return writable_ ? data_ : nullptr; }
  bool writable() const { return writable_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return strides_[i]; }
  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3]; }

 private:
  float* data_ = nullptr;
  Dims shape_{0, 0, 0, 0};
  Dims strides_{0, 0, 0, 0};
  bool writable_ = false;
};

}  // namespace attend
