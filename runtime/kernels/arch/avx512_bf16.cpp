// AVX-512 (F, CD, DQ, BW) + AVX512_BF16 instantiation of the flash kernels: the avx512 kernels and
// the bf16-math table (vdpbf16ps). Built with the avx512 flags plus -mavx512bf16.
#include "../flash_kernels.hpp"

namespace attend::kernels {
const KernelTable* kernel_table_avx512_bf16(bool bf16_math) {
  static const KernelTable strict = make_table<xsimd::avx512bw>("f32_flash_attention__avx512_bf16");
  static const KernelTable bf16 = make_table_bf16_math<xsimd::avx512bw>("bf16_flash_attention__avx512_bf16");
  return bf16_math ? &bf16 : &strict;
}
}  // namespace attend::kernels
