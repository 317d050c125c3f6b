// Implementation of preprocess/partition_memory.hpp.
#include "preprocess/partition_memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"

namespace sluice {
namespace {

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

std::int64_t available_host_memory_bytes() {
  std::int64_t available = meminfo_bytes("MemAvailable:");
  if (available < 0) available = std::numeric_limits<std::int64_t>::max();
  const std::int64_t limit = cgroup_bytes("memory.max");
  const std::int64_t used = cgroup_bytes("memory.current");
  if (limit > 0 && used >= 0)
    available = std::min(available, std::max<std::int64_t>(0, limit - used));
  return available;
}

void require_host_memory(std::int64_t bytes, const std::string& what) {
  const std::int64_t available = available_host_memory_bytes();
  SLUICE_INPUT_CHECK(bytes <= available, what, " needs about ", format_bytes(double(bytes)),
                     " more host memory, but only ", format_bytes(double(available)),
                     " is available (resident now ", format_bytes(double(current_rss_bytes())),
                     "); use a machine with more memory or a lighter partitioner");
}

ResidentPeakSampler::ResidentPeakSampler() : thread_([this] { sample(); }) {}

ResidentPeakSampler::~ResidentPeakSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ResidentPeakSampler::sample() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const std::uint64_t now = current_rss_bytes();
    std::uint64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    wake_.wait_for(lock, std::chrono::milliseconds(10));
  }
}

std::uint64_t ResidentPeakSampler::take_peak() {
  const std::uint64_t now = current_rss_bytes();
  return std::max(peak_.exchange(now), now);
}

PartitionStage::PartitionStage(std::string name, ResidentPeakSampler& sampler)
    : name_(std::move(name)), sampler_(sampler), start_(now_seconds()) {
  sampler_.take_peak();
}

PartitionStage::~PartitionStage() {
  log_debug("stage ", name_, ": ", now_seconds() - start_, " s, stage peak ",
            format_bytes(double(sampler_.take_peak())), ", resident ",
            format_bytes(double(current_rss_bytes())));
}

}  // namespace sluice
