// The oneDNN 2.6 baseline for scaled-dot-product attention: what oneDNN's own benchdnn uses as its
// SDPA reference, executed step by step with primitives created once:
//   S = (Q·Kᵀ)·scale       dnnl::matmul, scale as an output-scale attribute, Kᵀ read through strides
//   S += causal mask       dnnl::binary add with a [1, M, Nk] mask broadcast over batch·heads
//                          (a binary post-op on the matmul falls back to a reference kernel in 2.6)
//   S = softmax(S)         dnnl::softmax_forward, in place, over the key axis
//   O = S·V                dnnl::matmul
// GQA query heads that share a kv head are stacked along M, so K and V are never copied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace attend::bench {

struct SdpaShape {
  int64_t B, Hq, Hkv, Nq, Nk, D;
  bool causal;
  /// Floats between one kv head's K (or V) and the next; 0 = Nk·D (dense). Larger: heads of a cache
  /// with room for more tokens (the first Nk rows of each are read).
  int64_t kv_head_stride = 0;
};

class OnednnSdpa {
 public:
  /// Creates the primitives and the score buffer (B·Hkv·G·Nq·Nk floats) for `shape`. `bf16_matmuls`:
  /// both matmuls run on bf16 operands, accumulating in f32 — the baseline at attend's FpMath::bf16.
  /// f32 tensors in and out as for attend: Q, K, V and the softmax's output are reordered to bf16
  /// by oneDNN (timed; oneDNN 2.6's fpmath_mode::bf16 attribute leaves its f32 matmul in f32).
  explicit OnednnSdpa(const SdpaShape& shape, bool bf16_matmuls = false);
  ~OnednnSdpa();
  OnednnSdpa(const OnednnSdpa&) = delete;
  OnednnSdpa& operator=(const OnednnSdpa&) = delete;

  /// q [B,Hq,Nq,D], k/v [B,Hkv,Nk,D] (heads kv_head_stride apart), o [B,Hq,Nq,D], otherwise dense.
  /// Runs and waits.
  void run(const float* q, const float* k, const float* v, float* o);

  /// oneDNN's implementation names of the two matmuls ("brg:avx512_core_bf16 / …").
  std::string matmul_impls() const;

  /// Bytes of intermediate buffers (scores, mask, scratchpads) the baseline holds.
  size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend::bench
