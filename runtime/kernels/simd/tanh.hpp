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

// tanh(x) in f32: a [13/6] rational minimax approximation on [−7.9053, 7.9053] (Eigen's
// generic_fast_tanh_float coefficients), x clamped to that range first (tanh there is 1 to f32
// precision). Odd numerator, so small |x| keeps its relative accuracy. NaN stays NaN (min/max with
// the NaN as the second operand return it). ~15 operations: about half of e^(−2|x|)-based forms,
// which made softcap cost 12–19% of a prefill.
template <class Arch>
inline vfloat<Arch> tanh_f32(vfloat<Arch> x) {
  using B = vfloat<Arch>;
  x = xsimd::max(B(-7.90531110763549805f), xsimd::min(B(7.90531110763549805f), x));
  const B x2 = x * x;
  B p = xsimd::fma(x2, B(-2.76076847742355e-16f), B(2.00018790482477e-13f));
  p = xsimd::fma(x2, p, B(-8.60467152213735e-11f));
  p = xsimd::fma(x2, p, B(5.12229709037114e-08f));
  p = xsimd::fma(x2, p, B(1.48572235717979e-05f));
  p = xsimd::fma(x2, p, B(6.37261928875436e-04f));
  p = xsimd::fma(x2, p, B(4.89352455891786e-03f));
  p = x * p;
  B q = xsimd::fma(x2, B(1.19825839466702e-06f), B(1.18534705686654e-04f));
  q = xsimd::fma(x2, q, B(2.26843463243900e-03f));
  q = xsimd::fma(x2, q, B(4.89352518554385e-03f));
  return divide_positive<Arch>(p, q, Arch{});
}

// cap·tanh(s / cap).
template <class Arch>
inline vfloat<Arch> softcap_f32(vfloat<Arch> s, float cap, float inv_cap) {
  using B = vfloat<Arch>;
  return B(cap) * tanh_f32<Arch>(s * B(inv_cap));
}

}  // namespace
}  // namespace attend::kernels
