// Chooses the kernel table for a call: the requested ISA, or the best supported one capped by
// ATTEND_ISA.
#pragma once

#include <attend/isa.hpp>

#include "../context/internal_api.hpp"
#include "../kernels/kernel_table.hpp"

namespace attend::dispatch {

/// The table for `requested` (Isa::automatic → active_isa()) and `fpmath` (FpMath::bf16 selects the
/// vdpbf16ps table where bf16_math_runs, and is strict elsewhere). Throws attend::Error if the path
/// is not compiled in or not supported by this CPU/OS.
const kernels::KernelTable& kernel_table_for(Isa requested, FpMath fpmath = FpMath::strict);

/// Whether FpMath::bf16 runs the vdpbf16ps kernels for a call that asked for `requested` and
/// resolved to `resolved`: on avx512_bf16 when forced, or automatically where vdpbf16ps outruns
/// the f32 FMAs (CpuFeatures::bf16_dot_fast: AMD's cores, not Intel's).
bool bf16_math_runs(Isa requested, Isa resolved);

/// Whether bf16 math, where it runs, runs on AMX tiles: the CPU has AMX-BF16, the OS granted this
/// process its tile state, the tables were compiled with it, and ATTEND_AMX is not 0.
bool amx_bf16_math();

/// The ISA a table implements.
Isa resolve(Isa requested);

/// How far ahead decode requests K and V into L2 (kernels::FlashWork::l2_ahead_bytes), for this
/// machine class: 24 KiB on a Zen 4 and on the named AMX Xeons, 64 KiB (page starts) on a Zen 5 and
/// the model-167 AMX Xeon, 0 (none) elsewhere, or the environment variable ATTEND_DECODE_L2_AHEAD
/// (bytes, 0 to 1048576) when set. ATTEND_DECODE_TUNING=zen4|zen5|amx_xeon|amx_xeon_pages|none
/// applies that class's rules (this one and the two below) instead of this machine's. kernel_table_for
/// throws attend::Error (invalid_argument) for any call while either variable holds something else.
int64_t decode_l2_ahead_bytes();

/// Whether the L2 requests over K/V of `type` are page starts (kernels::FlashWork::l2_pages): one
/// line of each 4 KiB page, l2_ahead bytes ahead, instead of every line. A Zen 5's and the
/// model-167 AMX Xeon's rule (with 64 KiB ahead), or ATTEND_DECODE_L2_PAGES=0|1 when set (errors as
/// above); never an 8-bit cache's, whose requests are whole lines (the model-167 Xeon, session 59:
/// page starts 51–55% of a read on D2/D3, none 52–57, whole lines 59–64).
bool decode_l2_pages(kernels::KvType type);
/// The same under request kind `pages` (page starts if true) instead of the environment's.
bool decode_l2_pages(kernels::KvType type, bool pages);

/// Whether L2 requests are page starts where a type takes them (the rules' kind, before
/// decode_l2_pages's exceptions).
bool decode_page_starts();

/// Whether decode calls choose the request kind, page starts or whole lines, at run time from
/// their own times (RequestKindChooser, request_kind.hpp) instead of decode_page_starts(): the
/// model-167 AMX Xeon's rule (amx_xeon_pages from the CPU class, neither ATTEND_DECODE_TUNING nor
/// ATTEND_DECODE_L2_PAGES set), or ATTEND_DECODE_ADAPT=0|1 when set (errors as above).
bool decode_request_kind_adaptive();

/// Whether decode work items over K/V of `type` take those requests: `gqa` for a GQA group's item
/// (two or more query rows per kv head), else one row's; `k_blocked` for a cache's blocked K (else
/// a row-major K: sdpa). Measured per machine class (docs/performance.md, sessions 23–24, 31–33):
/// - f32: GQA groups, and one row over a row-major K (over a cache's blocked K it lost 2 points).
/// - i8: GQA groups; one row too, except on the named AMX Xeons (where it cost 2–6 points of a
///   read). The model-167 Xeon (amx_xeon_pages) takes both, as whole lines 64 KiB ahead (session
///   59, alternated attend-bench processes, share of a read without → with: D2 / D3 52–54 / 55–57
///   → 58–61 / 61–66%, the one-row D1 / D4 62–68 / 62–66 → 68–71 / 69–73%); a Zen 5 none.
/// - bf16, f16: none on a Zen 4 (a bf16 cache lost 6 points); on the AMX Xeons GQA groups (3–5%
///   faster), and bf16's one row (6–7% faster) but not f16's (2–5% slower).
/// With page starts (a Zen 5, session 40): f32 GQA groups over a blocked K and one row over a
/// row-major K; bf16 and f16 one row.
bool decode_l2_requests(kernels::KvType type, bool gqa, bool k_blocked);
/// The same under request kind `pages` instead of the environment's.
bool decode_l2_requests(kernels::KvType type, bool gqa, bool k_blocked, bool pages);

/// Whether such a work item requests K's next key group into L1 (prefetcht0) as it scores: yes,
/// except for one row over a cache's blocked f32 K on the AMX Xeons and the Zen 5s (the hardware
/// prefetchers alone: 4–8 points of a read better on the Xeon, session 33; 6–15 on a Zen 5,
/// session 38).
bool decode_k_l1_requests(kernels::KvType type, bool gqa, bool k_blocked);

/// Whether an 8-bit cache's one-row decode items (one query row per kv head) take the integer
/// kernels (kernels::FlashWork::i8_one_row_integer; the avx512_bf16 tier's vpdpwssd, as a GQA
/// group's) instead of the f32 ones over widened codes: on the AMX Xeons (an Emerald Rapids, D1's
/// and D4's shapes: 77–82 → 86–94% of a read, attend-bench alternated; session 47). Not on the
/// Zen classes: a Zen 5 ran the integer version 2–5% slower (session 22, flash_narrow_i8.hpp) and
/// an 8-bit variant of it no faster (session 43); a Zen 4 never measured it; not remeasured since.
bool decode_i8_one_row_integer();

/// Whether decode work items over a cache's blocked K (`k_blocked`) of `type` leave K and V to the
/// hardware prefetchers and score K's blocks one at a time in address order
/// (kernels::FlashWork::hardware_stream; no software requests into L1 or L2): a Zen 4's rule for
/// f32 and 16-bit caches (session 51: the f32 cache's D1–D4 74–90 → 85–99% of a read). Not an
/// 8-bit cache's (its steps lost 10–25 points without their requests), nor a row-major K (sdpa:
/// its scores read 16 rows at once). ATTEND_DECODE_HW_STREAM=0|1 overrides the class.
bool decode_hardware_stream(kernels::KvType type, bool k_blocked);

/// Whether decode work items of a GQA group (`gqa`: two or more rows per kv head) over a cache's
/// blocked f32 or 8-bit K score its blocks one at a time in address order, with their requests
/// (kernels::FlashWork::one_block_scores), instead of two at once: a Zen 5's rule (session 65: the
/// f32 caches' D2/D3 +2–7 points of a read, the 8-bit cache's +2–3). Not the 16-bit caches (the bf16
/// cache's GQA shapes lost 20 points), nor one row (blocked_scores' groups of four).
/// ATTEND_DECODE_ONE_BLOCK=0|1 overrides the class. Either order computes the same bits.
bool decode_one_block_scores(kernels::KvType type, bool gqa, bool k_blocked);

}  // namespace attend::dispatch

namespace attend::detail {

/// attend's bf16 decode GEMV for the layer's projections (kernels::Bf16GemvWork): the avx512_bf16
/// kernel where the active ISA is avx512_bf16 (ATTEND_ISA may cap it) and the environment variable
/// ATTEND_BF16_GEMV is unset or 1; null (oneDNN's matmul instead) where it is 0. Any other value
/// throws attend::Error (invalid_argument), as ATTEND_ISA's do. (In attend::detail: attend_layer
/// calls it across a shared libattend_core's boundary.)
ATTEND_INTERNAL kernels::Bf16GemvFn bf16_decode_gemv();

/// The most rows of a projection that bf16_decode_gemv's kernel takes (more go to oneDNN's matmul):
/// kernels::kBf16GemvMaxRows (8) on a full-width AVX-512 CPU whose vdpbf16ps outruns its FMAs and
/// that has no AMX (Zen 5), 4 elsewhere; ATTEND_BF16_GEMV_ROWS=4|8 overrides it, and any other value
/// throws attend::Error (invalid_argument) from the construction of every bf16 projection.
ATTEND_INTERNAL int64_t bf16_decode_gemv_rows();

/// Whether bf16_decode_gemv's 1–4 row kernel also requests its lines 24 KiB ahead into L2 (besides
/// 4 KiB ahead into L1): not on the Zen 5 rules' CPUs (those of bf16_decode_gemv_rows' 8), where the
/// hardware prefetcher keeps up and the requests cost 7–13%; everywhere else.
ATTEND_INTERNAL bool bf16_decode_gemv_l2_requests();

}  // namespace attend::detail
