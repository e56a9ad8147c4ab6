// libFuzzer target for the public API: scaled_dot_product_attention (and its workspace query) with
// random shapes, strides, masks, biases and options (sometimes deliberately invalid),
// cached_attention over a KV cache with random prior contents, aliasing or negative strides and
// bad sequence ids, and the attention layer with a random configuration (forward, forward_cached,
// set_memory + cross_attend), and paged_attention over a PagedKVCache with forked, truncated and
// scattered sequences. Every call must either throw attend::Error — leaving the output exactly as
// it was — or succeed and match the double-precision reference. Buffers are sized exactly, so
// AddressSanitizer catches any access outside them.
#include <attend/attend.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "reference/reference_attention.hpp"
#include "reference/reference_layer.hpp"
#include "reference/stored_values.hpp"

namespace {

using attend::fuzz::Input;

[[noreturn]] void fail() { __builtin_trap(); }

std::vector<float> values(std::mt19937& rng, size_t n, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// |got − want| ≤ tol × the output's scale + `extra` (an absolute allowance: bf16 rounding).
void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol, double extra = 0.0) {
  double scale = 1e-2;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * scale + extra)) fail();
}

// The error fpmath = bf16 may add to outputs whose V is within ±1: each score s = scale·Σ q·k moves
// by at most ε = 2⁻⁸·|scale|·Σ|q||k| (q and k rounded to bf16), which moves a softmax average by at
// most e^{2ε} − 1; P and V rounded add 2·2⁻⁹. `qk_bound` bounds Σ|q||k|.
double bf16_allowance(const attend::SdpaOptions& opt, double qk_bound, int64_t D) {
  if (opt.fpmath != attend::FpMath::bf16) return 0.0;
  const double scale =
      opt.scale != 0.0f ? std::abs(opt.scale) : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, D)));
  return std::expm1(2.0 * std::ldexp(scale * qk_bound, -8)) + std::ldexp(1.0, -8) + 1e-6;
}

// Every KV-cache storage type, and a copy of rows of `row` values as such a cache holds them.
const attend::DType kStorage[4] = {attend::DType::f32, attend::DType::bf16, attend::DType::f16, attend::DType::i8};
std::vector<float> stored(std::vector<float> x, int64_t row, attend::DType t) {
  if (row > 0)
    for (size_t at = 0; at + static_cast<size_t>(row) <= x.size(); at += static_cast<size_t>(row))
      attend::testing::round_trip_row(x.data() + at, row, t);
  return x;
}

void fuzz_sdpa(Input& in, std::mt19937& rng) {
  const int64_t B = in.range(0, 2), Hkv = in.range(1, 3), G = in.range(1, 3), Nq = in.range(0, 20),
                Nk = in.range(0, 40), D = in.range(0, 20), Dv = in.range(1, 20);
  const int64_t Hq = Hkv * G + (in.range(0, 15) == 0 ? 1 : 0);  // sometimes not a multiple
  const bool bnhd = in.flag();
  const int64_t pad = in.range(0, 3);
  // [B, H, N, X] stored as [B, H, N, X+pad] or [B, N, H, X+pad].
  auto strides = [&](int64_t H, int64_t N, int64_t X) -> attend::TensorView::Dims {
    const int64_t row = X + pad;
    return bnhd ? attend::TensorView::Dims{N * H * row, row, H * row, 1}
                : attend::TensorView::Dims{H * N * row, N * row, row, 1};
  };
  const float mag = in.flag() ? 1.0f : 8.0f;
  auto q = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hq * Nq * (D + pad))), mag);
  auto k = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hkv * Nk * (D + pad))), mag);
  auto v = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hkv * Nk * (Dv + pad))), 1.0f);
  std::vector<float> o(static_cast<size_t>(std::max<int64_t>(1, B * Hq * Nq * (Dv + pad))), 12345.0f);
  const attend::TensorView qv(q.data(), {B, Hq, Nq, D}, strides(Hq, Nq, D)),
      kv(k.data(), {B, Hkv, Nk, D}, strides(Hkv, Nk, D)), vv(v.data(), {B, Hkv, Nk, Dv}, strides(Hkv, Nk, Dv));
  attend::TensorView ov(o.data(), {B, Hq, Nq, Dv}, strides(Hq, Nq, Dv));
  const uint8_t twist = in.byte();
  if (twist == 1) ov = attend::TensorView(const_cast<float*>(q.data()), ov.shape(), ov.strides());  // aliases q
  if (twist == 2) ov = attend::TensorView(o.data(), ov.shape(), {0, 0, 0, 1});                      // self-aliasing
  if (twist == 3) ov = attend::TensorView(static_cast<const float*>(o.data()), ov.shape(), ov.strides());  // read-only
  // 16-bit tensors (valid outputs only): q, k, v rounded to bf16/f16 — the f32 copies then hold the
  // widened values the reference sees — and o f32 or of that dtype.
  const uint8_t dmode = twist == 0 ? static_cast<uint8_t>(in.range(0, 4)) : 0;
  const attend::DType dt = dmode <= 2 ? attend::DType::bf16 : attend::DType::f16;
  const bool in16 = dmode != 0, out16 = dmode == 2 || dmode == 4;
  std::vector<uint16_t> q16, k16, v16, o16(o.size(), 0x1234);
  attend::TensorView cq = qv, ck = kv, cv = vv, co = ov;
  if (in16) {
    const auto to16 = [&](std::vector<float>& x, std::vector<uint16_t>& h) {
      h.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        h[i] = dt == attend::DType::bf16 ? attend::numeric::to_bf16(x[i]) : attend::numeric::to_f16(x[i]);
        x[i] = dt == attend::DType::bf16 ? attend::numeric::from_bf16(h[i]) : attend::numeric::from_f16(h[i]);
      }
    };
    to16(q, q16);
    to16(k, k16);
    to16(v, v16);
    cq = attend::TensorView(static_cast<const void*>(q16.data()), dt, qv.shape(), qv.strides());
    ck = attend::TensorView(static_cast<const void*>(k16.data()), dt, kv.shape(), kv.strides());
    cv = attend::TensorView(static_cast<const void*>(v16.data()), dt, vv.shape(), vv.strides());
    if (out16) co = attend::TensorView(static_cast<void*>(o16.data()), dt, ov.shape(), ov.strides());
  }

  attend::SdpaOptions opt;
  opt.causal = in.flag();
  opt.window = in.range(-1, 8);
  if (in.range(0, 3) == 0) opt.scale = in.flag() ? INFINITY : 0.3f;
  std::vector<int64_t> lens;
  if (in.flag()) {
    for (int64_t b = 0; b < B + (in.range(0, 7) == 0 ? 1 : 0); ++b) lens.push_back(in.range(-1, Nk + 1));
    opt.kv_lens = lens;
  }
  std::vector<float> bias;
  if (in.flag()) {
    attend::TensorView::Dims bs{in.flag() ? B : 1, in.flag() ? Hq : 1, in.flag() ? Nq : 1, in.flag() ? Nk : 1};
    if (in.range(0, 7) == 0) bs[3] += 1;  // does not broadcast
    bias = values(rng, static_cast<size_t>(std::max<int64_t>(1, bs[0] * bs[1] * bs[2] * bs[3])), 2.0f);
    opt.bias = attend::TensorView::dense(static_cast<const float*>(bias.data()), bs);
  }
  const attend::Isa isas[5] = {attend::Isa::automatic, attend::Isa::generic, attend::Isa::avx2, attend::Isa::avx512,
                               attend::Isa::avx512_bf16};
  opt.isa = isas[in.range(0, 4)];
  opt.fpmath = in.range(0, 1) ? attend::FpMath::bf16 : attend::FpMath::strict;
  opt.num_threads = static_cast<int>(in.range(0, 3));
  // Model-family terms, sometimes invalid (a negative or non-finite cap, a per-head array of the
  // wrong size or with a non-finite value).
  const float caps[6] = {0.0f, 0.0f, 2.5f, 30.0f, -1.0f, NAN};
  opt.softcap = caps[in.range(0, 5)];
  std::vector<float> sinks, slopes;
  for (std::vector<float>* t : {&sinks, &slopes}) {
    const int64_t pick = in.range(0, 5);
    if (pick == 0 || pick == 1) continue;
    const int64_t n = pick == 5 ? Hq + 1 : Hq;
    *t = values(rng, static_cast<size_t>(n), t == &sinks ? 3.0f : 0.5f);
    if (pick == 4 && n > 0) (*t)[0] = t == &sinks ? INFINITY : NAN;
  }
  opt.sinks = sinks;
  opt.alibi_slopes = slopes;
  if (in.range(0, 3) == 0) opt.causal_alignment = attend::CausalAlignment::top_left;  // PyTorch's is_causal

  // The workspace query validates like the call (it is not given o): it never crashes, and a call
  // it rejects is rejected too.
  bool query_rejected = false;
  try {
    (void)attend::sdpa_workspace_bytes(cq, ck, cv, opt);
  } catch (const attend::Error&) {
    query_rejected = true;
  }
  const std::vector<float> before = o;
  const std::vector<uint16_t> before16 = o16;
  try {
    attend::scaled_dot_product_attention(cq, ck, cv, co, opt);
    if (query_rejected) fail();
  } catch (const attend::Error&) {
    if (std::memcmp(before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();  // rejected calls write nothing
    if (before16 != o16) fail();
    return;
  }
  // Invalid outputs must be rejected. Zero strides alias only over a dimension longer than 1.
  const bool invalid_output = twist == 1 || twist == 3 || (twist == 2 && (B > 1 || Hq > 1 || Nq > 1));
  if (invalid_output && B * Hq * Nq * Dv > 0) fail();
  const std::vector<double> want = attend::testing::reference_attention(qv, kv, vv, opt);
  std::vector<float> got(want.size());
  for (int64_t b = 0, i = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t n = 0; n < Nq; ++n)
        for (int64_t d = 0; d < Dv; ++d, ++i) {
          const size_t at = static_cast<size_t>(b * ov.stride(0) + h * ov.stride(1) + n * ov.stride(2) + d);
          got[static_cast<size_t>(i)] = !out16                      ? o[at]
                                        : dt == attend::DType::bf16 ? attend::numeric::from_bf16(o16[at])
                                                                    : attend::numeric::from_f16(o16[at]);
        }
  // A 16-bit o adds half an ulp of each element (|o| ≤ 1: V is within ±1).
  const double rounding = !out16 ? 0.0 : dt == attend::DType::bf16 ? 0x1p-9 : 0x1p-12;
  check_close(got, want, 1e-4, bf16_allowance(opt, static_cast<double>(D) * mag * mag, D) + rounding);
}

// cached_attention: a cache with random prior lengths (appended through KVCache::append), then one
// call whose views are sometimes invalid (negative strides, an output overlapping an input or
// itself, a read-only output), with sequence ids sometimes repeated or out of range and a capacity
// sometimes too small. A rejected call must leave the cache's lengths, its later results and o
// untouched; an accepted one must match the reference over the stored (f32) values.
void fuzz_cached(Input& in, std::mt19937& rng) {
  const int64_t Hkv = in.range(1, 2), G = in.range(1, 3), D = in.range(1, 20), B = in.range(1, 2), N = in.range(0, 6);
  const int64_t Hq = Hkv * G, capacity = in.range(1, 24);
  const attend::DType storage = kStorage[in.range(0, 3)];
  attend::KVCache cache({Hkv, D, 3, capacity, storage});
  // Host copy of what each slot holds: [slot][head][token][d] for K and V.
  std::vector<std::vector<float>> hk(3), hv(3);
  for (int64_t slot = 0; slot < 3; ++slot) {
    const int64_t n = in.range(0, capacity);
    const auto k = values(rng, static_cast<size_t>(Hkv * n * D), 1.0f), v = values(rng, k.size(), 1.0f);
    cache.append(slot, attend::TensorView::dense(k.data(), {1, Hkv, n, D}),
                 attend::TensorView::dense(v.data(), {1, Hkv, n, D}));
    hk[static_cast<size_t>(slot)] = stored(k, D, storage);
    hv[static_cast<size_t>(slot)] = stored(v, D, storage);
  }
  std::vector<int64_t> seqs;
  for (int64_t b = 0; b < B; ++b) seqs.push_back(in.range(0, 3) == 0 ? in.range(-1, 3) : (b + in.range(0, 2)) % 3);
  if (in.range(0, 7) == 0) seqs.push_back(0);  // wrong count
  const auto q = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hq * N * D)), 1.0f);
  const auto kn = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hkv * N * D)), 1.0f);
  const auto vn = values(rng, kn.size(), 1.0f);
  std::vector<float> o(static_cast<size_t>(std::max<int64_t>(1, B * Hq * N * D)), 12345.0f);
  attend::TensorView qv = attend::TensorView::dense(q.data(), {B, Hq, N, D});
  const attend::TensorView kv = attend::TensorView::dense(kn.data(), {B, Hkv, N, D}),
                           vv = attend::TensorView::dense(vn.data(), {B, Hkv, N, D});
  attend::TensorView ov = attend::TensorView::dense(o.data(), {B, Hq, N, D});
  const uint8_t twist = in.range(0, 6);
  if (twist == 1) ov = attend::TensorView(const_cast<float*>(q.data()), ov.shape(), ov.strides());   // aliases q
  if (twist == 2) ov = attend::TensorView(const_cast<float*>(kn.data()), ov.shape(), ov.strides());  // aliases k_new
  if (twist == 3) ov = attend::TensorView(o.data(), ov.shape(), {0, 0, 0, 1});                       // self-aliasing
  if (twist == 4) ov = attend::TensorView(static_cast<const float*>(o.data()), ov.shape(), ov.strides());
  if (twist == 5 && N > 1)  // a negative stride: rows walk backwards from the end (would read before q)
    qv = attend::TensorView(q.data() + (N - 1) * D, qv.shape(), {Hq * N * D, N * D, -D, 1});
  attend::SdpaOptions opt;
  opt.window = in.range(0, 4) == 0 ? in.range(-1, 6) : 0;
  opt.num_threads = static_cast<int>(in.range(0, 3));

  std::vector<int64_t> lengths_before(3);
  for (int64_t slot = 0; slot < 3; ++slot) lengths_before[static_cast<size_t>(slot)] = cache.length(slot);
  const std::vector<float> o_before = o;
  bool rejected = false;
  try {
    attend::cached_attention(qv, kv, vv, cache, seqs, ov, opt);
  } catch (const attend::Error&) {
    rejected = true;
  }
  if (rejected) {
    for (int64_t slot = 0; slot < 3; ++slot)
      if (cache.length(slot) != lengths_before[static_cast<size_t>(slot)]) fail();
    if (std::memcmp(o_before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();
    return;
  }
  const bool distinct_valid = static_cast<int64_t>(seqs.size()) == B && [&] {
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i] < 0 || seqs[i] > 2 || lengths_before[static_cast<size_t>(seqs[i])] + N > capacity) return false;
      for (size_t j = 0; j < i; ++j)
        if (seqs[j] == seqs[i]) return false;
    }
    return true;
  }();
  const bool bad_view = twist == 1 || twist == 2 || twist == 4 || (twist == 3 && B * Hq * N > 1) ||
                        (twist == 5 && N > 1) || opt.window < 0;
  if (!distinct_valid || (bad_view && B * Hq * N * D > 0)) fail();  // should have been rejected
  // Reference per batch entry over the host copy of the sequence plus the new tokens (as stored).
  const std::vector<float> kns = stored(kn, D, storage), vns = stored(vn, D, storage);
  for (int64_t b = 0; b < B; ++b) {
    const size_t slot = static_cast<size_t>(seqs[static_cast<size_t>(b)]);
    const int64_t before = lengths_before[slot], total = before + N;
    std::vector<float> k(static_cast<size_t>(Hkv * total * D)), v(k.size());
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t t = 0; t < total; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>((h * total + t) * D + d);
          k[at] = t < before ? hk[slot][static_cast<size_t>((h * before + t) * D + d)]
                             : kns[static_cast<size_t>(((b * Hkv + h) * N + t - before) * D + d)];
          v[at] = t < before ? hv[slot][static_cast<size_t>((h * before + t) * D + d)]
                             : vns[static_cast<size_t>(((b * Hkv + h) * N + t - before) * D + d)];
        }
    attend::SdpaOptions ro;
    ro.causal = true;
    ro.window = opt.window;
    const auto want =
        attend::testing::reference_attention(attend::TensorView::dense(q.data() + b * Hq * N * D, {1, Hq, N, D}),
                                             attend::TensorView::dense(k.data(), {1, Hkv, total, D}),
                                             attend::TensorView::dense(v.data(), {1, Hkv, total, D}), ro);
    const std::vector<float> got(o.begin() + b * Hq * N * D, o.begin() + (b + 1) * Hq * N * D);
    check_close(got, want, 1e-4);
    if (cache.length(static_cast<int64_t>(slot)) != total) fail();
  }
}

void fuzz_layer(Input& in, std::mt19937& rng) {
  attend::testing::RefLayer ref;
  ref.hkv = in.range(1, 2);
  ref.hq = ref.hkv * in.range(1, 3);
  ref.hd = 2 * in.range(1, 6);
  ref.dm = in.range(1, 40);
  ref.rope = in.flag();
  const bool bias = in.flag(), causal = in.flag(), cached = in.flag();
  const float ws = 1.0f / std::sqrt(static_cast<float>(ref.dm));
  ref.wq = values(rng, static_cast<size_t>(ref.hq * ref.hd * ref.dm), ws);
  ref.wk = values(rng, static_cast<size_t>(ref.hkv * ref.hd * ref.dm), ws);
  ref.wv = values(rng, static_cast<size_t>(ref.hkv * ref.hd * ref.dm), ws);
  ref.wo = values(rng, static_cast<size_t>(ref.dm * ref.hq * ref.hd), 0.3f);
  if (bias) {
    ref.bq = values(rng, static_cast<size_t>(ref.hq * ref.hd), 0.5f);
    ref.bk = values(rng, static_cast<size_t>(ref.hkv * ref.hd), 0.5f);
    ref.bv = values(rng, static_cast<size_t>(ref.hkv * ref.hd), 0.5f);
    ref.bo = values(rng, static_cast<size_t>(ref.dm), 0.5f);
  }
  attend::MhaConfig cfg;
  cfg.d_model = ref.dm;
  cfg.n_heads = ref.hq;
  cfg.n_kv_heads = ref.hkv;
  cfg.head_dim = ref.hd;
  cfg.bias = bias;
  cfg.rope = ref.rope;
  cfg.causal = causal;
  attend::MhaWeights w;
  w.q = ref.wq.data();
  w.k = ref.wk.data();
  w.v = ref.wv.data();
  w.o = ref.wo.data();
  if (bias) {
    w.q_bias = ref.bq.data();
    w.k_bias = ref.bk.data();
    w.v_bias = ref.bv.data();
    w.o_bias = ref.bo.data();
  }
  const attend::MultiHeadAttention layer(cfg, w);
  const int64_t batch = in.range(1, 2), tokens = in.range(1, 12);
  const auto x = values(rng, static_cast<size_t>(batch * tokens * ref.dm), 1.0f);
  std::vector<float> y(x.size(), 7.0f);
  if (!cached && in.flag()) {  // cross-attention over a memory set into a cache
    const int64_t mem = in.range(0, 10), capacity = in.range(1, 10);
    const auto memory = values(rng, static_cast<size_t>(batch * mem * ref.dm), 1.0f);
    attend::KVCache cache({ref.hkv, ref.hd, 2, capacity, attend::DType::f32});
    std::vector<int64_t> seqs = {1, 0};
    seqs.resize(static_cast<size_t>(batch));
    try {
      layer.set_memory(memory.data(), batch, mem, cache, seqs);
    } catch (const attend::Error& e) {
      if (mem <= capacity || e.code() != attend::ErrorCode::capacity || cache.length(seqs[0]) != 0) fail();
      return;
    }
    if (mem > capacity) fail();
    layer.cross_attend(x.data(), y.data(), batch, tokens, cache, seqs);
    if (mem > 0) check_close(y, ref.forward(x, batch, tokens, false, {}, 0, &memory, mem), 1e-4);
    return;
  }
  if (!cached) {
    layer.forward(x.data(), y.data(), batch, tokens);
    check_close(y, ref.forward(x, batch, tokens, causal), 1e-4);
    return;
  }
  // Through a small cache: a prefill then the rest one token at a time; a capacity that is sometimes
  // too small must make the overflowing call throw and change nothing.
  const int64_t capacity = in.range(1, 14), split = in.range(1, tokens);
  attend::KVCache cache({ref.hkv, ref.hd, 2, capacity, attend::DType::f32});
  std::vector<int64_t> seqs = {1, 0};
  seqs.resize(static_cast<size_t>(batch));
  auto step = [&](int64_t t0, int64_t n) {
    std::vector<float> xs(static_cast<size_t>(batch * n * ref.dm)), ys(xs.size(), 7.0f);
    for (int64_t b = 0; b < batch; ++b)
      std::memcpy(&xs[static_cast<size_t>(b * n * ref.dm)], &x[static_cast<size_t>((b * tokens + t0) * ref.dm)],
                  sizeof(float) * static_cast<size_t>(n * ref.dm));
    const int64_t len_before = cache.length(seqs[0]);
    try {
      layer.forward_cached(xs.data(), ys.data(), batch, n, cache, seqs);
    } catch (const attend::Error&) {
      if (len_before + n <= capacity || cache.length(seqs[0]) != len_before) fail();
      for (float v : ys)
        if (v != 7.0f) fail();
      return false;
    }
    for (int64_t b = 0; b < batch; ++b)
      std::memcpy(&y[static_cast<size_t>((b * tokens + t0) * ref.dm)], &ys[static_cast<size_t>(b * n * ref.dm)],
                  sizeof(float) * static_cast<size_t>(n * ref.dm));
    return true;
  };
  bool ok = step(0, split);
  for (int64_t t = split; ok && t < tokens; ++t) ok = step(t, 1);
  if (ok) check_close(y, ref.forward(x, batch, tokens, true), 1e-4);
}

}  // namespace

// paged_attention: a small pool with random sequences (some forked, some truncated, so blocks are
// shared and scattered), then one call with random chunks (decode, prompt, empty; sometimes a
// repeated or unknown id, a token sum that does not match, a pool too small) and sometimes invalid
// views. A rejected call must leave every length, the free-block count and o untouched; an accepted
// one must match the reference over each sequence's history.
void fuzz_paged(Input& in, std::mt19937& rng) {
  const int64_t Hkv = in.range(1, 2), G = in.range(1, 4), D = 16 * in.range(1, 2) - in.range(0, 1) * 8;
  const int64_t Hq = Hkv * G, bt = 16 * in.range(1, 2), blocks = in.range(1, 12);
  const attend::DType storage = kStorage[in.range(0, 3)];
  attend::PagedKVCache cache({Hkv, D, blocks, bt, storage});
  // Host copy of each sequence: [head][token][d] for K and V.
  struct Host {
    int64_t id;
    std::vector<std::vector<float>> k, v;
  };
  std::vector<Host> seqs;
  const int64_t nseq = in.range(1, 3);
  for (int64_t i = 0; i < nseq; ++i) {
    Host h{cache.create_sequence(), std::vector<std::vector<float>>(static_cast<size_t>(Hkv)),
           std::vector<std::vector<float>>(static_cast<size_t>(Hkv))};
    if (i > 0 && in.range(0, 2) == 0) {  // a fork of the previous sequence (shares its blocks)
      h.id = cache.fork(seqs.back().id);
      h.k = seqs.back().k;
      h.v = seqs.back().v;
    }
    const int64_t n = in.range(0, 40);
    const auto k0 = values(rng, static_cast<size_t>(Hkv * n * D), 1.0f), v0 = values(rng, k0.size(), 1.0f);
    const std::vector<float> k = stored(k0, D, storage), v = stored(v0, D, storage);  // (the host copy)
    try {
      cache.append(h.id, attend::TensorView::dense(k0.data(), {1, Hkv, n, D}),
                   attend::TensorView::dense(v0.data(), {1, Hkv, n, D}));
      for (int64_t hh = 0; hh < Hkv; ++hh) {
        h.k[static_cast<size_t>(hh)].insert(h.k[static_cast<size_t>(hh)].end(), k.begin() + hh * n * D,
                                            k.begin() + (hh + 1) * n * D);
        h.v[static_cast<size_t>(hh)].insert(h.v[static_cast<size_t>(hh)].end(), v.begin() + hh * n * D,
                                            v.begin() + (hh + 1) * n * D);
      }
    } catch (const attend::Error& e) {
      if (e.code() != attend::ErrorCode::capacity || e.blocks_missing() <= 0) fail();
    }
    const int64_t len = cache.length(h.id);
    if (static_cast<int64_t>(h.k[0].size()) != len * D) fail();
    if (len > 0 && in.range(0, 3) == 0) {  // roll back some tokens
      const int64_t keep = in.range(0, static_cast<int>(std::min<int64_t>(len, 255)));
      cache.truncate(h.id, std::min(keep, len));
      for (auto& x : h.k) x.resize(static_cast<size_t>(std::min(keep, len) * D));
      for (auto& x : h.v) x.resize(static_cast<size_t>(std::min(keep, len) * D));
    }
    seqs.push_back(std::move(h));
  }
  std::vector<attend::SequenceChunk> chunks;
  for (const Host& h : seqs)
    if (in.flag()) chunks.push_back({h.id, in.range(0, 3) == 0 ? in.range(2, 20) : in.range(0, 1)});
  if (in.range(0, 7) == 0 && !chunks.empty()) chunks.push_back(chunks[0]);  // repeated id
  if (in.range(0, 7) == 0) chunks.push_back({in.range(50, 60), 1});         // unknown id
  int64_t T = 0;
  for (const auto& c : chunks) T += c.tokens;
  const int64_t Tv = T + (in.range(0, 7) == 0 ? 1 : 0);  // sometimes not the sum
  const auto q = values(rng, static_cast<size_t>(std::max<int64_t>(1, Tv * Hq * D)), 1.0f);
  const auto kn = values(rng, static_cast<size_t>(std::max<int64_t>(1, Tv * Hkv * D)), 1.0f);
  const auto vn = values(rng, kn.size(), 1.0f);
  std::vector<float> o(static_cast<size_t>(std::max<int64_t>(1, Tv * Hq * D)), 12345.0f);
  auto token_major = [&](const float* p, int64_t H) { return attend::TensorView(p, {1, H, Tv, D}, {0, D, H * D, 1}); };
  attend::TensorView ov(o.data(), {1, Hq, Tv, D}, {0, D, Hq * D, 1});
  const uint8_t twist = in.range(0, 5);
  if (twist == 1) ov = attend::TensorView(const_cast<float*>(q.data()), ov.shape(), ov.strides());  // aliases q
  if (twist == 2) ov = attend::TensorView(static_cast<const float*>(o.data()), ov.shape(), ov.strides());
  attend::SdpaOptions opt;
  opt.window = in.range(0, 4) == 0 ? in.range(0, 6) : 0;
  opt.num_threads = static_cast<int>(in.range(0, 3));

  std::vector<int64_t> lengths_before;
  for (const Host& h : seqs) lengths_before.push_back(cache.length(h.id));
  const int64_t free_before = cache.free_blocks();
  const std::vector<float> o_before = o;
  try {
    attend::paged_attention(token_major(q.data(), Hq), token_major(kn.data(), Hkv), token_major(vn.data(), Hkv), cache,
                            chunks, ov, opt);
  } catch (const attend::Error& e) {
    for (size_t i = 0; i < seqs.size(); ++i)
      if (cache.length(seqs[i].id) != lengths_before[i]) fail();
    if (cache.free_blocks() != free_before) fail();
    if (std::memcmp(o_before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();
    if (e.code() == attend::ErrorCode::capacity && e.blocks_missing() <= 0) fail();
    return;
  }
  if (Tv != T || (T > 0 && (twist == 1 || twist == 2))) fail();  // should have been rejected
  for (size_t i = 1; i < chunks.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (chunks[i].seq == chunks[j].seq) fail();
  // Reference per chunk over the sequence's history plus its new tokens (as stored).
  const std::vector<float> kns = stored(kn, D, storage), vns = stored(vn, D, storage);
  int64_t first = 0;
  for (const auto& c : chunks) {
    const Host* h = nullptr;
    size_t idx = 0;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].id == c.seq) h = &seqs[i], idx = i;
    if (!h) fail();
    const int64_t before = lengths_before[idx], total = before + c.tokens;
    if (cache.length(c.seq) != total) fail();
    std::vector<float> k(static_cast<size_t>(Hkv * total * D)), v(k.size());
    for (int64_t hh = 0; hh < Hkv; ++hh)
      for (int64_t t = 0; t < total; ++t)
        for (int64_t d = 0; d < D; ++d) {
          const size_t at = static_cast<size_t>((hh * total + t) * D + d);
          const bool old = t < before;
          k[at] = old ? h->k[static_cast<size_t>(hh)][static_cast<size_t>(t * D + d)]
                      : kns[static_cast<size_t>(((first + t - before) * Hkv + hh) * D + d)];
          v[at] = old ? h->v[static_cast<size_t>(hh)][static_cast<size_t>(t * D + d)]
                      : vns[static_cast<size_t>(((first + t - before) * Hkv + hh) * D + d)];
        }
    attend::SdpaOptions ref;
    ref.causal = true;
    ref.window = opt.window;
    const auto want = attend::testing::reference_attention(
        attend::TensorView(q.data() + first * Hq * D, {1, Hq, c.tokens, D}, {0, D, Hq * D, 1}),
        attend::TensorView::dense(k.data(), {1, Hkv, total, D}),
        attend::TensorView::dense(v.data(), {1, Hkv, total, D}), ref);
    std::vector<float> got;
    for (int64_t hh = 0; hh < Hq; ++hh)
      for (int64_t t = 0; t < c.tokens; ++t)
        for (int64_t d = 0; d < D; ++d) got.push_back(o[static_cast<size_t>(((first + t) * Hq + hh) * D + d)]);
    check_close(got, want, 1e-4);
    first += c.tokens;
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  std::mt19937 rng(in.byte() | (in.byte() << 8));
  switch (in.range(0, 6)) {
    case 0: fuzz_layer(in, rng); break;
    case 1:
    case 2: fuzz_cached(in, rng); break;
    case 6: fuzz_paged(in, rng); break;
    default: fuzz_sdpa(in, rng); break;
  }
  return 0;
}
