// attend-bench: attend's fused attention against the oneDNN baseline, in one process.
//
// Benchmarks are named <group>/<impl>/<shape>: sdpa/attend/P1, sdpa/onednn/P1, stream/read/D1.
// Every entry reports medians over repetitions (default 5, randomly interleaved across entries;
// override with --benchmark_repetitions / --benchmark_enable_random_interleaving=false)
// with FLOPS and bytes-per-second counters, and JSON output (--benchmark_format=json) carries the
// same. A summary table with the attend/oneDNN ratios, the fraction of the measured FMA peak
// (prefill) and of the measured streaming-read bandwidth (decode) is printed at the end (to stderr
// when the format is JSON, so stdout stays machine-readable).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "machine.hpp"
#include "onednn_sdpa.hpp"

namespace attend::bench {
namespace {

struct NamedShape {
  const char* name;
  SdpaShape shape;
  bool decode;  // K/V evicted before each iteration (Evict); compare with stream/read
};

const std::vector<NamedShape>& shapes() {
  static const std::vector<NamedShape> list = {
      {"P1", {1, 8, 8, 512, 512, 64, false}, false},
      {"P2", {1, 8, 8, 2048, 2048, 64, false}, false},
      {"P3", {1, 8, 8, 2048, 2048, 64, true}, false},
      {"P4", {1, 32, 32, 2048, 2048, 128, true}, false},
      {"P5", {1, 8, 8, 4096, 4096, 64, true}, false},
      {"D1", {1, 32, 32, 1, 4096, 128, false}, true},
      {"D2", {1, 32, 8, 1, 4096, 128, false}, true},
      {"D3", {8, 32, 8, 1, 2048, 128, false}, true},
      {"D4", {1, 32, 32, 1, 16384, 128, false}, true},
      // Head sizes other than 64/128 (issue 16): P3 with D = 80 and 256, D2 with D = 96.
      {"P6", {1, 8, 8, 2048, 2048, 80, true}, false},
      {"P7", {1, 8, 8, 2048, 2048, 256, true}, false},
      {"D5", {1, 32, 8, 1, 4096, 96, false}, true},
      // GQA groups of 8 (Llama-3-70B's 64 query heads over 8 kv heads): 16-register targets score
      // them in two row packs (session 17).
      {"D7", {1, 64, 8, 1, 4096, 128, false}, true},
      // Groups of 16 (Llama-3.1-405B: 128 query heads over 8 kv heads): past the narrow path's
      // rows on every target, the wide path's decode (session 19).
      {"D8", {1, 128, 8, 1, 4096, 128, false}, true},
  };
  return list;
}

// Multiply-adds counted as 2 FLOPs, two matmuls, only over visible (query, key) pairs.
double flops(const SdpaShape& s) {
  double pairs = 0.0;
  for (int64_t i = 0; i < s.Nq; ++i)
    pairs += s.causal ? static_cast<double>(std::min(s.Nk, i + (s.Nk - s.Nq) + 1)) : static_cast<double>(s.Nk);
  return 4.0 * s.B * s.Hq * pairs * s.D;
}

double io_bytes(const SdpaShape& s) { return 4.0 * (2.0 * s.B * s.Hq * s.Nq * s.D + 2.0 * s.B * s.Hkv * s.Nk * s.D); }
double kv_bytes(const SdpaShape& s) { return 4.0 * 2.0 * s.B * s.Hkv * s.Nk * s.D; }

// Inputs for one shape, kept while that shape's benchmarks run (registration order groups them),
// with the baseline's primitives and a once-per-shape correctness check of both implementations.
struct Workload {
  const NamedShape* shape = nullptr;
  KvBuffer q, k, v, o;
  std::unique_ptr<OnednnSdpa> onednn, onednn_bf16;  // (the second made by its entry)
  std::string error;                                // non-empty: a correctness check failed
  // bf16 copies of q, k, v and a bf16 output (made by sdpa/attend-bf16io's first call).
  Bf16Buffer q16, k16, v16, o16;
};

// A model family's score term on the fused path (sdpa/attend-<term>/).
enum class Term { none, softcap, sinks, alibi };

// Per-head term values of a shape (sinks drawn like the inputs; BLOOM's slopes; Gemma 2's cap).
struct TermValues {
  std::vector<float> sinks, slopes;
  explicit TermValues(int64_t heads) : sinks(static_cast<size_t>(heads)), slopes(alibi_slopes(heads)) {
    fill(sinks, 7, 2.0f);
  }
  void apply(Term t, SdpaOptions& opt) const {
    if (t == Term::softcap) opt.softcap = 50.0f;
    if (t == Term::sinks) opt.sinks = sinks;
    if (t == Term::alibi) opt.alibi_slopes = slopes;
  }
};

void run_attend(const SdpaShape& s, const float* q, const float* k, const float* v, float* o,
                FpMath fpmath = FpMath::strict, Term term = Term::none, const TermValues* tv = nullptr) {
  SdpaOptions opt;
  opt.causal = s.causal;
  opt.fpmath = fpmath;
  if (tv) tv->apply(term, opt);
  scaled_dot_product_attention(
      TensorView::dense(q, {s.B, s.Hq, s.Nq, s.D}), TensorView::dense(k, {s.B, s.Hkv, s.Nk, s.D}),
      TensorView::dense(v, {s.B, s.Hkv, s.Nk, s.D}), TensorView::dense(o, {s.B, s.Hq, s.Nq, s.D}), opt);
}

// Max abs error of `o` against a double-precision reference on a sample of rows.
double sampled_error(const SdpaShape& s, const Workload& w, std::span<const float> o) {
  const int64_t G = s.Hq / s.Hkv;
  const int64_t rows = s.B * s.Hq * s.Nq;
  double worst = 0.0;
  std::vector<double> p(static_cast<size_t>(s.Nk));
  for (int64_t sample = 0; sample < 16; ++sample) {
    const int64_t row = (sample * 7919 + 13) % rows;
    const int64_t i = row % s.Nq, h = (row / s.Nq) % s.Hq, b = row / (s.Nq * s.Hq);
    const float* q = &w.q[static_cast<size_t>(row * s.D)];
    const float* k = &w.k[static_cast<size_t>((b * s.Hkv + h / G) * s.Nk * s.D)];
    const float* v = &w.v[static_cast<size_t>((b * s.Hkv + h / G) * s.Nk * s.D)];
    const int64_t visible = s.causal ? std::min(s.Nk, i + (s.Nk - s.Nq) + 1) : s.Nk;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < visible; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < s.D; ++d) dot += double(q[d]) * k[j * s.D + d];
      p[j] = dot / std::sqrt(double(s.D));
      mx = std::max(mx, p[j]);
    }
    for (int64_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
    for (int64_t d = 0; d < s.D; ++d) {
      double want = 0.0;
      for (int64_t j = 0; j < visible; ++j) want += p[j] / sum * v[j * s.D + d];
      worst = std::max(worst, std::abs(want - o[static_cast<size_t>(row * s.D + d)]));
    }
  }
  return worst;
}

Workload& workload(const NamedShape& ns) {
  static Workload w;
  if (w.shape == &ns) return w;
  w = Workload{};
  w.shape = &ns;
  const SdpaShape& s = ns.shape;
  w.q.resize(static_cast<size_t>(s.B * s.Hq * s.Nq * s.D));
  w.k.resize(static_cast<size_t>(s.B * s.Hkv * s.Nk * s.D));
  w.v.resize(w.k.size());
  w.o.assign(w.q.size(), 0.0f);
  fill(w.q, 1);
  fill(w.k, 2);
  fill(w.v, 3);
  w.onednn = std::make_unique<OnednnSdpa>(s);
  std::vector<float> check(w.o.size());
  run_attend(s, w.q.data(), w.k.data(), w.v.data(), check.data());
  if (double e = sampled_error(s, w, check); e > 1e-4)
    w.error = "attend differs from the reference by " + std::to_string(e);
  w.onednn->run(w.q.data(), w.k.data(), w.v.data(), check.data());
  if (double e = sampled_error(s, w, check); e > 1e-4)
    w.error = "onednn differs from the reference by " + std::to_string(e);
  return w;
}

void set_counters(benchmark::State& state, const SdpaShape& s, double bytes) {
  state.counters["FLOPS"] = benchmark::Counter(flops(s), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

// Decode entries also measure a read of the same bytes after every call (stream_pct); prefill
// entries run back to back with warm caches, each call followed by an FMA probe (peak_pct).
template <class F>
void timed_sdpa(benchmark::State& state, const NamedShape* ns, Workload& w, F&& body) {
  if (!ns->decode) return timed_loop_vs_peak(state, flops(ns->shape), body);
  timed_loop_vs_own_bytes(
      state, evict_kv(w.k, w.v), [] {}, body);
}

void bm_attend(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  timed_sdpa(state, ns, w, [&] { run_attend(ns->shape, w.q.data(), w.k.data(), w.v.data(), w.o.data()); });
  set_counters(state, ns->shape, io_bytes(ns->shape));
  const SdpaShape& s = ns->shape;
  SdpaOptions opt;
  opt.causal = s.causal;
  state.counters["workspace_MiB"] =
      static_cast<double>(sdpa_workspace_bytes(TensorView::dense(w.q.data(), {s.B, s.Hq, s.Nq, s.D}),
                                               TensorView::dense(w.k.data(), {s.B, s.Hkv, s.Nk, s.D}),
                                               TensorView::dense(w.v.data(), {s.B, s.Hkv, s.Nk, s.D}), opt)) /
      (1 << 20);
}

// f32 in and out, FpMath::bf16 (vdpbf16ps on avx512_bf16 where it outruns the FMAs); prefill shapes.
// peak_pct is the share of the vdpbf16ps probe run after each call (the FMA probe where
// FpMath::bf16 runs the f32 kernels: attend::bf16_math_native()). Checked once per shape against the sampled reference
// with the documented bf16-math bound (1e-2 of the output's scale).
void bm_attend_bf16math(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const SdpaShape& s = ns->shape;
  run_attend(s, w.q.data(), w.k.data(), w.v.data(), w.o.data(), FpMath::bf16);
  if (double e = sampled_error(s, w, w.o); e > 1e-2)
    return state.SkipWithError(("attend fpmath=bf16 differs from the reference by " + std::to_string(e)).c_str());
  timed_loop_vs_peak(
      state, flops(s), [&] { run_attend(s, w.q.data(), w.k.data(), w.v.data(), w.o.data(), FpMath::bf16); },
      attend::bf16_math_native());
  set_counters(state, s, io_bytes(s));
}

// bf16 tensors in and out (TensorView dtype bf16), the way a bf16 model calls it: prefill with
// FpMath::bf16 (peak_pct against the vdpbf16ps probe), decode reading bf16 K/V (stream_pct against
// a plain read of its own bytes, half the f32 entry's). Checked once per shape against the sampled
// double reference over the bf16-rounded inputs: 1e-2 of the output's scale (the bf16-math bound;
// the output's own rounding, 2⁻⁹, included).
void bm_attend_bf16io(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const SdpaShape& s = ns->shape;
  if (w.q16.empty()) {
    w.q16 = to_bf16<Bf16Buffer>(w.q);
    w.k16 = to_bf16<Bf16Buffer>(w.k);
    w.v16 = to_bf16<Bf16Buffer>(w.v);
    w.o16.assign(w.q16.size(), 0);
  }
  SdpaOptions opt;
  opt.causal = s.causal;
  opt.fpmath = FpMath::bf16;
  const auto view = [](const Bf16Buffer& x, int64_t b, int64_t h, int64_t n, int64_t d) {
    return TensorView::dense(static_cast<const void*>(x.data()), DType::bf16, {b, h, n, d});
  };
  const TensorView q = view(w.q16, s.B, s.Hq, s.Nq, s.D), k = view(w.k16, s.B, s.Hkv, s.Nk, s.D),
                   v = view(w.v16, s.B, s.Hkv, s.Nk, s.D);
  const TensorView o = TensorView::dense(static_cast<void*>(w.o16.data()), DType::bf16, {s.B, s.Hq, s.Nq, s.D});
  auto run = [&] { scaled_dot_product_attention(q, k, v, o, opt); };
  run();
  {
    Workload wide;  // the reference sees exactly the bf16 inputs
    wide.q = from_bf16<KvBuffer>(w.q16);
    wide.k = from_bf16<KvBuffer>(w.k16);
    wide.v = from_bf16<KvBuffer>(w.v16);
    if (double e = sampled_error(s, wide, from_bf16(w.o16)); e > 1e-2)
      return state.SkipWithError(("attend bf16 io differs from the reference by " + std::to_string(e)).c_str());
  }
  if (ns->decode) {
    timed_loop_vs_own_bytes(
        state, evict_kv(w.k16, w.v16), [] {}, run);
  } else {
    timed_loop_vs_peak(state, flops(s), run, attend::bf16_math_native());
  }
  set_counters(state, s, io_bytes(s) / 2);
}

// oneDNN's baseline with bf16 matmuls (Q, K, V and P reordered to bf16 by oneDNN, f32 in and out,
// softmax f32): the speed-up of fpmath = bf16 at equal precision. Label: the matmul
// implementations oneDNN chose (brg:avx512_core_bf16 where the CPU has AVX512_BF16).
void bm_onednn_bf16(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const SdpaShape& s = ns->shape;
  if (!w.onednn_bf16) {
    try {
      w.onednn_bf16 = std::make_unique<OnednnSdpa>(s, true);
    } catch (const std::exception& e) {  // oneDNN 2.6 has bf16 matmuls only with AVX-512
      return state.SkipWithError(
          ("oneDNN cannot run bf16 matmuls on this CPU (oneDNN isa " + onednn_isa() + "): " + e.what()).c_str());
    }
  }
  w.onednn_bf16->run(w.q.data(), w.k.data(), w.v.data(), w.o.data());
  if (double e = sampled_error(s, w, w.o); e > 1e-2)
    return state.SkipWithError(("onednn bf16 differs from the reference by " + std::to_string(e)).c_str());
  timed_loop_vs_peak(
      state, flops(s), [&] { w.onednn_bf16->run(w.q.data(), w.k.data(), w.v.data(), w.o.data()); }, has_bf16_dot());
  set_counters(state, s, io_bytes(s));
  state.SetLabel(w.onednn_bf16->matmul_impls());
}

void bm_onednn(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  timed_sdpa(state, ns, w, [&] { w.onednn->run(w.q.data(), w.k.data(), w.v.data(), w.o.data()); });
  set_counters(state, ns->shape, io_bytes(ns->shape));
  state.counters["workspace_MiB"] = static_cast<double>(w.onednn->workspace_bytes()) / (1 << 20);
}

// sdpa/attend with one score term on (softcap 50, a sink per head, BLOOM's ALiBi slopes): its cost
// is its time over sdpa/attend's (and, paired, the ratio of the two entries' %peak* / %stream).
template <Term kTerm>
void bm_attend_term(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  if (!w.error.empty()) return state.SkipWithError(w.error.c_str());
  const TermValues tv(ns->shape.Hq);
  timed_sdpa(state, ns, w, [&] {
    run_attend(ns->shape, w.q.data(), w.k.data(), w.v.data(), w.o.data(), FpMath::strict, kTerm, &tv);
  });
  set_counters(state, ns->shape, io_bytes(ns->shape));
}

void bm_stream(benchmark::State& state, const NamedShape* ns) {
  Workload& w = workload(*ns);
  const Evict kv = evict_kv(w.k, w.v);
  timed_reference_reads(state, kv);
  state.SetBytesProcessed(static_cast<int64_t>(kv_bytes(ns->shape)) * state.iterations());
}

}  // namespace

void print_sdpa_summary(const SummaryReporter& rep, double peak, FILE* out) {
  std::fprintf(out, "\nSummary (medians; speed-up = onednn time / attend time, same process)\n");
  std::fprintf(out, "%-5s %11s %11s %8s %9s %10s %8s %8s %10s %10s %8s %8s %8s\n", "shape", "attend ms", "onednn ms",
               "speedup", "speedup*", "GFLOP/s", "%peak", "%peak*", "GB/s", "stream", "%stream", "dnn%str", "bound");
  for (const NamedShape& ns : shapes()) {
    const auto* a = rep.find(std::string("sdpa/attend/") + ns.name);
    const auto* o = rep.find(std::string("sdpa/onednn/") + ns.name);
    if (!a) continue;
    const double speedup = o ? o->seconds / a->seconds : 0.0;
    // speedup*: the ratio of the two impls' paired shares of the machine's limit (FMA probe for
    // prefill, stream read for decode): the speed-up had both met the same machine state.
    const double a_pct = ns.decode ? a->stream_pct : a->peak_pct;
    const double o_pct = o ? (ns.decode ? o->stream_pct : o->peak_pct) : 0.0;
    std::fprintf(out, "%-5s %11.3f %11.3f %7.2fx %8.2fx %10.1f %7.1f%%", ns.name, a->seconds * 1e3,
                 o ? o->seconds * 1e3 : 0.0, speedup, a_pct > 0 && o_pct > 0 ? a_pct / o_pct : 0.0, a->gflops,
                 peak > 0 ? 100.0 * a->gflops / peak : 0.0);
    if (!ns.decode) {
      std::fprintf(out, " %7.1f%%\n", a->peak_pct);
      continue;
    }
    std::fprintf(out, " %8s", "");
    const auto* st = rep.find(std::string("stream/read/") + ns.name);
    if (st) {
      // %stream: the paired per-iteration figure (stream_pct) when measured, else the ratio of the
      // two entries' medians.
      const double kv_gbps = kv_bytes(ns.shape) / a->seconds * 1e-9;
      const double pct = a->stream_pct > 0 ? a->stream_pct : 100.0 * kv_gbps / st->gbps;
      std::fprintf(out, " %10.1f %10.1f %7.1f%%", kv_gbps, st->gbps, pct);
      if (o) {
        // onednn's share of the stream bandwidth bounds any speed-up over it: a kernel that reads
        // K and V at 100% of stream is at most 1/share times faster.
        const double dnn_pct =
            o->stream_pct > 0 ? o->stream_pct : 100.0 * kv_bytes(ns.shape) / o->seconds * 1e-9 / st->gbps;
        std::fprintf(out, " %7.1f%% %7.2fx", dnn_pct, 100.0 / dnn_pct);
      }
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(
      out,
      "(%%peak is of the FMA peak measured at start, %.1f GFLOP/s; %%peak* of a ~3 ms FMA probe run right after "
      "each call, median of the per-call ratios; GB/s for decode counts the K+V bytes read, like stream/read; "
      "%%stream and dnn%%str are attend's and onednn's bandwidth as a share of a plain read of the same bytes "
      "timed right after each call (the fastest of three read loops, as stream/read: the context's reference_read; "
      "median of the per-call ratios); speedup* = attend's paired share over "
      "onednn's (%%peak* for prefill, %%stream for decode): the speed-up at equal machine state; bound = "
      "1/dnn%%str is the largest speed-up a kernel reading at 100%% of stream could show)\n",
      peak);
}

void print_bf16math_summary(const SummaryReporter& rep, double bf16_peak, double amx_peak, FILE* out) {
  bool any = false;
  for (const NamedShape& ns : shapes())
    any |= rep.find(std::string("sdpa/attend-bf16math/") + ns.name) ||
           rep.find(std::string("sdpa/attend-bf16io/") + ns.name);
  if (!any) return;
  std::fprintf(
      out, "\nfpmath=bf16 prefill (medians; f32 in and out; vs f32 = sdpa/attend time / this time, same process)\n");
  std::fprintf(out, "%-5s %11s %11s %11s %8s %8s %10s %9s %9s %9s %10s %8s %9s\n", "shape", "bf16 ms", "f32 ms",
               "dnnbf16 ms", "vs f32", "vs dnn", "GFLOP/s", "%bf16pk", "%bf16pk*", "dnn%pk*", "bf16io ms", "io/f32",
               "io%pk*");
  for (const NamedShape& ns : shapes()) {
    const auto* b = rep.find(std::string("sdpa/attend-bf16math/") + ns.name);
    const auto* a = rep.find(std::string("sdpa/attend/") + ns.name);
    const auto* d = rep.find(std::string("sdpa/onednn-bf16/") + ns.name);
    const auto* io = rep.find(std::string("sdpa/attend-bf16io/") + ns.name);
    if (ns.decode || (!b && !io)) continue;
    const double bs = b ? b->seconds : 0.0;
    std::fprintf(out, "%-5s %11.3f %11.3f %11.3f %7.2fx %7.2fx %10.1f %8.1f%% %8.1f%% %8.1f%% %10.3f %7.2fx %8.1f%%\n",
                 ns.name, bs * 1e3, a ? a->seconds * 1e3 : 0.0, d ? d->seconds * 1e3 : 0.0,
                 a && b ? a->seconds / bs : 0.0, d && b ? d->seconds / bs : 0.0, b ? b->gflops : 0.0,
                 b && bf16_peak > 0 ? 100.0 * b->gflops / bf16_peak : 0.0, b ? b->peak_pct : 0.0, d ? d->peak_pct : 0.0,
                 io ? io->seconds * 1e3 : 0.0, io && a ? a->seconds / io->seconds : 0.0, io ? io->peak_pct : 0.0);
  }
  // Decode with bf16 tensors: K/V bytes halved; %stream against a plain read of those bytes.
  bool io_decode = false;
  for (const NamedShape& ns : shapes())
    io_decode |= ns.decode && rep.find(std::string("sdpa/attend-bf16io/") + ns.name) != nullptr;
  if (io_decode) {
    std::fprintf(out, "%-5s %11s %11s %8s %9s\n", "shape", "bf16io ms", "f32 ms", "vs f32", "%stream");
    for (const NamedShape& ns : shapes()) {
      const auto* io = rep.find(std::string("sdpa/attend-bf16io/") + ns.name);
      const auto* a = rep.find(std::string("sdpa/attend/") + ns.name);
      if (!ns.decode || !io) continue;
      std::fprintf(out, "%-5s %11.3f %11.3f %7.2fx %8.1f%%\n", ns.name, io->seconds * 1e3, a ? a->seconds * 1e3 : 0.0,
                   a ? a->seconds / io->seconds : 0.0, io->stream_pct);
    }
  }
  std::fprintf(
      out,
      "(%%bf16pk is of the vdpbf16ps peak measured at start, %.1f GFLOP/s (64 FLOPs per instruction); "
      "%%bf16pk* of a ~3 ms vdpbf16ps probe run right after each call, median of the per-call ratios; dnnbf16 = "
      "oneDNN's baseline with bf16 matmuls (Q, K, V, P reordered to bf16, timed), vs dnn its time over "
      "attend's; dnn%%pk* its share of the vdpbf16ps probe; bf16io = sdpa/attend-bf16io: bf16 q, k, v and o, "
      "fpmath=bf16, io/f32 = sdpa/attend time over its time, io%%pk* its paired share of the vdpbf16ps probe)\n%s",
      bf16_peak,
      attend::bf16_math_native()
          ? ""
          : "(fpmath=bf16 runs the f32 kernels on this CPU (attend-info): %bf16pk* and io%pk* are of the FMA probe)\n");
  if (amx_peak > 0)
    std::fprintf(out,
                 "(fpmath=bf16 runs its two products on AMX tiles here (attend-info): a tdpbf16ps probe does %.0f "
                 "GFLOP/s, %.1fx the vdpbf16ps one; the softmax between the products stays on the vector units)\n",
                 amx_peak, bf16_peak > 0 ? amx_peak / bf16_peak : 0.0);
}

void print_terms_summary(const SummaryReporter& rep, FILE* out) {
  bool any = false;
  for (const NamedShape& ns : shapes()) any |= rep.find(std::string("sdpa/attend-softcap/") + ns.name) != nullptr;
  if (!any) return;
  std::fprintf(out,
               "\nScore terms (medians; cost = the term's time / sdpa/attend's, paired = attend's %%peak* or "
               "%%stream over the term's)\n");
  std::fprintf(out, "%-5s %10s %10s %8s %8s %10s %8s %8s %10s %8s %8s\n", "shape", "attend ms", "softcap", "cost",
               "paired", "sinks", "cost", "paired", "alibi", "cost", "paired");
  for (const NamedShape& ns : shapes()) {
    const auto* a = rep.find(std::string("sdpa/attend/") + ns.name);
    if (!a || !rep.find(std::string("sdpa/attend-softcap/") + ns.name)) continue;
    std::fprintf(out, "%-5s %10.3f", ns.name, a->seconds * 1e3);
    for (const char* term : {"softcap", "sinks", "alibi"}) {
      const auto* t = rep.find(std::string("sdpa/attend-") + term + "/" + ns.name);
      const double share_a = ns.decode ? a->stream_pct : a->peak_pct;
      const double share_t = t ? (ns.decode ? t->stream_pct : t->peak_pct) : 0.0;
      std::fprintf(out, " %10.3f %7.3fx %7.3fx", t ? t->seconds * 1e3 : 0.0, t ? t->seconds / a->seconds : 0.0,
                   share_t > 0 ? share_a / share_t : 0.0);
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out,
               "(softcap 50 (Gemma 2), one sink per head, BLOOM's ALiBi slopes; the issue's budget: cost <= 1.10 "
               "on P2/P3, <= 1.03 on D1/D2)\n");
}

void register_sdpa_benchmarks() {
  for (const NamedShape& ns : shapes()) {
    auto reg = [&](const char* group, void (*fn)(benchmark::State&, const NamedShape*)) {
      register_entry(std::string(group) + ns.name, [fn, &ns](benchmark::State& s) { fn(s, &ns); });
    };
    reg("sdpa/attend/", bm_attend);
    reg("sdpa/onednn/", bm_onednn);
    if (!ns.decode) reg("sdpa/attend-bf16math/", bm_attend_bf16math);
    reg("sdpa/attend-bf16io/", bm_attend_bf16io);
    if (!ns.decode) reg("sdpa/onednn-bf16/", bm_onednn_bf16);
    if (ns.decode) reg("stream/read/", bm_stream);
    if (std::string(ns.name) == "P2" || std::string(ns.name) == "P3" || std::string(ns.name) == "D1" ||
        std::string(ns.name) == "D2") {
      reg("sdpa/attend-softcap/", bm_attend_term<Term::softcap>);
      reg("sdpa/attend-sinks/", bm_attend_term<Term::sinks>);
      reg("sdpa/attend-alibi/", bm_attend_term<Term::alibi>);
    }
  }
  register_mla_benchmarks();
}

}  // namespace attend::bench

int main(int argc, char** argv) {
  using namespace attend::bench;
  // Defaults a quick suite wants, each overridable on the command line.
  // --quiet: no progress line (it is shown only on a terminal anyway).
  bool quiet = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--quiet") == 0) {
      quiet = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  // Random interleaving spreads every entry's repetitions over the whole run, so an entry and the
  // ones it is compared with (onednn, stream/read) see the same mix of machine states on a shared,
  // noisy machine instead of one stretch each.
  std::vector<std::string> defaults = {"--benchmark_repetitions=5", "--benchmark_min_time=0.05",
                                       "--benchmark_report_aggregates_only=true",
                                       "--benchmark_enable_random_interleaving=true"};
  bool json = false;
  for (int i = 1; i < argc; ++i) json |= std::strstr(argv[i], "--benchmark_format=json") != nullptr;
  for (std::string& d : defaults) {
    const std::string key = d.substr(0, d.find('='));
    bool given = false;
    for (int i = 1; i < argc; ++i) given |= std::strncmp(argv[i], key.c_str(), key.size()) == 0;
    if (!given) args.push_back(d.data());
  }
  // The repetitions and minimum time the run will use (the last value given wins, as for the library).
  int repetitions = 1;
  double min_time = 0.5;
  for (char* a : args) {
    if (std::strncmp(a, "--benchmark_repetitions=", 24) == 0) repetitions = std::atoi(a + 24);
    if (std::strncmp(a, "--benchmark_min_time=", 21) == 0) min_time = std::atof(a + 21);
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

  // Settings every attention call would reject (ATTEND_ISA, ATTEND_DECODE_*): say so before timing.
  attend::DecodeTuning tuning;
  try {
    attend::active_isa();
    tuning = attend::decode_tuning();
  } catch (const attend::Error& e) {
    std::fprintf(stderr, "attend-bench: %s\n", e.what());
    return 1;
  }
  const int threads = omp_get_max_threads();
  const double peak = measure_fma_peak_gflops(threads);
  benchmark::AddCustomContext("cpu_model", attend::cpu_model());
  {
    const attend::CpuClass cls = attend::cpu_class();
    benchmark::AddCustomContext("cpu_class", cls.name);
    benchmark::AddCustomContext("cpu_family_model", std::to_string(cls.family) + "/" + std::to_string(cls.model));
    benchmark::AddCustomContext("avx512_bits", std::to_string(cls.avx512_bits));
  }
  benchmark::AddCustomContext("attend_version", ATTEND_VERSION_STRING);
  benchmark::AddCustomContext("attend_isa", attend::isa_name(attend::active_isa()));
  benchmark::AddCustomContext("onednn_version", attend::onednn_version());
  benchmark::AddCustomContext("onednn_isa", attend::onednn_isa());
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext("flush_mib", std::to_string(attend::bench::flush_mib()));
  benchmark::AddCustomContext("eviction", attend::bench::eviction_name());
  benchmark::AddCustomContext("reference_read", attend::bench::reference_read_name());
  benchmark::AddCustomContext("fma_peak_gflops", std::to_string(peak));
  const double bf16_peak = measure_bf16_peak_gflops(threads);
  benchmark::AddCustomContext("bf16_dot_peak_gflops", std::to_string(bf16_peak));
  const double amx_peak = attend::bench::measure_amx_peak_gflops(threads);
  benchmark::AddCustomContext("amx_bf16_peak_gflops", std::to_string(amx_peak));
  benchmark::AddCustomContext("fpmath_bf16", attend::bf16_math_amx()      ? "amx"
                                             : attend::bf16_math_native() ? "vdpbf16ps"
                                                                          : "f32");
  // The decode requests' rules this run applied (a machine class's, or the environment's).
  benchmark::AddCustomContext("decode_tuning",
                              tuning.rules + (tuning.rules_from_environment ? " (ATTEND_DECODE_TUNING)" : ""));
  benchmark::AddCustomContext("decode_l2_ahead_bytes", std::to_string(tuning.l2_ahead_bytes));
  benchmark::AddCustomContext("decode_l2_page_starts", tuning.l2_page_starts ? "1" : "0");
  benchmark::AddCustomContext("decode_i8_one_row_integer", tuning.i8_one_row_integer ? "1" : "0");
  benchmark::AddCustomContext("decode_hardware_stream", tuning.hardware_stream ? "1" : "0");
  benchmark::AddCustomContext("decode_one_block_scores", tuning.one_block_scores ? "1" : "0");
  benchmark::AddCustomContext("decode_adaptive_request_kind", tuning.adaptive_request_kind ? "1" : "0");
  benchmark::AddCustomContext("bf16_gemv_rows", std::to_string(tuning.bf16_gemv_rows));
  benchmark::AddCustomContext("bf16_gemv_l2_ahead_bytes", std::to_string(tuning.bf16_gemv_l2_ahead_bytes));
  if (!tuning.overrides.empty()) benchmark::AddCustomContext("decode_overrides", tuning.overrides);
  // What the cache/ and layer/ entries store and read, so collected results say it themselves.
  benchmark::AddCustomContext(
      "kv_cache_layout",
      "attend: K in 16-token blocks [head_dim][16], V row-major [token][head_dim], per (seq, "
      "kv head), capacity rounded up to 16; paged (cache/attend-paged-f32, serve/paged-*): the same per "
      "block of 32 tokens (serve/*-b64|b128|b256: larger), pool head-major; onednn: f32 "
      "[B][Hkv][L][D] (serve/onednn: per sequence)");
  benchmark::AddCustomContext("kv_cache_dtypes",
                              "cache/attend-f32|bf16|f16 store K/V as named, compute f32; cache/attend-bf16math: the "
                              "bf16 cache with fpmath=bf16 (vdpbf16ps decode where bf16 math runs natively without "
                              "AMX); layer/* use an f32 cache except layer/attend-bf16 (bf16 cache, fpmath=bf16)");
  benchmark::AddCustomContext("layer_weights",
                              "layer/attend, layer/onednn: f32; layer/attend-bf16w, layer/attend-bf16: bf16 weights "
                              "(oneDNN bf16 matmul, f32 accumulation; up to bf16_gemv_rows rows (4, 8 on Zen 5) on "
                              "attend's bf16 GEMV where the CPU has AVX512_BF16, unless ATTEND_BF16_GEMV=0; where "
                              "oneDNN has no bf16 matmul, "
                              "i.e. without AVX-512: bf16 values held in f32, same products)");

  register_sdpa_benchmarks();
  register_cache_benchmarks();
  register_layer_benchmarks();
  register_serve_benchmarks();

  std::unique_ptr<benchmark::BenchmarkReporter> inner(benchmark::CreateDefaultDisplayReporter());
  SummaryReporter reporter(inner.get());
  start_progress(!quiet, repetitions, min_time);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  finish_progress();
  FILE* out = json ? stderr : stdout;
  print_sdpa_summary(reporter, peak, out);
  print_bf16math_summary(reporter, bf16_peak, amx_peak, out);
  print_terms_summary(reporter, out);
  print_mla_summary(reporter, peak, out);
  print_cache_summary(reporter, out);
  print_layer_summary(reporter, peak, out);
  print_serve_summary(reporter, out);
  benchmark::Shutdown();
  return 0;
}
