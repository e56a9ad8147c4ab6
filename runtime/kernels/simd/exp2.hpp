// 2^x for x ≤ 0, the exponential of the online softmax.
#pragma once

#include "arch.hpp"

namespace attend::kernels {
namespace {

// p · 2^n for integral n ≥ −127: the exponent is built with integer arithmetic.
template <class Arch>
inline vfloat<Arch> scale_by_pow2(vfloat<Arch> p, vfloat<Arch> n, requires_arch<xsimd::generic>) {
  using I = vint<Arch>;
  const I e = (xsimd::to_int(n) + I(127)) << 23;
  return p * xsimd::bitwise_cast<vfloat<Arch>>(e);
}

#if defined(__AVX512F__)
// AVX-512 scales by 2^n in one instruction (vscalefps); below −160 the result rounds to exactly 0.
template <class Arch>
inline vfloat<Arch> scale_by_pow2(vfloat<Arch> p, vfloat<Arch> n, requires_arch<xsimd::avx512f>) {
  return _mm512_scalef_ps(p, n);
}
#endif

// 2^x for x ≤ 0 (NaN propagates) from `poly`, 2^f on f ∈ [-0.5, 0.5] after rounding x to n + f;
// the exponent is applied by scale_by_pow2. Inputs below −127 (−160 with vscalefps; including −inf
// from masks) give exactly 0, which is what a masked score must contribute.
template <class Arch, class Poly>
inline vfloat<Arch> exp2_nonpositive_by(vfloat<Arch> x, Poly poly) {
  using B = vfloat<Arch>;
  constexpr float kFloor = has_avx512_ops(Arch{}) ? -160.0f : -127.0f;
  x = xsimd::max(B(kFloor), x);  // operand order: x86 max returns the 2nd operand on NaN
  const B n = xsimd::nearbyint(x);
  return scale_by_pow2<Arch>(poly(x - n), n, Arch{});
}

// 2^x for x ≤ 0: degree-5 polynomial, relative error ≤ 1.1e-7 on [-0.5, 0.5].
template <class Arch>
inline vfloat<Arch> exp2_nonpositive(vfloat<Arch> x) {
  using B = vfloat<Arch>;
  return exp2_nonpositive_by<Arch>(x, [](B f) {
    B p = B(1.321867225e-03f);
    p = xsimd::fma(p, f, B(9.671698324e-03f));
    p = xsimd::fma(p, f, B(5.550893024e-02f));
    p = xsimd::fma(p, f, B(2.402223796e-01f));
    p = xsimd::fma(p, f, B(6.931468844e-01f));
    return xsimd::fma(p, f, B(1.0f));
  });
}

// 2^x for x ≤ 0 to bf16 precision: degree-3 polynomial, relative error ≤ 7.8e-5 (a bf16 rounds at
// 3.9e-3). For weights that bf16 math rounds to bf16 anyway.
template <class Arch>
inline vfloat<Arch> exp2_nonpositive_bf16(vfloat<Arch> x) {
  using B = vfloat<Arch>;
  return exp2_nonpositive_by<Arch>(x, [](B f) {
    B p = B(5.508868381e-02f);
    p = xsimd::fma(p, f, B(2.426040515e-01f));
    p = xsimd::fma(p, f, B(6.932762417e-01f));
    return xsimd::fma(p, f, B(9.999289404e-01f));
  });
}

}  // namespace
}  // namespace attend::kernels
