// Plain double-precision attention layer: X·Wᵀ projections, Hugging Face rotate_half RoPE, the
// reference attention with materialised scores, concat, W_O. Weights in nn.Linear layout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attend::testing {

struct RefLayer {
  int64_t dm, hq, hkv, hd;
  int64_t hdv = 0;  // V head width; 0 = hd
  bool rope = false;
  double theta = 10000.0;
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;  // [out, in]; biases may be empty
  // Model-family terms (self-attention only for window and ALiBi, as MhaConfig says).
  int64_t window = 0;
  double softcap = 0.0;
  std::vector<float> alibi, sinks;  // per query head, or empty

  // y = x·Wᵀ + b for rows of x (n rows of `in`).
  static std::vector<double> linear(const std::vector<double>& x, int64_t n, int64_t in, const std::vector<float>& w,
                                    const std::vector<float>& b, int64_t out) {
    std::vector<double> y(static_cast<size_t>(n * out));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
        for (int64_t i = 0; i < in; ++i) acc += x[static_cast<size_t>(r * in + i)] * w[static_cast<size_t>(o * in + i)];
        y[static_cast<size_t>(r * out + o)] = acc;
      }
    return y;
  }

  void apply_rope(std::vector<double>& rows, int64_t heads, int64_t batch, int64_t tokens, int64_t first) const {
    const int64_t half = hd / 2;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          double* x = &rows[static_cast<size_t>(((b * tokens + t) * heads + h) * hd)];
          for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(first + t) * std::pow(theta, -2.0 * i / hd);
            const double x1 = x[i], x2 = x[i + half];
            x[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
            x[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
          }
        }
  }

  /// Self-attention of x [batch, tokens, dm] (keys from `kv_x` [batch, kv_tokens, dm] when given,
  /// for cross-attention; then no RoPE). Query i sits at position first + i and, if causal, sees
  /// keys j ≤ i + (kv_tokens − tokens); keys ≥ lengths[b] are masked.
  std::vector<double> forward(const std::vector<float>& xf, int64_t batch, int64_t tokens, bool causal,
                              const std::vector<int64_t>& lengths = {}, int64_t first = 0,
                              const std::vector<float>* kv_x = nullptr, int64_t kv_tokens = -1) const {
    const bool cross = kv_x != nullptr;
    if (!cross) kv_tokens = tokens;
    std::vector<double> x(xf.begin(), xf.end());
    std::vector<double> xm = cross ? std::vector<double>(kv_x->begin(), kv_x->end()) : x;
    auto q = linear(x, batch * tokens, dm, wq, bq, hq * hd);
    auto k = linear(xm, batch * kv_tokens, dm, wk, bk, hkv * hd);
    const int64_t dv = hdv ? hdv : hd;
    auto v = linear(xm, batch * kv_tokens, dm, wv, bv, hkv * dv);
    if (rope && !cross) {
      apply_rope(q, hq, batch, tokens, first);
      apply_rope(k, hkv, batch, kv_tokens, first);
    }
    std::vector<double> attn(static_cast<size_t>(batch * tokens * hq * dv), 0.0);
    std::vector<double> s(static_cast<size_t>(kv_tokens));
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t valid = lengths.empty() ? kv_tokens : lengths[static_cast<size_t>(b)];
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t hk = h / (hq / hkv);
        for (int64_t i = 0; i < tokens; ++i) {
          double mx = -INFINITY;
          for (int64_t j = 0; j < kv_tokens; ++j) {
            const int64_t pos = i + (kv_tokens - tokens);
            const bool visible = j < valid && (!causal || j <= pos) && (cross || window == 0 || j > pos - window);
            if (!visible) {
              s[static_cast<size_t>(j)] = -INFINITY;
              continue;
            }
            double dot = 0.0;
            for (int64_t d = 0; d < hd; ++d)
              dot += q[static_cast<size_t>(((b * tokens + i) * hq + h) * hd + d)] *
                     k[static_cast<size_t>(((b * kv_tokens + j) * hkv + hk) * hd + d)];
            double x = dot * scale;
            if (softcap > 0.0) x = softcap * std::tanh(x / softcap);
            if (!alibi.empty() && !cross) x += alibi[static_cast<size_t>(h)] * static_cast<double>(j - pos);
            s[static_cast<size_t>(j)] = x;
            mx = std::max(mx, x);
          }
          if (mx == -INFINITY) continue;
          const double sink = sinks.empty() ? -INFINITY : sinks[static_cast<size_t>(h)];
          mx = std::max(mx, sink);
          double sum = sinks.empty() ? 0.0 : std::exp(sink - mx);
          for (double& e : s) sum += e = (e == -INFINITY ? 0.0 : std::exp(e - mx));
          for (int64_t j = 0; j < kv_tokens; ++j)
            for (int64_t d = 0; d < dv; ++d)
              attn[static_cast<size_t>(((b * tokens + i) * hq + h) * dv + d)] +=
                  s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(((b * kv_tokens + j) * hkv + hk) * dv + d)];
        }
      }
    }
    return linear(attn, batch * tokens, hq * dv, wo, bo, dm);
  }
};

}  // namespace attend::testing
