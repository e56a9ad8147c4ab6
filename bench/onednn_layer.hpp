// The attention layer a user would write with oneDNN 2.6 primitives: a fused QKV matmul, reorders
// from the projection's [B, N, H, D] to the [B, H, N, D] the unfused attention baseline needs,
// OnednnSdpa (matmul → mask add → softmax → matmul), a reorder back, the output matmul. Decode keeps
// a dense f32 KV cache [B, Hkv, L, D] the new token's K/V are copied into. All f32; the packed
// weights in 2 MiB pages, as attend's (and the cache, the bench's KvBuffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace attend::bench {

struct LayerShape {
  int64_t B, N, dm, hq, hkv, hd;
  int64_t cache_len;  // 0: prefill of N tokens (causal); else decode N=1 with this many cached keys (incl. new)
};

class OnednnLayer {
 public:
  /// w_qkv [dm, (hq+2hkv)·hd] and w_o [hq·hd, dm] in X·W layout.
  OnednnLayer(const LayerShape& s, const float* w_qkv, const float* w_o);
  ~OnednnLayer();
  /// x [B, N, dm] → y [B, N, dm]. Decode: k_cache/v_cache [B, hkv, cache_len, hd] (the last row is
  /// overwritten with the new token's K/V).
  void run(const float* x, float* y, float* k_cache, float* v_cache);
  /// The packed weights (address, bytes): what a decode step streams besides the cache.
  std::vector<std::pair<const void*, size_t>> weight_ranges() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attend::bench
