// Deterministic hashing: a 64-bit streaming hash for fingerprints, and counter-based random
// numbers keyed by (seed, epoch, layer, vertex, element) so results never depend on chunking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define SLUICE_HD __host__ __device__ __forceinline__
#else
#define SLUICE_HD inline
#endif

namespace sluice {

// SplitMix64 finalizer: a strong 64-bit mixing function.
SLUICE_HD std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// key_hash(seed, a, b, c, d) == key_hash_finish(key_hash_prefix(seed, a, b, c), d): a row's
// prefix is computed once and only the last mixing step runs per element.
SLUICE_HD std::uint64_t key_hash_prefix(std::uint64_t seed, std::uint64_t a, std::uint64_t b,
                                        std::uint64_t c) {
  std::uint64_t h = mix64(seed ^ 0x5851f42d4c957f2dULL);
  h = mix64(h ^ a);
  h = mix64(h ^ b);
  return mix64(h ^ c);
}
SLUICE_HD std::uint64_t key_hash_finish(std::uint64_t prefix, std::uint64_t d) {
  return mix64(prefix ^ d);
}

// Hash of a key tuple; the building block of every random decision in training.
SLUICE_HD std::uint64_t key_hash(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0,
                                 std::uint64_t c = 0, std::uint64_t d = 0) {
  return key_hash_finish(key_hash_prefix(seed, a, b, c), d);
}

// Uniform float in [0, 1) from a hash (24 random bits).
SLUICE_HD float hash_to_unit(std::uint64_t h) {
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// Streaming fingerprint over byte ranges (word-wise, order-sensitive).
class Fingerprint {
 public:
  void add(const void* data, std::size_t bytes);
  void add_u64(std::uint64_t value);
  std::uint64_t value() const { return mix64(state_ ^ length_); }
  std::string hex() const;

 private:
  std::uint64_t state_ = 0x243f6a8885a308d3ULL;
  std::uint64_t length_ = 0;
};

}  // namespace sluice
