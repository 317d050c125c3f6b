// The fp32 <-> bf16 conversion of kernels/bfloat16.hpp (--host-precision bf16): exact values,
// ties to even, subnormals, overflow, infinities and NaNs, and an independent nearest-value
// search over many bit patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/bfloat16.hpp"

namespace sluice {
namespace {

float from_bits(std::uint32_t u) {
  return fp32_from_bits(u);
}

TEST(Bfloat16, ExactValuesKeepTheirUpperHalf) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_from_float(-2.0f), 0xc000);
  EXPECT_EQ(bf16_from_float(0.0f), 0x0000);
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_float(0.5f), 0x3f00);
  EXPECT_EQ(float_from_bf16(0x3f80), 1.0f);
  EXPECT_EQ(float_from_bf16(0x4049), 3.140625f);
  EXPECT_EQ(float_from_bf16(0xc2f7), -123.5f);
}

TEST(Bfloat16, RoundsToNearestWithTiesToEven) {
  // 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): down to even.
  EXPECT_EQ(bf16_from_float(from_bits(0x3f808000)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 0x3f81 (odd) and 0x3f82 (even): up to even.
  EXPECT_EQ(bf16_from_float(from_bits(0x3f818000)), 0x3f82);
  // Just above and just below a half.
  EXPECT_EQ(bf16_from_float(from_bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(bf16_from_float(from_bits(0x3f807fff)), 0x3f80);
  // The same for negative values (the magnitude rounds).
  EXPECT_EQ(bf16_from_float(from_bits(0xbf808000)), 0xbf80);
  EXPECT_EQ(bf16_from_float(from_bits(0xbf818000)), 0xbf82);
  EXPECT_EQ(bf16_from_float(from_bits(0xbf80c000)), 0xbf81);
  // pi = 0x40490fdb: the lower half is below one half.
  EXPECT_EQ(bf16_from_float(3.14159265f), 0x4049);
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
  // A carry through the mantissa into the exponent: 2 - 2^-9 rounds up to 2.
  EXPECT_EQ(bf16_from_float(from_bits(0x3fffc000)), 0x4000);
  EXPECT_EQ(round_to_bf16(1.998046875f), 2.0f);
}

TEST(Bfloat16, SubnormalsRoundLikeNormals) {
  EXPECT_EQ(bf16_from_float(from_bits(0x00000001)), 0x0000);
  EXPECT_EQ(bf16_from_float(from_bits(0x00008000)), 0x0000);  // tie, to even
  EXPECT_EQ(bf16_from_float(from_bits(0x00018000)), 0x0002);  // tie, to even
  EXPECT_EQ(bf16_from_float(from_bits(0x00008001)), 0x0001);
  EXPECT_EQ(bf16_from_float(from_bits(0x007fffff)), 0x0080);  // up into the smallest normal
  EXPECT_EQ(bf16_from_float(from_bits(0x80008001)), 0x8001);
}

TEST(Bfloat16, OverflowInfinitiesAndNans) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_from_float(inf), 0x7f80);
  EXPECT_EQ(bf16_from_float(-inf), 0xff80);
  EXPECT_EQ(float_from_bf16(0x7f80), inf);
  // The largest bf16 is 0x7f7f; fp32 values from halfway above it on round to infinity.
  EXPECT_EQ(bf16_from_float(from_bits(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(bf16_from_float(from_bits(0x7f7f8000)), 0x7f80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(bf16_from_float(-std::numeric_limits<float>::max()), 0xff80);
  // NaNs stay NaNs, quiet, with their sign and upper payload bits.
  EXPECT_EQ(bf16_from_float(from_bits(0x7fc00000)), 0x7fc0);
  EXPECT_EQ(bf16_from_float(from_bits(0xffc00000)), 0xffc0);
  EXPECT_EQ(bf16_from_float(from_bits(0x7fa00000)), 0x7fe0);
  // A payload only in the lower half would truncate to an infinity; the quiet bit keeps a NaN.
  EXPECT_EQ(bf16_from_float(from_bits(0x7f800001)), 0x7fc0);
  EXPECT_EQ(bf16_from_float(from_bits(0xff80ffff)), 0xffc0);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7f800001))));
}

TEST(Bfloat16, EveryBf16ValueRoundTripsUnchanged) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<bf16_t>(b);
    const float x = float_from_bf16(bits);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(round_to_bf16(x))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(bf16_from_float(x), bits) << std::hex << b;
  }
}

// An independent definition: the nearer of the two bf16 neighbours of x (truncation and the next
// value away from zero), measured in double; ties to the even one.
bf16_t nearest_by_search(float x) {
  const std::uint32_t u = fp32_bits(x);
  const auto low = static_cast<bf16_t>(u >> 16);
  const auto high = static_cast<bf16_t>(low + 1);
  const double ax = std::abs(double(x));
  const double below = std::abs(double(float_from_bf16(low)));
  // The next bf16 magnitude; above the largest finite one it is 2^128 (rounds to infinity).
  const double above =
      (high & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::abs(double(float_from_bf16(high)));
  const double down = ax - below, up = above - ax;
  if (down < up) return low;
  if (up < down) return high;
  return (low & 1) == 0 ? low : high;
}

TEST(Bfloat16, AgreesWithANearestValueSearchOverManyBitPatterns) {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  int checked = 0;
  for (int k = 0; k < 2000000; ++k) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    // Every other pattern gets a lower half near a tie.
    std::uint32_t u = static_cast<std::uint32_t>(state >> 32);
    if (k & 1) u = (u & 0xffff0000u) | (0x7ffeu + (u & 3u));
    const float x = from_bits(u);
    if (std::isnan(x) || std::isinf(x)) continue;
    ASSERT_EQ(bf16_from_float(x), nearest_by_search(x)) << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, 1900000);
}

}  // namespace
}  // namespace sluice
