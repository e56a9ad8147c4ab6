// cache/<impl>/<shape>: one decode step of attention over a KV cache — append one token's K/V,
// attend over the whole cache — for impl ∈ {attend-f32, attend-bf16, attend-f16, attend-i8, onednn}, and
// attend-bf16math (the bf16 cache with SdpaOptions::fpmath = bf16: vdpbf16ps where it runs natively). The
// oneDNN baseline keeps a plain dense f32 cache: the new row is copied in, then the unfused
// matmul → softmax → matmul runs over it. The bytes each step streams are evicted before every iteration (Evict).
#include <omp.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "onednn_sdpa.hpp"

namespace attend::bench {
namespace {

struct CacheShape {
  const char* name;
  int64_t B, Hq, Hkv, L, D;  // L: cache length after the step's append
};

const std::vector<CacheShape>& cache_shapes() {
  static const std::vector<CacheShape> s = {{"D1", 1, 32, 32, 4096, 128},
                                            {"D2", 1, 32, 8, 4096, 128},
                                            {"D3", 8, 32, 8, 2048, 128},
                                            {"D4", 1, 32, 32, 16384, 128}};
  return s;
}

// K/V bytes read per step in the cache's storage type (i8: its scales included), plus q and o.
double step_bytes(const CacheShape& s, double elem) {
  return 2.0 * s.B * s.Hkv * s.L * s.D * elem + 2.0 * 4 * s.B * s.Hq * s.D;
}
double step_flops(const CacheShape& s) { return 4.0 * s.B * s.Hq * s.L * s.D; }

struct CacheData {
  const CacheShape* shape = nullptr;
  KvBuffer k, v;  // dense [B, Hkv, L, D]
  std::vector<float> q, o, k_new, v_new;
};

CacheData& data(const CacheShape& s) {
  static CacheData d;
  if (d.shape == &s) return d;
  d = CacheData{};
  d.shape = &s;
  d.k.resize(static_cast<size_t>(s.B * s.Hkv * s.L * s.D));
  d.v.resize(d.k.size());
  d.q.resize(static_cast<size_t>(s.B * s.Hq * s.D));
  d.o.resize(d.q.size());
  d.k_new.resize(static_cast<size_t>(s.B * s.Hkv * s.D));
  d.v_new.resize(d.k_new.size());
  fill(d.k, 21);
  fill(d.v, 22);
  fill(d.q, 23);
  fill(d.k_new, 24);
  fill(d.v_new, 25);
  return d;
}

void bm_attend_cache(benchmark::State& state, const CacheShape* s, DType dtype, FpMath fpmath = FpMath::strict) {
  CacheData& d = data(*s);
  KVCache cache({s->Hkv, s->D, s->B, s->L, dtype});
  std::vector<int64_t> seqs(static_cast<size_t>(s->B));
  for (int64_t b = 0; b < s->B; ++b) {
    seqs[static_cast<size_t>(b)] = b;
    cache.append(
        b, TensorView(d.k.data() + b * s->Hkv * s->L * s->D, {1, s->Hkv, s->L - 1, s->D}, {0, s->L * s->D, s->D, 1}),
        TensorView(d.v.data() + b * s->Hkv * s->L * s->D, {1, s->Hkv, s->L - 1, s->D}, {0, s->L * s->D, s->D, 1}));
  }
  const auto q = TensorView::dense(static_cast<const float*>(d.q.data()), {s->B, s->Hq, 1, s->D});
  const auto kn = TensorView::dense(static_cast<const float*>(d.k_new.data()), {s->B, s->Hkv, 1, s->D});
  const auto vn = TensorView::dense(static_cast<const float*>(d.v_new.data()), {s->B, s->Hkv, 1, s->D});
  const auto o = TensorView::dense(d.o.data(), {s->B, s->Hq, 1, s->D});
  SdpaOptions opt;
  opt.fpmath = fpmath;
  auto step = [&] { cached_attention(q, kn, vn, cache, seqs, o, opt); };
  // Each step is paired with a plain read of the cache's bytes it reads (stream_pct).
  const double elem = kv_element_bytes(dtype, s->D);
  timed_decode_steps(state, cache, s->B, s->L, evict_cache(cache, seqs), step);
  state.counters["FLOPS"] = benchmark::Counter(step_flops(*s), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(step_bytes(*s, elem)) * state.iterations());
  state.counters["cache_MiB"] = static_cast<double>(cache.memory_bytes()) / (1 << 20);
}

// The same step over a PagedKVCache of 32-token blocks (the default), the sequences' blocks
// interleaved through the pool as a server's would be.
void bm_attend_paged(benchmark::State& state, const CacheShape* s, DType dtype) {
  CacheData& d = data(*s);
  constexpr int64_t kBlock = 32;
  const int64_t per_seq = (s->L + kBlock - 1) / kBlock;
  PagedKVCache cache({s->Hkv, s->D, s->B * per_seq, kBlock, dtype});
  std::vector<SequenceChunk> chunks;
  for (int64_t b = 0; b < s->B; ++b) chunks.push_back({cache.create_sequence(), 1});
  for (int64_t t = 0; t < s->L - 1; t += 256)
    for (int64_t b = 0; b < s->B; ++b) {
      const int64_t n = std::min<int64_t>(256, s->L - 1 - t);
      const float* base = d.k.data() + (b * s->Hkv * s->L + t) * s->D;
      const float* vbase = d.v.data() + (b * s->Hkv * s->L + t) * s->D;
      cache.append(chunks[static_cast<size_t>(b)].seq,
                   TensorView(base, {1, s->Hkv, n, s->D}, {0, s->L * s->D, s->D, 1}),
                   TensorView(vbase, {1, s->Hkv, n, s->D}, {0, s->L * s->D, s->D, 1}));
    }
  // The B sequences' new rows packed as [1, H, B, D] (token b = sequence b).
  const TensorView q(d.q.data(), {1, s->Hq, s->B, s->D}, {0, s->D, s->Hq * s->D, 1});
  const TensorView kn(d.k_new.data(), {1, s->Hkv, s->B, s->D}, {0, s->D, s->Hkv * s->D, 1});
  const TensorView vn(d.v_new.data(), {1, s->Hkv, s->B, s->D}, {0, s->D, s->Hkv * s->D, 1});
  const TensorView o(d.o.data(), {1, s->Hq, s->B, s->D}, {0, s->D, s->Hq * s->D, 1});
  const double elem = kv_element_bytes(dtype, s->D);
  std::vector<int64_t> seqs;
  for (const SequenceChunk& c : chunks) seqs.push_back(c.seq);
  timed_loop_vs_own_bytes(
      state, evict_cache(cache, seqs),
      [&] {
        for (const SequenceChunk& c : chunks) cache.truncate(c.seq, s->L - 1);
      },
      [&] { paged_attention(q, kn, vn, cache, chunks, o); });
  state.counters["FLOPS"] = benchmark::Counter(step_flops(*s), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(step_bytes(*s, elem)) * state.iterations());
  state.counters["cache_MiB"] = static_cast<double>(cache.memory_bytes()) / (1 << 20);
}

void bm_onednn_cache(benchmark::State& state, const CacheShape* s) {
  CacheData& d = data(*s);
  OnednnSdpa sdpa({s->B, s->Hq, s->Hkv, 1, s->L, s->D, false});
  timed_loop_vs_own_bytes(
      state, evict_kv(d.k, d.v), [] {},
      [&] {
        for (int64_t bh = 0; bh < s->B * s->Hkv; ++bh) {  // append: the new row is the cache's last
          std::memcpy(d.k.data() + (bh * s->L + s->L - 1) * s->D, d.k_new.data() + bh * s->D, sizeof(float) * s->D);
          std::memcpy(d.v.data() + (bh * s->L + s->L - 1) * s->D, d.v_new.data() + bh * s->D, sizeof(float) * s->D);
        }
        sdpa.run(d.q.data(), d.k.data(), d.v.data(), d.o.data());
      });
  state.counters["FLOPS"] = benchmark::Counter(step_flops(*s), benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(step_bytes(*s, 4)) * state.iterations());
}

}  // namespace

void register_cache_benchmarks() {
  for (const CacheShape& s : cache_shapes()) {
    auto reg = [&](const std::string& impl, auto fn) { register_entry("cache/" + impl + "/" + s.name, fn); };
    reg("attend-f32", [&s](benchmark::State& st) { bm_attend_cache(st, &s, DType::f32); });
    reg("attend-bf16", [&s](benchmark::State& st) { bm_attend_cache(st, &s, DType::bf16); });
    reg("attend-bf16math", [&s](benchmark::State& st) { bm_attend_cache(st, &s, DType::bf16, FpMath::bf16); });
    reg("attend-f16", [&s](benchmark::State& st) { bm_attend_cache(st, &s, DType::f16); });
    reg("attend-i8", [&s](benchmark::State& st) { bm_attend_cache(st, &s, DType::i8); });
    reg("attend-paged-f32", [&s](benchmark::State& st) { bm_attend_paged(st, &s, DType::f32); });
    reg("onednn", [&s](benchmark::State& st) { bm_onednn_cache(st, &s); });
  }
}

void print_cache_summary(const SummaryReporter& rep, FILE* out) {
  bool any = false;
  for (const CacheShape& s : cache_shapes()) {
    auto get = [&](const char* impl) { return rep.find(std::string("cache/") + impl + "/" + s.name); };
    const auto *f32 = get("attend-f32"), *bf16 = get("attend-bf16"), *f16 = get("attend-f16"), *dnn = get("onednn"),
               *paged = get("attend-paged-f32");
    const auto* stream = rep.find(std::string("stream/read/") + s.name);
    if (!f32) continue;
    if (!any) {
      std::fprintf(out,
                   "\nKV-cache decode step (medians; tokens/s ratios; %%stream = f32 K+V bandwidth as a share of a "
                   "plain read of the same bytes timed right after each step, bf16%%str and f16%%str the same for the "
                   "16-bit caches (a read of their bytes), dnn%%str for onednn, whose reciprocal bounds f32/dnn; "
                   "bf16/f32* = 2 x bf16%%str / %%stream, the ratio at equal bandwidth, from the paired figures; "
                   "paged%%str for the f32 PagedKVCache of 32-token blocks)\n");
      std::fprintf(out, "%-5s %9s %9s %9s %9s %8s %8s %8s %9s %9s %8s %8s %8s %8s %9s\n", "shape", "f32 ms", "bf16 ms",
                   "f16 ms", "onednn ms", "f32/dnn", "bf16/f32", "f16/f32", "bf16/f32*", "f16/f32*", "%stream",
                   "bf16%str", "f16%str", "dnn%str", "paged%str");
      any = true;
    }
    const double kv_f32 = 2.0 * 4 * s.B * s.Hkv * s.L * s.D;
    // The paired per-step figure when measured, else the ratio to the stream/read entry's median.
    auto pct = [&](const SummaryReporter::Entry* e, double bytes) {
      if (!e) return 0.0;
      if (e->stream_pct > 0) return e->stream_pct;
      return stream ? 100.0 * bytes / e->seconds * 1e-9 / stream->gbps : 0.0;
    };
    auto ratio = [](const SummaryReporter::Entry* num, const SummaryReporter::Entry* den) {
      return num && den ? den->seconds / num->seconds : 0.0;
    };
    const double p32 = pct(f32, kv_f32), pb = pct(bf16, kv_f32 / 2), ph = pct(f16, kv_f32 / 2);
    std::fprintf(out,
                 "%-5s %9.3f %9.3f %9.3f %9.3f %7.2fx %7.2fx %7.2fx %8.2fx %8.2fx %7.1f%% %7.1f%% %7.1f%% %7.1f%% "
                 "%8.1f%%\n",
                 s.name, f32->seconds * 1e3, bf16 ? bf16->seconds * 1e3 : 0.0, f16 ? f16->seconds * 1e3 : 0.0,
                 dnn ? dnn->seconds * 1e3 : 0.0, ratio(f32, dnn), ratio(bf16, f32), ratio(f16, f32),
                 p32 > 0 ? 2 * pb / p32 : 0.0, p32 > 0 ? 2 * ph / p32 : 0.0, p32, pb, ph, pct(dnn, kv_f32),
                 pct(paged, kv_f32));
  }
  // The bf16 cache under fpmath = bf16 against the same cache's strict step.
  bool bfm_header = false;
  for (const CacheShape& s : cache_shapes()) {
    const auto* bfm = rep.find(std::string("cache/attend-bf16math/") + s.name);
    const auto* bf16 = rep.find(std::string("cache/attend-bf16/") + s.name);
    if (!bfm) continue;
    if (!bfm_header) {
      std::fprintf(out,
                   "bf16 cache with fpmath=bf16 (%s; vs strict = cache/attend-bf16 time / this time, bfm/bf16* = "
                   "the paired shares' ratio, the speed-up at equal bandwidth)\n",
                   bf16_math_native() && !bf16_math_amx() ? "Q·Kᵀ and P·V on vdpbf16ps" : "the strict kernels here");
      std::fprintf(out, "%-5s %9s %9s %9s %10s %9s %9s\n", "shape", "bfm ms", "bf16 ms", "vs strict", "bfm/bf16*",
                   "bfm%str", "bf16%str");
      bfm_header = true;
    }
    const double pm = bfm->stream_pct, pb = bf16 ? bf16->stream_pct : 0.0;
    std::fprintf(out, "%-5s %9.3f %9.3f %8.2fx %9.2fx %8.1f%% %8.1f%%\n", s.name, bfm->seconds * 1e3,
                 bf16 ? bf16->seconds * 1e3 : 0.0, bf16 ? bf16->seconds / bfm->seconds : 0.0, pb > 0 ? pm / pb : 0.0,
                 pm, pb);
  }
  // The 8-bit cache: its bytes are the elements and one f32 scale per token row of K and of V.
  bool header = false;
  for (const CacheShape& s : cache_shapes()) {
    const auto* i8 = rep.find(std::string("cache/attend-i8/") + s.name);
    const auto* f32 = rep.find(std::string("cache/attend-f32/") + s.name);
    if (!i8) continue;
    if (!header) {
      std::fprintf(out,
                   "8-bit cache (i8 + scales: %.3f bytes per element at D = %lld; i8/f32* = (4 / that) x "
                   "i8%%str / %%stream, tokens/s at equal bandwidth from the paired figures)\n",
                   kv_element_bytes(DType::i8, s.D), static_cast<long long>(s.D));
      std::fprintf(out, "%-5s %9s %9s %8s %9s %9s %8s\n", "shape", "i8 ms", "f32 ms", "i8/f32", "i8/f32*", "i8%str",
                   "%stream");
      header = true;
    }
    const double p8 = i8->stream_pct, p32 = f32 ? f32->stream_pct : 0.0;
    std::fprintf(out, "%-5s %9.3f %9.3f %7.2fx %8.2fx %8.1f%% %7.1f%%\n", s.name, i8->seconds * 1e3,
                 f32 ? f32->seconds * 1e3 : 0.0, f32 ? f32->seconds / i8->seconds : 0.0,
                 p32 > 0 ? 4.0 / kv_element_bytes(DType::i8, s.D) * p8 / p32 : 0.0, p8, p32);
  }
}

}  // namespace attend::bench
