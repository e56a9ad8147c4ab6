// attend::TensorView — a non-owning view of a 4-D tensor (f32, bf16 or f16) with explicit element
// strides.
#pragma once

#include <array>
#include <attend/dtype.hpp>
#include <cstdint>

namespace attend {

/// A non-owning, 4-D view: element (i0, i1, i2, i3) is at
/// `data + (i0*strides[0] + i1*strides[1] + i2*strides[2] + i3*strides[3])` elements of dtype().
///
/// Shapes and strides are in elements (not bytes). Attention tensors use the logical layout
/// [B, H, N, D] (batch, heads, tokens, head dimension); strides let a view describe other physical
/// layouts without a copy, e.g. the [B, N, H, D] output of a fused QKV projection:
///   `TensorView(ptr, {B, H, N, D}, {N*H*D, D, H*D, 1})`.
/// Strides must be non-negative. Views built from a const pointer are read-only: passing one as an
/// output throws attend::Error.
///
/// The `float*` constructors make f32 views. bf16 and f16 views come from the `void*` ones; their
/// elements are the 16-bit patterns (`uint16_t` storage, e.g. a torch.bfloat16 tensor's data).
class TensorView {
 public:
  using Dims = std::array<int64_t, 4>;

  TensorView() = default;
  TensorView(float* data, Dims shape, Dims strides)
      : TensorView(static_cast<void*>(data), DType::f32, shape, strides) {}
  TensorView(const float* data, Dims shape, Dims strides)
      : TensorView(static_cast<const void*>(data), DType::f32, shape, strides) {}
  TensorView(void* data, DType dtype, Dims shape, Dims strides)
      : data_(data), dtype_(dtype), shape_(shape), strides_(strides), writable_(true) {}
  TensorView(const void* data, DType dtype, Dims shape, Dims strides)
      : data_(const_cast<void*>(data)), dtype_(dtype), shape_(shape), strides_(strides), writable_(false) {}

  /// A densely packed row-major view (last dimension contiguous).
  static TensorView dense(float* data, Dims shape) { return TensorView(data, shape, dense_strides(shape)); }
  static TensorView dense(const float* data, Dims shape) { return TensorView(data, shape, dense_strides(shape)); }
  static TensorView dense(void* data, DType dtype, Dims shape) {
    return TensorView(data, dtype, shape, dense_strides(shape));
  }
  static TensorView dense(const void* data, DType dtype, Dims shape) {
    return TensorView(data, dtype, shape, dense_strides(shape));
  }

  /// Row-major strides for `shape`.
  static constexpr Dims dense_strides(Dims shape) {
    return {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
  }

  DType dtype() const { return dtype_; }
  /// The elements of an f32 view; null for any other dtype (use data_ptr()).
  const float* data() const { return dtype_ == DType::f32 ? static_cast<const float*>(data_) : nullptr; }
  /// The mutable elements of a writable f32 view; null for a read-only view or another dtype.
  float* mutable_data() const { return writable_ && dtype_ == DType::f32 ? static_cast<float*>(data_) : nullptr; }
  /// The first element, of any dtype.
  const void* data_ptr() const { return data_; }
  /// The first element of a writable view, of any dtype; null for a read-only view.
  void* mutable_data_ptr() const { return writable_ ? data_ : nullptr; }
  bool writable() const { return writable_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t stride(int i) const { return strides_[i]; }
  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3]; }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Dims shape_{0, 0, 0, 0};
  Dims strides_{0, 0, 0, 0};
  bool writable_ = false;
};

}  // namespace attend
