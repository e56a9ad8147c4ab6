// tanh in f32 and the soft-capping of scores built on it (FlashWork::softcap).
#pragma once

#include "arch.hpp"

namespace attend::kernels {
namespace {

// p / q for q > 0: a division, or on AVX-512 vrcp14ps (relative error ≤ 2^-14) and one Newton step
// (≤ 2^-27), a third of vdivps's cost.
template <class Arch>
inline vfloat<Arch> divide_positive(vfloat<Arch> p, vfloat<Arch> q, requires_arch<xsimd::generic>) {
  return p / q;
}
#if defined(__AVX512F__)
template <class Arch>
inline vfloat<Arch> divide_positive(vfloat<Arch> p, vfloat<Arch> q, requires_arch<xsimd::avx512f>) {
  const __m512 r = _mm512_rcp14_ps(q);
  return _mm512_mul_ps(_mm512_mul_ps(p, r), _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.0f)));
}
#endif

// cap·tanh(x) in f32: x·P(x²)/Q(x²), a [9/8] rational minimax for tanh on [−8.2, 8.2], fitted for
// this file by Lawson's iteration on the relative error (tools/fit_tanh.py 8.2 5 5; P's constant
// term 1 − 8e-9 taken as 1); x clamped to that range first (tanh(8.2) is 1 − 1.5e-7); P's
// coefficients times cap, so the cap costs no operation. Relative error ≤ 3.3e-7 measured with FMA
// over every third float in [2^-20, 12] and caps from 1e-3 to 3e5 (Eigen's [13/6] form, used
// before: 2.9e-7 for tanh alone), with one FMA fewer and no multiply by cap. Odd numerator, so
// small |x| keeps its relative accuracy. NaN stays NaN (min/max with the NaN as the second operand
// return it).
template <class Arch>
inline vfloat<Arch> capped_tanh(vfloat<Arch> x, float cap) {
  using B = vfloat<Arch>;
  x = xsimd::max(B(-8.2f), xsimd::min(B(8.2f), x));
  const B u = x * x;
  B p = xsimd::fma(u, B(cap * 1.484043993e-08f), B(cap * 2.163719080e-05f));
  p = xsimd::fma(u, p, B(cap * 3.556681234e-03f));
  p = xsimd::fma(u, p, B(cap * 1.343211865e-01f));
  p = xsimd::fma(u, p, B(cap));
  p = x * p;
  B q = xsimd::fma(u, B(8.370556112e-07f), B(3.386432778e-04f));
  q = xsimd::fma(u, q, B(2.610827917e-02f));
  q = xsimd::fma(u, q, B(4.676544439e-01f));
  q = xsimd::fma(u, q, B(1.0f));
  return divide_positive<Arch>(p, q, Arch{});
}

// cap·tanh(s / cap).
template <class Arch>
inline vfloat<Arch> softcap_f32(vfloat<Arch> s, float cap, float inv_cap) {
  return capped_tanh<Arch>(s * vfloat<Arch>(inv_cap), cap);
}

}  // namespace
}  // namespace attend::kernels
