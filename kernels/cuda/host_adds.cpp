// HostAdds (see host_adds.hpp).
#include "kernels/cuda/host_adds.hpp"

#include <omp.h>

#include <memory>

#include "common/parallel.hpp"
#include "kernels/bfloat16.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/host_rows.hpp"

namespace sluice::cuda {
namespace {

// One queued addition, owned by its host function.
struct Addition {
  const void* staged = nullptr;  // n x cols in the host precision
  const vertex_t* rows = nullptr;
  std::int64_t n = 0, cols = 0;
  void* host = nullptr;
  std::int64_t host_ld = 0;
  HostPrecision precision = HostPrecision::kFp32;
  int threads = 1;
};

template <typename T, typename Add>
void add_rows(const Addition& a, Add add) {
  const T* staged = static_cast<const T*>(a.staged);
  T* host = static_cast<T*>(a.host);
  const std::int64_t n = a.n, cols = a.cols;
  // Unique rows: one thread a row, no order to keep.
#pragma omp parallel for schedule(static) num_threads(a.threads) if (worth_parallel(n * cols))
  for (std::int64_t i = 0; i < n; ++i) {
    T* row = host + static_cast<std::int64_t>(a.rows[i]) * a.host_ld;
    const T* x = staged + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) row[j] = add(row[j], x[j]);
  }
}

// The host function: no CUDA calls (host functions must not make any).
void CUDART_CB run_addition(void* user) {
  const std::unique_ptr<Addition> a(static_cast<Addition*>(user));
  if (a->precision == HostPrecision::kBf16)
    add_rows<bf16_t>(*a, [](bf16_t y, bf16_t x) {
      return bf16_from_float(float_from_bf16(y) + float_from_bf16(x));
    });
  else
    add_rows<float>(*a, [](float y, float x) { return y + x; });
}

// The host address of `rows` when they lie in host memory (a constant kept in pinned memory),
// else null (device memory).
const vertex_t* host_address(const vertex_t* rows) {
  cudaPointerAttributes attributes{};
  SLUICE_CUDA(cudaPointerGetAttributes(&attributes, rows));
  if (attributes.type == cudaMemoryTypeUnregistered) return rows;
  if (attributes.type != cudaMemoryTypeHost) return nullptr;
  return static_cast<const vertex_t*>(attributes.hostPointer);
}

}  // namespace

HostAdds::HostAdds(int gpu, int threads) : gpu_(gpu), threads_(threads), stream_(gpu) {
  for (Slot& slot : slots_) {
    slot.staged = Event(gpu);
    slot.added = Event(gpu);
  }
}

HostAdds::~HostAdds() {
  SLUICE_CUDA_NOTHROW(cudaStreamSynchronize(stream_.get()));
}

void HostAdds::add(const Mat& src, const Idx& src_rows, const Idx& host_rows, const HostMat& host,
                   cudaStream_t lane, unsigned blocks, TransferCounters& counters) {
  const std::int64_t n = host_rows.size, cols = src.cols;
  if (n == 0 || cols == 0) return;
  DeviceGuard guard(gpu_);
  Slot& slot = slots_[queued_ % kSlots];
  // The slot's last addition read its staging: the lane writes it again after that. Growing a
  // slot waits on the host for every queued addition (the first batches of a run).
  if (queued_ >= kSlots) SLUICE_CUDA(cudaStreamWaitEvent(lane, slot.added.get()));
  const std::int64_t value_bytes = n * cols * host.element_bytes();
  const void* staged = slot.values.ensure(value_bytes, stream_.get());
  counters.d2h_bytes += value_bytes;
  if (host.precision == HostPrecision::kBf16) {  // rounded on the way: half the bytes
    launch_narrow_rows(src.data, src.ld, src_rows.data,
                       static_cast<bf16_t*>(slot.values.device_pointer()), cols, nullptr, n, cols,
                       lane, blocks);
  } else if (src_rows.data == nullptr) {  // compact rows: a copy engine's work, no SMs
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    SLUICE_CUDA(cudaMemcpy2DAsync(slot.values.get(), row_bytes, src.data,
                                  static_cast<std::size_t>(src.ld) * sizeof(float), row_bytes,
                                  static_cast<std::size_t>(n), cudaMemcpyDeviceToHost, lane));
  } else {
    launch_gather_rows(src.data, src.ld, src_rows.data,
                       static_cast<float*>(slot.values.device_pointer()), cols, nullptr, n, cols,
                       lane, blocks);
  }
  const vertex_t* rows = host_address(host_rows.data);
  if (!rows) {  // device memory: copied next to the values
    const std::int64_t id_bytes = n * static_cast<std::int64_t>(sizeof(vertex_t));
    auto* ids = static_cast<vertex_t*>(slot.ids.ensure(id_bytes, stream_.get()));
    SLUICE_CUDA(cudaMemcpyAsync(ids, host_rows.data, static_cast<std::size_t>(id_bytes),
                                cudaMemcpyDeviceToHost, lane));
    rows = ids;
    counters.d2h_index_bytes += id_bytes;
  }
  SLUICE_CUDA(cudaEventRecord(slot.staged.get(), lane));
  SLUICE_CUDA(cudaStreamWaitEvent(stream_.get(), slot.staged.get()));
  auto addition = std::make_unique<Addition>(
      Addition{staged, rows, n, cols, host.data, host.ld, host.precision, threads_});
  SLUICE_CUDA(cudaLaunchHostFunc(stream_.get(), run_addition, addition.get()));
  addition.release();  // run_addition owns it now
  SLUICE_CUDA(cudaEventRecord(slot.added.get(), stream_.get()));
  ++queued_;
}

void HostAdds::join(cudaStream_t stream) const {
  if (queued_ == 0) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaStreamWaitEvent(stream, slots_[(queued_ - 1) % kSlots].added.get()));
}

void HostAdds::synchronize() const {
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaStreamSynchronize(stream_.get()));
}

}  // namespace sluice::cuda
