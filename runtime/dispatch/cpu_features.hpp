// What the CPU and the operating system let attend's kernels use. Detected once.
#pragma once

#include <string>

namespace attend::dispatch {

struct CpuFeatures {
  bool avx2_fma = false;             // AVX2 + FMA + F16C instructions and OS-enabled YMM state
  bool avx512 = false;               // AVX-512 F/CD/DQ/BW instructions and OS-enabled opmask/ZMM state
  bool avx512_bf16 = false;          // avx512 + AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  std::string model;                 // brand string
  std::string vendor;                // CPUID vendor string ("AuthenticAMD", "GenuineIntel"); empty off x86
  int family = 0, model_number = 0;  // CPUID display family and model (x86; 0 elsewhere)
  bool cpuid_avx512f = false;        // the silicon's AVX512F bit, whether or not the OS enabled it
  const char* class_name = "";       // classify_cpu of the above (name and AVX-512 width)
  int avx512_bits = 0;
};

/// attend's name for the CPU's microarchitecture class and the width of its AVX-512 datapath, from
/// the vendor, family, model and features (pure: unit-tested on the families it knows).
struct CpuClassification {
  const char* name;  // "Zen 3", "Zen 4", "Zen 5", …, or "" when unknown
  int avx512_bits;   // 512, 256 (each 512-bit instruction runs as two halves), 0 = no AVX-512 or unknown
};
inline CpuClassification classify_cpu(const std::string& vendor, int family, int model_number, bool avx512) {
  if (vendor == "AuthenticAMD") {
    switch (family) {
      case 0x17: return {model_number >= 0x30 ? "Zen 2" : "Zen / Zen+", 0};
      case 0x19:
        // Zen 3 and Zen 4 share family 25; only Zen 4 has AVX-512, which it executes as two 256-bit
        // halves: its FP32 FMA peak is AVX2's.
        return avx512 ? CpuClassification{"Zen 4", 256} : CpuClassification{"Zen 3", 0};
      case 0x1a:
        // Zen 5: full 512-bit datapaths on servers and desktops (EPYC 9005, Ryzen 9000); the mobile
        // parts (models 0x20–0x2f, 0x60–0x7f: Strix Point, Krackan Point) keep two 256-bit halves.
        return {"Zen 5",
                !avx512 ? 0
                : (model_number >= 0x20 && model_number <= 0x2f) || (model_number >= 0x60 && model_number <= 0x7f)
                    ? 256
                    : 512};
      default: return {"", 0};
    }
  }
  return {"", 0};
}

/// Detects once (thread-safe) and returns the cached result.
const CpuFeatures& cpu_features();

}  // namespace attend::dispatch
