// Chooses the kernel table for a call: the requested ISA, or the best supported one capped by
// ATTEND_ISA.
#pragma once

#include <attend/isa.hpp>

#include "../kernels/kernel_table.hpp"

namespace attend::dispatch {

/// The table for `requested` (Isa::automatic → active_isa()) and `fpmath` (FpMath::bf16 selects the
/// vdpbf16ps table on avx512_bf16 and is strict elsewhere). Throws attend::Error if the path is not
/// compiled in or not supported by this CPU/OS.
const kernels::KernelTable& kernel_table_for(Isa requested, FpMath fpmath = FpMath::strict);

/// The ISA a table implements.
Isa resolve(Isa requested);

}  // namespace attend::dispatch
