// Implementation of the fingerprint in common/hash.hpp.
#include "common/hash.hpp"

#include <cstdio>
#include <cstring>

namespace sluice {

void Fingerprint::add(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  // Four independent lanes keep the multiply chains short; combined per block.
  for (; i + 32 <= bytes; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + i, 32);
    state_ = mix64(state_ ^ (w[0] + mix64(w[1]) * 3 + mix64(w[2] ^ w[3])));
    state_ ^= w[3] * 0x9e3779b97f4a7c15ULL;
  }
  for (; i < bytes; ++i) state_ = mix64(state_ ^ p[i]);
  length_ += bytes;
}

void Fingerprint::add_u64(std::uint64_t value) {
  add(&value, sizeof value);
}

std::string Fingerprint::hex() const {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value()));
  return buffer;
}

}  // namespace sluice
