// What the CPU and the operating system let attend's kernels use. Detected once.
#pragma once

#include <string>

namespace attend::dispatch {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA + F16C instructions and OS-enabled YMM state
  bool avx512 = false;       // AVX-512 F/CD/DQ/BW instructions and OS-enabled opmask/ZMM state
  bool avx512_bf16 = false;  // avx512 + AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  std::string model;         // brand string
};

/// Detects once (thread-safe) and returns the cached result.
const CpuFeatures& cpu_features();

}  // namespace attend::dispatch
