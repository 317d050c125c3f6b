// CudaBackend: P logical devices round-robin on the physical GPUs, peer access, pinned host
// matrices, and the weight-gradient all-reduce (local sums per GPU, then across GPUs by peer
// reads where every GPU may read every other's memory, else NCCL).
#include "kernels/cuda/cuda_backend.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda_memory_rules.hpp"

namespace sluice {

bool cuda_backend_available() {
  return cuda::device_count() > 0;
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<cuda::CudaBackend>(options);
}

namespace cuda {
namespace {

// Enables peer access between every pair of used GPUs (unless PeerAccess::kOff); fills the
// direct_peer table.
void setup_peer_access(BackendShared& shared) {
  const int g = shared.used_gpus;
  const bool disabled = shared.options.peer_access == PeerAccess::kOff;
  shared.direct_peer.assign(g, std::vector<bool>(g, false));
  bool all_direct = true;
  for (int a = 0; a < g; ++a) {
    shared.direct_peer[a][a] = !disabled;
    for (int b = 0; b < g; ++b) {
      if (a == b || disabled) continue;
      int can_access = 0;
      SLUICE_CUDA(cudaDeviceCanAccessPeer(&can_access, a, b));
      if (can_access) {
        DeviceGuard guard(a);
        const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
        if (status == cudaErrorPeerAccessAlreadyEnabled) {
          cudaGetLastError();
        } else {
          SLUICE_CUDA(status);
        }
      }
      shared.direct_peer[a][b] = can_access != 0;
      all_direct = all_direct && shared.direct_peer[a][b];
    }
  }
  if (disabled) {
    log_info("CUDA: peer access off; peer rows go through staged copies");
  } else if (!all_direct) {
    log_info(
        "CUDA: some GPU pairs lack peer access; those transfers are staged through host memory "
        "(slower)");
  }
}

}  // namespace

std::int64_t CudaBackend::placement_capacity(int index) const {
  SLUICE_EXPECTS(index >= 0 && index < num_devices(), "no logical device ", index);
  const std::int64_t budget = shared_->options.memory_budget;
  if (budget > 0) return budget - budget / kBudgetHeadroomDivisor;
  const int gpu = devices_[std::size_t(index)]->gpu();
  const auto sharing = std::count_if(devices_.begin(), devices_.end(),
                                     [&](const auto& d) { return d->gpu() == gpu; });
  DeviceGuard guard(gpu);
  std::size_t free = 0, total = 0;
  SLUICE_CUDA(cudaMemGetInfo(&free, &total));
  const std::int64_t usable = std::int64_t(free) - std::int64_t(total) / kGpuHeadroomDivisor;
  return std::max<std::int64_t>(0, usable) / sharing;
}

CudaBackend::CudaBackend(const BackendOptions& options)
    : shared_(std::make_unique<BackendShared>()) {
  const int available = device_count();
  if (available == 0)
    throw InputError("the CUDA backend needs a GPU, but no CUDA device is usable");
  SLUICE_INPUT_CHECK(options.partitions >= 1, "--partitions must be at least 1, got ",
                     options.partitions);
  SLUICE_INPUT_CHECK(options.gpus >= 1 && options.gpus <= available, "asked for ", options.gpus,
                     " GPUs but ", available, " are visible");
  SLUICE_INPUT_CHECK(
      options.peer_access == PeerAccess::kAuto || options.peer_access == PeerAccess::kOff,
      "unknown peer access mode ", static_cast<int>(options.peer_access));
  shared_->options = options;
  shared_->used_gpus = std::min(options.gpus, options.partitions);
  setup_peer_access(*shared_);
  for (int d = 0; d < options.partitions; ++d) {
    devices_.push_back(std::make_unique<CudaDevice>(d, d % shared_->used_gpus, *shared_));
    barrier_events_.emplace_back(devices_.back()->gpu());
  }
  // NCCL's communicators only where the all-reduce needs them: creating them takes part of a
  // multi-GPU start.
  if (shared_->used_gpus > 1 && !sums_by_peer_reads()) {
#if defined(SLUICE_HAVE_NCCL)
    std::vector<int> ids(static_cast<std::size_t>(shared_->used_gpus));
    for (int g = 0; g < shared_->used_gpus; ++g) ids[g] = g;
    nccl_ = NcclCommunicators(ids);
#else
    throw InputError(cat(
        "this build has no NCCL: the CUDA backend uses several GPUs only where each may read the "
        "others' memory (peer access, at most ",
        kMaxSumInputs, " GPUs); use --gpus 1"));
#endif
  }
  log_info("CUDA backend: ", options.partitions, " logical devices on ", shared_->used_gpus,
           " GPU(s); peer access ", peer_access_name(options.peer_access),
           options.op_times ? "; operation times on" : "");
}

CudaBackend::~CudaBackend() {
  for (auto& device : devices_) {
    try {
      device->synchronize();
    } catch (const std::exception& e) {
      report_library_error("CUDA", "synchronize", __FILE__, __LINE__, e.what());
    }
  }
  // Devices first (their buffers and handles), then the communicators, then host memory.
  devices_.clear();
}

std::string CudaBackend::name() const {
  return cat("cuda (", devices_.size(), " logical devices on ", shared_->used_gpus, " GPU",
             shared_->used_gpus == 1 ? "" : "s", ")");
}

Device& CudaBackend::device(int index) {
  SLUICE_EXPECTS(index >= 0 && index < num_devices(), "device ", index, " of ", num_devices());
  return *devices_[index];
}

HostMat CudaBackend::alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                                const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad host matrix shape ", rows, " x ", cols, " for ",
                 what);
  return HostMat{shared_->host_memory.allocate(rows * cols * element_bytes(precision)), rows, cols,
                 cols, precision};
}

void CudaBackend::release_host(const HostMat& m) {
  if (m.data != nullptr) shared_->host_memory.release(m.data);
}

void CudaBackend::all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) {
  SLUICE_EXPECTS(static_cast<int>(buffers.size()) == num_devices(),
                 "all_reduce_sum: ", buffers.size(), " buffers for ", num_devices(), " devices");
  if (n <= 0 || num_devices() == 1) return;
  const int gpus = shared_->used_gpus;
  // Device g (< gpus) is the first logical device on GPU g: it leads that GPU's sum.
  for (int d = gpus; d < num_devices(); ++d) {
    CudaDevice& member = *devices_[d];
    CudaDevice& leader = *devices_[member.gpu()];
    DeviceGuard guard(member.gpu());
    SLUICE_CUDA(cudaEventRecord(member.event(), member.stream()));
    SLUICE_CUDA(cudaStreamWaitEvent(leader.stream(), member.event(), 0));
    launch_axpy(n, 1.f, buffers[d], buffers[leader.index()], leader.stream());
  }
  if (sums_by_peer_reads()) {
    peer_all_reduce(buffers, n);
  } else if (gpus > 1) {
#if defined(SLUICE_HAVE_NCCL)
    SLUICE_NCCL(ncclGroupStart());
    for (int g = 0; g < gpus; ++g) {
      DeviceGuard guard(g);
      SLUICE_NCCL(ncclAllReduce(buffers[g], buffers[g], static_cast<std::size_t>(n), ncclFloat,
                                ncclSum, nccl_.get(static_cast<std::size_t>(g)),
                                devices_[g]->stream()));
    }
    SLUICE_NCCL(ncclGroupEnd());
#endif
  }
  if (num_devices() > gpus) {
    for (int d = gpus; d < num_devices(); ++d) {
      CudaDevice& member = *devices_[d];
      CudaDevice& leader = *devices_[member.gpu()];
      DeviceGuard guard(member.gpu());
      SLUICE_CUDA(cudaMemcpyAsync(buffers[d], buffers[leader.index()],
                                  static_cast<std::size_t>(n) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, leader.stream()));
    }
    for (int g = 0; g < gpus; ++g) {
      DeviceGuard guard(g);
      SLUICE_CUDA(cudaEventRecord(devices_[g]->event(), devices_[g]->stream()));
    }
    for (int d = gpus; d < num_devices(); ++d) {
      CudaDevice& member = *devices_[d];
      DeviceGuard guard(member.gpu());
      SLUICE_CUDA(cudaStreamWaitEvent(member.stream(), devices_[member.gpu()]->event(), 0));
    }
  }
}

std::vector<std::vector<int>> CudaBackend::setup_groups() const {
  std::vector<std::vector<int>> groups(std::size_t(shared_->used_gpus));
  for (const auto& device : devices_) groups[std::size_t(device->gpu())].push_back(device->index());
  return groups;
}

bool CudaBackend::sums_by_peer_reads() const {
  return shared_->used_gpus > 1 && shared_->used_gpus <= kMaxSumInputs && every_peer_direct();
}

bool CudaBackend::every_peer_direct() const {
  for (const auto& row : shared_->direct_peer)
    for (const bool direct : row)
      if (!direct) return false;
  return true;
}

void CudaBackend::peer_all_reduce(const std::vector<float*>& buffers, std::int64_t n) {
  const int gpus = shared_->used_gpus;
  // Slice g of the n floats: [first(g), first(g + 1)), starts 16-byte aligned.
  const auto first = [&](int g) { return g == gpus ? n : n * g / gpus / 4 * 4; };
  // Every leader's work so far is done before any leader's next step reads or writes peers'
  // buffers: the records precede all the waits, as in barrier().
  const auto join_leaders = [&] {
    for (int g = 0; g < gpus; ++g) {
      DeviceGuard guard(g);
      SLUICE_CUDA(cudaEventRecord(devices_[g]->event(), devices_[g]->stream()));
    }
    for (int g = 0; g < gpus; ++g) {
      DeviceGuard guard(g);
      for (int q = 0; q < gpus; ++q)
        if (q != g)
          SLUICE_CUDA(cudaStreamWaitEvent(devices_[g]->stream(), devices_[q]->event(), 0));
    }
  };
  join_leaders();
  for (int g = 0; g < gpus; ++g) {
    DeviceGuard guard(g);
    std::vector<const float*> slices;
    for (int q = 0; q < gpus; ++q) slices.push_back(buffers[q] + first(g));
    launch_sum_inputs(slices, first(g + 1) - first(g), buffers[g] + first(g),
                      devices_[g]->stream());
  }
  join_leaders();
  for (int g = 0; g < gpus; ++g) {
    DeviceGuard guard(g);
    for (int q = 0; q < gpus; ++q) {
      const std::int64_t count = first(q + 1) - first(q);
      if (q == g || count == 0) continue;
      SLUICE_CUDA(cudaMemcpyPeerAsync(buffers[g] + first(q), g, buffers[q] + first(q), q,
                                      std::size_t(count) * sizeof(float), devices_[g]->stream()));
    }
  }
}

void CudaBackend::synchronize_all() {
  for (auto& device : devices_) device->synchronize();
}

void CudaBackend::barrier() {
  const int n = num_devices();
  if (n <= 1) return;  // one in-order stream orders itself
  // Record first on every stream, then wait: each wait sees the record of this barrier (an
  // event's state is captured when cudaStreamWaitEvent is called). A stream waits on events of
  // other GPUs too (allowed across devices); host functions queued before the record (loss
  // copies) and the flushes' additions into host memory are part of what the event covers.
  for (int d = 0; d < n; ++d) {
    DeviceGuard guard(devices_[d]->gpu());
    LaneScope compute(*devices_[d], Lane::kCompute);
    devices_[d]->join_host_adds();
    SLUICE_CUDA(cudaEventRecord(barrier_events_[d].get(), devices_[d]->stream()));
  }
  for (int d = 0; d < n; ++d) {
    DeviceGuard guard(devices_[d]->gpu());
    for (int other = 0; other < n; ++other) {
      if (other == d) continue;
      SLUICE_CUDA(cudaStreamWaitEvent(devices_[d]->stream(), barrier_events_[other].get(), 0));
    }
  }
}

}  // namespace cuda
}  // namespace sluice
