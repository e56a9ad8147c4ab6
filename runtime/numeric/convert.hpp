// Scalar f32 ↔ bf16/f16 conversions (round to nearest even) for the runtime side: appending to a
// KV cache (a few KiB per token) and the slow inspection paths. The hot path — widening during
// attention — is vectorised in the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace attend::numeric {

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline uint16_t to_bf16(float f) {
  const uint32_t b = bits_of(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

inline float from_bf16(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline uint16_t to_f16(float f) {
  const uint32_t b = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // ≥ 65520 rounds to infinity (inf included)
  if (a < 0x38800000u) {                        // below 2^-14: f16 subnormal or zero
    // f·2^24 is exact in f32; rounding it to an integer (nearest even) gives the subnormal's
    // mantissa, and 1024 correctly becomes the smallest normal.
    return sign | static_cast<uint16_t>(std::nearbyint(float_of(a) * 16777216.0f));
  }
  // Rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even in one add, as
  // to_bf16 does; a carry into the exponent is right. No data-dependent branch: the rounding test
  // it replaces mispredicted on half of random data (a decode call on an f16 cache of 32 kv heads
  // × 16 tokens, D 128, appending one token: 32 → 24 µs, Zen 3; bf16's 17).
  const uint32_t h = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  return sign | static_cast<uint16_t>(h);
}

inline float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) return (sign ? -1.0f : 1.0f) * static_cast<float>(mant) * (1.0f / 16777216.0f);
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

/// The 8-bit cache's quantisation of one row (a token's K or V in one kv head): symmetric, one f32
/// scale s = max|x| / 127, q = round-to-nearest-even(x / s) in [−127, 127]; the row reads back as
/// q · s (error ≤ s / 2 per element). An all-zero row has s = 0 (reads back as zeros); a row with
/// a NaN or an infinity gets a NaN scale, so every element reads back as NaN (never a finite lie).
/// `get(d)` is element d as f32 (read twice), `put(d, q)` stores its code; returns s.
/// No library call per element: std::nearbyint and std::fmax were calls on the baseline target
/// (a decode call appending one token to 32 kv heads × 16 cached tokens, D 128: 67 → 26 µs, Zen 3).
/// Both loops vectorise on the baseline target for f32 and bf16 sources (GCC 12 -fopt-info-vec; an
/// f16 source's conversion branches): the largest magnitude is an integer maximum of the elements'
/// bits without their sign (for non-negative floats the same order, and a NaN or an infinity
/// exceeds the largest finite's bits), and the codes are made in chunks of kChunk into a local
/// array, then put one by one (a K row's codes go to every 16th byte). Codes and scale are bitwise
/// those of the element-by-element loops this replaces.
template <class Get, class Put>
float quantize_i8(int64_t n, Get get, Put put) {
  int32_t mbits = 0;  // the largest |x| as bits (0x7f800000 and above: an infinity or NaN)
  for (int64_t d = 0; d < n; ++d) {
    const int32_t b = static_cast<int32_t>(bits_of(get(d)) & 0x7fffffffu);
    mbits = b > mbits ? b : mbits;
  }
  const bool finite = mbits <= 0x7f7fffff;
  const float s = float_of(static_cast<uint32_t>(mbits)) / 127.0f;
  if (!finite || s == 0.0f) {  // non-finite, all zero, or below 127 × the smallest subnormal
    for (int64_t d = 0; d < n; ++d) put(d, int8_t{0});
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  // |x / s| ≤ 127 (plus an ulp): adding 1.5·2^23 rounds it to an integer in the current rounding
  // mode (nearest even by default), exactly as std::nearbyint, and subtracting it back is exact.
  constexpr float kRound = 12582912.0f;
  constexpr int64_t kChunk = 64;
  int8_t codes[kChunk];
  for (int64_t d0 = 0; d0 < n; d0 += kChunk) {
    const int64_t m = n - d0 < kChunk ? n - d0 : kChunk;
    for (int64_t i = 0; i < m; ++i) {
      float r = (get(d0 + i) / s + kRound) - kRound;
      r = r > 127.0f ? 127.0f : r;
      r = r < -127.0f ? -127.0f : r;
      codes[i] = static_cast<int8_t>(static_cast<int32_t>(r));
    }
    for (int64_t i = 0; i < m; ++i) put(d0 + i, codes[i]);
  }
  return s;
}

/// quantize_i8 of a dense row.
inline float quantize_i8_row(const float* x, int64_t n, int8_t* q) {
  return quantize_i8(
      n, [x](int64_t d) { return x[d]; }, [q](int64_t d, int8_t v) { q[d] = v; });
}

}  // namespace attend::numeric
