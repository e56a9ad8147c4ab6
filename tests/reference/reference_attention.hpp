// The oracle: plain attention (with every score term of SdpaOptions) in double precision with the score matrix
// materialised, written from the definition and sharing no code with the runtime. Mask semantics are restated here from
// the public header so a misreading in the kernels cannot hide in shared code.
#pragma once

#include <algorithm>
#include <attend/sdpa.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace attend::testing {

inline double at(const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return t.data()[a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3)];
}

inline double bias_at(const TensorView& t, int64_t b, int64_t h, int64_t i, int64_t j) {
  auto idx = [&](int dim, int64_t x) { return t.dim(dim) == 1 ? int64_t{0} : x; };
  return at(t, idx(0, b), idx(1, h), idx(2, i), idx(3, j));
}

/// Returns O as a dense [B, Hq, Nq, Dv] array of doubles.
inline std::vector<double> reference_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                               const SdpaOptions& opt) {
  const int64_t B = q.dim(0), Hq = q.dim(1), Nq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), Nk = k.dim(2), Dv = v.dim(3);
  const double scale = opt.scale != 0.0f ? opt.scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out(static_cast<size_t>(B * Hq * Nq * Dv), 0.0);
  std::vector<double> s(static_cast<size_t>(Nk));
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid = opt.kv_lens.empty() ? Nk : opt.kv_lens[b];
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < Nq; ++i) {
        // bottom-right aligned position of query i, or i itself (top-left)
        const int64_t pos = opt.causal_alignment == CausalAlignment::top_left ? i : i + (Nk - Nq);
        double mx = ninf;
        for (int64_t j = 0; j < Nk; ++j) {
          bool visible = j < valid;
          if (opt.causal && j > pos) visible = false;
          if (opt.window > 0 && j <= pos - opt.window) visible = false;
          if (!visible) {
            s[j] = ninf;
            continue;
          }
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, h, i, d) * at(k, b, hk, j, d);
          s[j] = dot * scale;
          // Model-family terms in Gemma 2's order: softcap, then ALiBi, then the bias.
          if (opt.softcap > 0.0f) s[j] = opt.softcap * std::tanh(s[j] / opt.softcap);
          if (!opt.alibi_slopes.empty())
            s[j] += static_cast<double>(opt.alibi_slopes[h]) * static_cast<double>(j - pos);
          if (opt.bias.data()) s[j] += bias_at(opt.bias, b, h, i, j);
          mx = std::max(mx, s[j]);
        }
        double* o = &out[static_cast<size_t>(((b * Hq + h) * Nq + i) * Dv)];
        if (mx == ninf) continue;  // fully masked row: zeros (with or without a sink)
        // A sink adds e^(sink − m) to the denominator only, m counting the sink.
        const bool sink = !opt.sinks.empty();
        if (sink) mx = std::max(mx, static_cast<double>(opt.sinks[h]));
        double sum = sink ? std::exp(static_cast<double>(opt.sinks[h]) - mx) : 0.0;
        for (int64_t j = 0; j < Nk; ++j) {
          s[j] = s[j] == ninf ? 0.0 : std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j < Nk; ++j) {
          if (s[j] == 0.0) continue;
          for (int64_t d = 0; d < Dv; ++d) o[d] += s[j] / sum * at(v, b, hk, j, d);
        }
      }
    }
  }
  return out;
}

}  // namespace attend::testing
