// MLA decode in DeepSeek's absorbed form (issue 16, shape D6): MQA over one shared latent per token,
// D = 576 (512 latent + 64 rotary), Dv = 512, V the leading 512 columns of K. sdpa/attend-mla/D6
// passes v as a view of k's memory (same base pointer and strides), sdpa/attend-mla-copy/D6 the same
// values as a separate dense V; stream/read/D6 is a plain read of the K bytes alone.
#include <attend/attend.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace attend::bench {
namespace {

constexpr int64_t kB = 4, kHq = 16, kNk = 4096, kD = 576, kDv = 512;

struct MlaWorkload {
  std::vector<float> q, o;
  KvBuffer k, v;  // v: the copy (the leading kDv columns of each K row)
  std::string error;
  MlaWorkload() {
    q.resize(static_cast<size_t>(kB * kHq * kD));
    o.resize(static_cast<size_t>(kB * kHq * kDv));
    k.resize(static_cast<size_t>(kB * kNk * kD));
    v.resize(static_cast<size_t>(kB * kNk * kDv));
    fill(q, 11);
    fill(k, 12);
    for (int64_t t = 0; t < kB * kNk; ++t) std::copy_n(k.data() + t * kD, kDv, v.data() + t * kDv);
  }
  TensorView qv() const { return TensorView::dense(q.data(), {kB, kHq, 1, kD}); }
  TensorView kv() const { return TensorView::dense(k.data(), {kB, 1, kNk, kD}); }
  TensorView v_alias() const { return TensorView(k.data(), {kB, 1, kNk, kDv}, {kNk * kD, kNk * kD, kD, 1}); }
  TensorView v_copy() const { return TensorView::dense(v.data(), {kB, 1, kNk, kDv}); }
  TensorView ov() { return TensorView::dense(o.data(), {kB, kHq, 1, kDv}); }
};

MlaWorkload& mla() {
  static MlaWorkload w;
  return w;
}

double mla_flops() { return 2.0 * kB * kHq * kNk * (kD + kDv); }
double k_bytes() { return 4.0 * kB * kNk * kD; }

// Max abs error against a double reference on a few (batch, head) rows.
double mla_error(const MlaWorkload& w) {
  double worst = 0.0;
  std::vector<double> p(static_cast<size_t>(kNk));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h : {int64_t{0}, kHq - 1}) {
      const float* q = w.q.data() + (b * kHq + h) * kD;
      const float* k = w.k.data() + b * kNk * kD;
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < kNk; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < kD; ++d) dot += double(q[d]) * k[j * kD + d];
        p[j] = dot / std::sqrt(double(kD));
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j < kNk; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t d = 0; d < kDv; ++d) {
        double want = 0.0;
        for (int64_t j = 0; j < kNk; ++j) want += p[j] / sum * k[j * kD + d];
        worst = std::max(worst, std::abs(want - w.o[static_cast<size_t>((b * kHq + h) * kDv + d)]));
      }
    }
  return worst;
}

template <bool kAlias>
void bm_mla(benchmark::State& state) {
  MlaWorkload& w = mla();
  const TensorView v = kAlias ? w.v_alias() : w.v_copy();
  auto run = [&] { scaled_dot_product_attention(w.qv(), w.kv(), v, w.ov()); };
  run();
  if (double e = mla_error(w); e > 1e-4)
    return state.SkipWithError(("attend MLA differs from the reference by " + std::to_string(e)).c_str());
  // Paired with a plain read of the K bytes alone (what an ideal aliased call reads).
  Evict keys, values;
  keys.add_all(w.k);
  values.add_all(w.k);
  if (!kAlias) values.add_all(w.v);
  timed_loop_vs_stream(state, values, run, keys);
  state.counters["FLOPS"] = benchmark::Counter(mla_flops(), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(k_bytes() + (kAlias ? 0.0 : 4.0 * kB * kNk * kDv)) * state.iterations());
}

void bm_mla_stream(benchmark::State& state) {
  MlaWorkload& w = mla();
  Evict keys;
  keys.add_all(w.k);
  timed_reference_reads(state, keys);
  state.SetBytesProcessed(static_cast<int64_t>(k_bytes()) * state.iterations());
}

}  // namespace

void register_mla_benchmarks() {
  for (auto [name, fn] :
       {std::pair{"sdpa/attend-mla/D6", &bm_mla<true>}, std::pair{"sdpa/attend-mla-copy/D6", &bm_mla<false>},
        std::pair{"stream/read/D6", &bm_mla_stream}})
    register_entry(name, fn);
}

void print_mla_summary(const SummaryReporter& rep, double peak, FILE* out) {
  const auto* a = rep.find("sdpa/attend-mla/D6");
  const auto* c = rep.find("sdpa/attend-mla-copy/D6");
  const auto* st = rep.find("stream/read/D6");
  if (!a) return;
  const double k_gbps = k_bytes() / a->seconds * 1e-9;
  // The floors: the FLOPs at the FMA peak measured at start, the K bytes at the plain read.
  const double compute_ms = peak > 0 ? mla_flops() / (peak * 1e9) * 1e3 : 0.0;
  const double read_ms = st ? k_bytes() / (st->gbps * 1e9) * 1e3 : 0.0;
  std::fprintf(out, "\nMLA decode D6 (B=4, Hq=16, Hkv=1, Nk=4096, D=576, Dv=512; medians)\n");
  std::fprintf(out, "%11s %11s %9s %10s %9s %10s %10s %12s %10s\n", "aliased ms", "copy ms", "copy/al", "K GB/s",
               "%stream", "GFLOP/s", "%peak", "FMA floor ms", "read ms");
  std::fprintf(out, "%11.3f %11.3f %8.2fx %10.1f %8.1f%% %10.1f %9.1f%% %12.3f %10.3f\n", a->seconds * 1e3,
               c ? c->seconds * 1e3 : 0.0, c ? c->seconds / a->seconds : 0.0, k_gbps, a->stream_pct, a->gflops,
               peak > 0 ? 100.0 * a->gflops / peak : 0.0, compute_ms, read_ms);
  std::fprintf(out,
               "(aliased: v a view of k's memory; copy: the same values as a separate V; %%stream: the aliased call's "
               "K bytes per second as a share of a plain read of them, paired per call; FMA floor: the call's "
               "%.2f GFLOP at the FMA peak measured at start, %.1f GFLOP/s — f32 arithmetic cannot beat it; "
               "read ms: the K bytes at stream/read/D6's bandwidth)\n",
               mla_flops() * 1e-9, peak);
}

}  // namespace attend::bench
