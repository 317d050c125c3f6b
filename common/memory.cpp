// Implementation of common/memory.hpp.
#include "common/memory.hpp"

#include <cstdio>
#include <cstring>

namespace sluice {
namespace {
std::uint64_t read_status_kib(const char* key) {
  std::FILE* file = std::fopen("/proc/self/status", "r");
  if (!file) return 0;
  char line[256];
  std::uint64_t value = 0;
  const std::size_t key_length = std::strlen(key);
  while (std::fgets(line, sizeof line, file)) {
    if (std::strncmp(line, key, key_length) == 0) {
      std::sscanf(line + key_length, "%lu", &value);
      break;
    }
  }
  std::fclose(file);
  return value * 1024;
}
}  // namespace

std::uint64_t current_rss_bytes() {
  return read_status_kib("VmRSS:");
}
std::uint64_t peak_rss_bytes() {
  return read_status_kib("VmHWM:");
}

}  // namespace sluice
