#include "machine.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <attend/isa.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace attend::bench {

size_t flush_mib() {
  static const size_t mib = [] {
    const char* e = std::getenv("ATTEND_BENCH_FLUSH_MIB");
    if (!e || !*e) return size_t{0};
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (*end != '\0' || v < 1 || v > (1L << 20)) {
      std::fprintf(stderr,
                   "attend-bench: ATTEND_BENCH_FLUSH_MIB must be a whole number of MiB in [1, 2^20], got '%s'\n", e);
      std::exit(2);
    }
    return static_cast<size_t>(v);
  }();
  return mib;
}

std::string eviction_name() {
  return flush_mib() ? "write flush of " + std::to_string(flush_mib()) + " MiB (ATTEND_BENCH_FLUSH_MIB)"
                     : "clflushopt of each decode entry's own bytes";
}

namespace {

std::vector<float>& flush_buffer() {
  static std::vector<float> buffer(flush_mib() << 18);
  return buffer;
}

// One line of every 64 bytes of floats [lo, hi) of the flush buffer written.
void write_flush(int64_t lo, int64_t hi) {
  float* p = flush_buffer().data();
  for (int64_t i = lo / 16 * 16; i < hi; i += 16) p[i] += 1.0f;
}

bool has_clflushopt() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23));
}

__attribute__((target("clflushopt"))) void clflushopt_lines(const char* p, const char* end) {
  for (; p < end; p += 64) _mm_clflushopt(const_cast<char*>(p));
}
void clflush_lines(const char* p, const char* end) {
  for (; p < end; p += 64) _mm_clflush(p);
}

}  // namespace

Evict& Evict::add(const void* data, size_t bytes) {
  if (data && bytes) ranges_.emplace_back(static_cast<const unsigned char*>(data), bytes);
  return merge();
}

Evict& Evict::add(const std::vector<std::pair<const void*, size_t>>& ranges) {
  for (const auto& [p, n] : ranges)
    if (p && n) ranges_.emplace_back(static_cast<const unsigned char*>(p), n);
  return merge();
}

Evict& Evict::add(const Evict& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  return merge();
}

Evict& Evict::merge() {
  runs_ = ranges_;
  std::sort(runs_.begin(), runs_.end());
  size_t out = 0;
  for (size_t i = 1; i < runs_.size(); ++i) {
    auto& last = runs_[out];
    if (runs_[i].first <= last.first + last.second)
      last.second = std::max(last.second, static_cast<size_t>(runs_[i].first + runs_[i].second - last.first));
    else
      runs_[++out] = runs_[i];
  }
  if (!runs_.empty()) runs_.resize(out + 1);
  bytes_ = added_ = 0;
  for (const auto& r : runs_) bytes_ += r.second;
  for (const auto& r : ranges_) added_ += r.second;
  return *this;
}

namespace {
// Calls f(address, bytes) for each piece of share `part` of `parts` of `ranges` laid end to end
// (`bytes` in all), split at whole lines.
template <class F>
void for_share(const std::vector<std::pair<const unsigned char*, size_t>>& ranges, size_t bytes, int part, int parts,
               F&& f) {
  const auto p = static_cast<size_t>(part), np = static_cast<size_t>(parts);
  const size_t lo = bytes * p / np / 64 * 64, hi = p + 1 == np ? bytes : bytes * (p + 1) / np / 64 * 64;
  size_t at = 0;
  for (const auto& [data, n] : ranges) {
    const size_t b = std::max(at, lo), e = std::min(at + n, hi);
    if (b < e) f(data + (b - at), e - b);
    at += n;
  }
}
}  // namespace

void Evict::part(int part, int parts) const {
  if (flush_mib()) {
    const auto n = static_cast<int64_t>(flush_buffer().size());
    return write_flush(n * part / parts, n * (part + 1) / parts);
  }
  static const bool opt = has_clflushopt();
  for_share(ranges_, added_, part, parts, [](const unsigned char* p, size_t n) {
    const auto* first = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63});
    (opt ? clflushopt_lines : clflush_lines)(first, reinterpret_cast<const char*>(p + n));
  });
  _mm_mfence();  // the write-backs done before anything is timed
}

namespace {
constexpr size_t kReadL1Ahead = 4096, kReadL2Ahead = 24576;

// Requests for the lines kReadL1Ahead and kReadL2Ahead bytes past p + i while they lie inside
// [p, p + bytes).
inline void request_ahead(const unsigned char* p, size_t i, size_t bytes) {
  if (i + kReadL1Ahead < bytes) _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadL1Ahead), _MM_HINT_T0);
  if (i + kReadL2Ahead < bytes) _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadL2Ahead), _MM_HINT_T1);
}

// Words of [p, p + bytes) XORed together: sixteen independent lanes (one 64-byte stretch per
// step), vectorised; kRequest: each stretch's successors requested ahead (request_ahead).
template <bool kRequest = false>
uint32_t xor_words(const unsigned char* p, size_t bytes) {
  const size_t n = bytes / 4;
  uint32_t acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (kRequest) request_ahead(p, 4 * i, bytes);
#pragma omp simd
    for (int k = 0; k < 16; ++k) {
      uint32_t w;
      std::memcpy(&w, p + 4 * (i + k), 4);
      acc[k] ^= w;
    }
  }
  uint32_t x = 0;
  for (; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, p + 4 * i, 4);
    x ^= w;
  }
  for (uint32_t a : acc) x ^= a;
  return x;
}
}  // namespace

uint32_t Evict::read() const {
  uint32_t total = 0;
#pragma omp parallel reduction(^ : total)
  for_share(runs_, bytes_, omp_get_thread_num(), omp_get_num_threads(),
            [&](const unsigned char* p, size_t n) { total ^= xor_words(p, n); });
  return total;
}

namespace {
// Whole 64-byte lines of [p, p + bytes) XORed into one 512-bit chain, with requests ahead
// (request_ahead) or without; the tail (less than a line) by xor_words.
template <bool kRequest>
__attribute__((target("avx512f"))) uint32_t xor_lines512(const unsigned char* p, size_t bytes) {
  __m512i acc = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    if (kRequest) request_ahead(p, i, bytes);
    acc = _mm512_xor_si512(acc, _mm512_loadu_si512(p + i));
  }
  alignas(64) uint32_t w[16];
  _mm512_store_si512(w, acc);
  uint32_t x = xor_words(p + i, bytes - i);
  for (uint32_t a : w) x ^= a;
  return x;
}

// The runs read as xor_lines512 on all OpenMP threads, each its share (xor_words without AVX-512).
template <bool kRequest>
uint32_t read_lines512(const std::vector<std::pair<const unsigned char*, size_t>>& runs, size_t bytes) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  uint32_t total = 0;
#pragma omp parallel reduction(^ : total)
  for_share(runs, bytes, omp_get_thread_num(), omp_get_num_threads(), [&](const unsigned char* p, size_t n) {
    total ^= avx512 ? xor_lines512<kRequest>(p, n) : xor_words<kRequest>(p, n);
  });
  return total;
}
}  // namespace

uint32_t Evict::read_requested() const { return read_lines512<true>(runs_, bytes_); }

uint32_t Evict::read_wide() const { return read_lines512<false>(runs_, bytes_); }

double Evict::reference_seconds(uint32_t& sink, ReferenceRead& fastest) const {
  const auto evicted_read = [&](uint32_t (Evict::*read_fn)() const) {
    (*this)();
    const auto t0 = std::chrono::steady_clock::now();
    sink ^= (this->*read_fn)();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const double plain = evicted_read(&Evict::read);
  const double requested = evicted_read(&Evict::read_requested);
  const double wide = evicted_read(&Evict::read_wide);
  fastest = ReferenceRead::plain;
  double best = plain;
  if (requested < best) best = requested, fastest = ReferenceRead::requested;
  if (wide < best) best = wide, fastest = ReferenceRead::wide;
  return best;
}

std::string reference_read_name() {
  return "the fastest of three plain reads of the entry's bytes where they lie, each after its own eviction, "
         "right after each call: a vectorised XOR of 32-bit words, 512-bit loads with each line's successors "
         "requested " +
         std::to_string(kReadL1Ahead / 1024) + " KiB ahead into L1 and " + std::to_string(kReadL2Ahead / 1024) +
         " KiB ahead into L2, and 512-bit loads without requests";
}

void Evict::operator()() const {
  if (!flush_mib() && bytes_ == 0) {
    std::fprintf(stderr, "attend-bench: a decode entry named no bytes to evict\n");
    std::exit(2);
  }
#pragma omp parallel
  part(omp_get_thread_num(), omp_get_num_threads());
}

namespace {

// 12 independent FMA chains hide the 4-cycle latency on two FMA pipes. One body per ISA, each
// compiled for its target so the intrinsics inline.
#define ATTEND_FMA_LOOP(V, FMA, SET1, STORE)                    \
  V acc[12];                                                    \
  for (int i = 0; i < 12; ++i) acc[i] = SET1(1.0f + i * 1e-3f); \
  const V a = SET1(0.999999f), b = SET1(1e-7f);                 \
  for (int64_t it = 0; it < iterations; ++it)                   \
    for (int i = 0; i < 12; ++i) acc[i] = FMA(acc[i], a, b);    \
  for (int i = 1; i < 12; ++i) acc[0] = FMA(acc[0], a, acc[i]); \
  alignas(64) float out[16];                                    \
  STORE(out, acc[0]);                                           \
  return out[0];

__attribute__((target("avx512f"))) double run512(int64_t iterations) {
  ATTEND_FMA_LOOP(__m512, _mm512_fmadd_ps, _mm512_set1_ps, _mm512_store_ps)
}
__attribute__((target("avx2,fma"))) double run256(int64_t iterations) {
  ATTEND_FMA_LOOP(__m256, _mm256_fmadd_ps, _mm256_set1_ps, _mm256_store_ps)
}
#undef ATTEND_FMA_LOOP

__attribute__((target("avx512f,avx512bf16"))) double run_bf16_dot(int64_t iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  for (int i = 1; i < 12; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, acc[0]);
  return out[0];
}

// AMX: four 16 × 16 f32 tiles accumulating tdpbf16ps products of two 16 × 32 bf16 tiles by two
// 16 × 16-pair tiles (16,384 FLOPs each), independent chains.
struct alignas(64) AmxProbeConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
__attribute__((target("amx-tile,amx-bf16"))) double run_amx(int64_t iterations) {
  AmxProbeConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  _tile_loadconfig(&c);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) a[i] = b[i] = 0x3a83;  // bf16 ~1e-3: the sums stay small
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

}  // namespace

double amx_bf16_gflops(int threads, int64_t iterations) {
  if (!attend::bf16_math_amx()) return 0.0;  // (also asks the OS for the tile state, once)
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += run_amx(iterations);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 16384.0 * 4.0 * static_cast<double>(iterations) * threads;
  return flops / s * 1e-9 + 0.0 * sink;
}

double measure_amx_peak_gflops(int threads) {
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, amx_bf16_gflops(threads, 2'000'000));
  return best;
}

double fma_gflops(int threads, int64_t iterations) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) return 0.0;
  const int lanes = avx512 ? 16 : 8;
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += avx512 ? run512(iterations) : run256(iterations);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 2.0 * lanes * 12.0 * static_cast<double>(iterations) * threads;
  return flops / s * 1e-9 + 0.0 * sink;
}

bool has_bf16_dot() { return __builtin_cpu_supports("avx512bf16"); }

double bf16_dot_gflops(int threads, int64_t iterations) {
  if (!has_bf16_dot()) return 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  sink += run_bf16_dot(iterations);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flops = 2.0 * 32 * 12.0 * static_cast<double>(iterations) * threads;
  return flops / s * 1e-9 + 0.0 * sink;
}

double measure_bf16_peak_gflops(int threads) {
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, bf16_dot_gflops(threads, 20'000'000));
  return best;
}

double measure_fma_peak_gflops(int threads) {
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep) best = std::max(best, fma_gflops(threads, 20'000'000));
  return best;
}

}  // namespace attend::bench
