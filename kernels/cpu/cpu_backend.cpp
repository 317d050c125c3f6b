// The CPU backend: P logical devices on host memory, zero-initialized host matrices, and an
// all-reduce that sums device buffers in device order (deterministic).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_device.hpp"
#include "kernels/cpu/cpu_util.hpp"

namespace sluice {

CpuBackend::CpuBackend(const BackendOptions& options) {
  SLUICE_INPUT_CHECK(options.partitions >= 1, "the CPU backend needs at least one partition, got ",
                     options.partitions);
  SLUICE_INPUT_CHECK(options.memory_budget >= 0, "negative device memory budget ",
                     options.memory_budget);
  SLUICE_INPUT_CHECK(options.threads >= 0, "negative thread count ", options.threads);
  if (options.threads > 0) {
    omp_set_num_threads(options.threads);
    openblas_set_num_threads(options.threads);
  }
  for (int p = 0; p < options.partitions; ++p)
    devices_.push_back(
        std::make_unique<CpuDevice>(p, options.memory_budget, options.cpu_residence));
}

Device& CpuBackend::device(int index) {
  SLUICE_EXPECTS(index >= 0 && index < num_devices(), "device ", index, " of ", num_devices());
  return *devices_[std::size_t(index)];
}

HostMat CpuBackend::alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                               const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad host shape ", rows, " x ", cols, " for ", what);
  std::lock_guard<std::mutex> lock(host_mutex_);
  host_buffers_.emplace_back(std::size_t(rows * cols * element_bytes(precision)));
  return HostMat{host_buffers_.back().data(), rows, cols, cols, precision};
}

void CpuBackend::release_host(const HostMat& m) {
  if (m.data == nullptr) return;
  std::lock_guard<std::mutex> lock(host_mutex_);
  const auto it = std::find_if(host_buffers_.begin(), host_buffers_.end(),
                               [&](const AlignedBuffer& b) { return b.data() == m.data; });
  SLUICE_EXPECTS(it != host_buffers_.end(), "release_host: not a matrix of this backend");
  host_buffers_.erase(it);
}

void CpuBackend::all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) {
  SLUICE_EXPECTS(int(buffers.size()) == num_devices(), "all_reduce_sum: ", buffers.size(),
                 " buffers for ", num_devices(), " devices");
  if (buffers.size() <= 1 || n == 0) return;
#pragma omp parallel for schedule(static) if (n > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = 0.f;
    for (float* b : buffers) sum += b[i];
    for (float* b : buffers) b[i] = sum;
  }
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace sluice
