#include "cpu_features.hpp"

#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attend::dispatch {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0 says which register state the OS saves on a context switch. xsimd 8.1 only looks at CPUID,
// which reports what the silicon can do even when the kernel disabled AVX-512 (or AVX) state —
// running those kernels then corrupts registers or faults. Read with the raw opcode so this file
// needs no -mxsave flag.
unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
  unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  if (__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) {
    const bool avx2 = (b7 >> 5) & 1;
    const bool avx512f = (b7 >> 16) & 1, avx512dq = (b7 >> 17) & 1, avx512cd = (b7 >> 28) & 1,
               avx512bw = (b7 >> 30) & 1;
    f.avx2_fma = avx && avx2 && fma && f16c && os_ymm;  // F16C widens f16 KV caches
    f.cpuid_avx512f = avx512f;
    f.cpuid_amx = ((d7 >> 24) & 1) && ((d7 >> 22) & 1);
    f.avx512 = f.avx2_fma && avx512f && avx512dq && avx512cd && avx512bw && os_zmm;
    unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
    if (a7 >= 1 && __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71))
      // CPUID.(7,1):EAX[5]; and AVX512_VNNI, CPUID.(7,0):ECX[11] (every AVX512_BF16 CPU has it: the
      // tier's 8-bit cache decode uses vpdpwssd).
      f.avx512_bf16 = f.avx512 && ((a71 >> 5) & 1) && ((c7 >> 11) & 1);
    // AMX tile state (XCR0 bits 17, 18: XTILECFG, XTILEDATA) enabled by the OS, which on Linux also
    // hands each process the large tile-data state only on request (arch_prctl
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, once per process; a tile instruction before it
    // faults). Asked here, once, where AMX exists.
    if (f.avx512_bf16 && f.cpuid_amx && (xcr0 & 0x60000) == 0x60000) {
#if defined(__linux__) && defined(__x86_64__)
      constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
      f.amx_bf16 = syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#endif
    }
  }
  {
    // Vendor (CPUID 0: EBX, EDX, ECX) and the display family and model (CPUID 1: EAX), as the
    // SDM/APM define them: the extended fields count only for family 15 (and model, 6 or 15).
    unsigned a0 = 0, v[3] = {};
    if (__get_cpuid(0, &a0, &v[0], &v[2], &v[1])) f.vendor.assign(reinterpret_cast<const char*>(v), sizeof v);
    const int base_family = static_cast<int>((a >> 8) & 0xf), base_model = static_cast<int>((a >> 4) & 0xf);
    f.family = base_family == 15 ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
    f.model_number =
        base_family == 6 || base_family == 15 ? (static_cast<int>((a >> 16) & 0xf) << 4) + base_model : base_model;
  }
  unsigned brand[12] = {};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    f.model = reinterpret_cast<const char*>(brand);
    while (!f.model.empty() && (f.model.back() == ' ' || f.model.back() == '\0')) f.model.pop_back();
    const auto first = f.model.find_first_not_of(' ');
    f.model = first == std::string::npos ? std::string() : f.model.substr(first);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

std::string model_from_proc() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    for (const char* key : {"model name", "Model", "CPU part"}) {
      if (line.rfind(key, 0) == 0) {
        const auto colon = line.find(':');
        if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
      }
    }
  }
  return "unknown CPU";
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f = detect();
    if (f.model.empty()) f.model = model_from_proc();
    const CpuClassification c = classify_cpu(f.vendor, f.family, f.model_number, f.cpuid_avx512f, f.cpuid_amx);
    f.class_name = c.name;
    f.bf16_dot_fast = f.avx512_bf16 && f.vendor != "GenuineIntel";
    f.avx512_bits = c.avx512_bits;
    return f;
  }();
  return features;
}

}  // namespace attend::dispatch
