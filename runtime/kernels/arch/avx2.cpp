// AVX2 + FMA instantiation of the flash kernels. Built with -mavx2 -mfma.
#include "../flash_kernels.hpp"

namespace attend::kernels {
const KernelTable* kernel_table_avx2() {
  static const KernelTable table = make_table<xsimd::fma3<xsimd::avx2>>("f32_flash_attention__avx2");
  return &table;
}
}  // namespace attend::kernels
