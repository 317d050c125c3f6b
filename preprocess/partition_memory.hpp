// Host memory for level-1 partitioning: how much the machine can still give (so that a job too
// large stops with a clear error before the kernel's out-of-memory killer ends it), and the
// resident peak of each partitioning stage, logged with its wall time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/memory.hpp"

namespace sluice {

// Throws InputError naming `what` when `bytes` more than resident now exceed
// available_host_memory_bytes() (common/memory.hpp).
void require_host_memory(std::int64_t bytes, const std::string& what);

// Samples the resident memory every few milliseconds on a background thread, so that each stage
// can report its own peak (the kernel's high-water mark only covers the whole process).
class ResidentPeakSampler {
 public:
  ResidentPeakSampler();
  ~ResidentPeakSampler();
  ResidentPeakSampler(const ResidentPeakSampler&) = delete;
  ResidentPeakSampler& operator=(const ResidentPeakSampler&) = delete;
  // The highest resident size seen since the previous call (or the start); starts a new window.
  std::uint64_t take_peak();

 private:
  void sample();
  std::atomic<std::uint64_t> peak_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Logs "stage NAME: S s, peak P (stage), resident R" when it ends; the peak is the sampler's
// window since the stage began.
class PartitionStage {
 public:
  PartitionStage(std::string name, ResidentPeakSampler& sampler);
  ~PartitionStage();
  PartitionStage(const PartitionStage&) = delete;
  PartitionStage& operator=(const PartitionStage&) = delete;

 private:
  std::string name_;
  ResidentPeakSampler& sampler_;
  double start_;
};

}  // namespace sluice
