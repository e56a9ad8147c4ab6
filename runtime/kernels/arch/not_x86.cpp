// On targets without x86 ISA paths the x86 tables are absent; the registry sees null.
#include "../kernel_table.hpp"

namespace attend::kernels {
const KernelTable* kernel_table_avx512() { return nullptr; }
const KernelTable* kernel_table_avx512_bf16(Bf16Math) { return nullptr; }
const KernelTable* kernel_table_avx2() { return nullptr; }
Bf16GemvFn bf16_gemv_avx512_bf16() { return nullptr; }
}  // namespace attend::kernels
