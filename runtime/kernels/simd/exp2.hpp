// 2^x for x ≤ 0, the exponential of the online softmax.
#pragma once

#include "arch.hpp"

namespace attend::kernels {
namespace {

// p · 2^n for integral n ≥ −127: the exponent is built with integer arithmetic.
template <class Arch>
inline vfloat<Arch> scale_by_pow2(vfloat<Arch> p, vfloat<Arch> n) {
  using I = vint<Arch>;
  const I e = (xsimd::to_int(n) + I(127)) << 23;
  return p * xsimd::bitwise_cast<vfloat<Arch>>(e);
}

// 2^x for x ≤ 0 (NaN propagates) from `poly`, 2^f on f ∈ [-0.5, 0.5] after rounding x to n + f.
// Small inputs, −inf from masks among them, give exactly 0, which is what a masked score must
// contribute:
// - AVX-512: below −126, through vscalefps' zero mask. x is clamped to −126 first, and n = −126
//   only with f ≥ 0, so no lane ever computes a subnormal or underflowing result (2^f·2^n ≥ 2^−126,
//   the smallest normal). Intel cores take a microcode assist for an instruction with such a lane
//   while FTZ is off; with the earlier clamp at −160 (vscalefps rounding to 0) every vector holding
//   a masked key and every row's first rescale factor (running max −inf) took one: half of a
//   16-key decode step's softmax on an Emerald Rapids, and causal prefill lost 5–15% (f32) and more
//   with bf16 math (docs/performance.md, session 45).
// - Otherwise (AVX2, NEON): the same clamp, and the exponent built with integer arithmetic
//   (scale_by_pow2); lanes below −126 take n = −127, whose factor's bits are those of +0, and p·0
//   is an exact 0, not an underflow. (Clamped at −127 instead, as before session 46, inputs in
//   [−126.5, −126) rounded to n = −126 with f < 0 and gave subnormal results.)
template <class Arch, class Poly>
inline vfloat<Arch> exp2_nonpositive_by(vfloat<Arch> x, Poly poly) {
  using B = vfloat<Arch>;
  constexpr float kFloor = -126.0f;
#if defined(__AVX512F__)
  if constexpr (has_avx512_ops(Arch{})) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, B(kFloor), _CMP_NLT_UQ);  // (NaN: live, and propagates)
    x = xsimd::max(B(kFloor), x);  // operand order: x86 max returns the 2nd operand on NaN
    const B n = xsimd::nearbyint(x);
    return _mm512_maskz_scalef_ps(live, poly(x - n), n);
  } else
#endif
  {
    const auto dead = x < B(kFloor);  // (NaN: not dead, and propagates through the max)
    x = xsimd::max(B(kFloor), x);
    const B n = xsimd::nearbyint(x);
    return scale_by_pow2<Arch>(poly(x - n), xsimd::select(dead, B(-127.0f), n));
  }
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
