// AVX-512 (F, CD, DQ, BW) + AVX512_BF16 instantiation of the flash kernels: the avx512 kernels, the
// bf16-math table (vdpbf16ps) and its AMX variant (tdpbf16ps). Built with the avx512 flags plus
// -mavx512bf16, and -mamx-tile -mamx-bf16 (AMX instructions come only from the AMX driver's
// intrinsics, which run only where dispatch found AMX usable). Also the layer's bf16 decode GEMV
// (ukernel/bf16_gemv.hpp).
#include "../flash_kernels.hpp"
#include "../ukernel/bf16_gemv.hpp"

namespace attend::kernels {
const KernelTable* kernel_table_avx512_bf16(Bf16Math math) {
  static const KernelTable strict = make_table<xsimd::avx512bw>("f32_flash_attention__avx512_bf16");
  static const KernelTable bf16 = make_table_bf16_math<xsimd::avx512bw>("bf16_flash_attention__avx512_bf16");
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
  static const KernelTable amx = make_table_amx<xsimd::avx512bw>("bf16_flash_attention__avx512_amx");
  if (math == Bf16Math::amx) return &amx;
#else
  if (math == Bf16Math::amx) return nullptr;
#endif
  return math == Bf16Math::dot ? &bf16 : &strict;
}
Bf16GemvFn bf16_gemv_avx512_bf16() { return &gemv::bf16_gemv; }
}  // namespace attend::kernels
