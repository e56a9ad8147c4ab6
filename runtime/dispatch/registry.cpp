#include "registry.hpp"

#include <attend/error.hpp>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "cpu_features.hpp"

namespace attend::dispatch {
namespace {

// The setting of environment variable `name` among `choices` (value, meaning), in `out`; unset or
// empty leaves `out` as it is. Anything else sets `error` ("NAME='v' is not one of a, b, c"): every
// call then throws it, so a typo never silently keeps the default.
template <class T>
void env_choice(const char* name, std::initializer_list<std::pair<const char*, T>> choices, T& out,
                std::string& error) {
  const char* env = std::getenv(name);
  if (!env || !*env) return;
  std::string list;
  for (const auto& [value, meaning] : choices) {
    if (std::string(env) == value) {
      out = meaning;
      return;
    }
    list += (list.empty() ? "" : ", ") + std::string(value);
  }
  error = std::string(name) + "='" + env + "' is not one of " + list;
}

const kernels::KernelTable* compiled_table(Isa isa) {
  switch (isa) {
    case Isa::avx512: return kernels::kernel_table_avx512();
    case Isa::avx512_bf16: return kernels::kernel_table_avx512_bf16(kernels::Bf16Math::none);
    case Isa::avx2: return kernels::kernel_table_avx2();
    case Isa::generic: return kernels::kernel_table_generic();
    case Isa::automatic: break;
  }
  return nullptr;
}

bool cpu_supports(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::avx512: return f.avx512;
    case Isa::avx512_bf16: return f.avx512_bf16;
    case Isa::avx2: return f.avx2_fma;
    case Isa::generic: return true;
    case Isa::automatic: break;
  }
  return false;
}

bool available(Isa isa) { return compiled_table(isa) != nullptr && cpu_supports(isa); }

// The environment cap, parsed once. An unknown value is remembered as an error message so that
// every call reports it (a typo must not silently select a different path).
struct EnvCap {
  Isa cap = Isa::avx512_bf16;
  std::string error;
};

const EnvCap& env_cap() {
  static const EnvCap cap = [] {
    EnvCap c;
    env_choice<Isa>(
        "ATTEND_ISA",
        {{"generic", Isa::generic}, {"avx2", Isa::avx2}, {"avx512", Isa::avx512}, {"avx512_bf16", Isa::avx512_bf16}},
        c.cap, c.error);
    return c;
  }();
  return cap;
}

// Decode's L2 request distance, chosen once: measured per machine class. Zen 4, two threads, LLC
// flushed, D2's shape (4 rows per kv head, f32), alternated call by call in one process, share of a
// plain read without → with requests 24 KiB ahead: f32 KVCache 77.6 → 84.2% (32 KiB: 84.5 → 88.5,
// 72.0 → 77.9; 8 KiB 79.1, 12 KiB 80.0), sdpa (row-major K) 74.3 → 86.8% (8–32 KiB: 81–89%), and
// with one row per kv head (D1's shape, sdpa; alternated processes) 82.6/82.7/76.8 → 92.6/92.9/77.4%;
// prefetcht0 at the same distance 68% (it holds L1's miss buffers). Zen 3 unmeasured: none
// (docs/performance.md, session 23); a Zen 5: none (its GQA shapes lose with them, below). The AMX
// Xeons (measured on the 'Xeon with AMX', whose caches are Granite Rapids'; alternated processes,
// 3 rounds, share of a read without → with 24 KiB): the paged cache's D3 75–78 → 83–85%, a serving
// step's paged decode 73–76 → 77–81%, the slot cache's 78–82 → 81–84%, the i8 cache's GQA shapes
// +3–6 points, but its one-row shapes (D1/D4) −2 to −6: there the i8 cache keeps them for GQA
// groups only (session 31). The 16-bit caches there (session 32, alternated processes, 3 rounds, ms
// without → with): bf16 D2 0.688–0.696 → 0.652–0.672, D3 2.60–2.65 → 2.46–2.49, D1 (one row) 2.58
// → 2.38–2.42; f16 D2/D3 likewise, but f16 D1/D4 (one row) 2–5% slower; on a Zen 4 a bf16 cache
// lost 6 points (sessions 23–24). On the AMX Xeons a decode of one row per kv head over a cache's
// blocked f32 K also leaves K's next key group to the hardware prefetchers (no prefetcht0): the
// samples of blocked_scores sat on those requests (the line fill buffers full), and without them
// (session 33, alternated processes, 3 rounds, ms / share of a read) the f32 cache's D1 5.22–5.28 /
// 84% → 4.80–4.86 / 88–91%, D4 20.5–21.0 / 85–86% → 18.9–19.3 / 89–94%, the paged cache's alike;
// GQA groups, the 8-bit (−12 to −25 points) and 16-bit caches keep them. L2 requests added there
// were worse (86–89%).
//
// A Zen 5 (session 38, alternated attend-bench processes, 3 rounds, share of a read) takes the
// Xeons' one-row rule alone: without K's L1 requests for one f32 row over a blocked K the f32
// cache's D4 reads 94.8–101.0% instead of 81.7–89.3% (9.6–10.7 against 10.0–12.8 ms), the paged
// cache's D4 95.4–99.4 (80.5–88.4), D1 97.8–103.3 (85.5–88.3); the Xeons' L2 requests cost its GQA
// shapes 4–10 points (f32 cache D2 83.0–86.6 against 91.4–93.2%), so it makes none.
//
// A Zen 5 (session 40, alternated attend-bench processes, 3 rounds, share of a read) requests page
// starts (decode_l2_pages: one line per 4 KiB page) 64 KiB ahead: the serving decode step 69–81 →
// 97–111% (slots and paged), sdpa D4 84–90 → 104–109, the bf16 cache's D4 78–98 → 102–107, bf16
// sdpa D4 87–93 → 106–109. Not for one f32 row over a blocked K (cache D1 101–103 → 85–91), f32
// GQA groups over a row-major K (sdpa D5 92–96 → 89–93, D2/D3 within noise; 4 rounds) nor the
// 16-bit and 8-bit caches' GQA groups (bf16 D2/D3 80–85 → 66–77; i8 within noise or lower).
//
// A Zen 4 (session 51) streams an f32 or 16-bit cache's blocked K/V best from its hardware
// prefetchers alone, with K's blocks scored one at a time in address order
// (decode_hardware_stream). Two threads reading D2's layout (docs/experiments/decode_order.cpp):
// in the scores' order (two blocks at once, a line of each) 13–15% below a plain read; plain reads
// with prefetcht0 4 KiB or prefetcht1 24 KiB ahead of each line 5–15% below one without. In the
// kernels (alternated attend-bench processes, 3 rounds, share of a read, ATTEND_DECODE_HW_STREAM=0
// → 1): the f32 cache's D1 85–89 → 98–99%, D2 78–79 → 85–91, D3 72–87 → 88–95, D4 82–90 →
// 95–99; the paged cache's D1 80–84 → 96–101, D2 66–85 → 88–93, D3 75–84 → 89–93, D4 88–91 →
// 94–100; the serving decode step 72–81 → 88–91 (slots), 70–88 → 84–93 (paged); the bf16
// cache's D1 78–86 → 89–92, D4 73–86 → 90–95, D2/D3 within the spread. Either half alone gained
// little (blocks in order with the requests, or no requests with pairs of blocks). Not the 8-bit
// cache (D1 81–88 → 62–77%, D2 55–59 → 45–50: its steps need their requests), nor a row-major K
// (sdpa: 16 rows at once, more streams than the prefetchers follow; without requests D2 43–57%).
//
// The model-167 AMX Xeon guest (session 55: Sapphire Rapids' caches, L2 2 MiB, L3 105 MiB), with
// sessions 36–54's kernels, streams better with a Zen 5's page starts 64 KiB ahead than with every
// line 24 KiB ahead (the AMX Xeons' other rules kept: K's L1 requests for one f32 row, an 8-bit
// cache's one row on the integer kernels). Alternated attend-bench processes, 3 rounds, share of a
// read, amx_xeon → amx_xeon_pages: the f32 cache's D2 89–93 → 95–97%, D3 93–95 → 96–99; the paged
// cache's D2 87–88 → 93–96, D3 90–94 → 98–103; sdpa D2 85–91 → 90–93, D3 88–93 → 92–95; the serving
// decode step 90–96 → 95–101 (slots), 90–95 → 96–103 (paged); the 8-bit cache's D2/D3 68–76 → 71–78;
// the bf16 cache's D1/D4 92–96 → 96–103; the one-row f32 and 8-bit shapes within the spread. A Zen
// 5's rules whole (zen5) gained alike but for the 8-bit cache's one row (D1/D4 95–98 → 88–94: the
// f32 kernels over widened codes). The Emerald Rapids (session 45, older kernels) lost 2–8 points
// on its GQA shapes with page starts: it keeps amx_xeon until measured again, as do the named
// Sapphire and Granite Rapids models.
//
// The same guest in a faster memory state (session 59: a read of D2's bytes ~37 GB/s, the FMA
// probe ~420 GFLOP/s), the 8-bit cache (alternated attend-bench processes, 2 rounds each, share of
// a read): with no L2 requests (session 55's choice) D2 / D3 52–54 / 55–57%, with page starts
// 51 / 55, with whole lines 24 or 64 KiB ahead 58–61 / 61–66 (128 KiB 54–55 / 57–60); its one row
// (D1 / D4, the integer kernels) 62–68 / 62–66 → 68–71 / 69–73 with whole lines 24–64 KiB ahead
// (0.42 → 0.38 ms on D2, 6.0 → 5.3 on D4). Session 55's slower state had the GQA shapes 3 points
// better without them (68–76 → 71–78): the faster state's 6–9 points decide. So amx_xeon_pages
// requests an 8-bit cache's lines 64 KiB ahead for GQA groups and one row; an f32 cache's one row
// over a blocked K loses with them here too (D4 82.5 → 78–80%), and keeps none.
//
// A Zen 5 (session 65) scores a GQA group against an f32 cache's blocked K one block at a time in
// address order, with its requests (decode_one_block_scores), where the other classes walk two
// blocks at once (a line of each per depth step; each query broadcast feeds two blocks' FMAs). In a
// fast memory state (a read of D2's f32 bytes at 75–87 GB/s) a loop with the scores' arithmetic
// per line read 81–88% of its own plain read walking two 8 KiB blocks at once and 93–99% walking
// one stream (docs/experiments/fma_ladder.cpp, "pairs" against "R = 4"). Alternated attend-bench
// processes, 4 rounds, share of a read (medians): the f32 cache's D2 87.7 → 90.8% and 87.6 →
// 90.9 (every round higher), D3 94.3 → 101.5 and 98.1 → 100.4; the paged cache's D2 84.8 → 87.6
// and 85.3 → 89.1, D3 93.2 → 98.3 and 95.3 → 98.1; the layer's f32 decode L3 87.9 → 90.0, L4
// 70.8 → 75.6; one row (D1/D4) untouched. The serving decode step (5 rounds): the slot cache 7.42 →
// 7.04 ms, the paged one 7.54 → 7.51, so the paged/slot bandwidth ratio (slots_paired) 0.963 →
// 0.953 (64-token blocks 0.959 → 0.947, 256: 0.965 → 0.964). One block at a time computes slower
// from L2 (one thread, 2 kv heads × 256 keys: 8.6 → 9.1 µs) and the bf16 cache's GQA shapes lost
// 20–25 points with it (its pairs kernel: D2 75.7 → 55.2%): not the 16-bit caches. The 8-bit cache's
// own scores (i8_scores, two blocks of 2 KiB at once for four rows) likewise, the same integer sums:
// D2 62.1 → 63.9%, D3 58.6 → 61.6 (0.776 → 0.741 ms), one row (the f32 kernels here) untouched;
// the decode driver's D2 step 164–168 → 157–160 µs evicted, 17.0–17.4 → 17.6–17.7 L2-resident.
//
// ATTEND_DECODE_TUNING=zen4|zen5|amx_xeon|amx_xeon_pages|none applies one class's rules on any
// machine (tests run each everywhere; prefetch and order only: the same results); unset: this
// machine's class. ATTEND_DECODE_HW_STREAM=0|1 overrides the class's choice of decode_hardware_stream,
// ATTEND_DECODE_ONE_BLOCK=0|1 its choice of decode_one_block_scores.
enum class Tuning { none, zen4, zen5, amx_xeon, amx_xeon_pages };

struct EnvDecode {
  Tuning tuning = Tuning::none;
  int64_t bytes = 0;
  bool pages = false;
  bool hw_stream = false;
  bool one_block = false;
  bool adaptive = false;
  bool tuning_set = false, bytes_set = false, pages_set = false, hw_stream_set = false, one_block_set = false,
       adaptive_set = false;  // by the environment
  std::string error;
};

// The named AMX Xeons (the unnamed model-167 class, "Xeon with AMX", takes amx_xeon_pages).
bool amx_xeon_class(const std::string& name) {
  return name == "Sapphire Rapids" || name == "Emerald Rapids" || name == "Granite Rapids";
}

const EnvDecode& env_decode() {
  static const EnvDecode decode = [] {
    EnvDecode e;
    const std::string cls = cpu_features().class_name;
    e.tuning = cls == "Zen 4"           ? Tuning::zen4
               : cls == "Zen 5"         ? Tuning::zen5
               : cls == "Xeon with AMX" ? Tuning::amx_xeon_pages
               : amx_xeon_class(cls)    ? Tuning::amx_xeon
                                        : Tuning::none;
    env_choice<Tuning>("ATTEND_DECODE_TUNING",
                       {{"zen4", Tuning::zen4},
                        {"zen5", Tuning::zen5},
                        {"amx_xeon", Tuning::amx_xeon},
                        {"amx_xeon_pages", Tuning::amx_xeon_pages},
                        {"none", Tuning::none}},
                       e.tuning, e.error);
    const bool pages = e.tuning == Tuning::zen5 || e.tuning == Tuning::amx_xeon_pages;
    e.bytes = e.tuning == Tuning::zen4 || e.tuning == Tuning::amx_xeon ? 24576 : pages ? 65536 : 0;
    e.pages = pages;
    env_choice<bool>("ATTEND_DECODE_L2_PAGES", {{"0", false}, {"1", true}}, e.pages, e.error);
    e.hw_stream = e.tuning == Tuning::zen4;
    env_choice<bool>("ATTEND_DECODE_HW_STREAM", {{"0", false}, {"1", true}}, e.hw_stream, e.error);
    e.one_block = e.tuning == Tuning::zen5;
    env_choice<bool>("ATTEND_DECODE_ONE_BLOCK", {{"0", false}, {"1", true}}, e.one_block, e.error);
    const auto set = [](const char* name) {
      const char* v = std::getenv(name);
      return v && *v;
    };
    e.tuning_set = set("ATTEND_DECODE_TUNING");
    e.pages_set = set("ATTEND_DECODE_L2_PAGES");
    // The request kind chosen at run time (request_kind.hpp): the model-167 Xeon's own rules, unless
    // the environment names rules or a kind; ATTEND_DECODE_ADAPT=0|1 overrides (1: on any rules
    // with L2 requests).
    e.adaptive = e.tuning == Tuning::amx_xeon_pages && !e.tuning_set && !e.pages_set;
    env_choice<bool>("ATTEND_DECODE_ADAPT", {{"0", false}, {"1", true}}, e.adaptive, e.error);
    e.adaptive_set = set("ATTEND_DECODE_ADAPT");
    e.bytes_set = set("ATTEND_DECODE_L2_AHEAD");
    e.hw_stream_set = set("ATTEND_DECODE_HW_STREAM");
    e.one_block_set = set("ATTEND_DECODE_ONE_BLOCK");
    const char* env = std::getenv("ATTEND_DECODE_L2_AHEAD");
    if (!env || !*env || !e.error.empty()) return e;
    const std::string v = env;
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (errno != 0 || end == v.c_str() || *end != '\0' || n < 0 || n > (1 << 20))
      e.error = "ATTEND_DECODE_L2_AHEAD='" + v + "' is not a byte count from 0 to 1048576";
    else
      e.bytes = n;
    return e;
  }();
  return decode;
}

// An on/off environment variable (0 or 1); anything else is an error for every call, like ATTEND_ISA.
struct EnvSwitch {
  bool allowed = true;
  std::string error;
};

EnvSwitch read_switch(const char* name) {
  EnvSwitch e;
  env_choice<bool>(name, {{"0", false}, {"1", true}}, e.allowed, e.error);
  return e;
}

// ATTEND_AMX=0 keeps FpMath::bf16 off the AMX tiles (vdpbf16ps instead, where bf16 math runs);
// unset or 1: AMX wherever it is usable.
const EnvSwitch& env_amx() {
  static const EnvSwitch amx = read_switch("ATTEND_AMX");
  return amx;
}

// ATTEND_BF16_GEMV=0 keeps the layer's bf16 decode projections on oneDNN; unset or 1: attend's GEMV
// where the active ISA has it.
const EnvSwitch& env_bf16_gemv() {
  static const EnvSwitch gemv = read_switch("ATTEND_BF16_GEMV");
  return gemv;
}

// ATTEND_BF16_GEMV_ROWS=4|8: the most rows attend's GEMV takes, in place of the machine class's.
struct EnvRows {
  int64_t rows = 0;  // 0: the class's
  std::string error;
};
const EnvRows& env_bf16_gemv_rows() {
  static const EnvRows r = [] {
    EnvRows e;
    env_choice<int64_t>("ATTEND_BF16_GEMV_ROWS", {{"4", 4}, {"8", 8}}, e.rows, e.error);
    return e;
  }();
  return r;
}

}  // namespace

bool amx_bf16_math() {
  return cpu_features().amx_bf16 && env_amx().allowed &&
         kernels::kernel_table_avx512_bf16(kernels::Bf16Math::amx) != nullptr;
}

namespace {

// The AMX Xeons' rules, with whole lines or page starts into L2.
bool amx_xeon_rules() {
  const Tuning t = env_decode().tuning;
  return t == Tuning::amx_xeon || t == Tuning::amx_xeon_pages;
}

}  // namespace

int64_t decode_l2_ahead_bytes() { return env_decode().error.empty() ? env_decode().bytes : 0; }

bool decode_page_starts() { return env_decode().error.empty() && env_decode().pages; }

bool decode_request_kind_adaptive() { return env_decode().error.empty() && env_decode().adaptive; }

bool decode_l2_pages(kernels::KvType type) { return decode_l2_pages(type, decode_page_starts()); }

bool decode_l2_pages(kernels::KvType type, bool pages) { return pages && type != kernels::KvType::i8; }

bool decode_l2_requests(kernels::KvType type, bool gqa, bool k_blocked) {
  return decode_l2_requests(type, gqa, k_blocked, decode_page_starts());
}

bool decode_l2_requests(kernels::KvType type, bool gqa, bool k_blocked, bool pages) {
  const bool xeon = amx_xeon_rules();
  // An 8-bit cache's requests are whole lines wherever it takes them (decode_l2_pages): on the
  // model-167 Xeon (amx_xeon_pages) for GQA groups and one row alike.
  if (type == kernels::KvType::i8) return env_decode().tuning == Tuning::amx_xeon_pages || (!pages && (gqa || !xeon));
  if (pages) switch (type) {                               // page starts: a Zen 5's rule
      case kernels::KvType::f32: return gqa == k_blocked;  // a cache's GQA groups, sdpa's one row
      case kernels::KvType::i8: break;                     // (above)
      case kernels::KvType::bf16:
      case kernels::KvType::f16: return !gqa;
    }
  switch (type) {
    case kernels::KvType::f32: return gqa || !k_blocked;
    case kernels::KvType::i8: break;  // (above)
    case kernels::KvType::bf16: return xeon;
    case kernels::KvType::f16: return xeon && gqa;
  }
  return false;
}

bool decode_k_l1_requests(kernels::KvType type, bool gqa, bool k_blocked) {
  const Tuning t = env_decode().tuning;
  return !((amx_xeon_rules() || t == Tuning::zen5) && type == kernels::KvType::f32 && !gqa && k_blocked);
}

bool decode_i8_one_row_integer() { return amx_xeon_rules(); }

bool decode_hardware_stream(kernels::KvType type, bool k_blocked) {
  return k_blocked && type != kernels::KvType::i8 && env_decode().error.empty() && env_decode().hw_stream;
}

bool decode_one_block_scores(kernels::KvType type, bool gqa, bool k_blocked) {
  return k_blocked && gqa && (type == kernels::KvType::f32 || type == kernels::KvType::i8) &&
         env_decode().error.empty() && env_decode().one_block;
}

Isa resolve(Isa requested) {
  if (requested != Isa::automatic) {
    if (!compiled_table(requested))
      throw Error(ErrorCode::unsupported,
                  std::string("isa ") + isa_name(requested) + " is not compiled into this build");
    if (!cpu_supports(requested))
      throw Error(ErrorCode::unsupported, std::string("isa ") + isa_name(requested) +
                                              " is not supported by this CPU/OS (" + cpu_features().model + ")");
    return requested;
  }
  const EnvCap& cap = env_cap();
  if (!cap.error.empty()) throw Error(ErrorCode::invalid_argument, cap.error);
  for (Isa isa : {Isa::avx512_bf16, Isa::avx512, Isa::avx2, Isa::generic}) {
    if (static_cast<int>(isa) > static_cast<int>(cap.cap)) continue;
    if (available(isa)) return isa;
  }
  return Isa::generic;
}

const kernels::KernelTable& kernel_table_for(Isa requested, FpMath fpmath) {
  if (fpmath != FpMath::strict && fpmath != FpMath::bf16)
    throw Error(ErrorCode::invalid_argument,
                "fpmath " + std::to_string(static_cast<int>(fpmath)) + " is not FpMath::strict or FpMath::bf16");
  if (!env_decode().error.empty()) throw Error(ErrorCode::invalid_argument, env_decode().error);
  if (!env_amx().error.empty()) throw Error(ErrorCode::invalid_argument, env_amx().error);
  const Isa isa = resolve(requested);
  if (fpmath == FpMath::bf16 && bf16_math_runs(requested, isa))
    return *kernels::kernel_table_avx512_bf16(amx_bf16_math() ? kernels::Bf16Math::amx : kernels::Bf16Math::dot);
  return *compiled_table(isa);
}

bool bf16_math_runs(Isa requested, Isa resolved) {
  // Isa::automatic takes the fastest: AMX tiles where usable, else the vdpbf16ps kernels where they
  // outrun the FMAs, else f32; a forced avx512_bf16 runs bf16 math wherever the CPU has it (tests,
  // comparisons).
  return resolved == Isa::avx512_bf16 &&
         (requested == Isa::avx512_bf16 || cpu_features().bf16_dot_fast || amx_bf16_math());
}

}  // namespace attend::dispatch

namespace attend {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::automatic: return "automatic";
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
  }
  return "unknown";
}

std::vector<Isa> compiled_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    if (dispatch::compiled_table(isa)) out.push_back(isa);
  return out;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    if (dispatch::available(isa)) out.push_back(isa);
  return out;
}

Isa active_isa() { return dispatch::resolve(Isa::automatic); }

const char* fpmath_name(FpMath m) { return m == FpMath::bf16 ? "bf16" : "strict"; }

bool bf16_math_native(Isa isa) { return dispatch::bf16_math_runs(isa, dispatch::resolve(isa)); }

bool bf16_math_amx(Isa isa) { return bf16_math_native(isa) && dispatch::amx_bf16_math(); }

std::string cpu_model() { return dispatch::cpu_features().model; }

DecodeTuning decode_tuning() {
  const dispatch::EnvDecode& e = dispatch::env_decode();
  if (!e.error.empty()) throw Error(ErrorCode::invalid_argument, e.error);
  DecodeTuning t;
  t.rules = e.tuning == dispatch::Tuning::zen4             ? "zen4"
            : e.tuning == dispatch::Tuning::zen5           ? "zen5"
            : e.tuning == dispatch::Tuning::amx_xeon       ? "amx_xeon"
            : e.tuning == dispatch::Tuning::amx_xeon_pages ? "amx_xeon_pages"
                                                           : "none";
  t.rules_from_environment = e.tuning_set;
  t.l2_ahead_bytes = e.bytes;
  t.l2_page_starts = e.pages;
  t.i8_one_row_integer = dispatch::decode_i8_one_row_integer();
  t.hardware_stream = e.hw_stream;
  t.one_block_scores = e.one_block;
  t.adaptive_request_kind = e.adaptive;
  if (e.bytes_set) t.overrides = "ATTEND_DECODE_L2_AHEAD";
  if (e.pages_set) t.overrides += std::string(t.overrides.empty() ? "" : ", ") + "ATTEND_DECODE_L2_PAGES";
  if (e.hw_stream_set) t.overrides += std::string(t.overrides.empty() ? "" : ", ") + "ATTEND_DECODE_HW_STREAM";
  if (e.one_block_set) t.overrides += std::string(t.overrides.empty() ? "" : ", ") + "ATTEND_DECODE_ONE_BLOCK";
  if (e.adaptive_set) t.overrides += std::string(t.overrides.empty() ? "" : ", ") + "ATTEND_DECODE_ADAPT";
  t.bf16_gemv_rows = detail::bf16_decode_gemv_rows();
  t.bf16_gemv_l2_ahead_bytes = detail::bf16_decode_gemv_l2_requests() ? kernels::kBf16GemvL2Ahead : 0;
  if (dispatch::env_bf16_gemv_rows().rows > 0)
    t.overrides += std::string(t.overrides.empty() ? "" : ", ") + "ATTEND_BF16_GEMV_ROWS";
  return t;
}

CpuClass cpu_class() {
  const dispatch::CpuFeatures& f = dispatch::cpu_features();
  return {f.class_name, f.vendor, f.family, f.model_number, f.avx512_bits};
}

}  // namespace attend

namespace attend::detail {

kernels::Bf16GemvFn bf16_decode_gemv() {
  if (!dispatch::env_bf16_gemv().error.empty())
    throw Error(ErrorCode::invalid_argument, dispatch::env_bf16_gemv().error);
  if (!dispatch::env_bf16_gemv().allowed || dispatch::resolve(Isa::automatic) != Isa::avx512_bf16) return nullptr;
  return kernels::bf16_gemv_avx512_bf16();
}

namespace {
// The CPUs whose rules for attend's bf16 GEMV were measured as Zen 5's (session 64): vdpbf16ps
// outruns the FMAs on full-width AVX-512, and oneDNN has no AMX.
bool zen5_gemv_rules() {
  const dispatch::CpuFeatures& f = dispatch::cpu_features();
  return f.bf16_dot_fast && !f.amx_bf16 && f.avx512_bits == 512;
}
}  // namespace

int64_t bf16_decode_gemv_rows() {
  const auto& env = dispatch::env_bf16_gemv_rows();
  if (!env.error.empty()) throw Error(ErrorCode::invalid_argument, env.error);
  if (env.rows > 0) return env.rows;
  // 5–8 rows where measured faster than oneDNN's kernel for them (Zen 5). Elsewhere 4: the AMX
  // Xeons' oneDNN takes 5+ rows on AMX tiles (faster, session 37); a Zen 4 has not been measured.
  return zen5_gemv_rules() ? kernels::kBf16GemvMaxRows : 4;
}

bool bf16_decode_gemv_l2_requests() {
  // Zen 5: 7–13% faster without (session 64); the AMX Xeon measured them (sessions 36–37).
  return !zen5_gemv_rules();
}

}  // namespace attend::detail
