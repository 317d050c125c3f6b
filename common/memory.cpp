// Implementation of common/memory.hpp.
#include "common/memory.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

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

// A "Key:   123 kB" line of /proc/meminfo, in bytes; -1 when absent.
std::int64_t meminfo_bytes(const char* key) {
  std::FILE* file = std::fopen("/proc/meminfo", "r");
  if (!file) return -1;
  char line[256];
  std::int64_t value = -1;
  const std::size_t length = std::strlen(key);
  while (std::fgets(line, sizeof line, file)) {
    long long kib = 0;
    if (std::strncmp(line, key, length) == 0 && std::sscanf(line + length, "%lld", &kib) == 1) {
      value = static_cast<std::int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(file);
  return value;
}

// A cgroup v2 memory file holding a number ("max" or missing: -1).
std::int64_t cgroup_bytes(const char* name) {
  std::ifstream in(std::string("/sys/fs/cgroup/") + name);
  std::string text;
  if (!(in >> text) || text == "max") return -1;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

void return_large_blocks_when_freed() {
#ifdef __GLIBC__
  // A fixed threshold also turns off glibc's raising of it. Failing costs memory, not results.
  if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1)
    log_debug("mallopt(M_MMAP_THRESHOLD) failed: freed blocks may stay with the process");
#endif
}

void populate_in_parallel(void* data, std::size_t bytes) {
  constexpr std::uintptr_t kPage = 4096;
  const auto start = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t first = (start + kPage - 1) & ~(kPage - 1);
  const std::uintptr_t last = (start + bytes) & ~(kPage - 1);
  const auto pages = static_cast<std::int64_t>(last > first ? (last - first) / kPage : 0);
  constexpr int kPieces = 64;
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(pages))
  for (int piece = 0; piece < kPieces; ++piece) {
    const std::uintptr_t begin = first + kPage * std::uintptr_t(pages * piece / kPieces);
    const std::uintptr_t end = first + kPage * std::uintptr_t(pages * (piece + 1) / kPieces);
#ifdef MADV_POPULATE_WRITE
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#endif
  }
}

std::uint64_t current_rss_bytes() {
  return read_status_kib("VmRSS:");
}
std::uint64_t peak_rss_bytes() {
  return read_status_kib("VmHWM:");
}

std::int64_t available_host_memory_bytes() {
  std::int64_t available = meminfo_bytes("MemAvailable:");
  if (available < 0) available = std::numeric_limits<std::int64_t>::max();
  const std::int64_t limit = cgroup_bytes("memory.max");
  const std::int64_t used = cgroup_bytes("memory.current");
  if (limit > 0 && used >= 0)
    available = std::min(available, std::max<std::int64_t>(0, limit - used));
  return available;
}

std::int64_t saturating_bytes(std::initializer_list<std::int64_t> factors) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t product = 1;
  for (const std::int64_t factor : factors) {
    if (factor <= 0) return 0;
    if (product > kMax / factor) return kMax;
    product *= factor;
  }
  return product;
}

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

void require_memory(const MemoryNeed& need) {
  const std::int64_t available = available_host_memory_bytes();
  if (need.bytes <= available) return;
  const std::string needed = need.bytes == std::numeric_limits<std::int64_t>::max()
                                 ? std::string("more than 8 EiB")
                                 : "about " + format_bytes(double(need.bytes));
  throw InputError(cat(need.cause, ": ", need.purpose, " needs ", needed,
                       " of host memory, but only ", format_bytes(double(available)),
                       " is available"));
}

}  // namespace sluice
