// CudaDevice: the operators of kernels/ops.hpp on one logical device (see cuda_backend.hpp).
// Every operation makes the device's GPU current (devices may be driven from several host
// threads) and enqueues on the stream of its current lane (compute, transfer or store).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/log.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/loss.hpp"

namespace sluice::cuda {
namespace {

constexpr std::int64_t kFloat = sizeof(float);

std::int64_t row_bytes(const Mat& m) {
  return m.cols * kFloat;
}

// The shape checks of flush_add_rows and flush_store_rows.
void expect_flush_shapes(const char* operation, const Mat& src, const Idx& src_rows,
                         const Idx& host_rows, const HostMat& host) {
  SLUICE_EXPECTS(host_rows.size == src_rows.size, operation, ": ", src_rows.size,
                 " device rows but ", host_rows.size, " host rows");
  SLUICE_EXPECTS(src.cols == host.cols, operation, ": width ", src.cols, " vs ", host.cols);
}

void expect_rows_fit(const Mat& m, std::int64_t needed_rows, const char* what) {
  SLUICE_EXPECTS(m.rows >= needed_rows, what, " has ", m.rows, " rows, ", needed_rows, " needed");
}

ActivationCode code(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return ActivationCode::kRelu;
    case Activation::kElu:
      return ActivationCode::kElu;
    default:
      return ActivationCode::kNone;
  }
}

// Host-side work queued on a stream (cudaLaunchHostFunc): the payload owns itself.
struct FlushTask {
  const float* values;   // n x cols, pinned staging
  const vertex_t* rows;  // n host row indices, pinned staging
  std::int64_t n, cols;
  float* host;
  std::int64_t host_ld;
  int threads;  // CPU threads of this task (the host's share of one GPU)
  static void CUDART_CB run(void* arg) {
    std::unique_ptr<FlushTask> task(static_cast<FlushTask*>(arg));
    const std::int64_t n = task->n, cols = task->cols;
#pragma omp parallel for schedule(static) num_threads(task->threads) if (n * cols > 65536)
    for (std::int64_t i = 0; i < n; ++i) {
      float* out = task->host + static_cast<std::int64_t>(task->rows[i]) * task->host_ld;
      const float* in = task->values + i * cols;
      for (std::int64_t j = 0; j < cols; ++j) out[j] += in[j];
    }
  }
};

struct LossTask {
  const double* loss;               // pinned
  double* loss_sum;                 // caller's
  const std::int32_t* predictions;  // pinned
  std::int32_t* caller_predictions;
  std::int64_t rows;
  static void CUDART_CB run(void* arg) {
    std::unique_ptr<LossTask> task(static_cast<LossTask*>(arg));
    if (task->loss_sum) *task->loss_sum += *task->loss;
    if (task->caller_predictions && task->rows > 0)
      std::memcpy(task->caller_predictions, task->predictions,
                  static_cast<std::size_t>(task->rows) * sizeof(std::int32_t));
  }
};

}  // namespace

CudaDevice::CudaDevice(int index, int gpu, BackendShared& shared)
    : index_(index),
      gpu_(gpu),
      name_(cat("cuda:", index, " (GPU ", gpu, ")")),
      shared_(shared),
      account_(name_, gpu, shared.options.memory_budget),
      constants_(account_, shared.host_constants) {
  DeviceGuard guard(gpu_);
  int lowest = 0, highest = 0;
  SLUICE_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  lanes_[static_cast<int>(Lane::kCompute)] = Stream(gpu_, highest);
  lanes_[static_cast<int>(Lane::kTransfer)] = Stream(gpu_, lowest);
  lanes_[static_cast<int>(Lane::kStore)] = Stream(gpu_, lowest);
  event_ = Event(gpu_);
  for (auto& marker : markers_) marker = Event(gpu_);
  time_origin_ = Event(gpu_, true);
  cublas_ = CublasHandle(gpu_, cur());
  cusparse_ = CusparseHandle(gpu_, cur());
  SLUICE_CUBLAS(cublasSetMathMode(
      cublas_.get(), shared.options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  int sms = 0;
  SLUICE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu_));
  host_link_blocks_ = static_cast<unsigned>(std::max(0, sms * shared.host_link_blocks_per_sm));
}

CudaDevice::~CudaDevice() {
  // Queued host functions reference pinned staging: let them finish before anything is freed.
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess) {
    SLUICE_CUDA_NOTHROW(cudaSetDevice(gpu_));
    for (const auto& lane : lanes_) SLUICE_CUDA_NOTHROW(cudaStreamSynchronize(lane.get()));
    SLUICE_CUDA_NOTHROW(cudaSetDevice(previous));
  }
  if (op_totals_.empty()) return;
  std::vector<std::pair<OpTotal, std::pair<int, std::string>>> rows;
  for (const auto& [key, total] : op_totals_) rows.emplace_back(total, key);
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first.ms > b.first.ms; });
  static const char* const kLaneNames[] = {"compute", "transfer", "store"};
  for (const auto& [total, key] : rows) {
    char line[160];
    std::snprintf(line, sizeof line, "%-8s %-28s %10.2f ms in %6lld calls (%.3f ms each)",
                  kLaneNames[key.first], key.second.c_str(), total.ms,
                  static_cast<long long>(total.calls), total.ms / double(total.calls));
    log_info("op times ", name_, ": ", line);
  }
}

// ---- memory ----

Mat CudaDevice::alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad matrix shape ", rows, " x ", cols, " for ", what);
  AccountedBuffer buffer = account_.allocate(rows * cols * kFloat, what);
  Mat m{buffer.as<float>(), rows, cols, cols};
  if (buffer.get()) allocations_.push_back(std::move(buffer));
  return m;
}

Mat CudaDevice::try_alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad matrix shape ", rows, " x ", cols, " for ", what);
  if (!constants_.leaves_headroom(rows * cols * kFloat)) return Mat{};
  try {
    return alloc(rows, cols, what);
  } catch (const OutOfDeviceMemory&) {
    return Mat{};
  }
}

Idx CudaDevice::upload(const std::vector<vertex_t>& values, const std::string& what) {
  DeviceGuard guard(gpu_);
  ConstantBuffer buffer = constants_.place(values, what, cur());
  Idx idx{buffer.as<vertex_t>(), static_cast<std::int64_t>(values.size())};
  if (buffer.get()) constant_buffers_.push_back(std::move(buffer));
  return idx;
}

Mat CudaDevice::upload_constant(const std::vector<float>& values, std::int64_t rows,
                                std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0 && static_cast<std::int64_t>(values.size()) == rows * cols,
                 "upload_constant: ", values.size(), " values for a ", rows, " x ", cols,
                 " matrix (", what, ")");
  DeviceGuard guard(gpu_);
  ConstantBuffer buffer = constants_.place(values, what, cur());
  Mat m{buffer.as<float>(), rows, cols, cols};
  if (buffer.on_host()) host_values_bytes_[m.data] = buffer.bytes();
  if (buffer.get()) constant_buffers_.push_back(std::move(buffer));
  return m;
}

Csr CudaDevice::upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                           std::int64_t num_cols, const std::string& what) {
  DeviceGuard guard(gpu_);
  const bool transpose = shared_.transpose_mode != TransposeMode::kOperation;
  // Values of the transpose: working scratch sized here, at setup, to the largest matrix, and
  // before the structure so that the scratch has the budget first (constants may spill).
  if (shared_.transpose_mode != TransposeMode::kOperation &&
      shared_.transpose_mode != TransposeMode::kWarp && !indptr.empty() && indptr.back() > 0 &&
      indptr.back() == static_cast<edge_t>(columns.size()))
    transposed_values_.ensure_as<float>(indptr.back(), account_, cur(), "transposed SpMM values");
  auto matrix = std::make_unique<DeviceCsr>(
      upload_device_csr(indptr, columns, num_cols, transpose, constants_, cur(), what,
                        shared_.long_degree_for(indptr.empty() ? 0 : std::int64_t(indptr.back()))));
  Csr handle{static_cast<int>(csrs_.size()), matrix->rows, matrix->cols, matrix->nnz};
  csrs_.push_back(std::move(matrix));
  return handle;
}

const DeviceCsr& CudaDevice::csr(Csr a) const {
  SLUICE_EXPECTS(a.id >= 0 && a.id < static_cast<int>(csrs_.size()), "CSR id ", a.id,
                 " was not uploaded to ", name_);
  const DeviceCsr& m = *csrs_[a.id];
  SLUICE_EXPECTS(m.rows == a.rows && m.cols == a.cols && m.nnz == a.nnz, "CSR ", a.id,
                 " shape does not match its handle");
  return m;
}

const DeviceCsr& CudaDevice::resident_csr(Csr a, const float** values) {
  const DeviceCsr& m = csr(a);
  const auto host_values =
      values && *values ? host_values_bytes_.find(*values) : host_values_bytes_.end();
  const bool stage_values = host_values != host_values_bytes_.end();
  ConstantBuffer DeviceCsr::*const arrays[] = {
      &DeviceCsr::indptr,    &DeviceCsr::columns, &DeviceCsr::self,      &DeviceCsr::t_indptr,
      &DeviceCsr::t_columns, &DeviceCsr::t_perm,  &DeviceCsr::long_rows, &DeviceCsr::t_long_rows};
  std::int64_t bytes = stage_values ? rounded(host_values->second) : 0;
  for (const auto array : arrays)
    if ((m.*array).on_host()) bytes += rounded((m.*array).bytes());
  if (bytes == 0 || !shared_.stage_constants) return m;
  expect_compute_lane("resident_csr");
  if (staged_csr_ == a.id && staged_values_source_ == (stage_values ? *values : nullptr)) {
    if (stage_values) *values = staged_values_;
    return *staged_view_;
  }
  // Growing waits for the stream (earlier kernels may still read the old copy).
  char* base = csr_staging_.ensure_as<char>(bytes, account_, cur(), "staged host CSR");
  auto view = std::make_unique<DeviceCsr>();
  view->rows = m.rows;
  view->cols = m.cols;
  view->nnz = m.nnz;
  view->wide = m.wide;
  view->has_transpose = m.has_transpose;
  view->long_degree = m.long_degree;
  view->num_long = m.num_long;
  view->num_t_long = m.num_t_long;
  std::int64_t offset = 0;
  const auto copy = [&](const void* source, std::int64_t size) {
    void* target = base + offset;
    SLUICE_CUDA(
        cudaMemcpyAsync(target, source, static_cast<std::size_t>(size), cudaMemcpyDefault, cur()));
    offset += rounded(size);
    counters_.h2d_block_bytes += size;
    return target;
  };
  for (const auto array : arrays) {
    const ConstantBuffer& from = m.*array;
    (*view).*array = from.on_host()
                         ? ConstantBuffer::view(copy(from.get(), from.bytes()), from.bytes())
                         : ConstantBuffer::view(from.get(), from.bytes());
  }
  staged_values_ =
      stage_values ? static_cast<const float*>(copy(*values, host_values->second)) : nullptr;
  staged_values_source_ = stage_values ? *values : nullptr;
  staged_csr_ = a.id;
  staged_view_ = std::move(view);
  if (stage_values) *values = staged_values_;
  return *staged_view_;
}

void CudaDevice::log_host_constants() {
  host_constants_reported_ = true;
  const std::string mib = cat(std::llround(double(constants_.host_bytes()) / double(1 << 20)));
  const char* how = shared_.stage_constants
                        ? " (sparse matrices copied to the device before use, index lists read "
                          "zero-copy)"
                        : " (read zero-copy)";
  if (constants_.force_host()) {
    log_info("device ", index_, ": SLUICE_HOST_CONSTANTS=1; ", mib,
             " MiB of chunk structures kept in pinned host memory", how);
  } else {
    log_info("device ", index_, ": chunk structures exceed the GPU memory budget; ", mib,
             " MiB kept in pinned host memory", how);
  }
}

// write/read/copy use cudaMemcpyDefault (UVA): a constant may live in mapped host memory.
void CudaDevice::write(const float* host, std::int64_t count, float* device) {
  if (count <= 0) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpyAsync(device, host, static_cast<std::size_t>(count * kFloat),
                              cudaMemcpyDefault, cur()));
  SLUICE_CUDA(cudaStreamSynchronize(cur()));
}

void CudaDevice::read(const float* device, std::int64_t count, float* host) {
  if (count <= 0) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpyAsync(host, device, static_cast<std::size_t>(count * kFloat),
                              cudaMemcpyDefault, cur()));
  SLUICE_CUDA(cudaStreamSynchronize(cur()));
}

// ---- transfers ----

const float* CudaDevice::host_device_pointer(const HostMat& m, std::int64_t first_row,
                                             std::int64_t rows) const {
  if (rows <= 0 || m.cols <= 0) return m.data;
  const float* begin = m.data + first_row * m.ld;
  const std::int64_t bytes = ((rows - 1) * m.ld + m.cols) * kFloat;
  return static_cast<const float*>(shared_.host_memory.device_pointer(begin, bytes));
}

void CudaDevice::load_rows(HostMat src, Idx src_rows, Idx dst_rows, Mat dst) {
  OpScope op(*this, "load_rows");
  report_host_constants();
  const std::int64_t n = src_rows.size;
  SLUICE_EXPECTS(dst_rows.size == n || dst_rows.size == 0, "load_rows: ", n, " source rows but ",
                 dst_rows.size, " destination rows");
  SLUICE_EXPECTS(src.cols == dst.cols, "load_rows: width ", src.cols, " vs ", dst.cols);
  if (dst_rows.size == 0) expect_rows_fit(dst, n, "load_rows destination");
  if (n == 0 || dst.cols == 0) return;
  DeviceGuard guard(gpu_);
  const float* source = host_device_pointer(src, 0, src.rows);
  launch_gather_rows(source, src.ld, src_rows.data, dst.data, dst.ld,
                     dst_rows.size ? dst_rows.data : nullptr, n, dst.cols, cur(),
                     host_link_blocks_);
  counters_.h2d_gather_rows += n;
  counters_.h2d_gather_bytes += n * row_bytes(dst);
}

void CudaDevice::load_block(HostMat src, std::int64_t src_row, Mat dst) {
  OpScope op(*this, "load_block");
  report_host_constants();
  SLUICE_EXPECTS(src.cols == dst.cols && src_row >= 0 && src_row + dst.rows <= src.rows,
                 "load_block: rows [", src_row, ", +", dst.rows, ") of a ", src.rows, " x ",
                 src.cols, " host matrix into ", dst.rows, " x ", dst.cols);
  if (dst.empty()) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpy2DAsync(dst.data, dst.ld * kFloat, src.data + src_row * src.ld,
                                src.ld * kFloat, dst.cols * kFloat, dst.rows,
                                cudaMemcpyHostToDevice, cur()));
  counters_.h2d_block_bytes += dst.rows * row_bytes(dst);
}

void CudaDevice::store_block(Mat src, HostMat dst, std::int64_t dst_row) {
  OpScope op(*this, "store_block");
  SLUICE_EXPECTS(src.cols == dst.cols && dst_row >= 0 && dst_row + src.rows <= dst.rows,
                 "store_block: ", src.rows, " x ", src.cols, " into rows [", dst_row, ", +",
                 src.rows, ") of a ", dst.rows, " x ", dst.cols, " host matrix");
  if (src.empty()) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpy2DAsync(dst.data + dst_row * dst.ld, dst.ld * kFloat, src.data,
                                src.ld * kFloat, src.cols * kFloat, src.rows,
                                cudaMemcpyDeviceToHost, cur()));
  counters_.d2h_bytes += src.rows * row_bytes(src);
}

CudaDevice::PeerStaging& CudaDevice::peer_staging(int gpu, std::int64_t value_bytes,
                                                  std::int64_t row_bytes_needed) {
  PeerStaging& staging = peer_staging_[gpu];
  if (!staging.done.get()) staging.done = Event(gpu);
  if (static_cast<std::int64_t>(staging.values.bytes()) < value_bytes ||
      static_cast<std::int64_t>(staging.rows.bytes()) < row_bytes_needed) {
    SLUICE_CUDA(cudaStreamSynchronize(cur()));
    SLUICE_CUDA(cudaEventSynchronize(staging.done.get()));
    staging.values = DeviceBuffer();
    staging.rows = DeviceBuffer();
    staging.values = DeviceBuffer(static_cast<std::size_t>(value_bytes), gpu);
    staging.rows = DeviceBuffer(static_cast<std::size_t>(row_bytes_needed), gpu);
  }
  return staging;
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

void CudaDevice::push_add_rows(Mat src, Idx src_rows, Device& owner, Mat owner_buf,
                               Idx owner_rows) {
  OpScope op(*this, "push_add_rows");
  auto& target = dynamic_cast<CudaDevice&>(owner);
  const std::int64_t n = src_rows.size;
  SLUICE_EXPECTS(owner_rows.size == n, "push_add_rows: ", n, " source rows but ", owner_rows.size,
                 " owner rows");
  SLUICE_EXPECTS(owner_buf.cols == src.cols, "push_add_rows: width ", src.cols, " vs ",
                 owner_buf.cols);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  const std::int64_t cols = src.cols;
  const bool same_gpu = target.gpu_ == gpu_;
  const bool direct =
      same_gpu ? shared_.direct_peer[gpu_][gpu_] : shared_.peer_atomics[gpu_][target.gpu_];
  if (direct) {
    launch_scatter_add_rows(src.data, src.ld, src_rows.data, owner_buf.data, owner_buf.ld,
                            owner_rows.data, n, cols, /*system_scope=*/!same_gpu, cur());
  } else {
    // Compact here, copy values and row indices to the owner's GPU, add there on the owner's
    // stream; the two streams are ordered by events both ways.
    float* compact = staging_.ensure_as<float>(n * cols, account_, cur(), "push staging");
    launch_gather_rows(src.data, src.ld, src_rows.data, compact, cols, nullptr, n, cols, cur());
    PeerStaging& remote = peer_staging(target.gpu_, n * cols * kFloat, n * kFloat);
    SLUICE_CUDA(cudaMemcpyPeerAsync(remote.values.get(), target.gpu_, compact, gpu_,
                                    static_cast<std::size_t>(n * cols * kFloat), cur()));
    // owner_rows may be a constant in mapped host memory: a UVA copy, not a peer copy.
    SLUICE_CUDA(cudaMemcpyAsync(remote.rows.get(), owner_rows.data,
                                static_cast<std::size_t>(n * sizeof(vertex_t)), cudaMemcpyDefault,
                                cur()));
    SLUICE_CUDA(cudaEventRecord(event_.get(), cur()));
    {
      DeviceGuard owner_guard(target.gpu_);
      SLUICE_CUDA(cudaStreamWaitEvent(target.stream(), event_.get(), 0));
      launch_scatter_add_rows(remote.values.as<float>(), cols, nullptr, owner_buf.data,
                              owner_buf.ld, remote.rows.as<vertex_t>(), n, cols,
                              /*system_scope=*/!same_gpu, target.stream());
      SLUICE_CUDA(cudaEventRecord(remote.done.get(), target.stream()));
    }
    SLUICE_CUDA(cudaStreamWaitEvent(cur(), remote.done.get(), 0));
  }
  counters_.p2p_rows += n;
  counters_.p2p_bytes += n * row_bytes(src);
}

void CudaDevice::flush_add_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  OpScope op(*this, "flush_add_rows");
  const std::int64_t n = src_rows.size;
  expect_flush_shapes("flush_add_rows", src, src_rows, host_rows, host);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  const std::int64_t cols = src.cols;
  // The leaving rows are compacted straight into pinned host staging (zero-copy writes over the
  // link): no device staging buffer, so a flush never needs device memory beyond the budget.
  auto* values = static_cast<float*>(host_values_.ensure(n * cols * kFloat, cur()));
  launch_gather_rows(src.data, src.ld, src_rows.data,
                     static_cast<float*>(host_values_.device_pointer()), cols, nullptr, n, cols,
                     cur());
  // host_rows may be a constant kept in pinned host memory: the host function reads it there
  // (a host-to-host cudaMemcpyAsync need not be stream-ordered against the previous flush's
  // host function, which still reads the staging buffer).
  cudaPointerAttributes attributes{};
  SLUICE_CUDA(cudaPointerGetAttributes(&attributes, host_rows.data));
  const vertex_t* rows = nullptr;
  if (attributes.type == cudaMemoryTypeHost && attributes.hostPointer != nullptr) {
    rows = static_cast<const vertex_t*>(attributes.hostPointer);
  } else {
    auto* staged = static_cast<vertex_t*>(host_rows_.ensure(n * kFloat, cur()));
    SLUICE_CUDA(cudaMemcpyAsync(staged, host_rows.data,
                                static_cast<std::size_t>(n * sizeof(vertex_t)),
                                cudaMemcpyDeviceToHost, cur()));
    rows = staged;
  }
  // Each GPU's flushes run in their own host-function thread: share the cores between them.
  const int threads = std::max(1, omp_get_max_threads() / std::max(1, shared_.used_gpus));
  auto task =
      std::make_unique<FlushTask>(FlushTask{values, rows, n, cols, host.data, host.ld, threads});
  SLUICE_CUDA(cudaLaunchHostFunc(cur(), &FlushTask::run, task.get()));
  task.release();  // owned by the queued host function now
  counters_.d2h_bytes += n * cols * kFloat;
}

void CudaDevice::flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  OpScope op(*this, "flush_store_rows");
  const std::int64_t n = src_rows.size;
  expect_flush_shapes("flush_store_rows", src, src_rows, host_rows, host);
  if (n == 0 || src.cols == 0) return;
  DeviceGuard guard(gpu_);
  // A gather whose destination is mapped host memory: the GPU writes the rows over the link
  // (posted writes, no round trip); host_rows is read wherever the constant lives.
  float* target = const_cast<float*>(host_device_pointer(host, 0, host.rows));
  launch_gather_rows(src.data, src.ld, src_rows.data, target, host.ld, host_rows.data, n, src.cols,
                     cur(), host_link_blocks_);
  counters_.d2h_bytes += n * src.cols * kFloat;
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

void CudaDevice::gather_rows(Mat src, Idx rows, Mat dst) {
  OpScope op(*this, "gather_rows");
  report_host_constants();
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
                          dst.cols, false, cur());
}

void CudaDevice::copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, bool add) {
  OpScope op(*this, add ? "copy_rows (add)" : "copy_rows");
  SLUICE_EXPECTS(src_rows.size == dst_rows.size && src.cols == dst.cols,
                 "copy_rows: ", src_rows.size, " source rows of width ", src.cols, " into ",
                 dst_rows.size, " rows of width ", dst.cols);
  if (src_rows.size == 0 || dst.cols == 0) return;
  DeviceGuard guard(gpu_);
  if (add) {
    // Unique destination rows: each element gets one addition, so the atomics are deterministic.
    launch_scatter_add_rows(src.data, src.ld, src_rows.data, dst.data, dst.ld, dst_rows.data,
                            src_rows.size, dst.cols, false, cur());
  } else {
    launch_gather_rows(src.data, src.ld, src_rows.data, dst.data, dst.ld, dst_rows.data,
                       src_rows.size, dst.cols, cur());
  }
}

void CudaDevice::zero_rows(Mat m, Idx rows) {
  OpScope op(*this, "zero_rows");
  DeviceGuard guard(gpu_);
  launch_zero_rows(m.data, m.ld, rows.data, rows.size, m.cols, cur());
}

void CudaDevice::fill(Mat m, float value) {
  OpScope op(*this, "fill");
  report_host_constants();
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

// ---- dense / sparse compute ----

void CudaDevice::dropout_rows(Mat m, Idx rows, Idx keys, const DropoutKey& key) {
  OpScope op(*this, "dropout_rows");
  if (key.rate <= 0.f) return;
  SLUICE_EXPECTS(keys.size == rows.size, "dropout_rows: ", rows.size, " rows but ", keys.size,
                 " keys");
  SLUICE_EXPECTS(key.rate < 1.f, "dropout rate must be below 1, got ", key.rate);
  DeviceGuard guard(gpu_);
  launch_dropout_rows(m.data, m.ld, m.cols, rows.data, keys.data, rows.size, key.seed,
                      static_cast<std::uint64_t>(key.epoch * 1024 + key.layer), key.rate, cur());
}

void CudaDevice::spmm_impl(Csr a, const float* values, Mat x, Mat y, bool transpose) {
  expect_compute_lane("spmm");
  report_host_constants();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, &values);
  if (!transpose || shared_.transpose_mode == TransposeMode::kOperation) {
    run_spmm(cusparse_.get(), m, values, DenseView{x.data, x.rows, x.cols, x.ld},
             DenseView{y.data, y.rows, y.cols, y.ld}, transpose, false, shared_.spmm_algorithm, 1.f,
             nullptr, spmm_workspace_, account_, cur());
    return;
  }
  SLUICE_EXPECTS(x.rows == m.rows && y.rows == m.cols && x.cols == y.cols, "SpMM shapes: A is ",
                 m.rows, " x ", m.cols, " (transposed), x is ", x.rows, " x ", x.cols, ", y is ",
                 y.rows, " x ", y.cols);
  if (m.nnz == 0 || y.cols == 0) return;
  if (shared_.transpose_mode == TransposeMode::kPrecomputed) {
    transpose_add(m, kTransposeCsr, 1.f, values, x, y, nullptr, nullptr);
    return;
  }
  if (shared_.transpose_mode == TransposeMode::kWarp) {
    transpose_add(m, kTransposeWarp, 1.f, values, x, y, nullptr, nullptr);
    return;
  }
  // Measured: the first call for a (matrix, width) runs every method on the real operands,
  // timed, with signs that add up to one transpose-add (+csr, +warp, -csr ALG3: the last
  // removes its own result again, up to rounding); the second call picks the fastest, keeping
  // the default unless another takes under 0.8 of its time.
  TransposeChoice& choice = transpose_choices_[{a.id, x.cols}];
  // CSR_ALG3 reads the dense rows with vector loads: only 16-byte aligned rows qualify (a
  // misaligned address is a sticky CUDA error).
  const auto aligned_rows = [](Mat v) {
    return v.ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(v.data) % 16 == 0;
  };
  const bool aligned = aligned_rows(x) && aligned_rows(y);
  if (choice.method < 0 && choice.timed) {
    SLUICE_CUDA(cudaEventSynchronize(choice.events[5].get()));
    float ms[kTransposeMethods] = {};
    for (int k = 0; k < kTransposeMethods; ++k)
      SLUICE_CUDA(
          cudaEventElapsedTime(&ms[k], choice.events[2 * k].get(), choice.events[2 * k + 1].get()));
    choice.method = kTransposeCsr;
    for (int k = 1; k < kTransposeMethods; ++k)
      if (ms[k] < 0.8f * ms[choice.method]) choice.method = k;
    static const char* const names[] = {"csr", "warp", "csr ALG3"};
    log_debug(name_, ": transposed SpMM of matrix ", a.id, " (", m.rows, " x ", m.cols, ", ", m.nnz,
              " entries) at width ", x.cols, ": csr ", ms[0], " ms, warp ", ms[1], " ms, csr ALG3 ",
              ms[2], " ms -> ", names[choice.method]);
  }
  if (choice.method >= 0) {
    const int method =
        choice.method == kTransposeCsrAlg3 && !aligned ? int(kTransposeCsr) : choice.method;
    transpose_add(m, method, 1.f, values, x, y, nullptr, nullptr);
    return;
  }
  if (!aligned) {
    choice.method = kTransposeCsr;
    transpose_add(m, kTransposeCsr, 1.f, values, x, y, nullptr, nullptr);
    return;
  }
  for (auto& event : choice.events) event = Event(gpu_, true);
  transpose_add(m, kTransposeCsr, 1.f, values, x, y, choice.events[0].get(),
                choice.events[1].get());
  transpose_add(m, kTransposeWarp, 1.f, values, x, y, choice.events[2].get(),
                choice.events[3].get());
  transpose_add(m, kTransposeCsrAlg3, -1.f, values, x, y, choice.events[4].get(),
                choice.events[5].get());
  choice.timed = true;
}

void CudaDevice::transposed_aggregate(const DeviceCsr& m, const float* weights, int heads,
                                      std::int64_t width, Mat dout, Mat dz) {
  if (m.wide)
    launch_gat_transpose_aggregate(m.t_indptr.as<std::int64_t>(), m.t_columns.as<std::int64_t>(),
                                   m.t_perm.as<std::int64_t>(), m.cols, m.transposed_long_rows(),
                                   weights, heads, width, dout.data, dout.ld, dz.data, dz.ld,
                                   cur());
  else
    launch_gat_transpose_aggregate(m.t_indptr.as<std::int32_t>(), m.t_columns.as<std::int32_t>(),
                                   m.t_perm.as<std::int32_t>(), m.cols, m.transposed_long_rows(),
                                   weights, heads, width, dout.data, dout.ld, dz.data, dz.ld,
                                   cur());
}

void CudaDevice::transpose_add(const DeviceCsr& m, int method, float alpha, const float* values,
                               Mat x, Mat y, cudaEvent_t begin, cudaEvent_t end) {
  if (method == kTransposeWarp) {
    SLUICE_EXPECTS(alpha == 1.f, "the warp transposed SpMM only adds");
    if (begin) SLUICE_CUDA(cudaEventRecord(begin, cur()));
    transposed_aggregate(m, values, 1, x.cols, x, y);
    if (end) SLUICE_CUDA(cudaEventRecord(end, cur()));
    return;
  }
  float* transposed =
      transposed_values_.ensure_as<float>(m.nnz, account_, cur(), "transposed SpMM values");
  run_spmm(cusparse_.get(), m, values, DenseView{x.data, x.rows, x.cols, x.ld},
           DenseView{y.data, y.rows, y.cols, y.ld}, true, true,
           method == kTransposeCsrAlg3 ? 3 : shared_.spmm_algorithm, alpha, transposed,
           spmm_workspace_, account_, cur(), begin, end);
}

void CudaDevice::spmm(Csr a, const float* values, Mat x, Mat y) {
  OpScope op(*this, "spmm");
  spmm_impl(a, values, x, y, false);
}

void CudaDevice::spmm_transpose_add(Csr a, const float* values, Mat dy, Mat dx) {
  OpScope op(*this, "spmm_transpose_add");
  spmm_impl(a, values, dy, dx, true);
}

void CudaDevice::gemm(bool transpose_a, bool transpose_b, float alpha, Mat a, Mat b, float beta,
                      Mat c) {
  OpScope op(*this, transpose_a ? "gemm A^T B" : transpose_b ? "gemm A B^T" : "gemm A B");
  const std::int64_t m = transpose_a ? a.cols : a.rows;
  const std::int64_t k = transpose_a ? a.rows : a.cols;
  const std::int64_t kb = transpose_b ? b.cols : b.rows;
  const std::int64_t n = transpose_b ? b.rows : b.cols;
  SLUICE_EXPECTS(k == kb && c.rows == m && c.cols == n, "gemm shapes: op(a) ", m, " x ", k,
                 ", op(b) ", kb, " x ", n, ", c ", c.rows, " x ", c.cols);
  if (m == 0 || n == 0) return;
  expect_compute_lane("gemm");
  DeviceGuard guard(gpu_);
  if (k == 0) {  // c = beta * c (geam in place: C = beta * C + 0 * C)
    if (beta == 0.f) {
      launch_fill(c.data, c.rows, c.cols, c.ld, 0.f, cur());
    } else if (beta != 1.f) {
      const float zero = 0.f;
      SLUICE_CUBLAS(cublasSgeam(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n),
                                static_cast<int>(m), &beta, c.data, static_cast<int>(c.ld), &zero,
                                c.data, static_cast<int>(c.ld), c.data, static_cast<int>(c.ld)));
    }
    return;
  }
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass B first.
  const auto as_int = [](std::int64_t v) {
    SLUICE_EXPECTS(v <= std::numeric_limits<int>::max(), "gemm dimension ", v, " exceeds int");
    return static_cast<int>(v);
  };
  SLUICE_CUBLAS(cublasSgemm(cublas_.get(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                            transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n), as_int(m),
                            as_int(k), &alpha, b.data, as_int(std::max<std::int64_t>(b.ld, 1)),
                            a.data, as_int(std::max<std::int64_t>(a.ld, 1)), &beta, c.data,
                            as_int(std::max<std::int64_t>(c.ld, 1))));
}

void CudaDevice::bias_activation(Mat z, const float* bias, Activation act, Mat out) {
  OpScope op(*this, "bias_activation");
  SLUICE_EXPECTS(z.rows == out.rows && z.cols == out.cols, "bias_activation shapes");
  DeviceGuard guard(gpu_);
  launch_bias_activation(z.data, z.ld, bias, code(act), out.data, out.ld, z.rows, z.cols, cur());
}

void CudaDevice::activation_backward(Mat dout, Mat value, Activation act, Mat dz) {
  OpScope op(*this, "activation_backward");
  SLUICE_EXPECTS(dout.rows == dz.rows && dout.cols == dz.cols, "activation_backward shapes");
  SLUICE_EXPECTS(act == Activation::kNone || (value.rows == dz.rows && value.cols == dz.cols),
                 "activation_backward: value shape");
  DeviceGuard guard(gpu_);
  launch_activation_backward(dout.data, dout.ld, value.data, value.ld, code(act), dz.data, dz.ld,
                             dz.rows, dz.cols, cur());
}

void CudaDevice::add_column_sums(Mat m, float* out) {
  OpScope op(*this, "add_column_sums");
  DeviceGuard guard(gpu_);
  launch_add_column_sums(m.data, m.ld, m.rows, m.cols, out, cur());
}

void CudaDevice::axpy(std::int64_t n, float alpha, const float* x, float* y) {
  DeviceGuard guard(gpu_);
  launch_axpy(n, alpha, x, y, cur());
}

// ---- loss ----

void CudaDevice::softmax_cross_entropy(Mat logits, Idx labels, Idx mask, float scale, Mat grad,
                                       double* loss_sum, std::int32_t* predictions) {
  OpScope op(*this, "softmax_cross_entropy");
  const std::int64_t rows = logits.rows;
  SLUICE_EXPECTS(labels.size == rows || labels.size == 0, "softmax_cross_entropy: ", rows,
                 " rows but ", labels.size, " labels");
  SLUICE_EXPECTS(mask.size == rows || mask.size == 0, "softmax_cross_entropy: ", rows, " rows but ",
                 mask.size, " mask entries");
  const bool has_grad = grad.data != nullptr && !grad.empty();
  if (has_grad)
    SLUICE_EXPECTS(grad.rows == rows && grad.cols == logits.cols,
                   "softmax_cross_entropy: grad "
                   "shape ",
                   grad.rows, " x ", grad.cols);
  DeviceGuard guard(gpu_);
  auto* loss = loss_accumulator_.ensure_as<double>(1, account_, cur(), "loss accumulator");
  std::int32_t* device_predictions =
      predictions ? predictions_.ensure_as<std::int32_t>(std::max<std::int64_t>(rows, 1), account_,
                                                         cur(), "predictions")
                  : nullptr;
  auto* host_loss = static_cast<double*>(host_loss_.ensure(sizeof(double), cur()));
  auto* host_predictions = static_cast<std::int32_t*>(host_predictions_.ensure(
      std::max<std::int64_t>(rows, 1) * static_cast<std::int64_t>(sizeof(std::int32_t)), cur()));
  SLUICE_CUDA(cudaMemsetAsync(loss, 0, sizeof(double), cur()));
  launch_softmax_cross_entropy(logits.data, logits.ld, rows, logits.cols,
                               labels.size ? labels.data : nullptr, mask.size ? mask.data : nullptr,
                               scale, has_grad ? grad.data : nullptr, grad.ld, loss,
                               device_predictions, cur());
  SLUICE_CUDA(cudaMemcpyAsync(host_loss, loss, sizeof(double), cudaMemcpyDeviceToHost, cur()));
  if (predictions && rows > 0)
    SLUICE_CUDA(cudaMemcpyAsync(host_predictions, device_predictions,
                                static_cast<std::size_t>(rows) * sizeof(std::int32_t),
                                cudaMemcpyDeviceToHost, cur()));
  auto task = std::make_unique<LossTask>(
      LossTask{host_loss, loss_sum, host_predictions, predictions, rows});
  SLUICE_CUDA(cudaLaunchHostFunc(cur(), &LossTask::run, task.get()));
  task.release();  // owned by the queued host function now
}

// ---- GAT ----

void CudaDevice::gat_source_scores(Mat z, Idx rows, const float* att_src, int heads, Mat el) {
  OpScope op(*this, "gat_source_scores");
  expect_compute_lane("gat_source_scores");
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0 && el.cols >= heads && el.rows >= z.rows,
                 "gat_source_scores: ", z.cols, " columns, ", heads, " heads, el ", el.rows, " x ",
                 el.cols, " for ", z.rows, " rows");
  if (rows.size == 0) return;
  DeviceGuard guard(gpu_);
  launch_gat_scores_of_rows(z.data, z.ld, rows.data, rows.size, heads, z.cols / heads, att_src,
                            el.data, el.ld, cur());
}

void CudaDevice::gat_forward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                             Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                             Mat alpha, Mat out, bool source_scores_ready) {
  OpScope op(*this, "gat_forward");
  expect_compute_lane("gat_forward");
  report_host_constants();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a);
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0, "gat_forward: ", z.cols,
                 " columns do not split into ", heads, " heads");
  const std::int64_t width = z.cols / heads;
  SLUICE_EXPECTS(z.rows == m.cols && el.rows == m.cols && el.cols >= heads && er.rows == m.rows &&
                     er.cols >= heads && alpha.rows == m.nnz && alpha.cols >= heads &&
                     out.rows == m.rows && out.cols == z.cols,
                 "gat_forward shapes (A ", m.rows, " x ", m.cols, ", nnz ", m.nnz, ")");
  const bool dropout = attention_key.rate > 0.f;
  if (dropout)
    SLUICE_EXPECTS(row_keys.size == m.rows, "gat_forward: ", m.rows, " rows but ", row_keys.size,
                   " row keys");
  {
    OpScope sub(*this, "gat_forward.scores");
    if (!source_scores_ready)
      launch_gat_scores(z.data, z.ld, nullptr, m.cols, heads, width, att_src, el.data, el.ld,
                        cur());
    launch_gat_scores(z.data, z.ld, m.self.as<vertex_t>(), m.rows, heads, width, att_dst, er.data,
                      er.ld, cur());
  }
  OpScope sub(*this, "gat_forward.aggregate");
  const AttentionDropout drop{
      attention_key.seed,
      static_cast<std::uint64_t>(attention_key.epoch * 1024 + attention_key.layer),
      attention_key.rate, dropout ? row_keys.data : nullptr};
  if (m.wide) {
    launch_gat_aggregate(m.arrays<std::int64_t>(), z.data, z.ld, el.data, el.ld, er.data, er.ld,
                         heads, width, drop, alpha.data, alpha.ld, out.data, out.ld, cur());
  } else {
    launch_gat_aggregate(m.arrays<std::int32_t>(), z.data, z.ld, el.data, el.ld, er.data, er.ld,
                         heads, width, drop, alpha.data, alpha.ld, out.data, out.ld, cur());
  }
}

void CudaDevice::gat_backward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                              Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                              Mat alpha, Mat dout, Mat dz, float* d_att_src, float* d_att_dst) {
  OpScope op(*this, "gat_backward");
  expect_compute_lane("gat_backward");
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a);
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0, "gat_backward: ", z.cols,
                 " columns do not split into ", heads, " heads");
  const std::int64_t width = z.cols / heads;
  SLUICE_EXPECTS(
      dout.rows == m.rows && dout.cols == z.cols && dz.rows == m.cols && dz.cols == z.cols,
      "gat_backward shapes");
  const bool dropout = attention_key.rate > 0.f;
  if (dropout)
    SLUICE_EXPECTS(row_keys.size == m.rows, "gat_backward: ", m.rows, " rows but ", row_keys.size,
                   " row keys");
  cudaStream_t s = cur();
  const std::int64_t k = heads;
  float* dalpha = gat_dalpha_.ensure_as<float>(m.nnz * k, account_, s, "GAT scratch");
  float* atilde = gat_atilde_.ensure_as<float>(m.nnz * k, account_, s, "GAT scratch");
  float* d_el = gat_del_.ensure_as<float>(m.cols * k, account_, s, "GAT scratch");
  float* d_er = gat_der_.ensure_as<float>(m.rows * k, account_, s, "GAT scratch");
  if (m.cols > 0)
    SLUICE_CUDA(cudaMemsetAsync(d_el, 0, static_cast<std::size_t>(m.cols * k * kFloat), s));
  const AttentionDropout drop{
      attention_key.seed,
      static_cast<std::uint64_t>(attention_key.epoch * 1024 + attention_key.layer),
      attention_key.rate, dropout ? row_keys.data : nullptr};
  // Fused: entry-major coefficients and one transposed aggregation over all heads (needs the
  // precomputed transpose); basic: head-major coefficients and one transposed SpMM per head.
  const bool fused = shared_.gat_fused && m.has_transpose;
  {
    OpScope sub(*this, "gat_backward.edges");
    if (m.wide) {
      launch_gat_backward_edges(m.arrays<std::int64_t>(), z.data, z.ld, el.data, el.ld, er.data,
                                er.ld, alpha.data, alpha.ld, dout.data, dout.ld, heads, width, drop,
                                dalpha, atilde, fused, fused, d_el, d_er, s);
    } else {
      launch_gat_backward_edges(m.arrays<std::int32_t>(), z.data, z.ld, el.data, el.ld, er.data,
                                er.ld, alpha.data, alpha.ld, dout.data, dout.ld, heads, width, drop,
                                dalpha, atilde, fused, fused, d_el, d_er, s);
    }
  }
  {
    OpScope sub(*this, "gat_backward.transposed");
    if (fused) {
      transposed_aggregate(m, atilde, heads, width, dout, dz);
    } else {
      // dZ_u^h += sum_v alpha~_vu^h dO_v^h: one transposed SpMM per head.
      for (int h = 0; h < heads; ++h)
        spmm_impl(a, atilde + h * m.nnz, dout.col_block(h * width, width),
                  dz.col_block(h * width, width), true);
    }
  }
  OpScope sub(*this, "gat_backward.scores");
  launch_gat_scores_backward(d_el, k, nullptr, m.cols, heads, width, z.data, z.ld, att_src, dz.data,
                             dz.ld, d_att_src, /*atomic_dz=*/false, s);
  launch_gat_scores_backward(d_er, k, m.self.as<vertex_t>(), m.rows, heads, width, z.data, z.ld,
                             att_dst, dz.data, dz.ld, d_att_dst, /*atomic_dz=*/true, s);
}

void CudaDevice::head_mean(Mat in, int heads, Mat out) {
  OpScope op(*this, "head_mean");
  SLUICE_EXPECTS(heads > 0 && in.cols == out.cols * heads && in.rows == out.rows,
                 "head_mean shapes: ", in.rows, " x ", in.cols, " -> ", out.rows, " x ", out.cols,
                 " with ", heads, " heads");
  DeviceGuard guard(gpu_);
  launch_head_mean(in.data, in.ld, in.rows, heads, out.cols, out.data, out.ld, cur());
}

void CudaDevice::head_mean_backward(Mat dout, int heads, Mat din) {
  OpScope op(*this, "head_mean_backward");
  SLUICE_EXPECTS(heads > 0 && din.cols == dout.cols * heads && din.rows == dout.rows,
                 "head_mean_backward shapes");
  DeviceGuard guard(gpu_);
  launch_head_mean_backward(dout.data, dout.ld, dout.rows, heads, dout.cols, din.data, din.ld,
                            cur());
}

// ---- optimizer ----

void CudaDevice::sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g) {
  DeviceGuard guard(gpu_);
  launch_sgd_step(n, lr, weight_decay, w, g, cur());
}

void CudaDevice::adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, std::int64_t step, float* w, float* g, float* m,
                           float* v) {
  SLUICE_EXPECTS(step >= 1, "Adam steps count from 1, got ", step);
  DeviceGuard guard(gpu_);
  const double t = static_cast<double>(step);
  const float bias_correction1 = static_cast<float>(1.0 - std::pow(double(beta1), t));
  const float bias_correction2 = static_cast<float>(1.0 - std::pow(double(beta2), t));
  launch_adam_step(n, lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, w, g,
                   m, v, cur());
}

void CudaDevice::synchronize() {
  report_host_constants();
  DeviceGuard guard(gpu_);
  for (const auto& lane : lanes_) SLUICE_CUDA(cudaStreamSynchronize(lane.get()));
}

void CudaDevice::synchronize_lane(Lane lane) {
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaStreamSynchronize(lanes_[static_cast<int>(lane)].get()));
}

// ---- lanes, markers, timers ----

void CudaDevice::mark(int marker) {
  SLUICE_EXPECTS(marker >= 0 && marker < kMarkers, "marker ", marker, " out of range");
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaEventRecord(markers_[marker].get(), cur()));
  marked_[marker] = true;
}

void CudaDevice::wait(int marker) {
  SLUICE_EXPECTS(marker >= 0 && marker < kMarkers, "marker ", marker, " out of range");
  if (!marked_[marker]) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaStreamWaitEvent(cur(), markers_[marker].get(), 0));
}

void CudaDevice::wait_peer(Device& other, int marker) {
  SLUICE_EXPECTS(marker >= 0 && marker < kMarkers, "marker ", marker, " out of range");
  auto* peer = dynamic_cast<CudaDevice*>(&other);
  SLUICE_EXPECTS(peer != nullptr, "wait_peer: ", other.name(), " is not a CUDA device");
  if (!peer->marked_[marker]) return;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaStreamWaitEvent(cur(), peer->markers_[marker].get(), 0));
}

void CudaDevice::phase_begin(Phase phase, std::int32_t tag) {
  const int k = static_cast<int>(phase);
  SLUICE_EXPECTS(open_timer_[k] < 0, "phase ", k, " timed twice at once on ", name_);
  DeviceGuard guard(gpu_);
  if (timers_used_ == timers_.size())
    timers_.push_back(TimedRange{Event(gpu_, true), Event(gpu_, true), k});
  TimedRange& range = timers_[timers_used_];
  range.phase = k;
  range.lane = lane_;
  range.tag = tag;
  SLUICE_CUDA(cudaEventRecord(range.begin.get(), cur()));
  open_timer_[k] = static_cast<int>(timers_used_++);
}

void CudaDevice::phase_end(Phase phase) {
  const int k = static_cast<int>(phase);
  SLUICE_EXPECTS(open_timer_[k] >= 0, "phase ", k, " ended but never begun on ", name_);
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaEventRecord(timers_[static_cast<std::size_t>(open_timer_[k])].end.get(), cur()));
  open_timer_[k] = -1;
}

void CudaDevice::set_time_origin() {
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaEventRecord(time_origin_.get(), lanes_[0].get()));
  has_time_origin_ = true;
}

void CudaDevice::take_phase_times(double seconds[kPhases], std::vector<PhaseRange>* timeline) {
  DeviceGuard guard(gpu_);
  for (std::size_t i = 0; i < timers_used_; ++i) {
    const TimedRange& range = timers_[i];
    float ms = 0.f;
    SLUICE_CUDA(cudaEventElapsedTime(&ms, range.begin.get(), range.end.get()));
    seconds[range.phase] += static_cast<double>(ms) * 1e-3;
    if (!timeline) continue;
    float begin_ms = 0.f;
    if (has_time_origin_)
      SLUICE_CUDA(cudaEventElapsedTime(&begin_ms, time_origin_.get(), range.begin.get()));
    timeline->push_back(PhaseRange{static_cast<Phase>(range.phase), static_cast<Lane>(range.lane),
                                   range.tag, double(begin_ms) * 1e-3,
                                   double(begin_ms + ms) * 1e-3});
  }
  timers_used_ = 0;
  collect_op_times();
}

int CudaDevice::op_begin(const char* name) {
  if (!shared_.op_times) return -1;
  DeviceGuard guard(gpu_);
  if (op_used_ == op_ranges_.size())
    op_ranges_.push_back(OpRange{Event(gpu_, true), Event(gpu_, true)});
  OpRange& range = op_ranges_[op_used_];
  range.name = name;
  range.lane = lane_;
  SLUICE_CUDA(cudaEventRecord(range.begin.get(), cur()));
  return static_cast<int>(op_used_++);
}

void CudaDevice::op_end(int index) {
  if (index < 0) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  SLUICE_CUDA_NOTHROW(cudaSetDevice(gpu_));
  SLUICE_CUDA_NOTHROW(
      cudaEventRecord(op_ranges_[static_cast<std::size_t>(index)].end.get(), cur()));
  SLUICE_CUDA_NOTHROW(cudaSetDevice(previous));
}

// Sums the recorded operation ranges (their work has finished: called after a drain). The
// first collection (the first pass sequence: lazy module loading, measured SpMM choices) is
// left out, as the benchmarks leave out the first epoch.
void CudaDevice::collect_op_times() {
  if (op_used_ == 0) return;
  if (op_collections_++ == 0) {
    op_used_ = 0;
    return;
  }
  DeviceGuard guard(gpu_);
  for (std::size_t i = 0; i < op_used_; ++i) {
    const OpRange& range = op_ranges_[i];
    float ms = 0.f;
    SLUICE_CUDA(cudaEventElapsedTime(&ms, range.begin.get(), range.end.get()));
    OpTotal& total = op_totals_[{range.lane, range.name}];
    total.ms += double(ms);
    ++total.calls;
  }
  op_used_ = 0;
}

}  // namespace sluice::cuda
