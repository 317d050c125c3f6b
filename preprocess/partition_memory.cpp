// Implementation of preprocess/partition_memory.hpp.
#include "preprocess/partition_memory.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"

namespace sluice {

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
