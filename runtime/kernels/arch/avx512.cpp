// AVX-512 (F, CD, DQ, BW) instantiation of the flash kernels. Built with -mavx512f -mavx512cd
// -mavx512dq -mavx512bw -mfma; contains nothing but the table, everything else is a template.
#include "../flash_kernels.hpp"

namespace attend::kernels {
const KernelTable* kernel_table_avx512() {
  static const KernelTable table = make_table<xsimd::avx512bw>("f32_flash_attention__avx512");
  return &table;
}
}  // namespace attend::kernels
