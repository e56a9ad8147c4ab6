// MultiHeadAttention: validate → project (oneDNN) → rotate → attend (fused kernels, read through
// strided views of the projection output: no transpose copies) → project out.
#include <algorithm>
#include <attend/error.hpp>
#include <attend/mha.hpp>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "../gemm/onednn_matmul.hpp"
#include "attention_call.hpp"
#include "kv_cache_access.hpp"
#include "mha_access.hpp"
#include "paged_step.hpp"

namespace attend {
namespace {

[[noreturn]] void fail(const std::string& m) { throw Error(ErrorCode::invalid_argument, "MultiHeadAttention: " + m); }

std::string str(int64_t x) { return std::to_string(x); }

// The projections' name for an activation dtype (checked by check_io).
gemm::ActType act(DType t) {
  return t == DType::bf16 ? gemm::ActType::bf16 : t == DType::f16 ? gemm::ActType::f16 : gemm::ActType::f32;
}

// Rows of the projection output for m tokens: Q rows `ldq` floats apart, K and V rows `ldkv` apart.
struct Projected {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  int64_t ldq = 0, ldkv = 0;
};

// Concatenates projection matrices along their output dimension, in the given layout.
std::vector<float> concat_outputs(WeightLayout layout, int64_t in,
                                  std::initializer_list<std::pair<const float*, int64_t>> parts) {
  int64_t total = 0;
  for (auto& p : parts) total += p.second;
  std::vector<float> w(static_cast<size_t>(in * total));
  if (layout == WeightLayout::out_in) {  // rows are outputs: stack them
    float* dst = w.data();
    for (auto& p : parts) {
      std::memcpy(dst, p.first, sizeof(float) * static_cast<size_t>(p.second * in));
      dst += p.second * in;
    }
  } else {  // columns are outputs: interleave each input row
    for (int64_t r = 0; r < in; ++r) {
      float* dst = w.data() + r * total;
      for (auto& p : parts) {
        std::memcpy(dst, p.first + r * p.second, sizeof(float) * static_cast<size_t>(p.second));
        dst += p.second;
      }
    }
  }
  return w;
}

// Outputs [first, first + n) of a projection with `in` inputs and `out` outputs, in its layout.
std::vector<float> slice_outputs(const float* w, WeightLayout layout, int64_t in, int64_t out, int64_t first,
                                 int64_t n) {
  std::vector<float> s(static_cast<size_t>(in * n));
  if (layout == WeightLayout::out_in) {
    std::memcpy(s.data(), w + first * in, sizeof(float) * s.size());
  } else {
    for (int64_t r = 0; r < in; ++r)
      std::memcpy(s.data() + r * n, w + r * out + first, sizeof(float) * static_cast<size_t>(n));
  }
  return s;
}

// Inputs [first, first + n) of a projection with `in` inputs and `out` outputs (W_O's columns for
// a head shard), in its layout.
std::vector<float> slice_inputs(const float* w, WeightLayout layout, int64_t in, int64_t out, int64_t first,
                                int64_t n) {
  std::vector<float> s(static_cast<size_t>(out * n));
  if (layout == WeightLayout::in_out) {
    std::memcpy(s.data(), w + first * out, sizeof(float) * s.size());
  } else {
    for (int64_t r = 0; r < out; ++r)
      std::memcpy(s.data() + r * n, w + r * in + first, sizeof(float) * static_cast<size_t>(n));
  }
  return s;
}

std::vector<float> concat_bias(std::initializer_list<std::pair<const float*, int64_t>> parts) {
  std::vector<float> b;
  for (auto& p : parts) b.insert(b.end(), p.first, p.first + p.second);
  return b;
}

}  // namespace

struct MultiHeadAttention::Impl {
  MhaConfig cfg;
  // hd: Q/K head width, dv: V head width; k_out, v_out: K and V projection widths; a_out: the
  // attention output's (W_O's input).
  int64_t dm = 0, hq = 0, hkv = 0, hd = 0, dv = 0, q_out = 0, k_out = 0, v_out = 0, a_out = 0;
  float scale = 1.0f;
  std::optional<gemm::Linear> qkv, q, kv, o;
  std::vector<double> inv_freq;  // RoPE: theta^(-2i/hd)
  std::vector<float> sinks;      // this shard's heads' logits, or empty
  std::vector<float> alibi;      // this shard's heads' ALiBi slopes, or empty
  MhaShardInfo shard;            // the heads held (hq = shard.heads, hkv = shard.kv_heads)

  gemm::WeightType wtype() const {
    return cfg.weight_dtype == DType::bf16 ? gemm::WeightType::bf16 : gemm::WeightType::f32;
  }

  // Workspace of projecting m rows (want_q / want_kv: which parts the caller needs; a fused layer
  // computes all of them in one GEMM regardless) and, with `out`, of the output projection.
  // x of type xt in, y of type yt out (the projections' own conversions, gemm::Linear::run).
  void add_projection_needs(int64_t m, bool want_q, bool want_kv, bool out, detail::Needs& n,
                            gemm::ActType xt = gemm::ActType::f32, gemm::ActType yt = gemm::ActType::f32) const {
    n[detail::Slot::projection] += static_cast<size_t>(m * (q_out + k_out + v_out));
    size_t g = 0;
    if (qkv) g = std::max(g, qkv->scratch_floats(m, xt));
    if (q && want_q) g = std::max(g, q->scratch_floats(m, xt));
    if (kv && want_kv) g = std::max(g, kv->scratch_floats(m, xt));
    if (out) {
      g = std::max(g, o->scratch_floats(m, gemm::ActType::f32, yt));
      n[detail::Slot::attention_out] += static_cast<size_t>(m * a_out);
    }
    n[detail::Slot::gemm_scratch] = std::max(n[detail::Slot::gemm_scratch], g);
  }

  // Where the projection of m rows lands in the lease's buffer (filled by project()).
  Projected projected(const detail::Lease& lease, int64_t m) const {
    float* buf = lease.get(detail::Slot::projection);
    if (qkv) {
      const int64_t c = q_out + k_out + v_out;
      return {buf, buf + q_out, buf + q_out + k_out, c, c};
    }
    Projected p;
    p.q = buf;
    p.ldq = q_out;
    p.k = buf + m * q_out;
    p.v = p.k + k_out;
    p.ldkv = k_out + v_out;
    return p;
  }

  void project(const void* x, int64_t m, bool want_q, bool want_kv, const Projected& p, const detail::Lease& lease,
               gemm::ActType xt = gemm::ActType::f32) const {
    float* scratch = lease.get(detail::Slot::gemm_scratch);
    constexpr gemm::ActType f32 = gemm::ActType::f32;
    if (qkv) return qkv->run(x, xt, p.q, f32, m, lease.threads(), scratch);
    if (want_q) q->run(x, xt, p.q, f32, m, lease.threads(), scratch);
    if (want_kv) kv->run(x, xt, p.k, f32, m, lease.threads(), scratch);
  }

  // Views of the projection rows as [batch, heads, tokens, hd] (no copies).
  TensorView q_view(const Projected& p, int64_t batch, int64_t tokens) const {
    return TensorView(static_cast<const float*>(p.q), {batch, hq, tokens, hd}, {tokens * p.ldq, hd, p.ldq, 1});
  }
  TensorView k_view(const Projected& p, int64_t batch, int64_t tokens) const {
    return TensorView(static_cast<const float*>(p.k), {batch, hkv, tokens, hd}, {tokens * p.ldkv, hd, p.ldkv, 1});
  }
  TensorView v_view(const Projected& p, int64_t batch, int64_t tokens) const {
    return TensorView(static_cast<const float*>(p.v), {batch, hkv, tokens, dv}, {tokens * p.ldkv, dv, p.ldkv, 1});
  }
  TensorView o_view(float* attn, int64_t batch, int64_t tokens) const {
    return TensorView(attn, {batch, hq, tokens, dv}, {tokens * a_out, dv, a_out, 1});
  }

  // Rotates `heads` heads of each row in place: row (b, t) at rows + (b*tokens + t)*ld, position
  // position(b, t).
  template <class PositionFn>
  void rope(float* rows, int64_t ld, int64_t heads, int64_t batch, int64_t tokens, PositionFn position) const {
    const int64_t half = hd / 2;
    thread_local std::vector<float> cs;  // (kept: a warm call allocates nothing)
    cs.resize(static_cast<size_t>(2 * half));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t) {
        const double pos = static_cast<double>(position(b, t));
        for (int64_t i = 0; i < half; ++i) {
          const double angle = pos * inv_freq[static_cast<size_t>(i)];
          cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle));
          cs[static_cast<size_t>(half + i)] = static_cast<float>(std::sin(angle));
        }
        float* row = rows + (b * tokens + t) * ld;
        for (int64_t h = 0; h < heads; ++h) {
          float* x = row + h * hd;
          for (int64_t i = 0; i < half; ++i) {
            const float c = cs[static_cast<size_t>(i)], s = cs[static_cast<size_t>(half + i)];
            const float x1 = x[i], x2 = x[i + half];
            x[i] = x1 * c - x2 * s;
            x[i + half] = x2 * c + x1 * s;
          }
        }
      }
  }

  void check_io(const char* name, const void* x, const void* y, int64_t batch, int64_t tokens, DType xt = DType::f32,
                DType yt = DType::f32) const {
    if (batch < 0 || tokens < 0) fail(std::string(name) + ": batch and tokens must be >= 0");
    if (xt != DType::f32 && xt != DType::bf16 && xt != DType::f16)
      fail(std::string(name) + ": x must be f32, bf16 or f16, got " + dtype_name(xt));
    if (yt != DType::f32 && yt != xt)
      fail(std::string(name) + ": y must be f32 or x's dtype (" + dtype_name(xt) + "), got " + dtype_name(yt));
    if (batch * tokens == 0) return;
    if (!x || !y) fail(std::string(name) + ": null input or output");
    const int64_t n = batch * tokens * dm;
    const char* xb = static_cast<const char*>(x);
    const char* yb = static_cast<const char*>(y);
    const int64_t x_bytes = n * static_cast<int64_t>(dtype_size(xt)),
                  y_bytes = n * static_cast<int64_t>(dtype_size(yt));
    if (xb < yb + y_bytes && yb < xb + x_bytes) fail(std::string(name) + ": output overlaps input");
  }

  // The span forms: the buffers must hold exactly batch · tokens · d_model floats.
  void check_sizes(const char* name, size_t x_size, size_t y_size, int64_t batch, int64_t tokens,
                   bool has_y = true) const {
    if (batch < 0 || tokens < 0) fail(std::string(name) + ": batch and tokens must be >= 0");
    const size_t n = static_cast<size_t>(batch * tokens * dm);
    if (x_size != n || (has_y && y_size != n))
      fail(std::string(name) + ": x and y must hold batch · tokens · d_model = " + std::to_string(n) + " floats, got " +
           std::to_string(x_size) + (has_y ? " and " + std::to_string(y_size) : std::string()));
  }

  // The options a call accepts; the rest must be left at their defaults.
  struct Accepts {
    bool causal = false, lengths = false, first_position = false;
  };
  void check_options(const char* name, const MhaOptions& opt, Accepts a, int64_t batch, int64_t tokens) const {
    if (opt.num_threads < 0) fail(std::string(name) + ": num_threads must be >= 0");
    if (opt.causal && !a.causal) fail(std::string(name) + ": the causal option does not apply to this call");
    if (!opt.lengths.empty() && !a.lengths) fail(std::string(name) + ": lengths do not apply to this call");
    if (opt.first_position && !a.first_position)
      fail(std::string(name) + ": first_position does not apply to this call");
    if (opt.first_position && *opt.first_position < 0) fail(std::string(name) + ": first_position must be >= 0");
    if (!opt.lengths.empty()) {
      if (static_cast<int64_t>(opt.lengths.size()) != batch)
        fail(std::string(name) + ": lengths has " + str(static_cast<int64_t>(opt.lengths.size())) +
             " entries for batch " + str(batch));
      for (int64_t len : opt.lengths)
        if (len < 0 || len > tokens)
          fail(std::string(name) + ": length " + str(len) + " outside [0, " + str(tokens) + "]");
    }
  }

  // The workspace of a call projecting m = batch·tokens rows and (with a kernel table) attending over
  // up to max_keys keys, reserved in one step, so the byte limit is checked before anything is computed.
  // Returns where the projections land.
  Projected reserve(detail::Lease& lease, const char* who, const kernels::KernelTable* table, int64_t batch,
                    int64_t tokens, int64_t max_keys, bool want_q, bool want_kv, bool out,
                    gemm::ActType xt = gemm::ActType::f32, gemm::ActType yt = gemm::ActType::f32) const {
    const int64_t m = batch * tokens;
    detail::Needs needs;
    add_projection_needs(m, want_q, want_kv, out, needs, xt, yt);
    if (table) detail::add_attention_needs(*table, batch, hq, hkv, tokens, max_keys, hd, dv, lease.threads(), needs);
    lease.reserve(needs, who);
    return projected(lease, m);
  }

  // The attention of a self-attention call: Q, K and V read straight out of the projection rows
  // through strided views, the output into the lease's attention rows.
  detail::AttentionCall self_attention(const char* who, const MhaOptions& opt, const Projected& p,
                                       const detail::Lease& lease, int64_t batch, int64_t tokens) const {
    detail::AttentionCall c = call(who, opt);
    c.q = q_view(p, batch, tokens);
    c.k = k_view(p, batch, tokens);
    c.v = v_view(p, batch, tokens);
    c.o = o_view(lease.get(detail::Slot::attention_out), batch, tokens);
    return c;
  }

  // The attention call's options; `self`: self-attention (the window and ALiBi apply).
  detail::AttentionCall call(const char* who, const MhaOptions& opt, bool self = true) const {
    detail::AttentionCall c;
    c.who = who;
    c.scale = scale;
    c.softcap = cfg.softcap;
    c.sinks = sinks;
    if (self) {
      c.window = cfg.window;
      c.alibi_slopes = alibi;
    }
    c.num_threads = opt.num_threads;
    c.isa = opt.isa;
    c.fpmath = opt.fpmath;
    c.context = opt.context;
    return c;
  }

  // Attention output rows → y (of type yt) through W_O.
  void output(void* y, int64_t m, const detail::Lease& lease, gemm::ActType yt = gemm::ActType::f32) const {
    o->run(lease.get(detail::Slot::attention_out), gemm::ActType::f32, y, yt, m, lease.threads(),
           lease.get(detail::Slot::gemm_scratch));
  }

  // Stores `tokens` K/V rows of each sequence as the start of its slot (cross-attention memory).
  void store_kv(KVCache& cache, std::span<const int64_t> seqs, const Projected& p, int64_t batch,
                int64_t tokens) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < hkv; ++h)
        detail::KVCacheAccess::store(cache, seqs[static_cast<size_t>(b)], h, 0, tokens,
                                     p.k + b * tokens * p.ldkv + h * hd, p.ldkv, p.v + b * tokens * p.ldkv + h * dv,
                                     p.ldkv, kernels::KvType::f32);
  }
};

MultiHeadAttention::MultiHeadAttention(const MhaConfig& config, const MhaWeights& w) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  MhaConfig c = config;
  if (c.d_model <= 0 || c.n_heads <= 0) fail("d_model and n_heads must be > 0");
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;
  if (c.n_kv_heads < 0 || c.n_heads % c.n_kv_heads != 0)
    fail("n_kv_heads " + str(c.n_kv_heads) + " must divide n_heads " + str(c.n_heads));
  if (c.head_dim == 0) {
    if (c.d_model % c.n_heads != 0)
      fail("n_heads " + str(c.n_heads) + " does not divide d_model " + str(c.d_model) + " (set head_dim)");
    c.head_dim = c.d_model / c.n_heads;
  }
  if (c.head_dim < 0) fail("head_dim must be > 0");
  if (c.value_head_dim < 0) fail("value_head_dim must be >= 0 (0: head_dim), got " + str(c.value_head_dim));
  if (c.value_head_dim == 0) c.value_head_dim = c.head_dim;
  if (c.rope && c.head_dim % 2 != 0) fail("rope needs an even head_dim, got " + str(c.head_dim));
  if (c.rope && !(c.rope_theta > 0.0 && std::isfinite(c.rope_theta))) fail("rope_theta must be positive and finite");
  if (c.weight_dtype != DType::f32 && c.weight_dtype != DType::bf16)
    throw Error(ErrorCode::unsupported, std::string("MultiHeadAttention: ") + dtype_name(c.weight_dtype) +
                                            " weights are not supported (use f32 or bf16)");
  if (c.window < 0) fail("window must be >= 0, got " + str(c.window));
  if (!(c.softcap >= 0.0f) || !std::isfinite(c.softcap))
    fail("softcap must be finite and >= 0, got " + std::to_string(c.softcap));
  if (!c.alibi_slopes.empty() && static_cast<int64_t>(c.alibi_slopes.size()) != c.n_heads)
    fail("alibi_slopes has " + str(static_cast<int64_t>(c.alibi_slopes.size())) + " values for " + str(c.n_heads) +
         " heads");
  for (float x : c.alibi_slopes)
    if (!std::isfinite(x)) fail("alibi_slopes must be finite");
  if (w.sinks)
    for (int64_t h = 0; h < c.n_heads; ++h)
      if (!std::isfinite(w.sinks[h])) fail("sinks[" + str(h) + "] is not finite");
  if (!w.q || !w.k || !w.v || !w.o) fail("weights q, k, v and o are required");
  if (c.bias && (!w.q_bias || !w.k_bias || !w.v_bias || !w.o_bias)) fail("config.bias needs all four biases");
  if (!c.bias && (w.q_bias || w.k_bias || w.v_bias || w.o_bias)) fail("biases given but config.bias is false");
  // The head shard: query heads split evenly; kv heads split when the shard count divides them,
  // else each shard holds the one kv head its query heads share.
  const int64_t N = c.shard_count;
  if (N < 1) fail("shard_count must be >= 1, got " + str(N));
  if (c.shard_rank < 0 || c.shard_rank >= N)
    fail("shard_rank " + str(c.shard_rank) + " outside [0, shard_count = " + str(N) + ")");
  if (c.n_heads % N != 0) fail("shard_count " + str(N) + " does not divide n_heads " + str(c.n_heads));
  const bool kv_split = c.n_kv_heads % N == 0;
  if (!kv_split && N % c.n_kv_heads != 0)
    fail("shard_count " + str(N) + " must divide n_kv_heads " + str(c.n_kv_heads) +
         " (kv heads split) or be a multiple of it (kv heads replicated)");
  MhaShardInfo& sh = s.shard;
  sh.heads = c.n_heads / N;
  sh.first_head = c.shard_rank * sh.heads;
  sh.kv_heads = kv_split ? c.n_kv_heads / N : 1;
  sh.first_kv_head = kv_split ? c.shard_rank * sh.kv_heads : c.shard_rank / (N / c.n_kv_heads);
  s.cfg = c;
  s.dm = c.d_model;
  s.hq = sh.heads;
  s.hkv = sh.kv_heads;
  s.hd = c.head_dim;
  s.dv = c.value_head_dim;
  s.q_out = s.hq * s.hd;
  s.k_out = s.hkv * s.hd;
  s.v_out = s.hkv * s.dv;
  s.a_out = s.hq * s.dv;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
  if (w.sinks) s.sinks.assign(w.sinks + sh.first_head, w.sinks + sh.first_head + s.hq);
  if (!c.alibi_slopes.empty())
    s.alibi.assign(c.alibi_slopes.begin() + sh.first_head, c.alibi_slopes.begin() + sh.first_head + s.hq);
  // A shard's slices of the full layer's weights (the whole layer: the caller's buffers as they are).
  MhaWeights wl = w;
  std::vector<float> sq, sk, sv, so, sbq, sbk, sbv;
  if (N > 1) {
    const int64_t q0 = sh.first_head * s.hd, k0 = sh.first_kv_head * s.hd, v0 = sh.first_kv_head * s.dv;
    sq = slice_outputs(w.q, w.layout, s.dm, c.n_heads * s.hd, q0, s.q_out);
    sk = slice_outputs(w.k, w.layout, s.dm, c.n_kv_heads * s.hd, k0, s.k_out);
    sv = slice_outputs(w.v, w.layout, s.dm, c.n_kv_heads * s.dv, v0, s.v_out);
    so = slice_inputs(w.o, w.layout, c.n_heads * s.dv, s.dm, sh.first_head * s.dv, s.a_out);
    wl.q = sq.data();
    wl.k = sk.data();
    wl.v = sv.data();
    wl.o = so.data();
    if (c.bias) {
      sbq.assign(w.q_bias + q0, w.q_bias + q0 + s.q_out);
      sbk.assign(w.k_bias + k0, w.k_bias + k0 + s.k_out);
      sbv.assign(w.v_bias + v0, w.v_bias + v0 + s.v_out);
      wl.q_bias = sbq.data();
      wl.k_bias = sbk.data();
      wl.v_bias = sbv.data();
      if (c.shard_rank != 0) wl.o_bias = nullptr;  // the all-reduce adds shard 0's
    }
  }
  const bool out_in = wl.layout == WeightLayout::out_in;
  const gemm::WeightType wt = s.wtype();
  if (!c.cross_attention) {
    const std::vector<float> wqkv =
        concat_outputs(wl.layout, s.dm, {{wl.q, s.q_out}, {wl.k, s.k_out}, {wl.v, s.v_out}});
    const std::vector<float> bqkv =
        c.bias ? concat_bias({{wl.q_bias, s.q_out}, {wl.k_bias, s.k_out}, {wl.v_bias, s.v_out}}) : std::vector<float>{};
    s.qkv.emplace(wqkv.data(), out_in, s.dm, s.q_out + s.k_out + s.v_out, c.bias ? bqkv.data() : nullptr, wt);
  } else {
    s.q.emplace(wl.q, out_in, s.dm, s.q_out, wl.q_bias, wt);
    const std::vector<float> wkv = concat_outputs(wl.layout, s.dm, {{wl.k, s.k_out}, {wl.v, s.v_out}});
    const std::vector<float> bkv =
        c.bias ? concat_bias({{wl.k_bias, s.k_out}, {wl.v_bias, s.v_out}}) : std::vector<float>{};
    s.kv.emplace(wkv.data(), out_in, s.dm, s.k_out + s.v_out, c.bias ? bkv.data() : nullptr, wt);
  }
  s.o.emplace(wl.o, out_in, s.a_out, s.dm, wl.o_bias, wt);
  if (c.rope) {
    s.inv_freq.resize(static_cast<size_t>(s.hd / 2));
    for (int64_t i = 0; i < s.hd / 2; ++i)
      s.inv_freq[static_cast<size_t>(i)] =
          std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(s.hd));
  }
}

MultiHeadAttention::~MultiHeadAttention() = default;
MultiHeadAttention::MultiHeadAttention(MultiHeadAttention&&) noexcept = default;
MultiHeadAttention& MultiHeadAttention::operator=(MultiHeadAttention&&) noexcept = default;

const MhaConfig& MultiHeadAttention::config() const { return impl_->cfg; }

MhaShardInfo MultiHeadAttention::shard_info() const { return impl_->shard; }

size_t MultiHeadAttention::weight_bytes() const {
  const Impl& s = *impl_;
  size_t n = s.o->weight_bytes();
  for (const auto* l : {&s.qkv, &s.q, &s.kv})
    if (*l) n += (*l)->weight_bytes();
  return n;
}

void MultiHeadAttention::forward(const float* x, float* y, int64_t batch, int64_t tokens, const MhaOptions& opt) const {
  forward(x, DType::f32, y, DType::f32, batch, tokens, opt);
}

void MultiHeadAttention::forward(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t batch, int64_t tokens,
                                 const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::forward";
  s.check_io(who, x, y, batch, tokens, x_dtype, y_dtype);
  s.check_options(who, opt, {.causal = true, .lengths = true, .first_position = true}, batch, tokens);
  const kernels::KernelTable& table = detail::kernel_table(opt.isa, opt.fpmath);
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  detail::Lease lease(opt.context, opt.num_threads);
  const Projected p =
      s.reserve(lease, who, &table, batch, tokens, tokens, true, true, true, act(x_dtype), act(y_dtype));
  detail::AttentionCall c = s.self_attention(who, opt, p, lease, batch, tokens);
  c.causal = opt.causal.value_or(s.cfg.causal);
  c.kv_lens = opt.lengths;
  const detail::Checked checked = detail::validate(c);

  s.project(x, m, true, true, p, lease, act(x_dtype));
  if (s.cfg.rope) {
    const int64_t first = opt.first_position.value_or(0);
    auto pos = [&](int64_t, int64_t t) { return first + t; };
    s.rope(p.q, p.ldq, s.hq, batch, tokens, pos);
    s.rope(p.k, p.ldkv, s.hkv, batch, tokens, pos);
  }
  detail::execute(c, checked, table, lease);
  s.output(y, m, lease, act(y_dtype));
}

void MultiHeadAttention::forward(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens,
                                 const MhaOptions& opt) const {
  impl_->check_sizes("MultiHeadAttention::forward", x.size(), y.size(), batch, tokens);
  forward(x.data(), y.data(), batch, tokens, opt);
}

void MultiHeadAttention::forward_cached(const float* x, float* y, int64_t batch, int64_t tokens, KVCache& cache,
                                        std::span<const int64_t> seqs, const MhaOptions& opt) const {
  forward_cached(x, DType::f32, y, DType::f32, batch, tokens, cache, seqs, opt);
}

void MultiHeadAttention::forward_cached(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t batch,
                                        int64_t tokens, KVCache& cache, std::span<const int64_t> seqs,
                                        const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::forward_cached";
  s.check_io(who, x, y, batch, tokens, x_dtype, y_dtype);
  s.check_options(who, opt, {.causal = true, .lengths = false, .first_position = true}, batch, tokens);
  if (opt.causal && !*opt.causal) fail(std::string(who) + ": attention over a cache is causal (causal = false given)");
  const detail::CacheUse use(cache, true, who);
  const std::vector<int64_t> start = detail::check_cache_batch(who, cache, seqs, batch, tokens, s.hkv, s.hd, s.dv);
  const kernels::KernelTable& table = detail::kernel_table(opt.isa, opt.fpmath);
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  detail::Lease lease(opt.context, opt.num_threads);
  const int64_t max_keys = *std::max_element(start.begin(), start.end()) + tokens;
  const Projected p =
      s.reserve(lease, who, &table, batch, tokens, max_keys, true, true, true, act(x_dtype), act(y_dtype));
  // Append and attend through the one attention path (all or nothing, see detail::execute).
  detail::AttentionCall c = s.self_attention(who, opt, p, lease, batch, tokens);
  c.cache = &cache;
  c.seqs = seqs;
  c.append = true;
  c.causal = true;
  const detail::Checked checked = detail::validate(c);

  s.project(x, m, true, true, p, lease, act(x_dtype));
  if (s.cfg.rope) {
    auto pos = [&](int64_t b, int64_t t) {
      return (opt.first_position ? *opt.first_position : start[static_cast<size_t>(b)]) + t;
    };
    s.rope(p.q, p.ldq, s.hq, batch, tokens, pos);
    s.rope(p.k, p.ldkv, s.hkv, batch, tokens, pos);
  }
  detail::execute(c, checked, table, lease);
  s.output(y, m, lease, act(y_dtype));
}

void MultiHeadAttention::forward_cached(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens,
                                        KVCache& cache, std::span<const int64_t> seqs, const MhaOptions& opt) const {
  impl_->check_sizes("MultiHeadAttention::forward_cached", x.size(), y.size(), batch, tokens);
  forward_cached(x.data(), y.data(), batch, tokens, cache, seqs, opt);
}

void MultiHeadAttention::forward_paged(const float* x, float* y, std::span<const SequenceChunk> chunks,
                                       PagedKVCache& cache, const MhaOptions& opt) const {
  forward_paged(x, DType::f32, y, DType::f32, chunks, cache, opt);
}

void MultiHeadAttention::forward_paged(const void* x, DType x_dtype, void* y, DType y_dtype,
                                       std::span<const SequenceChunk> chunks, PagedKVCache& cache,
                                       const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::forward_paged";
  int64_t T = 0;
  for (const SequenceChunk& c : chunks) {
    if (c.tokens < 0)
      fail(std::string(who) + ": chunk of sequence " + str(c.seq) + " has " + str(c.tokens) + " tokens");
    T += c.tokens;
  }
  s.check_io(who, x, y, 1, T, x_dtype, y_dtype);
  s.check_options(who, opt, {.causal = true}, 1, T);
  if (opt.causal && !*opt.causal) fail(std::string(who) + ": attention over a cache is causal (causal = false given)");
  const PagedKVCacheConfig& cc = cache.config();
  if (cc.kv_heads != s.hkv || cc.head_dim != s.hd || cc.value_dim != s.dv)
    fail(std::string(who) + ": the cache holds " + str(cc.kv_heads) + " kv heads of dims " + str(cc.head_dim) + "/" +
         str(cc.value_dim) + " (K/V), the layer has " + str(s.hkv) + " of dims " + str(s.hd) + "/" + str(s.dv));
  detail::PagedStep step(who, cache, chunks, T);  // checks the chunks, claims their sequences
  const kernels::KernelTable& table = detail::kernel_table(opt.isa, opt.fpmath);
  if (T == 0) return;
  detail::Lease lease(opt.context, opt.num_threads);
  detail::Needs needs;
  s.add_projection_needs(T, true, true, true, needs, act(x_dtype), act(y_dtype));
  step.add_needs(table, s.hq, lease.threads(), needs);
  lease.reserve(needs, who);
  const Projected p = s.projected(lease, T);
  step.take_blocks();  // the pool's verdict before any work

  s.project(x, T, true, true, p, lease, act(x_dtype));
  if (s.cfg.rope) {
    thread_local std::vector<int64_t> position;
    position.resize(static_cast<size_t>(T));
    for (size_t i = 0, t = 0; i < chunks.size(); ++i)
      for (int64_t j = 0; j < chunks[i].tokens; ++j) position[t++] = step.position(i, j);
    auto pos = [&](int64_t, int64_t t) { return position[static_cast<size_t>(t)]; };
    s.rope(p.q, p.ldq, s.hq, 1, T, pos);
    s.rope(p.k, p.ldkv, s.hkv, 1, T, pos);
  }
  const TensorView k_new = s.k_view(p, 1, T), v_new = s.v_view(p, 1, T);
  step.attend(s.q_view(p, 1, T), s.o_view(lease.get(detail::Slot::attention_out), 1, T), s.scale, s.call(who, opt),
              table, lease, &k_new, &v_new);
  s.output(y, T, lease, act(y_dtype));
}

void MultiHeadAttention::forward_paged(std::span<const float> x, std::span<float> y,
                                       std::span<const SequenceChunk> chunks, PagedKVCache& cache,
                                       const MhaOptions& opt) const {
  int64_t T = 0;
  for (const SequenceChunk& c : chunks) T += std::max<int64_t>(0, c.tokens);
  impl_->check_sizes("MultiHeadAttention::forward_paged", x.size(), y.size(), 1, T);
  forward_paged(x.data(), y.data(), chunks, cache, opt);
}

void MultiHeadAttention::set_memory(const float* memory, int64_t batch, int64_t tokens, KVCache& cache,
                                    std::span<const int64_t> seqs, const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::set_memory";
  if (batch < 0 || tokens < 0) fail(std::string(who) + ": batch and tokens must be >= 0");
  if (batch * tokens > 0 && !memory) fail(std::string(who) + ": null memory");
  s.check_options(who, opt, {}, batch, tokens);
  const detail::CacheUse use(cache, true, who);
  detail::check_cache_batch(who, cache, seqs, batch, 0, s.hkv, s.hd, s.dv);
  if (tokens > cache.config().capacity)
    throw Error(ErrorCode::capacity, std::string(who) + ": " + str(tokens) +
                                         " memory tokens exceed the cache capacity " + str(cache.config().capacity));
  if (batch * tokens > 0) {
    const int64_t m = batch * tokens;
    detail::Lease lease(opt.context, opt.num_threads);
    const Projected p = s.reserve(lease, who, nullptr, batch, tokens, 0, false, true, false);
    s.project(memory, m, false, true, p, lease);
    s.store_kv(cache, seqs, p, batch, tokens);
  }
  for (int64_t b = 0; b < batch; ++b) detail::KVCacheAccess::set_length(cache, seqs[static_cast<size_t>(b)], tokens);
}

void MultiHeadAttention::set_memory(std::span<const float> memory, int64_t batch, int64_t tokens, KVCache& cache,
                                    std::span<const int64_t> seqs, const MhaOptions& opt) const {
  impl_->check_sizes("MultiHeadAttention::set_memory", memory.size(), 0, batch, tokens, false);
  set_memory(memory.data(), batch, tokens, cache, seqs, opt);
}

void MultiHeadAttention::cross_attend(const float* x, float* y, int64_t batch, int64_t tokens, const KVCache& cache,
                                      std::span<const int64_t> seqs, const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::cross_attend";
  s.check_io(who, x, y, batch, tokens);
  s.check_options(who, opt, {}, batch, tokens);
  const detail::CacheUse use(cache, false, who);
  const std::vector<int64_t> held = detail::check_cache_batch(who, cache, seqs, batch, 0, s.hkv, s.hd, s.dv);
  const kernels::KernelTable& table = detail::kernel_table(opt.isa, opt.fpmath);
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  detail::Lease lease(opt.context, opt.num_threads);
  const int64_t max_keys = *std::max_element(held.begin(), held.end());
  const Projected p = s.reserve(lease, who, &table, batch, tokens, max_keys, true, false, true);
  detail::AttentionCall c = s.call(who, opt, false);
  c.q = s.q_view(p, batch, tokens);
  // No new tokens: K/V come from the cache only.
  c.k = TensorView(static_cast<const float*>(nullptr), {batch, s.hkv, 0, s.hd}, {0, 0, 0, 1});
  c.v = TensorView(static_cast<const float*>(nullptr), {batch, s.hkv, 0, s.dv}, {0, 0, 0, 1});
  c.o = s.o_view(lease.get(detail::Slot::attention_out), batch, tokens);
  c.cache = const_cast<KVCache*>(&cache);  // read only: append is false
  c.seqs = seqs;
  c.append = false;
  c.causal = false;
  const detail::Checked checked = detail::validate(c);

  s.project(x, m, true, false, p, lease);
  detail::execute(c, checked, table, lease);
  s.output(y, m, lease);
}

void MultiHeadAttention::cross_attend(std::span<const float> x, std::span<float> y, int64_t batch, int64_t tokens,
                                      const KVCache& cache, std::span<const int64_t> seqs,
                                      const MhaOptions& opt) const {
  impl_->check_sizes("MultiHeadAttention::cross_attend", x.size(), y.size(), batch, tokens);
  cross_attend(x.data(), y.data(), batch, tokens, cache, seqs, opt);
}

std::vector<float> MultiHeadAttention::attention_weights(const float* x, int64_t batch, int64_t tokens,
                                                         std::span<const int64_t> heads, const MhaOptions& opt) const {
  const Impl& s = *impl_;
  const char* who = "MultiHeadAttention::attention_weights";
  if (batch < 0 || tokens < 0) fail(std::string(who) + ": batch and tokens must be >= 0");
  if (batch * tokens > 0 && !x) fail(std::string(who) + ": null input");
  for (int64_t h : heads)
    if (h < 0 || h >= s.hq) fail(std::string(who) + ": head " + str(h) + " outside [0, " + str(s.hq) + ")");
  s.check_options(who, opt, {.causal = true, .lengths = true, .first_position = true}, batch, tokens);
  const int64_t nh = static_cast<int64_t>(heads.size());
  std::vector<float> out(static_cast<size_t>(batch * nh * tokens * tokens), 0.0f);
  if (batch * tokens == 0 || nh == 0) return out;
  detail::Lease lease(opt.context, opt.num_threads);
  const Projected p = s.reserve(lease, who, nullptr, batch, tokens, 0, true, true, false);
  s.project(x, batch * tokens, true, true, p, lease);
  if (s.cfg.rope) {
    const int64_t first = opt.first_position.value_or(0);
    auto pos = [&](int64_t, int64_t t) { return first + t; };
    s.rope(p.q, p.ldq, s.hq, batch, tokens, pos);
    s.rope(p.k, p.ldkv, s.hkv, batch, tokens, pos);
  }
  const bool causal = opt.causal.value_or(s.cfg.causal);
  const int64_t group = s.hq / s.hkv;
  std::vector<double> row(static_cast<size_t>(tokens));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = opt.lengths.empty() ? tokens : opt.lengths[static_cast<size_t>(b)];
    for (int64_t hi = 0; hi < nh; ++hi) {
      const int64_t h = heads[static_cast<size_t>(hi)], hk = h / group;
      for (int64_t i = 0; i < tokens; ++i) {
        const float* q = p.q + (b * tokens + i) * p.ldq + h * s.hd;
        const int64_t visible = std::min(valid, causal ? i + 1 : tokens);
        const int64_t first = s.cfg.window > 0 ? std::max<int64_t>(0, i - s.cfg.window + 1) : 0;
        if (visible <= first) continue;
        const bool sink = !s.sinks.empty();
        double mx = sink ? s.sinks[static_cast<size_t>(h)] : -INFINITY;
        for (int64_t j = first; j < visible; ++j) {
          const float* k = p.k + (b * tokens + j) * p.ldkv + hk * s.hd;
          double dot = 0.0;
          for (int64_t d = 0; d < s.hd; ++d) dot += static_cast<double>(q[d]) * k[d];
          double x = dot * s.scale;
          if (s.cfg.softcap > 0.0f) x = s.cfg.softcap * std::tanh(x / s.cfg.softcap);
          if (!s.alibi.empty()) x += static_cast<double>(s.alibi[static_cast<size_t>(h)]) * static_cast<double>(j - i);
          row[static_cast<size_t>(j)] = x;
          mx = std::max(mx, x);
        }
        double sum = sink ? std::exp(s.sinks[static_cast<size_t>(h)] - mx) : 0.0;  // a sink takes weight, no value
        for (int64_t j = first; j < visible; ++j)
          sum += row[static_cast<size_t>(j)] = std::exp(row[static_cast<size_t>(j)] - mx);
        float* dst = out.data() + ((b * nh + hi) * tokens + i) * tokens;
        for (int64_t j = first; j < visible; ++j) dst[j] = static_cast<float>(row[static_cast<size_t>(j)] / sum);
      }
    }
  }
  return out;
}

void add_sinusoidal_positions(float* x, int64_t batch, int64_t tokens, int64_t d_model, int64_t first_position) {
  if (batch < 0 || tokens < 0 || d_model <= 0 || first_position < 0)
    throw Error(ErrorCode::invalid_argument,
                "add_sinusoidal_positions: batch, tokens, first_position >= 0 and d_model > 0 required");
  if (batch * tokens > 0 && !x) throw Error(ErrorCode::invalid_argument, "add_sinusoidal_positions: null x");
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(first_position + t);
    for (int64_t i = 0; i < d_model; ++i) {
      const double freq = std::pow(10000.0, -static_cast<double>(i - i % 2) / static_cast<double>(d_model));
      const float pe = static_cast<float>(i % 2 == 0 ? std::sin(pos * freq) : std::cos(pos * freq));
      for (int64_t b = 0; b < batch; ++b) x[(b * tokens + t) * d_model + i] += pe;
    }
  }
}

void detail::MhaAccess::weight_ranges(const MultiHeadAttention& layer,
                                      std::vector<std::pair<const void*, size_t>>& out) {
  const MultiHeadAttention::Impl& s = *layer.impl_;
  for (const auto* l : {&s.qkv, &s.q, &s.kv, &s.o})
    if (*l) out.emplace_back((*l)->weight_data(), (*l)->weight_bytes());
}

}  // namespace attend
