// The kernel table of one ISA: the two flash drivers for every K/V element type. Included only by
// runtime/kernels/arch/*.cpp (one per ISA, each built with that ISA's flags).
#pragma once

#include "flash_narrow.hpp"
#include "flash_narrow_i8.hpp"
#include "flash_wide.hpp"
#include "flash_wide_bf16.hpp"

namespace attend::kernels {
namespace {

template <class Arch, template <class, class> class Driver>
void flash_any_type(const FlashWork& w, float* scratch) {
  switch (w.kv_type) {
    case KvType::f32: return Driver<Arch, float>::run(w, scratch);
    case KvType::bf16: return Driver<Arch, Bf16>::run(w, scratch);
    case KvType::f16: return Driver<Arch, F16>::run(w, scratch);
    case KvType::i8: return Driver<Arch, I8>::run(w, scratch);
  }
}

template <class Arch, class E>
struct NarrowDriver {
  static void run(const FlashWork& w, float* scratch) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    // AVX512_VNNI (the avx512_bf16 tables): an 8-bit cache's decode in integer dot products.
    if constexpr (std::is_same_v<E, I8>) return flash_narrow_i8<Arch>(w, scratch);
#endif
    flash_narrow<Arch, E>(w, scratch);
  }
};
template <class Arch, class E>
struct WideDriver {
  static void run(const FlashWork& w, float* scratch) { flash_wide<Arch, E>(w, scratch); }
};

#if defined(__AVX512BF16__)
// FpMath::bf16's decode: a bf16 K and V on vdpbf16ps (flash_narrow's Dot), every other type as
// NarrowDriver.
template <class Arch, class E>
struct NarrowBf16Driver {
  static void run(const FlashWork& w, float* scratch) {
    if constexpr (std::is_same_v<E, Bf16>)
      flash_narrow<Arch, Bf16, true>(w, scratch);
    else
      NarrowDriver<Arch, E>::run(w, scratch);
  }
};
template <class Arch, class E>
struct WideBf16Driver {
  static void run(const FlashWork& w, float* scratch) { flash_wide<Arch, E, true>(w, scratch); }
};
#endif
#if defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
template <class Arch, class E>
struct WideAmxDriver {
  static void run(const FlashWork& w, float* scratch) { flash_wide<Arch, E, true, true>(w, scratch); }
};
#endif

template <class Arch>
size_t scratch_floats(int64_t head_dim, int64_t value_dim, int64_t rows) {
  return static_cast<size_t>(make_layout<Arch>(head_dim, value_dim, rows).total);
}

template <class Arch>
KernelTable make_table(const char* name) {
  using T = Tiles<Arch>;
  return KernelTable{name,
                     KernelGeometry{T::W, T::kBlockRows, T::kBlockKeys, T::kNarrowRows},
                     &flash_any_type<Arch, NarrowDriver>,
                     &flash_any_type<Arch, WideDriver>,
                     &scratch_floats<Arch>,
                     false};
}

#if defined(__AVX512BF16__)
// The table for FpMath::bf16: the wide driver rounds Q·Kᵀ and P·V operands to bf16 (vdpbf16ps);
// decode (the narrow driver) too over a bf16 K and V (NarrowBf16Driver), every other type f32.
// Its row blocks are twice the f32 ones (128 rows): the K tile rounded to bf16 and the V tile packed
// into pairs serve twice the rows.
template <class Arch>
KernelTable make_table_bf16_math(const char* name) {
  using T = Tiles<Arch>;
  return KernelTable{name,
                     KernelGeometry{T::W, 2 * T::kBlockRows, T::kBlockKeys, T::kNarrowRows},
                     &flash_any_type<Arch, NarrowBf16Driver>,
                     &flash_any_type<Arch, WideBf16Driver>,
                     &scratch_floats_bf16<Arch>,
                     true};
}
#endif
#if defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
// The table for FpMath::bf16 on a CPU with AMX-BF16 (Sapphire Rapids and later): the bf16-math
// table's geometry and panels, its two products on AMX tiles (flash_wide_bf16.hpp, AmxWide).
template <class Arch>
KernelTable make_table_amx(const char* name) {
  KernelTable t = make_table_bf16_math<Arch>(name);
  t.flash_wide = &flash_any_type<Arch, WideAmxDriver>;
  // Decode stays f32: these cores issue vdpbf16ps at half their FMA rate (CpuFeatures::bf16_dot_fast).
  t.flash_narrow = &flash_any_type<Arch, NarrowDriver>;
  return t;
}
#endif

}  // namespace
}  // namespace attend::kernels
