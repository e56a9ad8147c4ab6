// layer/<impl>/<shape>: the whole attention layer, impl ∈ {attend, attend-bf16w, attend-bf16, onednn, attend-tp2}, plus
// layer/attend-gemm (attend's projection GEMMs alone) and layer/attend-attn (its attention alone),
// so the summary can show the layer costs no more than its parts (no hidden copies).
// Decode entries also time a plain read of the bytes they stream (packed weights + cached K/V, where
// they lie) right after every call (timed_loop_vs_own_bytes): their `stream_pct` gives the ratios at equal bandwidth,
// which the machine's swinging bandwidth blurs in ratios of separately timed medians. The f32
// prefill entries likewise run an FMA probe after every call (timed_loop_vs_peak, `peak_pct`).
// L1: prefill d_model 4096, 32 heads, 8 kv heads, head_dim 128, N = 512, causal; L2: d_model 1024,
// 16 heads, N = 2048, causal; L3: one decode step with L1's config over a 4096-token cache, B = 1;
// L4: the same at B = 8 over 2048 tokens. Decode shapes evict the bytes they stream (cache, weights) every iteration.
#include <sched.h>

#include <atomic>
#include <attend/attend.hpp>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/gemm/onednn_matmul.hpp"
#include "bench_common.hpp"
#include "onednn_layer.hpp"

namespace attend::bench {
namespace {

struct NamedLayer {
  const char* name;
  LayerShape s;
};

const std::vector<NamedLayer>& layer_shapes() {
  static const std::vector<NamedLayer> l = {{"L1", {1, 512, 4096, 32, 8, 128, 0}},
                                            {"L2", {1, 2048, 1024, 16, 16, 64, 0}},
                                            {"L3", {1, 1, 4096, 32, 8, 128, 4096}},
                                            {"L4", {8, 1, 4096, 32, 8, 128, 2048}}};
  return l;
}

bool decode(const LayerShape& s) { return s.cache_len > 0; }
int64_t q_out(const LayerShape& s) { return s.hq * s.hd; }
int64_t kv_out(const LayerShape& s) { return s.hkv * s.hd; }

double gemm_flops(const LayerShape& s) {
  const double m = static_cast<double>(s.B * s.N);
  return 2.0 * m * s.dm * (q_out(s) + 2 * kv_out(s)) + 2.0 * m * q_out(s) * s.dm;
}
double attn_flops(const LayerShape& s) {
  const double pairs = decode(s) ? static_cast<double>(s.cache_len) : s.N * (s.N + 1) / 2.0;
  return 4.0 * s.B * s.hq * pairs * s.hd;
}
double weight_bytes(const LayerShape& s, int elem) {
  return static_cast<double>(elem) * (s.dm * (q_out(s) + 2 * kv_out(s)) + q_out(s) * s.dm);
}
double kv_bytes(const LayerShape& s) { return decode(s) ? 2.0 * 4 * s.B * s.hkv * s.cache_len * s.hd : 0.0; }

// Weights in X·W layout, shared by every impl of a shape.
struct LayerData {
  const NamedLayer* layer = nullptr;
  KvBuffer wq, wk, wv, wo, wqkv, x, y, k_cache, v_cache;
};

LayerData& layer_data(const NamedLayer& nl) {
  static LayerData d;
  if (d.layer == &nl) return d;
  d = LayerData{};
  d.layer = &nl;
  const LayerShape& s = nl.s;
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.dm));
  d.wq.resize(static_cast<size_t>(s.dm * q_out(s)));
  d.wk.resize(static_cast<size_t>(s.dm * kv_out(s)));
  d.wv.resize(d.wk.size());
  d.wo.resize(static_cast<size_t>(q_out(s) * s.dm));
  fill(d.wq, 31, ws);
  fill(d.wk, 32, ws);
  fill(d.wv, 33, ws);
  fill(d.wo, 34, 1.0f / std::sqrt(static_cast<float>(q_out(s))));
  const int64_t C = q_out(s) + 2 * kv_out(s);
  d.wqkv.resize(static_cast<size_t>(s.dm * C));
  for (int64_t r = 0; r < s.dm; ++r) {
    float* row = d.wqkv.data() + r * C;
    std::memcpy(row, d.wq.data() + r * q_out(s), sizeof(float) * q_out(s));
    std::memcpy(row + q_out(s), d.wk.data() + r * kv_out(s), sizeof(float) * kv_out(s));
    std::memcpy(row + q_out(s) + kv_out(s), d.wv.data() + r * kv_out(s), sizeof(float) * kv_out(s));
  }
  d.x.resize(static_cast<size_t>(s.B * s.N * s.dm));
  d.y.resize(d.x.size());
  fill(d.x, 35);
  if (decode(s)) {
    d.k_cache.resize(static_cast<size_t>(s.B * s.hkv * s.cache_len * s.hd));
    d.v_cache.resize(d.k_cache.size());
    fill(d.k_cache, 36);
    fill(d.v_cache, 37);
  }
  return d;
}

void counters(benchmark::State& state, const LayerShape& s, double flops, double bytes) {
  state.counters["FLOPS"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  (void)s;
}

// A KV cache holding the shape's cached tokens (all but the step's own), one slot per sequence.
KVCache filled_cache(const LayerShape& s, const LayerData& d, DType dtype = DType::f32) {
  KVCache cache({s.hkv, s.hd, s.B, s.cache_len, dtype});
  for (int64_t b = 0; b < s.B; ++b) {
    const TensorView::Dims strides{0, s.cache_len * s.hd, s.hd, 1};
    cache.append(
        b, TensorView(d.k_cache.data() + b * s.hkv * s.cache_len * s.hd, {1, s.hkv, s.cache_len - 1, s.hd}, strides),
        TensorView(d.v_cache.data() + b * s.hkv * s.cache_len * s.hd, {1, s.hkv, s.cache_len - 1, s.hd}, strides));
  }
  return cache;
}

// The shape's causal layer (f32 weights) and its weights (X·W layout).
MhaConfig layer_config(const LayerShape& s) {
  MhaConfig cfg;
  cfg.d_model = s.dm;
  cfg.n_heads = s.hq;
  cfg.n_kv_heads = s.hkv;
  cfg.head_dim = s.hd;
  cfg.causal = true;
  return cfg;
}
MhaWeights layer_weights(const LayerData& d) {
  MhaWeights w;
  w.layout = WeightLayout::in_out;
  w.q = d.wq.data();
  w.k = d.wk.data();
  w.v = d.wv.data();
  w.o = d.wo.data();
  return w;
}

// `act`: the activations' dtype (x and y); bf16 runs the attention with fpmath = bf16 too — the
// whole layer as a bf16 model calls it.
void bm_attend_layer(benchmark::State& state, const NamedLayer* nl, DType wdt, DType cache_dtype,
                     DType act = DType::f32) {
  LayerData& d = layer_data(*nl);
  const LayerShape& s = nl->s;
  const std::vector<uint16_t> x16 = act == DType::bf16 ? to_bf16(d.x) : std::vector<uint16_t>{};
  std::vector<uint16_t> y16(x16.size());
  const void* x = act == DType::bf16 ? static_cast<const void*>(x16.data()) : d.x.data();
  void* y = act == DType::bf16 ? static_cast<void*>(y16.data()) : d.y.data();
  MhaOptions opt;
  if (act == DType::bf16) opt.fpmath = FpMath::bf16;
  MhaConfig cfg = layer_config(s);
  cfg.weight_dtype = wdt;
  const MultiHeadAttention layer(cfg, layer_weights(d));
  if (decode(s)) {
    KVCache cache = filled_cache(s, d, cache_dtype);
    std::vector<int64_t> seqs(static_cast<size_t>(s.B));
    for (int64_t b = 0; b < s.B; ++b) seqs[static_cast<size_t>(b)] = b;
    Evict step_bytes = evict_cache(cache, seqs);
    add_weights(step_bytes, layer);
    timed_decode_steps(state, cache, s.B, s.cache_len, step_bytes,
                       [&] { layer.forward_cached(x, act, y, act, s.B, 1, cache, seqs, opt); });
  } else if (wdt == DType::f32 || act == DType::bf16) {
    // Compute-bound: paired with the f32 FMA probe (peak_pct), the bf16 layer too, so the two
    // compare at equal machine state (the GFLOP/s shares of one probe).
    timed_loop_vs_peak(state, gemm_flops(s) + attn_flops(s), [&] { layer.forward(x, act, y, act, s.B, s.N, opt); });
  } else {
    timed_loop(state, nullptr, [&] { layer.forward(x, act, y, act, s.B, s.N, opt); });
  }
  counters(state, s, gemm_flops(s) + attn_flops(s),
           weight_bytes(s, wdt == DType::bf16 ? 2 : 4) + kv_bytes(s) * (cache_dtype == DType::f32 ? 1.0 : 0.5));
}

// Tensor parallelism on this machine's cores: the layer sharded over 2 ranks (MhaConfig::
// shard_count = 2), each rank a thread of its own pinned to one core and computing its shard with
// one thread (its own context, its own KV cache of half the kv heads), then an all-reduce of the two
// partial outputs over shared memory — each rank sums its half of y — as MPI's shared-memory
// transport does for ranks on one machine. A step is timed from the ranks' start to the end of the
// all-reduce; counter allreduce_pct = the median share of the step the all-reduce phase took.
// Compare with layer/attend (the whole layer, one process, 2 threads).
void bm_attend_tp2(benchmark::State& state, const NamedLayer* nl) {
  constexpr int kRanks = 2;
  LayerData& d = layer_data(*nl);
  const LayerShape& s = nl->s;
  const MhaConfig cfg = layer_config(s);
  const MhaWeights w = layer_weights(d);
  std::vector<MultiHeadAttention> layers;
  std::vector<std::unique_ptr<Context>> contexts;
  std::vector<KVCache> caches;
  for (int r = 0; r < kRanks; ++r) {
    MhaConfig c = cfg;
    c.shard_rank = r;
    c.shard_count = kRanks;
    layers.emplace_back(c, w);
    contexts.push_back(std::make_unique<Context>(ContextConfig{1}));
    if (decode(s)) {  // this rank's kv heads of the shape's cached tokens
      const MhaShardInfo sh = layers.back().shard_info();
      KVCache cache({sh.kv_heads, s.hd, s.B, s.cache_len, DType::f32});
      for (int64_t b = 0; b < s.B; ++b) {
        const TensorView::Dims strides{0, s.cache_len * s.hd, s.hd, 1};
        const int64_t at = (b * s.hkv + sh.first_kv_head) * s.cache_len * s.hd;
        cache.append(b, TensorView(d.k_cache.data() + at, {1, sh.kv_heads, s.cache_len - 1, s.hd}, strides),
                     TensorView(d.v_cache.data() + at, {1, sh.kv_heads, s.cache_len - 1, s.hd}, strides));
      }
      caches.push_back(std::move(cache));
    }
  }
  std::vector<int64_t> seqs(static_cast<size_t>(s.B));
  for (int64_t b = 0; b < s.B; ++b) seqs[static_cast<size_t>(b)] = b;
  Evict step_bytes;  // both ranks' caches and weights, each rank evicting a part
  for (int r = 0; r < kRanks; ++r) {
    add_weights(step_bytes, layers[static_cast<size_t>(r)]);
    if (decode(s)) step_bytes.add(evict_cache(caches[static_cast<size_t>(r)], seqs));
  }
  const size_t n = d.y.size(), half = n / 2;
  std::vector<std::vector<float>> partial(kRanks, std::vector<float>(n));
  auto compute = [&](int r) {
    MhaOptions opt;
    opt.context = contexts[static_cast<size_t>(r)].get();
    opt.num_threads = 1;
    if (decode(s))
      layers[static_cast<size_t>(r)].forward_cached(d.x.data(), partial[static_cast<size_t>(r)].data(), s.B, 1,
                                                    caches[static_cast<size_t>(r)], seqs, opt);
    else
      layers[static_cast<size_t>(r)].forward(d.x.data(), partial[static_cast<size_t>(r)].data(), s.B, s.N, opt);
  };
  auto reduce = [&](int r) {  // rank r sums its half of y
    const size_t lo = r == 0 ? 0 : half, hi = r == 0 ? half : n;
    for (size_t i = lo; i < hi; ++i) d.y[i] = partial[0][i] + partial[1][i];
  };
  // Before each step (untimed) each rank truncates its cache back and evicts its part of the
  // step's bytes itself: an OpenMP region here would leave OpenMP's worker spinning on the other
  // core while the ranks run.
  auto prepare = [&](int r) {
    if (!decode(s)) return;
    KVCache& c = caches[static_cast<size_t>(r)];
    for (int64_t b = 0; b < s.B; ++b) c.truncate(b, s.cache_len - 1);
    step_bytes.part(r, kRanks);
  };
  // Rank 1 on a thread of its own; rank 0 on the benchmark's thread. Each pinned to one core.
  const int cores = std::max(1, omp_get_num_procs());
  cpu_set_t saved;
  sched_getaffinity(0, sizeof saved, &saved);
  auto pin = [&](int core) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(core % cores, &one);
    sched_setaffinity(0, sizeof one, &one);
  };
  std::barrier sync(kRanks);
  std::atomic<bool> stop{false};
  std::thread rank1([&] {
    pin(1);
    for (;;) {
      sync.arrive_and_wait();  // a step begins (or the run ends)
      if (stop) return;
      prepare(1);
      sync.arrive_and_wait();  // both prepared: the timed step starts
      compute(1);
      sync.arrive_and_wait();  // both partials ready
      reduce(1);
      sync.arrive_and_wait();  // y complete
    }
  });
  pin(0);
  std::vector<double> shares;
  auto step = [&](double& reduce_s) {
    sync.arrive_and_wait();
    prepare(0);
    sync.arrive_and_wait();
    const auto t0 = std::chrono::steady_clock::now();
    compute(0);
    sync.arrive_and_wait();
    const auto t1 = std::chrono::steady_clock::now();
    reduce(0);
    sync.arrive_and_wait();
    const auto t2 = std::chrono::steady_clock::now();
    reduce_s = std::chrono::duration<double>(t2 - t1).count();
    return std::chrono::duration<double>(t2 - t0).count();
  };
  double unused = 0;
  step(unused);  // warm-up: primitives, workspaces, first touch
  for (auto _ : state) {
    double r = 0;
    const double t = step(r);
    set_iteration_time(state, t);
    shares.push_back(100.0 * r / t);
  }
  stop = true;
  sync.arrive_and_wait();
  rank1.join();
  sched_setaffinity(0, sizeof saved, &saved);
  if (!shares.empty()) {
    std::sort(shares.begin(), shares.end());
    state.counters["allreduce_pct"] = shares[shares.size() / 2];
  }
  counters(state, s, gemm_flops(s) + attn_flops(s), weight_bytes(s, 4) + kv_bytes(s));
}

void bm_onednn_layer(benchmark::State& state, const NamedLayer* nl) {
  LayerData& d = layer_data(*nl);
  const LayerShape& s = nl->s;
  OnednnLayer layer(s, d.wqkv.data(), d.wo.data());
  auto step = [&] { layer.run(d.x.data(), d.y.data(), d.k_cache.data(), d.v_cache.data()); };
  Evict step_bytes = evict_kv(d.k_cache, d.v_cache);
  step_bytes.add(layer.weight_ranges());
  if (decode(s))
    timed_loop_vs_own_bytes(
        state, step_bytes, [] {}, step);
  else
    timed_loop_vs_peak(state, gemm_flops(s) + attn_flops(s), step);
  counters(state, s, gemm_flops(s) + attn_flops(s), weight_bytes(s, 4) + kv_bytes(s));
}

// attend's projections alone: the same oneDNN GEMMs the layer runs (QKV fused, then W_O).
void bm_attend_gemm(benchmark::State& state, const NamedLayer* nl) {
  LayerData& d = layer_data(*nl);
  const LayerShape& s = nl->s;
  const int64_t C = q_out(s) + 2 * kv_out(s), m = s.B * s.N;
  gemm::Linear qkv(d.wqkv.data(), false, s.dm, C, nullptr, gemm::WeightType::f32);
  gemm::Linear o(d.wo.data(), false, q_out(s), s.dm, nullptr, gemm::WeightType::f32);
  std::vector<float> rows(static_cast<size_t>(m * C)), attn(static_cast<size_t>(m * q_out(s)));
  // The scratch the layer takes from its context, 64-byte aligned.
  std::vector<float> scratch_storage(std::max(qkv.scratch_floats(m), o.scratch_floats(m)) + 16);
  float* scratch = scratch_storage.data() + (16 - reinterpret_cast<uintptr_t>(scratch_storage.data()) / 4 % 16) % 16;
  auto step = [&] {
    qkv.run(d.x.data(), rows.data(), m, 0, scratch);
    o.run(attn.data(), d.y.data(), m, 0, scratch);
  };
  Evict weights;
  weights.add(qkv.weight_data(), qkv.weight_bytes()).add(o.weight_data(), o.weight_bytes());
  if (decode(s))
    timed_loop_vs_own_bytes(
        state, weights, [] {}, step);
  else
    timed_loop_vs_peak(state, gemm_flops(s), step);
  counters(state, s, gemm_flops(s), weight_bytes(s, 4));
}

// attend's attention alone, on the layouts the layer uses: strided views of the [B·N, C]
// projection rows (prefill) or the KV cache (decode).
void bm_attend_attn(benchmark::State& state, const NamedLayer* nl) {
  LayerData& d = layer_data(*nl);
  const LayerShape& s = nl->s;
  const int64_t C = q_out(s) + 2 * kv_out(s);
  std::vector<float> rows(static_cast<size_t>(s.B * s.N * C)), out(static_cast<size_t>(s.B * s.N * q_out(s)));
  fill(rows, 38);
  const TensorView::Dims qkv_strides{s.N * C, s.hd, C, 1};
  const TensorView q(static_cast<const float*>(rows.data()), {s.B, s.hq, s.N, s.hd}, qkv_strides);
  const TensorView o(out.data(), {s.B, s.hq, s.N, s.hd}, {s.N * q_out(s), s.hd, q_out(s), 1});
  const TensorView k(static_cast<const float*>(rows.data() + q_out(s)), {s.B, s.hkv, s.N, s.hd}, qkv_strides);
  const TensorView v(static_cast<const float*>(rows.data() + q_out(s) + kv_out(s)), {s.B, s.hkv, s.N, s.hd},
                     qkv_strides);
  if (decode(s)) {
    KVCache cache = filled_cache(s, d);
    std::vector<int64_t> seqs(static_cast<size_t>(s.B));
    for (int64_t b = 0; b < s.B; ++b) seqs[static_cast<size_t>(b)] = b;
    timed_decode_steps(state, cache, s.B, s.cache_len, evict_cache(cache, seqs),
                       [&] { cached_attention(q, k, v, cache, seqs, o); });
  } else {
    SdpaOptions opt;
    opt.causal = true;
    timed_loop_vs_peak(state, attn_flops(s), [&] { scaled_dot_product_attention(q, k, v, o, opt); });
  }
  counters(state, s, attn_flops(s), kv_bytes(s));
}

}  // namespace

void register_layer_benchmarks() {
  for (const NamedLayer& nl : layer_shapes()) {
    auto reg = [&](const std::string& impl, auto fn) { register_entry("layer/" + impl + "/" + nl.name, fn); };
    reg("attend", [&nl](benchmark::State& st) { bm_attend_layer(st, &nl, DType::f32, DType::f32); });
    reg("attend-bf16w", [&nl](benchmark::State& st) { bm_attend_layer(st, &nl, DType::bf16, DType::f32); });
    // bf16 activations, weights and KV cache, fpmath = bf16: every large byte stream halved, every
    // product on bf16 operands.
    reg("attend-bf16",
        [&nl](benchmark::State& st) { bm_attend_layer(st, &nl, DType::bf16, DType::bf16, DType::bf16); });
    reg("onednn", [&nl](benchmark::State& st) { bm_onednn_layer(st, &nl); });
    reg("attend-tp2", [&nl](benchmark::State& st) { bm_attend_tp2(st, &nl); });
    reg("attend-gemm", [&nl](benchmark::State& st) { bm_attend_gemm(st, &nl); });
    reg("attend-attn", [&nl](benchmark::State& st) { bm_attend_attn(st, &nl); });
  }
}

namespace {

// Decode shapes at equal bandwidth. A step that streams `bytes` at `pct` % of a plain read takes
// bytes / pct in units of that read's time per byte, so ratios of these are what the medians would
// show had every entry met the same bandwidth.
void print_layer_decode_summary(const SummaryReporter& rep, FILE* out) {
  bool any = false;
  for (const NamedLayer& nl : layer_shapes()) {
    const LayerShape& s = nl.s;
    if (!decode(s)) continue;
    auto get = [&](const char* impl) { return rep.find(std::string("layer/") + impl + "/" + nl.name); };
    auto pct = [](const SummaryReporter::Entry* e) { return e ? e->stream_pct : 0.0; };
    const auto *a = get("attend"), *bw = get("attend-bf16w"), *b16 = get("attend-bf16"), *dnn = get("onednn"),
               *g = get("attend-gemm"), *at = get("attend-attn");
    if (pct(a) <= 0) continue;
    if (!any) {
      std::fprintf(out,
                   "\nLayer decode at equal bandwidth (paired: %%str = the step's bandwidth as a share of a plain read "
                   "of the same bytes timed right after each step, median of the per-step ratios; * = the speed-up the "
                   "medians would show if both entries had read at the same bandwidth; bytes f32/bf16w = the "
                   "bf16w/f32* a step reading at 100%% of stream reaches)\n");
      std::fprintf(out, "%-5s %9s %9s %9s %9s %9s %9s %8s %10s %12s %12s %15s\n", "shape", "attend", "bf16w", "bf16",
                   "onednn", "gemm", "attn", "vs dnn*", "bf16w/f32*", "bf16+kv/f32*", "layer/parts*",
                   "bytes f32/bf16w");
      any = true;
    }
    // Bytes each entry streams (weights + K/V), as in their counters.
    const double wf = weight_bytes(s, 4), wb = weight_bytes(s, 2), kv = kv_bytes(s);
    auto norm = [&](const SummaryReporter::Entry* e, double bytes) { return pct(e) > 0 ? bytes / pct(e) : 0.0; };
    const double ta = norm(a, wf + kv), tbw = norm(bw, wb + kv), tb16 = norm(b16, wb + kv / 2),
                 tdnn = norm(dnn, wf + kv), tparts = norm(g, wf) + norm(at, kv);
    auto ratio = [](double num, double den) { return num > 0 && den > 0 ? num / den : 0.0; };
    std::fprintf(out, "%-5s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%% %7.2fx %9.2fx %11.2fx %12.2f %14.2fx\n",
                 nl.name, pct(a), pct(bw), pct(b16), pct(dnn), pct(g), pct(at), ratio(tdnn, ta), ratio(ta, tbw),
                 ratio(ta, tb16), pct(g) > 0 && pct(at) > 0 ? ratio(ta, tparts) : 0.0, (wf + kv) / (wb + kv));
  }
}

// Prefill shapes at equal compute: each f32 entry's GFLOP/s as a share of an FMA probe run right
// after each call (peak_pct). A call of `flops` at `pct` % takes flops / pct in units of the probe's
// time per FLOP, so ratios of these are what the medians would show had every entry met the same
// machine state.
void print_layer_prefill_summary(const SummaryReporter& rep, FILE* out) {
  bool any = false;
  for (const NamedLayer& nl : layer_shapes()) {
    const LayerShape& s = nl.s;
    if (decode(s)) continue;
    auto get = [&](const char* impl) { return rep.find(std::string("layer/") + impl + "/" + nl.name); };
    auto pct = [](const SummaryReporter::Entry* e) { return e ? e->peak_pct : 0.0; };
    const auto *a = get("attend"), *dnn = get("onednn"), *g = get("attend-gemm"), *at = get("attend-attn"),
               *b16 = get("attend-bf16");
    if (pct(a) <= 0) continue;
    if (!any) {
      std::fprintf(
          out,
          "\nLayer prefill at equal compute (paired: %%pk* = the call's GFLOP/s as a share of a ~3 ms FMA probe "
          "run right after each call, median of the per-call ratios; * = the speed-up the medians would show "
          "if both entries had met the same machine state; bf16 = layer/attend-bf16: bf16 activations, "
          "weights, cache, fpmath = bf16, its %%pk* of the same f32 FMA probe)\n");
      std::fprintf(out, "%-5s %9s %9s %9s %9s %9s %8s %12s %9s\n", "shape", "attend", "onednn", "gemm", "attn", "bf16",
                   "vs dnn*", "layer/parts*", "bf16/f32*");
      any = true;
    }
    const double fl = gemm_flops(s) + attn_flops(s);
    auto norm = [&](const SummaryReporter::Entry* e, double flops) { return pct(e) > 0 ? flops / pct(e) : 0.0; };
    const double ta = norm(a, fl), tdnn = norm(dnn, fl), tparts = norm(g, gemm_flops(s)) + norm(at, attn_flops(s)),
                 tb16 = norm(b16, fl);
    std::fprintf(out, "%-5s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%% %7.2fx %12.2f %8.2fx\n", nl.name, pct(a), pct(dnn),
                 pct(g), pct(at), pct(b16), tdnn > 0 ? tdnn / ta : 0.0, pct(g) > 0 && pct(at) > 0 ? ta / tparts : 0.0,
                 tb16 > 0 ? ta / tb16 : 0.0);
  }
}

// Two tensor-parallel ranks (threads on the two cores, shared-memory all-reduce) against the whole
// layer on two threads.
void print_layer_tp_summary(const SummaryReporter& rep, FILE* out) {
  bool any = false;
  for (const NamedLayer& nl : layer_shapes()) {
    const auto* a = rep.find(std::string("layer/attend/") + nl.name);
    const auto* tp = rep.find(std::string("layer/attend-tp2/") + nl.name);
    if (!a || !tp) continue;
    if (!any) {
      std::fprintf(out,
                   "\nTensor parallel, 2 ranks (layer/attend-tp2: the layer sharded by heads over 2 ranks, one core "
                   "and one thread each, all-reduce over shared memory) against layer/attend (2 threads; medians)\n");
      std::fprintf(out, "%-5s %10s %10s %9s %14s\n", "shape", "attend ms", "tp2 ms", "tp2/attend", "all-reduce %");
      any = true;
    }
    std::fprintf(out, "%-5s %10.3f %10.3f %8.2fx %13.1f%%\n", nl.name, a->seconds * 1e3, tp->seconds * 1e3,
                 a->seconds / tp->seconds, tp->counter("allreduce_pct"));
  }
}

}  // namespace

void print_layer_summary(const SummaryReporter& rep, double peak, FILE* out) {
  bool any = false;
  for (const NamedLayer& nl : layer_shapes()) {
    auto get = [&](const char* impl) { return rep.find(std::string("layer/") + impl + "/" + nl.name); };
    const auto *a = get("attend"), *bw = get("attend-bf16w"), *b16 = get("attend-bf16"), *dnn = get("onednn"),
               *g = get("attend-gemm"), *at = get("attend-attn");
    if (!a) continue;
    if (!any) {
      std::fprintf(out,
                   "\nAttention layer (medians; layer/parts = attend layer time over gemm-alone + attention-alone)\n");
      std::fprintf(out, "%-5s %10s %10s %10s %9s %10s %10s %11s %9s %8s\n", "shape", "attend ms", "bf16w ms",
                   "onednn ms", "vs dnn", "bf16w/f32", "bf16+kv/f32", "layer/parts", "GFLOP/s", "GB/s");
      any = true;
    }
    const double parts = (g && at) ? g->seconds + at->seconds : 0.0;
    std::fprintf(out, "%-5s %10.3f %10.3f %10.3f %8.2fx %9.2fx %9.2fx %11.2f %9.1f %8.1f\n", nl.name, a->seconds * 1e3,
                 bw ? bw->seconds * 1e3 : 0.0, dnn ? dnn->seconds * 1e3 : 0.0, dnn ? dnn->seconds / a->seconds : 0.0,
                 bw ? a->seconds / bw->seconds : 0.0, b16 ? a->seconds / b16->seconds : 0.0,
                 parts > 0 ? a->seconds / parts : 0.0, a->gflops, a->gbps);
  }
  print_layer_prefill_summary(rep, out);
  print_layer_decode_summary(rep, out);
  print_layer_tp_summary(rep, out);
  (void)peak;
}

}  // namespace attend::bench
