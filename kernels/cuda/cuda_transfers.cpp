// CudaDevice transfers: host-link loads and stores (zero-copy gathers and DMA blocks), peer
// pulls and pushes between logical devices (direct or staged), gradient flushes into host
// matrices, and the device-local row copies. Host matrices of bf16 elements are read by kernels
// that widen them (host_rows.hpp) and written by kernels that round on the GPU, so the link
// carries 2 bytes per element; a row's repeated flushes are added by CPU threads (HostAdds). A
// matrix made resident (try_make_resident) goes through the same kernels and copies within
// device memory, without the host-link grid cap.

#include <omp.h>

#include <algorithm>
#include <memory>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/host_rows.hpp"

namespace sluice::cuda {
namespace {

std::int64_t row_bytes(const Mat& m) {
  return m.cols * kFloat;
}

void expect_rows_fit(const Mat& m, std::int64_t needed_rows, const char* what) {
  SLUICE_EXPECTS(m.rows >= needed_rows, what, " has ", m.rows, " rows, ", needed_rows, " needed");
}

// The grid cap of a kernel that reads or writes `m`: host_link_blocks for a matrix in host memory
// (see gather.hpp), none for a resident one.
unsigned blocks_for(const HostMat& m, unsigned host_link_blocks) {
  return m.residence == Residence::kHost ? host_link_blocks : 0;
}

// dst[dst_rows[i]] = src[src_rows[i]] (src_rows null: row i) for i < n, each row with the
// dropout keyed keys[i] (scatter_dropout_rows, copy_dropout_rows; the caller set the device).
void move_rows_with_dropout(Mat src, const vertex_t* src_rows, const vertex_t* dst_rows,
                            std::int64_t n, Mat dst, Idx keys, const DropoutKey& key,
                            cudaStream_t stream) {
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  if (n == 0 || dst.cols == 0) return;
  if (key.rate <= 0.f) {
    launch_gather_rows(src.data, src.ld, src_rows, dst.data, dst.ld, dst_rows, n, dst.cols, stream);
    return;
  }
  launch_scatter_dropout_rows(src.data, src.ld, src_rows, dst_rows, dst.data, dst.ld, n, dst.cols,
                              keys.data, key.seed, key.salt(), key.rate, stream);
}

// A copy of `src` on GPU src_gpu into `dst` (same shape) on GPU dst_gpu, each with its own row
// stride (cudaMemcpy3DPeerAsync).
cudaMemcpy3DPeerParms peer_copy(Mat src, int src_gpu, Mat dst, int dst_gpu) {
  cudaMemcpy3DPeerParms copy{};
  copy.srcPtr = make_cudaPitchedPtr(src.data, static_cast<std::size_t>(src.ld * kFloat),
                                    static_cast<std::size_t>(src.cols * kFloat),
                                    static_cast<std::size_t>(src.rows));
  copy.srcDevice = src_gpu;
  copy.dstPtr = make_cudaPitchedPtr(dst.data, static_cast<std::size_t>(dst.ld * kFloat),
                                    static_cast<std::size_t>(dst.cols * kFloat),
                                    static_cast<std::size_t>(dst.rows));
  copy.dstDevice = dst_gpu;
  copy.extent = make_cudaExtent(static_cast<std::size_t>(src.cols * kFloat),
                                static_cast<std::size_t>(src.rows), 1);
  return copy;
}

}  // namespace

void* CudaDevice::host_device_pointer(const HostMat& m, std::int64_t first_row,
                                      std::int64_t rows) const {
  if (rows <= 0 || m.cols <= 0) return m.data;
  if (m.residence == Residence::kDevice) return m.row_block(first_row, rows).data;
  const HostMat block = m.row_block(first_row, rows);
  return const_cast<void*>(shared_.host_memory.device_pointer(block.data, block.span_bytes()));
}

void CudaDevice::load_rows(HostMat src, Idx src_rows, Idx dst_rows, Mat dst) {
  OpScope op(*this, "load_rows");
  finish_setup();
  const std::int64_t n = src_rows.size;
  SLUICE_EXPECTS(dst_rows.size == n || dst_rows.size == 0, "load_rows: ", n, " source rows but ",
                 dst_rows.size, " destination rows");
  SLUICE_EXPECTS(src.cols == dst.cols, "load_rows: width ", src.cols, " vs ", dst.cols);
  if (dst_rows.size == 0) expect_rows_fit(dst, n, "load_rows destination");
  if (n == 0 || dst.cols == 0) return;
  DeviceGuard guard(gpu_);
  const void* source = host_device_pointer(src, 0, src.rows);
  const vertex_t* to = dst_rows.size ? dst_rows.data : nullptr;
  const unsigned blocks = blocks_for(src, host_read_blocks_);
  if (src.precision == HostPrecision::kBf16)
    launch_widen_rows(static_cast<const bf16_t*>(source), src.ld, src_rows.data, dst.data, dst.ld,
                      to, n, dst.cols, cur(), blocks);
  else if (blocks > 0)
    launch_load_host_rows(static_cast<const float*>(source), src.ld, src_rows.data, dst.data,
                          dst.ld, to, n, dst.cols, cur(), blocks);
  else
    launch_gather_rows(static_cast<const float*>(source), src.ld, src_rows.data, dst.data, dst.ld,
                       to, n, dst.cols, cur(), blocks);
  if (src.residence == Residence::kHost) counters_.h2d_gather_rows += n;
  counters_.bytes_for(src, counters_.h2d_gather_bytes) += n * dst.cols * src.element_bytes();
}

void CudaDevice::load_block(HostMat src, std::int64_t src_row, Mat dst) {
  OpScope op(*this, "load_block");
  finish_setup();
  SLUICE_EXPECTS(src.cols == dst.cols && src_row >= 0 && src_row + dst.rows <= src.rows,
                 "load_block: rows [", src_row, ", +", dst.rows, ") of a ", src.rows, " x ",
                 src.cols, " host matrix into ", dst.rows, " x ", dst.cols);
  if (dst.empty()) return;
  DeviceGuard guard(gpu_);
  if (src.precision == HostPrecision::kBf16) {
    // Read zero-copy and widened on the way (no device staging for the 16-bit block).
    const auto* source = static_cast<const bf16_t*>(host_device_pointer(src, src_row, dst.rows));
    launch_widen_rows(source, src.ld, nullptr, dst.data, dst.ld, nullptr, dst.rows, dst.cols, cur(),
                      blocks_for(src, host_read_blocks_));
  } else {
    SLUICE_CUDA(cudaMemcpy2DAsync(
        dst.data, dst.ld * kFloat, src.row_block(src_row, 0).data, src.ld * kFloat,
        dst.cols * kFloat, dst.rows,
        src.residence == Residence::kHost ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
        cur()));
  }
  counters_.bytes_for(src, counters_.h2d_block_bytes) += dst.rows * dst.cols * src.element_bytes();
}

void CudaDevice::store_block(Mat src, HostMat dst, std::int64_t dst_row) {
  OpScope op(*this, "store_block");
  SLUICE_EXPECTS(src.cols == dst.cols && dst_row >= 0 && dst_row + src.rows <= dst.rows,
                 "store_block: ", src.rows, " x ", src.cols, " into rows [", dst_row, ", +",
                 src.rows, ") of a ", dst.rows, " x ", dst.cols, " host matrix");
  if (src.empty()) return;
  DeviceGuard guard(gpu_);
  if (dst.precision == HostPrecision::kBf16) {
    // Rounded on the GPU and written over the link into mapped host memory (posted writes).
    auto* target = static_cast<bf16_t*>(host_device_pointer(dst, dst_row, src.rows));
    launch_narrow_rows(src.data, src.ld, nullptr, target, dst.ld, nullptr, src.rows, src.cols,
                       cur(), blocks_for(dst, host_write_blocks_));
  } else {
    SLUICE_CUDA(cudaMemcpy2DAsync(
        dst.row_block(dst_row, 0).data, dst.ld * kFloat, src.data, src.ld * kFloat,
        src.cols * kFloat, src.rows,
        dst.residence == Residence::kHost ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice,
        cur()));
  }
  counters_.bytes_for(dst, counters_.d2h_bytes) += src.rows * src.cols * dst.element_bytes();
}

void CudaDevice::pull_rows(const Device& owner, Mat owner_buf, Idx owner_rows, Idx dst_rows,
                           Mat dst) {
  OpScope op(*this, "pull_rows");
  const auto& source = dynamic_cast<const CudaDevice&>(owner);
  const std::int64_t n = owner_rows.size;
  SLUICE_EXPECTS(dst_rows.size == n, "pull_rows: ", n, " owner rows but ", dst_rows.size,
                 " destination rows");
  SLUICE_EXPECTS(owner_buf.cols == dst.cols, "pull_rows: width ", owner_buf.cols, " vs ", dst.cols);
  if (n == 0 || dst.cols == 0) return;
  DeviceGuard guard(gpu_);
  const bool direct = shared_.direct_peer[gpu_][source.gpu_];
  const float* from = owner_buf.data;
  if (!direct) {
    // Copy the owner's whole buffer here (cudaMemcpyPeerAsync stages through the host when
    // needed), then gather locally.
    const std::int64_t span = (owner_buf.rows - 1) * owner_buf.ld + owner_buf.cols;
    float* local = peer_source_.ensure_as<float>(span, account_, cur(), "peer staging (pull)");
    SLUICE_CUDA(cudaMemcpyPeerAsync(local, gpu_, owner_buf.data, source.gpu_,
                                    static_cast<std::size_t>(span * kFloat), cur()));
    from = local;
  }
  launch_gather_rows(from, owner_buf.ld, owner_rows.data, dst.data, dst.ld, dst_rows.data, n,
                     dst.cols, cur());
  counters_.p2p_rows += n;
  counters_.p2p_bytes += n * row_bytes(dst);
}

// A copy engine's work (no SMs): between GPUs a peer copy, staged through the host by the driver
// where the GPUs have no peer access; one span where both sides are contiguous.
void CudaDevice::copy_block_to(Mat src, int target_gpu, Mat dst) {
  if (src.ld == src.cols && dst.ld == dst.cols) {
    SLUICE_CUDA(cudaMemcpyPeerAsync(dst.data, target_gpu, src.data, gpu_,
                                    static_cast<std::size_t>(src.rows * src.cols * kFloat), cur()));
  } else if (target_gpu == gpu_) {
    SLUICE_CUDA(cudaMemcpy2DAsync(dst.data, dst.ld * kFloat, src.data, src.ld * kFloat,
                                  src.cols * kFloat, src.rows, cudaMemcpyDeviceToDevice, cur()));
  } else {
    const cudaMemcpy3DPeerParms copy = peer_copy(src, gpu_, dst, target_gpu);
    SLUICE_CUDA(cudaMemcpy3DPeerAsync(&copy, cur()));
  }
}

void CudaDevice::put_block(Mat src, Device& peer, Mat dst) {
  OpScope op(*this, "put_block");
  const auto& target = dynamic_cast<const CudaDevice&>(peer);
  SLUICE_EXPECTS(src.rows == dst.rows && src.cols == dst.cols, "put_block: ", src.rows, " x ",
                 src.cols, " into ", dst.rows, " x ", dst.cols);
  if (src.empty()) return;
  DeviceGuard guard(gpu_);
  copy_block_to(src, target.gpu_, dst);
  counters_.p2p_rows += src.rows;
  counters_.p2p_bytes += src.rows * row_bytes(src);
}

void CudaDevice::put_rows(Mat src, Idx src_rows, Device& peer, Mat dst) {
  OpScope op(*this, "put_rows");
  const auto& target = dynamic_cast<const CudaDevice&>(peer);
  const std::int64_t n = src_rows.size;
  SLUICE_EXPECTS(n == dst.rows && src.cols == dst.cols, "put_rows: ", n, " rows of width ",
                 src.cols, " into ", dst.rows, " x ", dst.cols);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  if (target.gpu_ == gpu_ || shared_.direct_peer[gpu_][target.gpu_]) {
    // Stores into the peer's memory over the link.
    launch_gather_rows(src.data, src.ld, src_rows.data, dst.data, dst.ld, nullptr, n, src.cols,
                       cur());
  } else {
    // Compact here, then one peer copy.
    float* compact = staging_.ensure_as<float>(n * src.cols, account_, cur(), "put staging");
    launch_gather_rows(src.data, src.ld, src_rows.data, compact, src.cols, nullptr, n, src.cols,
                       cur());
    copy_block_to(Mat{compact, n, src.cols, src.cols}, target.gpu_, dst);
  }
  counters_.p2p_rows += n;
  counters_.p2p_bytes += n * row_bytes(src);
}

void CudaDevice::flush_add_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  OpScope op(*this, "flush_add_rows");
  const std::int64_t n = host_rows.size;
  expect_flush_shapes("flush_add_rows", src, src_rows, host_rows, host);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  if (host.residence == Residence::kHost) {
    // Written once into pinned staging, added by CPU threads (host_adds.hpp): read back and
    // added by the GPU, every row would cross the link twice.
    if (!host_adds_) {
      // Half the cores a GPU, the rest left to the threads that issue work and run the driver's
      // callbacks: an addition waits on memory, and more threads spinning beside it made the
      // epochs slower and less even (kernels/cuda/NOTES.md).
      const int threads = std::max(1, omp_get_max_threads() / (2 * std::max(1, shared_.used_gpus)));
      host_adds_ = std::make_unique<HostAdds>(gpu_, threads);
    }
    host_adds_->add(src, src_rows, host_rows, host, cur(), host_write_blocks_, counters_);
    return;
  }
  // A resident matrix: the GPU adds in device memory (rows unique, no atomics); bf16 as the CPU
  // backend adds: round(host + round(values)).
  if (host.precision == HostPrecision::kBf16)
    launch_add_narrowed_rows(src.data, src.ld, src_rows.data, static_cast<bf16_t*>(host.data),
                             host.ld, host_rows.data, n, src.cols, cur());
  else
    launch_add_rows(src.data, src.ld, src_rows.data, static_cast<float*>(host.data), host.ld,
                    host_rows.data, n, src.cols, cur());
  counters_.resident_bytes += n * src.cols * host.element_bytes();
}

void CudaDevice::join_host_adds() {
  if (host_adds_) host_adds_->join(cur());
}

void CudaDevice::flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  OpScope op(*this, "flush_store_rows");
  const std::int64_t n = host_rows.size;
  expect_flush_shapes("flush_store_rows", src, src_rows, host_rows, host);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  // A gather whose destination is mapped host memory: the GPU writes the rows over the link
  // (posted writes, no round trip); host_rows is read wherever the constant lives.
  void* target = host_device_pointer(host, 0, host.rows);
  const unsigned blocks = blocks_for(host, host_write_blocks_);
  if (host.precision == HostPrecision::kBf16)
    launch_narrow_rows(src.data, src.ld, src_rows.data, static_cast<bf16_t*>(target), host.ld,
                       host_rows.data, n, src.cols, cur(), blocks);
  else
    launch_gather_rows(src.data, src.ld, src_rows.data, static_cast<float*>(target), host.ld,
                       host_rows.data, n, src.cols, cur(), blocks);
  counters_.bytes_for(host, counters_.d2h_bytes) += n * src.cols * host.element_bytes();
}

void CudaDevice::scatter_rows(Mat src, Idx rows, Mat dst) {
  OpScope op(*this, "scatter_rows");
  SLUICE_EXPECTS(src.cols == dst.cols && src.rows == rows.size, "scatter_rows: ", src.rows, " x ",
                 src.cols, " with ", rows.size, " rows into width ", dst.cols);
  if (rows.size == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  launch_gather_rows(src.data, src.ld, nullptr, dst.data, dst.ld, rows.data, rows.size, src.cols,
                     cur());
}

void CudaDevice::scatter_dropout_rows(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key) {
  OpScope op(*this, "scatter_dropout_rows");
  SLUICE_EXPECTS(src.cols == dst.cols && src.rows == rows.size && keys.size == rows.size,
                 "scatter_dropout_rows: ", src.rows, " x ", src.cols, " with ", rows.size,
                 " rows and ", keys.size, " keys into width ", dst.cols);
  DeviceGuard guard(gpu_);
  move_rows_with_dropout(src, nullptr, rows.data, rows.size, dst, keys, key, cur());
}

void CudaDevice::scatter_arrivals(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key,
                                  Mat gradient) {
  OpScope op(*this, "scatter_arrivals");
  SLUICE_EXPECTS(src.cols == dst.cols && src.rows == rows.size && keys.size == rows.size,
                 "scatter_arrivals: ", src.rows, " x ", src.cols, " with ", rows.size, " rows and ",
                 keys.size, " keys into width ", dst.cols);
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  if (rows.size == 0) return;
  DeviceGuard guard(gpu_);
  launch_scatter_arrivals(src.data, src.ld, rows.data, dst.data, dst.ld, rows.size, dst.cols,
                          keys.data, key.seed, key.salt(), key.rate, gradient.data, gradient.ld,
                          gradient.cols, cur());
}

void CudaDevice::gather_rows(Mat src, Idx rows, Mat dst) {
  OpScope op(*this, "gather_rows");
  finish_setup();
  SLUICE_EXPECTS(src.cols == dst.cols, "gather_rows: width ", src.cols, " vs ", dst.cols);
  expect_rows_fit(dst, rows.size, "gather_rows destination");
  DeviceGuard guard(gpu_);
  launch_gather_rows(src.data, src.ld, rows.data, dst.data, dst.ld, nullptr, rows.size, dst.cols,
                     cur());
}

void CudaDevice::scatter_add_rows(Mat src, Idx rows, Mat dst) {
  OpScope op(*this, "scatter_add_rows");
  SLUICE_EXPECTS(src.cols == dst.cols, "scatter_add_rows: width ", src.cols, " vs ", dst.cols);
  expect_rows_fit(src, rows.size, "scatter_add_rows source");
  DeviceGuard guard(gpu_);
  launch_scatter_add_rows(src.data, src.ld, nullptr, dst.data, dst.ld, rows.data, rows.size,
                          dst.cols, cur());
}

void CudaDevice::copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, RowCopy mode) {
  const bool add = mode == RowCopy::kAdd;
  OpScope op(*this, add ? "copy_rows (add)" : "copy_rows");
  SLUICE_EXPECTS(src_rows.size == dst_rows.size && src.cols == dst.cols,
                 "copy_rows: ", src_rows.size, " source rows of width ", src.cols, " into ",
                 dst_rows.size, " rows of width ", dst.cols);
  if (src_rows.size == 0 || dst.cols == 0) return;
  DeviceGuard guard(gpu_);
  if (add) {
    // Unique destination rows: each element gets one addition, so the atomics are deterministic.
    launch_scatter_add_rows(src.data, src.ld, src_rows.data, dst.data, dst.ld, dst_rows.data,
                            src_rows.size, dst.cols, cur());
  } else {
    launch_gather_rows(src.data, src.ld, src_rows.data, dst.data, dst.ld, dst_rows.data,
                       src_rows.size, dst.cols, cur());
  }
}

void CudaDevice::copy_dropout_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, Idx keys,
                                   const DropoutKey& key) {
  OpScope op(*this, "copy_dropout_rows");
  SLUICE_EXPECTS(
      src_rows.size == dst_rows.size && keys.size == dst_rows.size && src.cols == dst.cols,
      "copy_dropout_rows: ", src_rows.size, " source rows of width ", src.cols, " and ", keys.size,
      " keys into ", dst_rows.size, " rows of width ", dst.cols);
  DeviceGuard guard(gpu_);
  move_rows_with_dropout(src, src_rows.data, dst_rows.data, dst_rows.size, dst, keys, key, cur());
}

void CudaDevice::zero_rows(Mat m, Idx rows) {
  OpScope op(*this, "zero_rows");
  DeviceGuard guard(gpu_);
  launch_zero_rows(m.data, m.ld, rows.data, rows.size, m.cols, cur());
}

void CudaDevice::round_to_host_precision(Mat m, HostPrecision precision) {
  OpScope op(*this, "round_to_host_precision");
  if (precision == HostPrecision::kFp32 || m.empty()) return;
  DeviceGuard guard(gpu_);
  launch_round_rows(m.data, m.ld, nullptr, m.rows, m.cols, cur());
}

void CudaDevice::round_rows_to_host_precision(Mat m, Idx rows, HostPrecision precision) {
  OpScope op(*this, "round_rows_to_host_precision");
  if (precision == HostPrecision::kFp32 || rows.size == 0 || m.cols == 0) return;
  DeviceGuard guard(gpu_);
  launch_round_rows(m.data, m.ld, rows.data, rows.size, m.cols, cur());
}

void CudaDevice::fill(Mat m, float value) {
  OpScope op(*this, "fill");
  finish_setup();
  if (m.empty()) return;
  DeviceGuard guard(gpu_);
  if (value == 0.f && m.ld == m.cols) {
    SLUICE_CUDA(
        cudaMemsetAsync(m.data, 0, static_cast<std::size_t>(m.rows * m.cols * kFloat), cur()));
  } else {
    launch_fill(m.data, m.rows, m.cols, m.ld, value, cur());
  }
}

void CudaDevice::copy(Mat src, Mat dst) {
  OpScope op(*this, "copy");
  SLUICE_EXPECTS(src.rows == dst.rows && src.cols == dst.cols, "copy: ", src.rows, " x ", src.cols,
                 " into ", dst.rows, " x ", dst.cols);
  if (src.empty() || src.data == dst.data) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpy2DAsync(dst.data, dst.ld * kFloat, src.data, src.ld * kFloat,
                                src.cols * kFloat, src.rows, cudaMemcpyDefault, cur()));
}

}  // namespace sluice::cuda
