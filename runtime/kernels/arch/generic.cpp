// Baseline instantiation of the flash kernels, built without ISA flags: SSE2 on x86-64, NEON on
// aarch64 (both are part of those targets' baseline, so this path runs on every CPU of the target).
#include "../flash_kernels.hpp"

namespace attend::kernels {
#if defined(__aarch64__)
using GenericArch = xsimd::neon64;
#elif defined(__x86_64__)
using GenericArch = xsimd::sse2;
#else
using GenericArch = xsimd::default_arch;
#endif

const KernelTable* kernel_table_generic() {
  static const KernelTable table = make_table<GenericArch>(
#if defined(__aarch64__)
      "f32_flash_attention__neon64"
#else
      "f32_flash_attention__sse2"
#endif
  );
  return &table;
}
}  // namespace attend::kernels
