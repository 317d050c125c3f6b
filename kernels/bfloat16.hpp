// bfloat16: the 16-bit host storage of vertex data (sluice-train --host-precision bf16). A bf16
// value is the upper half of an IEEE fp32 value (sign, 8 exponent bits, 7 mantissa bits), so
// widening is exact and narrowing only rounds the mantissa. These are the ONE definition of the
// conversion: the CPU backend, the CUDA kernels and the trainer's feature conversion all call
// them, which is what makes the two backends round identically.
//
// Narrowing (bf16_from_float) rounds to nearest, ties to even; finite values above the largest
// bf16 (0x7f7f, about 3.39e38) round to infinity as fp32 rounding would; infinities stay
// infinities; a NaN stays a NaN with its sign and the upper 7 bits of its payload, with the quiet
// bit set (so a payload held only in the lower 16 bits cannot turn it into an infinity).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SLUICE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SLUICE_HOST_DEVICE inline
#endif

namespace sluice {

// The bits of one bf16 value, as stored in host memory.
using bf16_t = std::uint16_t;

SLUICE_HOST_DEVICE std::uint32_t fp32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

SLUICE_HOST_DEVICE float fp32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// fp32 -> bf16, round to nearest even (NaN and overflow as above).
SLUICE_HOST_DEVICE bf16_t bf16_from_float(float x) {
  const std::uint32_t u = fp32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff rounds a remainder above one half up and below it down; the low bit of the
  // kept half breaks the tie towards the even result. A carry into the exponent is the correct
  // next binade (or infinity).
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>(rounded >> 16);
}

// bf16 -> fp32 (exact).
SLUICE_HOST_DEVICE float float_from_bf16(bf16_t b) {
  return fp32_from_bits(static_cast<std::uint32_t>(b) << 16);
}

// x rounded to the nearest bf16 value, kept in fp32: what a row reads back after a round trip
// through a bf16 host matrix.
SLUICE_HOST_DEVICE float round_to_bf16(float x) {
  return float_from_bf16(bf16_from_float(x));
}

}  // namespace sluice
