// One attention layer's weights from a .safetensors file, in either naming scheme:
//  * nn.MultiheadAttention: P+in_proj_weight [3·d, d], P+in_proj_bias [3·d], P+out_proj.weight
//    [d, d], P+out_proj.bias [d];
//  * Llama-style: P+{q,k,v,o}_proj.weight (+ optional .bias), GQA inferred from k_proj's rows.
#pragma once

#include <attend/mha.hpp>
#include <string>
#include <vector>

#include "safetensors.hpp"

namespace attend::io {

struct LoadedLayer {
  std::string scheme;  // "nn.MultiheadAttention" or "llama"
  MhaConfig config;
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;  // nn.Linear [out, in]; biases empty when absent
  std::vector<float> sinks;                           // gpt-oss attention sinks ("sinks", [heads]); empty when absent
  /// Views of the vectors above (valid while this object lives).
  MhaWeights weights() const;
};

/// `heads` query heads (> 0); `kv_heads` 0 = infer from the shapes, else it must match them.
/// Throws IoError naming the file and tensor for a missing tensor or a wrong shape, and for
/// heads that do not divide the model width.
LoadedLayer load_layer(const SafeTensors& file, const std::string& prefix, int64_t heads, int64_t kv_heads);

}  // namespace attend::io
