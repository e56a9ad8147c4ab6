// Which vector instruction set attend's kernels run on, and how to choose it.
#pragma once

#include <attend/export.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace attend {

/// Kernel instruction-set paths. `automatic` means "the best one this CPU and OS support,
/// capped by the ATTEND_ISA environment variable".
enum class Isa {
  automatic,
  generic,  ///< baseline vectors of the build target (SSE2 on x86-64, NEON on aarch64)
  avx2,     ///< AVX2 + FMA (x86-64)
  avx512,   ///< AVX-512 F/CD/DQ/BW (x86-64)
  /// AVX-512 F/CD/DQ/BW + AVX512_BF16 + AVX512_VNNI (x86-64: Zen 4, Zen 5, Cooper Lake, Sapphire
  /// Rapids): the avx512 kernels, plus `vdpbf16ps` microkernels that SdpaOptions::fpmath =
  /// FpMath::bf16 runs on, and an 8-bit cache's decode (two or more rows per kv head) in `vpdpwssd`
  /// integer dot products (README, Guarantees).
  avx512_bf16,
};

/// How a call may round the operands of its two matrix products (named after oneDNN's
/// fpmath_mode). The softmax, its running maxima and sums, and every accumulation stay f32.
enum class FpMath {
  /// f32 arithmetic throughout (the default). One exception, a property of the storage: an 8-bit
  /// KV cache's decode on the avx512_bf16 path multiplies its integer codes with the query and the
  /// weights rounded to 16 bits (README, Guarantees), whatever the FpMath.
  strict,
  /// Q·Kᵀ and P·V may round their operands to bf16 (round to nearest even) and accumulate in f32:
  /// prefill-shaped work runs on AMX tiles where the CPU has them (bf16_math_amx()), else on
  /// vdpbf16ps, twice the f32 FMA rate on AMD's cores. Decode-shaped work stays f32, except over a
  /// bf16 K and V, which takes vdpbf16ps too where it runs without AMX (the AMX Xeons' decode stays
  /// f32: their vdpbf16ps is half-rate). On a path without AVX512_BF16 this is `strict` (never an error), and so it is
  /// under
  /// Isa::automatic on Intel's cores without AMX, which issue vdpbf16ps at half their FMA rate
  /// (bf16_math_native()); Isa::avx512_bf16, forced, runs vdpbf16ps there too.
  bf16,
};

/// "strict" or "bf16".
ATTEND_API const char* fpmath_name(FpMath m);

/// Whether FpMath::bf16 runs bf16 microkernels on `isa` (Isa::automatic: the active path), rather
/// than falling back to f32: true for a forced Isa::avx512_bf16 the CPU supports, and for
/// Isa::automatic where the active path is avx512_bf16 and either AMX is usable (bf16_math_amx) or
/// vdpbf16ps outruns the f32 FMAs (AMD's Zen 4 and Zen 5; not Intel's cores, which issue it at half
/// their FMA rate).
ATTEND_API bool bf16_math_native(Isa isa = Isa::automatic);

/// Whether FpMath::bf16 on `isa` runs its two products on AMX tiles (tdpbf16ps: Sapphire Rapids and
/// later Xeons, where Linux granted the process the tile state), rather than on vdpbf16ps or f32.
/// The environment variable ATTEND_AMX=0 turns AMX off (read once; a value other than 0 or 1 makes
/// every call throw attend::Error).
ATTEND_API bool bf16_math_amx(Isa isa = Isa::automatic);

/// "generic", "avx2", "avx512", "avx512_bf16" or "automatic".
ATTEND_API const char* isa_name(Isa isa);

/// The ISA paths compiled into this build (independent of the CPU).
ATTEND_API std::vector<Isa> compiled_isas();

/// The compiled ISA paths this CPU *and* operating system can run (XCR0 is checked, so a kernel
/// that disabled AVX-512 state is honoured).
ATTEND_API std::vector<Isa> supported_isas();

/// The path `Isa::automatic` resolves to: the best supported path, capped by the environment
/// variable ATTEND_ISA=generic|avx2|avx512|avx512_bf16 (read once, at the first call). A cap above what the
/// CPU supports selects the best supported path below it. An unrecognised value throws
/// attend::Error from this function and from every call that uses `Isa::automatic`.
ATTEND_API Isa active_isa();

/// A human-readable name of the CPU (from CPUID's brand string, or /proc/cpuinfo).
ATTEND_API std::string cpu_model();

/// The CPU's microarchitecture class as attend tells them apart, and how it executes AVX-512.
/// Performance figures are quoted per class (docs/performance.md): a Zen 4 runs each 512-bit
/// instruction as two 256-bit halves (its FP32 FMA peak is AVX2's), a Zen 5 server or desktop part
/// runs them full width (twice that peak), and decode's arithmetic per byte hides behind memory
/// loads on one and not the other.
struct CpuClass {
  /// "Zen 3", "Zen 4", "Zen 5", "Sapphire Rapids", "Granite Rapids", "Xeon with AMX" (an AMX
  /// Xeon whose model number a hypervisor hides), …; empty when attend does not know the family
  std::string name;
  std::string vendor;   ///< CPUID vendor string ("AuthenticAMD", "GenuineIntel"); empty off x86
  int family = 0;       ///< CPUID display family (x86); 0 elsewhere
  int model = 0;        ///< CPUID display model (x86); 0 elsewhere
  int avx512_bits = 0;  ///< AVX-512 datapath width: 512, 256 (two halves), 0 = no AVX-512 or unknown
};

/// Detected once; never throws.
ATTEND_API CpuClass cpu_class();

/// The memory requests decode issues on this machine: which machine class's measured rules apply
/// (docs/performance.md) and what they set. A fleet collecting results across CPU classes records
/// it beside them (attend-info, attend-bench's context).
struct DecodeTuning {
  /// "zen4", "zen5", "amx_xeon", "amx_xeon_pages" (the AMX Xeons' rules with a Zen 5's page starts:
  /// the model-167 Xeon) or "none" (no class-specific requests)
  std::string rules;
  /// ATTEND_DECODE_TUNING chose `rules` (else this machine's CPU class did)
  bool rules_from_environment = false;
  /// How far ahead K and V are requested into L2 (0: not at all); ATTEND_DECODE_L2_AHEAD overrides
  int64_t l2_ahead_bytes = 0;
  /// Those requests take one line of each 4 KiB page (else every line), except an 8-bit cache's,
  /// which are always every line; ATTEND_DECODE_L2_PAGES overrides
  bool l2_page_starts = false;
  /// An 8-bit cache's one-row decode (one query row per kv head) runs the integer kernels a GQA
  /// group's does (vpdpwssd on the avx512_bf16 tier), not the f32 ones (codes widened): the AMX
  /// Xeons' rule
  bool i8_one_row_integer = false;
  /// Decode over a cache's blocked K leaves K and V to the hardware prefetchers (no software
  /// requests, whatever l2_ahead_bytes says) and scores K's blocks one at a time in address order:
  /// a Zen 4's rule; ATTEND_DECODE_HW_STREAM=0|1 overrides. sdpa's row-major K keeps its requests.
  bool hardware_stream = false;
  /// The L2 request kind, page starts (l2_page_starts) or whole lines, is chosen at run time: each
  /// kind of decode call (storage type, rows per kv head, blocked K, head_dim, score terms)
  /// times the two in pairs over its first calls and then runs the faster for 500 calls before
  /// timing both again. The model-167
  /// AMX Xeon's rule (its faster kind follows the memory's state); ATTEND_DECODE_ADAPT=0|1
  /// overrides. Either kind computes the same bits.
  bool adaptive_request_kind = false;
  /// The layer's bf16-weight projections of up to this many rows (decode: one per sequence) run
  /// attend's bf16 GEMV where it runs (the avx512_bf16 path, ATTEND_BF16_GEMV not 0), more run
  /// oneDNN's matmul: 8 on a full-width AVX-512 CPU whose vdpbf16ps outruns its FMAs and that has no
  /// AMX (Zen 5), 4 elsewhere (the AMX Xeons' oneDNN takes 5+ rows faster on AMX tiles);
  /// ATTEND_BF16_GEMV_ROWS=4|8 overrides.
  int64_t bf16_gemv_rows = 4;
  /// How far ahead that GEMV's 1–4 row kernel requests its weights into L2 (it always requests
  /// them 4 KiB ahead into L1): 24 KiB, or 0 (none) where bf16_gemv_rows is 8 by the class (Zen 5:
  /// the hardware prefetcher keeps up there, and the requests cost 7–13%)
  int64_t bf16_gemv_l2_ahead_bytes = 24576;
  /// Decode of a GQA group (two or more rows per kv head) over an f32 or 8-bit cache scores its
  /// blocks one at a time in address order, with their requests, instead of two at once: a Zen 5's
  /// rule; ATTEND_DECODE_ONE_BLOCK=0|1 overrides. The same results either way.
  bool one_block_scores = false;
  /// Which overrides were set: "ATTEND_DECODE_L2_AHEAD", "ATTEND_DECODE_L2_PAGES",
  /// "ATTEND_DECODE_HW_STREAM", "ATTEND_DECODE_ONE_BLOCK", "ATTEND_DECODE_ADAPT",
  /// "ATTEND_BF16_GEMV_ROWS", joined by ", "; empty when none
  std::string overrides;
};

/// Read once. Throws attend::Error (invalid_argument) when an ATTEND_DECODE_* variable holds an
/// invalid value, as every attention call then does (or ATTEND_BF16_GEMV_ROWS does, as every bf16
/// projection's construction then does).
ATTEND_API DecodeTuning decode_tuning();

/// The oneDNN library the layer's projections run on: its version ("2.6.3") and the ISA it
/// dispatches to on this machine ("avx512_core_bf16", "avx2", …).
ATTEND_API std::string onednn_version();
ATTEND_API std::string onednn_isa();

}  // namespace attend
