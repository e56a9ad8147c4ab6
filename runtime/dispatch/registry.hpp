// Chooses the kernel table for a call: the requested ISA, or the best supported one capped by
// ATTEND_ISA.
#pragma once

#include <attend/isa.hpp>

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
/// machine class: 24 KiB on a Zen 4 and on the AMX Xeons, 0 (none) elsewhere, or the environment variable
/// ATTEND_DECODE_L2_AHEAD (bytes, 0 to 1048576) when set. kernel_table_for throws
/// attend::Error (invalid_argument) for any call while the variable holds something else.
int64_t decode_l2_ahead_bytes();

/// Whether those requests also serve an 8-bit cache's decode of one row per kv head (MHA): yes on
/// a Zen 4, no on the AMX Xeons (where they cost it 2–6 points of a read), whatever the distance.
bool decode_l2_i8_one_row();

}  // namespace attend::dispatch
