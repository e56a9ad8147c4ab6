// What the CPU and the operating system let attend's kernels use. Detected once.
#pragma once

#include <string>

namespace attend::dispatch {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 + FMA + F16C instructions and OS-enabled YMM state
  bool avx512 = false;       // AVX-512 F/CD/DQ/BW instructions and OS-enabled opmask/ZMM state
  bool avx512_bf16 = false;  // avx512 + AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  // vdpbf16ps outruns the f32 FMAs (Zen 4: 440 vs 223 GFLOP/s on 2 threads). Intel's cores issue
  // it on one port at half their FMA rate (an AMX Xeon here: 233 vs 466), so there FpMath::bf16 on
  // Isa::automatic runs the f32 kernels (faster, and exact to f32).
  bool bf16_dot_fast = false;
  // AMX-TILE + AMX-BF16 usable: on the CPU, its tile state enabled by the OS, and (Linux) granted to
  // this process. FpMath::bf16's prefill then runs on AMX tiles (tdpbf16ps).
  bool amx_bf16 = false;
  std::string model;                 // brand string
  std::string vendor;                // CPUID vendor string ("AuthenticAMD", "GenuineIntel"); empty off x86
  int family = 0, model_number = 0;  // CPUID display family and model (x86; 0 elsewhere)
  bool cpuid_avx512f = false;        // the silicon's AVX512F bit, whether or not the OS enabled it
  bool cpuid_amx = false;            // AMX-TILE and AMX-BF16 (CPUID.(7,0):EDX[24, 22]): Sapphire Rapids or later
  const char* class_name = "";       // classify_cpu of the above (name and AVX-512 width)
  int avx512_bits = 0;
};

/// attend's name for the CPU's microarchitecture class and the width of its AVX-512 datapath, from
/// the vendor, family, model and features (pure: unit-tested on the families it knows).
struct CpuClassification {
  const char* name;  // "Zen 3", "Zen 4", "Zen 5", …, or "" when unknown
  int avx512_bits;   // 512, 256 (each 512-bit instruction runs as two halves), 0 = no AVX-512 or unknown
};
inline CpuClassification classify_cpu(const std::string& vendor, int family, int model_number, bool avx512,
                                      bool amx = false) {
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
  if (vendor == "GenuineIntel" && family == 6) {
    // The Xeon server cores (Skylake-SP on) have two 512-bit FMA units (the lower Skylake/Cascade
    // Lake SKUs one: their peak halves, which CPUID does not tell); the client cores with AVX-512
    // (Ice Lake, Tiger Lake, Rocket Lake) fuse two 256-bit ports into one 512-bit FMA: AVX2's peak.
    switch (model_number) {
      case 0x8f: return {"Sapphire Rapids", avx512 ? 512 : 0};
      case 0xcf: return {"Emerald Rapids", avx512 ? 512 : 0};
      case 0xad:
      case 0xae: return {"Granite Rapids", avx512 ? 512 : 0};
      default: break;
    }
    // AMX exists on those server cores only: a hypervisor that shows another model number (a
    // client part's, say) does not change what the silicon is.
    if (amx) return {"Xeon with AMX", avx512 ? 512 : 0};
    switch (model_number) {
      case 0x55: return {"Skylake-SP / Cascade Lake", avx512 ? 512 : 0};
      case 0x6a:
      case 0x6c: return {"Ice Lake-SP", avx512 ? 512 : 0};
      case 0x7d:
      case 0x7e:
      case 0x8c:
      case 0x8d:
      case 0xa7: return {"Intel client AVX-512", avx512 ? 256 : 0};
      default: return {"", 0};
    }
  }
  return {"", 0};
}

/// Detects once (thread-safe) and returns the cached result.
const CpuFeatures& cpu_features();

}  // namespace attend::dispatch
