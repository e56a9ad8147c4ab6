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

#include "../dispatch/registry.hpp"
#include "../exec/attention.hpp"
#include "../gemm/onednn_matmul.hpp"
#include "../parallel/scheduler.hpp"
#include "kv_cache_access.hpp"

namespace attend {
namespace {

[[noreturn]] void fail(const std::string& m) { throw Error(ErrorCode::invalid_argument, "MultiHeadAttention: " + m); }

std::string str(int64_t x) { return std::to_string(x); }

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

std::vector<float> concat_bias(std::initializer_list<std::pair<const float*, int64_t>> parts) {
  std::vector<float> b;
  for (auto& p : parts) b.insert(b.end(), p.first, p.first + p.second);
  return b;
}

}  // namespace

struct MultiHeadAttention::Impl {
  MhaConfig cfg;
  int64_t dm = 0, hq = 0, hkv = 0, hd = 0, q_out = 0, kv_out = 0;
  float scale = 1.0f;
  std::optional<gemm::Linear> qkv, q, kv, o;
  std::vector<double> inv_freq;  // RoPE: theta^(-2i/hd)

  gemm::WeightType wtype() const {
    return cfg.weight_dtype == DType::bf16 ? gemm::WeightType::bf16 : gemm::WeightType::f32;
  }

  // Projects m rows of x. want_q / want_kv say which parts the caller needs (a fused layer computes
  // all of them in one GEMM regardless).
  Projected project(const float* x, int64_t m, bool want_q, bool want_kv, int threads) const {
    Projected p;
    if (qkv) {
      const int64_t c = q_out + 2 * kv_out;
      float* buf = parallel::thread_buffer(static_cast<size_t>(m * c), 3);
      qkv->run(x, buf, m, threads);
      p = {buf, buf + q_out, buf + q_out + kv_out, c, c};
      return p;
    }
    float* buf = parallel::thread_buffer(static_cast<size_t>(m * (q_out + 2 * kv_out)), 3);
    p.q = buf;
    p.ldq = q_out;
    p.k = buf + m * q_out;
    p.v = p.k + kv_out;
    p.ldkv = 2 * kv_out;
    if (want_q) q->run(x, p.q, m, threads);
    if (want_kv) kv->run(x, p.k, m, threads);
    return p;
  }

  // Rotates `heads` heads of each row in place: row (b, t) at rows + (b*tokens + t)*ld, position
  // position(b, t).
  template <class PositionFn>
  void rope(float* rows, int64_t ld, int64_t heads, int64_t batch, int64_t tokens, PositionFn position) const {
    const int64_t half = hd / 2;
    std::vector<float> cs(static_cast<size_t>(2 * half));
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

  exec::Problem problem(int64_t batch, int64_t tokens) const {
    exec::Problem p;
    p.batch = batch;
    p.q_heads = hq;
    p.kv_heads = hkv;
    p.num_queries = tokens;
    p.head_dim = hd;
    p.value_dim = hd;
    p.q_head_stride = hd;
    p.o_head_stride = hd;
    p.o_row_stride = q_out;
    p.scale = scale;
    p.entries.resize(static_cast<size_t>(batch));
    return p;
  }

  void check_io(const char* name, const float* x, const float* y, int64_t batch, int64_t tokens) const {
    if (batch < 0 || tokens < 0) fail(std::string(name) + ": batch and tokens must be >= 0");
    if (batch * tokens == 0) return;
    if (!x || !y) fail(std::string(name) + ": null input or output");
    const int64_t n = batch * tokens * dm;
    if (x < y + n && y < x + n) fail(std::string(name) + ": output overlaps input");
  }

  void check_seqs(const char* name, const KVCache& cache, std::span<const int64_t> seqs, int64_t batch) const {
    const KVCacheConfig& c = cache.config();
    if (c.kv_heads != hkv || c.head_dim != hd)
      fail(std::string(name) + ": cache has " + str(c.kv_heads) + " kv heads of dim " + str(c.head_dim) +
           ", layer has " + str(hkv) + " of dim " + str(hd));
    if (static_cast<int64_t>(seqs.size()) != batch)
      fail(std::string(name) + ": " + str(static_cast<int64_t>(seqs.size())) + " sequence ids for batch " + str(batch));
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i] < 0 || seqs[i] >= c.slots)
        fail(std::string(name) + ": sequence id " + str(seqs[i]) + " outside [0, " + str(c.slots) + ")");
      for (size_t j = 0; j < i; ++j)
        if (seqs[j] == seqs[i]) fail(std::string(name) + ": sequence id " + str(seqs[i]) + " appears twice");
    }
  }

  // Attention output rows → y through W_O.
  void output(const float* attn, float* y, int64_t m, int threads) const { o->run(attn, y, m, threads); }

  // Stores `tokens` K/V rows of each sequence as the start of its slot (cross-attention memory).
  void store_kv(KVCache& cache, std::span<const int64_t> seqs, const Projected& p, int64_t batch,
                int64_t tokens) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t) {
        const float* krow = p.k + (b * tokens + t) * p.ldkv;
        const float* vrow = p.v + (b * tokens + t) * p.ldkv;
        for (int64_t h = 0; h < hkv; ++h)
          detail::KVCacheAccess::store(cache, seqs[static_cast<size_t>(b)], h, t, krow + h * hd, vrow + h * hd);
      }
  }

  // Fills the entries' K/V with the slots' whole contents.
  void cache_entries(exec::Problem& p, const KVCache& cache, std::span<const int64_t> seqs) const {
    p.kv_type = detail::KVCacheAccess::kv_type(cache);
    p.k_head_stride = p.v_head_stride = detail::KVCacheAccess::head_stride(cache);
    p.k_row_stride = p.v_row_stride = hd;
    p.k_blocked = true;
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t seq = seqs[static_cast<size_t>(b)];
      exec::BatchEntry& e = p.entries[static_cast<size_t>(b)];
      e.k = detail::KVCacheAccess::keys(cache, seq);
      e.v = detail::KVCacheAccess::values(cache, seq);
      e.num_keys = e.valid_keys = cache.length(seq);
    }
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
  if (c.rope && c.head_dim % 2 != 0) fail("rope needs an even head_dim, got " + str(c.head_dim));
  if (c.rope && !(c.rope_theta > 0.0 && std::isfinite(c.rope_theta))) fail("rope_theta must be positive and finite");
  if (c.weight_dtype == DType::f16)
    throw Error(ErrorCode::unsupported, "MultiHeadAttention: f16 weights are not supported (use f32 or bf16)");
  if (!w.q || !w.k || !w.v || !w.o) fail("weights q, k, v and o are required");
  if (c.bias && (!w.q_bias || !w.k_bias || !w.v_bias || !w.o_bias)) fail("config.bias needs all four biases");
  if (!c.bias && (w.q_bias || w.k_bias || w.v_bias || w.o_bias)) fail("biases given but config.bias is false");
  s.cfg = c;
  s.dm = c.d_model;
  s.hq = c.n_heads;
  s.hkv = c.n_kv_heads;
  s.hd = c.head_dim;
  s.q_out = s.hq * s.hd;
  s.kv_out = s.hkv * s.hd;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
  const bool out_in = w.layout == WeightLayout::out_in;
  const gemm::WeightType wt = s.wtype();
  if (!c.cross_attention) {
    const std::vector<float> wqkv = concat_outputs(w.layout, s.dm, {{w.q, s.q_out}, {w.k, s.kv_out}, {w.v, s.kv_out}});
    const std::vector<float> bqkv =
        c.bias ? concat_bias({{w.q_bias, s.q_out}, {w.k_bias, s.kv_out}, {w.v_bias, s.kv_out}}) : std::vector<float>{};
    s.qkv.emplace(wqkv.data(), out_in, s.dm, s.q_out + 2 * s.kv_out, c.bias ? bqkv.data() : nullptr, wt);
  } else {
    s.q.emplace(w.q, out_in, s.dm, s.q_out, w.q_bias, wt);
    const std::vector<float> wkv = concat_outputs(w.layout, s.dm, {{w.k, s.kv_out}, {w.v, s.kv_out}});
    const std::vector<float> bkv =
        c.bias ? concat_bias({{w.k_bias, s.kv_out}, {w.v_bias, s.kv_out}}) : std::vector<float>{};
    s.kv.emplace(wkv.data(), out_in, s.dm, 2 * s.kv_out, c.bias ? bkv.data() : nullptr, wt);
  }
  s.o.emplace(w.o, out_in, s.q_out, s.dm, w.o_bias, wt);
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

size_t MultiHeadAttention::weight_bytes() const {
  const Impl& s = *impl_;
  size_t n = s.o->weight_bytes();
  for (const auto* l : {&s.qkv, &s.q, &s.kv})
    if (*l) n += (*l)->weight_bytes();
  return n;
}

void MultiHeadAttention::forward(const float* x, float* y, int64_t batch, int64_t tokens, const MhaOptions& opt) const {
  const Impl& s = *impl_;
  s.check_io("forward", x, y, batch, tokens);
  if (!opt.lengths.empty()) {
    if (static_cast<int64_t>(opt.lengths.size()) != batch)
      fail("forward: lengths has " + str(static_cast<int64_t>(opt.lengths.size())) + " entries for batch " +
           str(batch));
    for (int64_t len : opt.lengths)
      if (len < 0 || len > tokens) fail("forward: length " + str(len) + " outside [0, " + str(tokens) + "]");
  }
  if (opt.num_threads < 0) fail("forward: num_threads must be >= 0");
  const kernels::KernelTable& table = dispatch::kernel_table_for(Isa::automatic);
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  const Projected p = s.project(x, m, true, true, opt.num_threads);
  if (s.cfg.rope) {
    auto pos = [&](int64_t, int64_t t) { return opt.first_position + t; };
    s.rope(p.q, p.ldq, s.hq, batch, tokens, pos);
    s.rope(p.k, p.ldkv, s.hkv, batch, tokens, pos);
  }
  float* attn = parallel::thread_buffer(static_cast<size_t>(m * s.q_out), 4);
  exec::Problem pr = s.problem(batch, tokens);
  pr.q_row_stride = p.ldq;
  pr.k_head_stride = pr.v_head_stride = s.hd;
  pr.k_row_stride = pr.v_row_stride = p.ldkv;
  pr.causal = opt.causal.value_or(s.cfg.causal);
  for (int64_t b = 0; b < batch; ++b) {
    exec::BatchEntry& e = pr.entries[static_cast<size_t>(b)];
    e.q = p.q + b * tokens * p.ldq;
    e.k = p.k + b * tokens * p.ldkv;
    e.v = p.v + b * tokens * p.ldkv;
    e.o = attn + b * tokens * s.q_out;
    e.num_keys = tokens;
    e.valid_keys = opt.lengths.empty() ? tokens : opt.lengths[static_cast<size_t>(b)];
  }
  exec::run_attention(pr, table, opt.num_threads);
  s.output(attn, y, m, opt.num_threads);
}

void MultiHeadAttention::forward_cached(const float* x, float* y, int64_t batch, int64_t tokens, KVCache& cache,
                                        std::span<const int64_t> seqs, int num_threads) const {
  const Impl& s = *impl_;
  s.check_io("forward_cached", x, y, batch, tokens);
  s.check_seqs("forward_cached", cache, seqs, batch);
  if (num_threads < 0) fail("forward_cached: num_threads must be >= 0");
  std::vector<int64_t> start(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seq = seqs[static_cast<size_t>(b)];
    start[static_cast<size_t>(b)] = cache.length(seq);
    if (start[static_cast<size_t>(b)] + tokens > cache.config().capacity)
      fail("forward_cached: sequence " + str(seq) + " holds " + str(start[static_cast<size_t>(b)]) + " tokens; " +
           str(tokens) + " more exceed its capacity " + str(cache.config().capacity));
  }
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  const Projected p = s.project(x, m, true, true, num_threads);
  if (s.cfg.rope) {
    auto pos = [&](int64_t b, int64_t t) { return start[static_cast<size_t>(b)] + t; };
    s.rope(p.q, p.ldq, s.hq, batch, tokens, pos);
    s.rope(p.k, p.ldkv, s.hkv, batch, tokens, pos);
  }
  // Append and attend through the public cache entry point, reading Q, K and V straight out of the
  // projection rows through strided views (it re-validates, then changes the cache).
  float* attn = parallel::thread_buffer(static_cast<size_t>(m * s.q_out), 4);
  const TensorView::Dims qs{tokens * p.ldq, s.hd, p.ldq, 1}, kvs{tokens * p.ldkv, s.hd, p.ldkv, 1};
  SdpaOptions opt;
  opt.num_threads = num_threads;
  cached_attention(TensorView(static_cast<const float*>(p.q), {batch, s.hq, tokens, s.hd}, qs),
                   TensorView(static_cast<const float*>(p.k), {batch, s.hkv, tokens, s.hd}, kvs),
                   TensorView(static_cast<const float*>(p.v), {batch, s.hkv, tokens, s.hd}, kvs), cache, seqs,
                   TensorView(attn, {batch, s.hq, tokens, s.hd}, {tokens * s.q_out, s.hd, s.q_out, 1}), opt);
  s.output(attn, y, m, num_threads);
}

void MultiHeadAttention::set_memory(const float* memory, int64_t batch, int64_t tokens, KVCache& cache,
                                    std::span<const int64_t> seqs, int num_threads) const {
  const Impl& s = *impl_;
  if (batch < 0 || tokens < 0) fail("set_memory: batch and tokens must be >= 0");
  if (batch * tokens > 0 && !memory) fail("set_memory: null memory");
  s.check_seqs("set_memory", cache, seqs, batch);
  if (tokens > cache.config().capacity)
    fail("set_memory: " + str(tokens) + " memory tokens exceed the cache capacity " + str(cache.config().capacity));
  if (num_threads < 0) fail("set_memory: num_threads must be >= 0");
  if (batch * tokens > 0) {
    const Projected p = s.project(memory, batch * tokens, false, true, num_threads);
    s.store_kv(cache, seqs, p, batch, tokens);
  }
  for (int64_t b = 0; b < batch; ++b) detail::KVCacheAccess::set_length(cache, seqs[static_cast<size_t>(b)], tokens);
}

void MultiHeadAttention::cross_attend(const float* x, float* y, int64_t batch, int64_t tokens, const KVCache& cache,
                                      std::span<const int64_t> seqs, int num_threads) const {
  const Impl& s = *impl_;
  s.check_io("cross_attend", x, y, batch, tokens);
  s.check_seqs("cross_attend", cache, seqs, batch);
  if (num_threads < 0) fail("cross_attend: num_threads must be >= 0");
  const kernels::KernelTable& table = dispatch::kernel_table_for(Isa::automatic);
  if (batch * tokens == 0) return;
  const int64_t m = batch * tokens;
  const Projected p = s.project(x, m, true, false, num_threads);
  float* attn = parallel::thread_buffer(static_cast<size_t>(m * s.q_out), 4);
  exec::Problem pr = s.problem(batch, tokens);
  pr.q_row_stride = p.ldq;
  pr.causal = false;
  s.cache_entries(pr, cache, seqs);
  for (int64_t b = 0; b < batch; ++b) {
    pr.entries[static_cast<size_t>(b)].q = p.q + b * tokens * p.ldq;
    pr.entries[static_cast<size_t>(b)].o = attn + b * tokens * s.q_out;
  }
  exec::run_attention(pr, table, num_threads);
  s.output(attn, y, m, num_threads);
}

std::vector<float> MultiHeadAttention::attention_weights(const float* x, int64_t batch, int64_t tokens,
                                                         std::span<const int64_t> heads, const MhaOptions& opt) const {
  const Impl& s = *impl_;
  if (batch < 0 || tokens < 0) fail("attention_weights: batch and tokens must be >= 0");
  if (batch * tokens > 0 && !x) fail("attention_weights: null input");
  for (int64_t h : heads)
    if (h < 0 || h >= s.hq) fail("attention_weights: head " + str(h) + " outside [0, " + str(s.hq) + ")");
  if (!opt.lengths.empty() && static_cast<int64_t>(opt.lengths.size()) != batch)
    fail("attention_weights: lengths has the wrong size");
  for (int64_t len : opt.lengths)
    if (len < 0 || len > tokens) fail("attention_weights: length " + str(len) + " outside [0, " + str(tokens) + "]");
  const int64_t nh = static_cast<int64_t>(heads.size());
  std::vector<float> out(static_cast<size_t>(batch * nh * tokens * tokens), 0.0f);
  if (batch * tokens == 0 || nh == 0) return out;
  const Projected p = s.project(x, batch * tokens, true, true, opt.num_threads);
  if (s.cfg.rope) {
    auto pos = [&](int64_t, int64_t t) { return opt.first_position + t; };
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
        if (visible <= 0) continue;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          const float* k = p.k + (b * tokens + j) * p.ldkv + hk * s.hd;
          double dot = 0.0;
          for (int64_t d = 0; d < s.hd; ++d) dot += static_cast<double>(q[d]) * k[d];
          row[static_cast<size_t>(j)] = dot * s.scale;
          mx = std::max(mx, row[static_cast<size_t>(j)]);
        }
        for (int64_t j = 0; j < visible; ++j)
          sum += row[static_cast<size_t>(j)] = std::exp(row[static_cast<size_t>(j)] - mx);
        float* dst = out.data() + ((b * nh + hi) * tokens + i) * tokens;
        for (int64_t j = 0; j < visible; ++j) dst[j] = static_cast<float>(row[static_cast<size_t>(j)] / sum);
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

}  // namespace attend
