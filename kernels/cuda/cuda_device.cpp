// CudaDevice construction, memory (accounted buffers, read-only constants and their staging),
// lanes, markers, phase timers and operation timers (see cuda_backend.hpp). Every operation
// makes the device's GPU current (devices may be driven from several host threads) and
// enqueues on the stream of its current lane (compute, transfer or store).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "common/log.hpp"
#include "kernels/cuda/cuda_backend.hpp"

namespace sluice::cuda {
namespace {

// Grids of the zero-copy row transfers over the host link, whose warps mostly wait on the link:
// a grid of one block (8 warps) per 8 rows would fill the GPU and slow the compute lane's
// kernels. Writes (flush_store_rows, the host additions' staging, bf16 store_block) take a block
// on every SM. Reads (load_rows, bf16 load_block) take a block on every fourth SM: a read keeps
// its pace on a quarter of the SMs, while a kernel beside it slows on every SM that holds one of
// its blocks (kernels/cuda/NOTES.md, "Transfers").
constexpr int kHostWriteBlocksPerSm = 1;
constexpr int kSmsPerHostReadBlock = 4;

}  // namespace

CudaDevice::CudaDevice(int index, int gpu, BackendShared& shared)
    : index_(index),
      gpu_(gpu),
      name_(cat("cuda:", index, " (GPU ", gpu, ")")),
      shared_(shared),
      account_(name_, gpu, shared.options.memory_budget),
      constants_(account_) {
  DeviceGuard guard(gpu_);
  int lowest = 0, highest = 0;
  SLUICE_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  lanes_[static_cast<int>(Lane::kCompute)] = Stream(gpu_, highest);
  lanes_[static_cast<int>(Lane::kTransfer)] = Stream(gpu_, lowest);
  lanes_[static_cast<int>(Lane::kStore)] = Stream(gpu_, lowest);
  lanes_[static_cast<int>(Lane::kPeer)] = Stream(gpu_, highest);
  event_ = Event(gpu_);
  for (auto& marker : markers_) marker = Event(gpu_);
  for (auto& slot : staged_csr_) slot.ready = Event(gpu_);
  time_origin_ = Event(gpu_, EventTiming::kOn);
  cublas_ = CublasHandle(gpu_, cur());
  SLUICE_CUBLAS(cublasSetMathMode(
      cublas_.get(), shared.options.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  int sms = 0;
  SLUICE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, gpu_));
  host_write_blocks_ = static_cast<unsigned>(std::max(0, sms * kHostWriteBlocksPerSm));
  host_read_blocks_ = static_cast<unsigned>(std::max(1, sms / kSmsPerHostReadBlock));
}

CudaDevice::~CudaDevice() {
  // Queued host functions reference pinned staging: let them finish before anything is freed.
  int previous = 0;
  if (cudaGetDevice(&previous) == cudaSuccess) {
    SLUICE_CUDA_NOTHROW(cudaSetDevice(gpu_));
    for (const auto& lane : lanes_) SLUICE_CUDA_NOTHROW(cudaStreamSynchronize(lane.get()));
    SLUICE_CUDA_NOTHROW(cudaSetDevice(previous));
  }
  host_adds_.reset();  // waits for the additions into host matrices
  if (op_totals_.empty()) return;
  std::vector<std::pair<OpTotal, std::pair<int, std::string>>> rows;
  for (const auto& [key, total] : op_totals_) rows.emplace_back(total, key);
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first.ms > b.first.ms; });
  for (const auto& [total, key] : rows) {
    char line[160];
    std::snprintf(line, sizeof line, "%-8s %-28s %10.2f ms in %6lld calls (%.3f ms each)",
                  lane_name(static_cast<Lane>(key.first)), key.second.c_str(), total.ms,
                  static_cast<long long>(total.calls), total.ms / double(total.calls));
    log_info("op times ", name_, ": ", line);
  }
}

// ---- memory ----

Mat CudaDevice::alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad matrix shape ", rows, " x ", cols, " for ", what);
  return keep_matrix(account_.allocate(rows * cols * kFloat, what), rows, cols);
}

Mat CudaDevice::keep_matrix(AccountedBuffer buffer, std::int64_t rows, std::int64_t cols) {
  Mat m{buffer.as<float>(), rows, cols, cols};
  if (buffer.get()) allocations_.push_back(std::move(buffer));
  return m;
}

void CudaDevice::release(Mat m) {
  if (m.data == nullptr) return;
  const auto it =
      std::find_if(allocations_.begin(), allocations_.end(),
                   [&](const AccountedBuffer& b) { return b.get() == static_cast<void*>(m.data); });
  SLUICE_EXPECTS(it != allocations_.end(), "release: not a matrix of ", name_);
  allocations_.erase(it);
}

bool CudaDevice::try_allocate(std::int64_t bytes, const std::string& what, AccountedBuffer& out) {
  if (!constants_.leaves_headroom(bytes)) return false;
  try {
    out = account_.allocate(bytes, what);
  } catch (const OutOfDeviceMemory&) {
    return false;
  }
  return true;
}

Mat CudaDevice::try_alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad matrix shape ", rows, " x ", cols, " for ", what);
  AccountedBuffer buffer;
  if (!try_allocate(rows * cols * kFloat, what, buffer)) return Mat{};
  return keep_matrix(std::move(buffer), rows, cols);
}

HostMat CudaDevice::try_make_resident(HostMat m, const std::string& what) {
  if (m.residence == Residence::kDevice || m.empty()) return m;
  SLUICE_EXPECTS(m.ld == m.cols, "try_make_resident: ", what, " is a view (ld ", m.ld, ", ", m.cols,
                 " columns), not a host matrix or a block of its rows");
  const std::int64_t bytes = m.rows * m.cols * m.element_bytes();
  AccountedBuffer buffer;
  if (!try_allocate(bytes, what, buffer)) return m;
  DeviceGuard guard(gpu_);
  SLUICE_CUDA(cudaMemcpyAsync(buffer.get(), m.data, static_cast<std::size_t>(bytes),
                              cudaMemcpyHostToDevice, stream()));
  SLUICE_CUDA(cudaStreamSynchronize(stream()));
  HostMat resident = m;
  resident.data = buffer.get();
  resident.residence = Residence::kDevice;
  resident_matrices_.push_back(std::move(buffer));
  return resident;
}

void CudaDevice::read_matrix(const HostMat& m, void* out) {
  if (m.residence == Residence::kHost) {
    Device::read_matrix(m, out);
    return;
  }
  synchronize();
  DeviceGuard guard(gpu_);
  const std::int64_t row_bytes = m.cols * m.element_bytes();
  SLUICE_CUDA(cudaMemcpy2D(out, static_cast<std::size_t>(row_bytes), m.data,
                           static_cast<std::size_t>(m.ld * m.element_bytes()),
                           static_cast<std::size_t>(row_bytes), static_cast<std::size_t>(m.rows),
                           cudaMemcpyDeviceToHost));
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
                           std::int64_t num_cols, const CsrWeighting& weighting,
                           const std::string& what) {
  DeviceGuard guard(gpu_);
  if (!csr_upload_scratch_) csr_upload_scratch_ = std::make_unique<CsrUploadScratch>();
  const double start = now_seconds();
  const double placing = constants_.pin_seconds() + constants_.copy_seconds();
  auto matrix = std::make_unique<DeviceCsr>(
      upload_device_csr(indptr, columns, num_cols, weighting, constants_, cur(), what,
                        long_degree_for(indptr.empty() ? 0 : std::int64_t(indptr.back())),
                        &csr_seconds_, csr_upload_scratch_.get()));
  csr_prepare_seconds_ +=
      now_seconds() - start - (constants_.pin_seconds() + constants_.copy_seconds() - placing);
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

namespace {

using CsrArray = ConstantBuffer DeviceCsr::*;
// The arrays a staged CSR copies, in the order of its layout (the entry values follow them).
constexpr CsrArray kStagedArrays[] = {&DeviceCsr::indptr,         &DeviceCsr::columns,
                                      &DeviceCsr::self,           &DeviceCsr::t_indptr,
                                      &DeviceCsr::t_columns,      &DeviceCsr::t_perm,
                                      &DeviceCsr::column_degrees, &DeviceCsr::long_rows,
                                      &DeviceCsr::t_long_rows,    &DeviceCsr::self_degrees};
constexpr int kNumStagedArrays = static_cast<int>(std::size(kStagedArrays));
constexpr unsigned array_bit(int i) {
  return 1u << i;
}

// The arrays a product of `access` reads (row_spmm_matrix(), the GAT kernels): over the rows
// indptr, columns and the long rows; over the transpose its own three arrays and long rows, and
// indptr (GraphSAGE's mean weights by row length); both the self entries (or their degrees)
// and column degrees.
unsigned arrays_read(CsrAccess access) {
  constexpr unsigned both = array_bit(2) | array_bit(6) | array_bit(9);
  constexpr unsigned rows = both | array_bit(0) | array_bit(1) | array_bit(7);
  constexpr unsigned transposed =
      both | array_bit(0) | array_bit(3) | array_bit(4) | array_bit(5) | array_bit(8);
  switch (access) {
    case CsrAccess::kRows:
      return rows;
    case CsrAccess::kTransposed:
      return transposed;
    case CsrAccess::kBoth:
      return rows | transposed;
  }
  return rows | transposed;
}

// The arrays of `m` kept in pinned host memory.
unsigned host_arrays(const DeviceCsr& m) {
  unsigned out = 0;
  for (int i = 0; i < kNumStagedArrays; ++i)
    if ((m.*kStagedArrays[i]).on_host()) out |= array_bit(i);
  return out;
}

// Bytes of a staged layout of `m` holding `arrays` (a slot: host_arrays(m)), then
// `values_bytes` of entry values.
std::int64_t staged_bytes(const DeviceCsr& m, unsigned arrays, std::int64_t values_bytes) {
  std::int64_t bytes = rounded(values_bytes);
  for (int i = 0; i < kNumStagedArrays; ++i)
    if (arrays & array_bit(i)) bytes += rounded((m.*kStagedArrays[i]).bytes());
  return bytes;
}

}  // namespace

char* CudaDevice::slot_base(StagedCsr& slot, const DeviceCsr& m, std::int64_t values_bytes,
                            cudaStream_t stream) {
  // Sized once for the largest matrix, so no slot grows while a lane may read it (matrices
  // uploaded since the last call are measured once).
  for (; staged_csrs_measured_ < csrs_.size(); ++staged_csrs_measured_) {
    const DeviceCsr& each = *csrs_[staged_csrs_measured_];
    largest_staged_csr_ = std::max(largest_staged_csr_, staged_bytes(each, host_arrays(each), 0));
  }
  const std::int64_t largest =
      std::max(largest_staged_csr_, staged_bytes(m, host_arrays(m), values_bytes));
  if (staged_slot_bytes_ < largest) {
    for (const auto& lane : lanes_) SLUICE_CUDA(cudaStreamSynchronize(lane.get()));
    for (StagedCsr* each : {&staged_csr_[0], &staged_csr_[1]}) {
      each->buffer.ensure(largest, account_, stream, "staged host CSR");
      each->id = -1;
    }
    staged_slot_bytes_ = largest;
  }
  return static_cast<char*>(slot.buffer.ensure(largest, account_, stream, "staged host CSR"));
}

void CudaDevice::stage_csr_arrays(StagedCsr& slot, Csr a, char* base, unsigned layout,
                                  unsigned arrays, const float* values, cudaStream_t stream) {
  const DeviceCsr& m = csr(a);
  const auto host_values = values ? host_values_bytes_.find(values) : host_values_bytes_.end();
  const std::int64_t values_bytes =
      host_values != host_values_bytes_.end() ? host_values->second : 0;
  if (slot.id != a.id) {
    slot.id = a.id;
    slot.arrays = 0;
    slot.values_source = slot.values = nullptr;
    slot.view = std::make_unique<DeviceCsr>();
    DeviceCsr& view = *slot.view;
    view.rows = m.rows;
    view.cols = m.cols;
    view.nnz = m.nnz;
    view.wide = m.wide;
    view.weights = m.weights;
    view.long_degree = m.long_degree;
    view.num_long = m.num_long;
    view.num_t_long = m.num_t_long;
    view.long_split = m.long_split;
    view.t_long_split = m.t_long_split;
    for (const CsrArray array : kStagedArrays)
      view.*array = ConstantBuffer::view((m.*array).get(), (m.*array).bytes());
  }
  std::int64_t offset = 0;
  const auto copy = [&](void* target, const void* source, std::int64_t size) {
    SLUICE_CUDA(
        cudaMemcpyAsync(target, source, static_cast<std::size_t>(size), cudaMemcpyDefault, stream));
    counters_.h2d_block_bytes += size;
    counters_.h2d_csr_bytes += size;
  };
  for (int i = 0; i < kNumStagedArrays; ++i) {
    const ConstantBuffer& from = m.*kStagedArrays[i];
    if (!from.on_host() || !(layout & array_bit(i))) continue;
    if ((arrays & array_bit(i)) && !(slot.arrays & array_bit(i))) {
      copy(base + offset, from.get(), from.bytes());
      (*slot.view).*kStagedArrays[i] = ConstantBuffer::view(base + offset, from.bytes());
      slot.arrays |= array_bit(i);
    }
    offset += rounded(from.bytes());
  }
  if (values_bytes > 0 && slot.values_source != values) {
    copy(base + offset, values, values_bytes);
    slot.values_source = values;
    slot.values = reinterpret_cast<const float*>(base + offset);
  }
}

// The kept copy of `a` holding every array of `wanted`, or null.
CudaDevice::StagedCsr* CudaDevice::kept_csr(Csr a, unsigned wanted) {
  const auto kept = kept_csrs_.find(a.id);
  if (kept == kept_csrs_.end() || (kept->second.arrays & wanted) != wanted) return nullptr;
  return &kept->second;
}

void CudaDevice::lend_csr_space(const std::vector<Mat>& regions) {
  SLUICE_EXPECTS(csr_space_.empty() && kept_csrs_.empty(), "lend_csr_space on ", name_,
                 " before the space lent last was released");
  for (const Mat& region : regions) {
    if (!region.data) continue;
    // Staged arrays start at multiples of 256 bytes, as in a slot.
    const auto start = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(region.data));
    const std::int64_t skip = rounded(start) - start;
    const std::int64_t bytes = region.rows * region.ld * std::int64_t(sizeof(float)) - skip;
    if (bytes > 0)
      csr_space_.push_back(CsrSpace{reinterpret_cast<char*>(region.data) + skip, bytes});
  }
}

void CudaDevice::release_csr_space() {
  if (!kept_csrs_logged_ && (!kept_csrs_.empty() || csrs_not_kept_ > 0)) {
    const std::string kept =
        cat(kept_csrs_.size(), " chunk CSRs (", format_bytes(double(kept_csr_bytes_)), ")");
    log_info("device ", index_, ": the evaluation kept ", kept,
             " in idle training buffers for its later passes; ", csrs_not_kept_,
             " did not fit (copied again each pass)");
    kept_csrs_logged_ = true;
  }
  csr_space_.clear();
  kept_csrs_.clear();
  kept_csr_bytes_ = 0;
  csrs_not_kept_ = 0;
}

void CudaDevice::prefetch_csr(Csr a, CsrAccess access, CsrReuse reuse) {
  const DeviceCsr& m = csr(a);
  const unsigned wanted = arrays_read(access) & host_arrays(m);
  if (wanted == 0 || kept_csr(a, wanted)) return;
  DeviceGuard guard(gpu_);
  if (reuse == CsrReuse::kAgain && kept_csrs_.count(a.id) == 0) {
    const std::int64_t bytes = staged_bytes(m, wanted, 0);  // packed: the arrays it reads
    for (CsrSpace& space : csr_space_) {
      if (space.bytes < bytes) continue;
      StagedCsr& kept = kept_csrs_[a.id];
      kept.ready = Event(gpu_);
      OpScope op(*this, "prefetch_csr");
      stage_csr_arrays(kept, a, space.next, wanted, wanted, nullptr, cur());
      SLUICE_CUDA(cudaEventRecord(kept.ready.get(), cur()));
      space.next += bytes;
      space.bytes -= bytes;
      kept_csr_bytes_ += bytes;
      return;
    }
    ++csrs_not_kept_;
  }
  for (int k = 0; k < 2; ++k) {
    if (staged_csr_[k].id != a.id) continue;
    if ((staged_csr_[k].arrays & wanted) != wanted) {
      OpScope op(*this, "prefetch_csr");
      stage_csr_arrays(staged_csr_[k], a, slot_base(staged_csr_[k], m, 0, cur()), host_arrays(m),
                       wanted, nullptr, cur());
      SLUICE_CUDA(cudaEventRecord(staged_csr_[k].ready.get(), cur()));
    }
    next_staged_ = 1 - k;
    return;
  }
  StagedCsr& slot = staged_csr_[next_staged_];
  next_staged_ = 1 - next_staged_;
  // The compute lane's reads of the slot's matrix were all issued before this call.
  SLUICE_CUDA(cudaEventRecord(event_.get(), stream()));
  SLUICE_CUDA(cudaStreamWaitEvent(cur(), event_.get(), 0));
  OpScope op(*this, "prefetch_csr");  // the copies only, not the wait before them
  stage_csr_arrays(slot, a, slot_base(slot, m, 0, cur()), host_arrays(m), wanted, nullptr, cur());
  SLUICE_CUDA(cudaEventRecord(slot.ready.get(), cur()));
}

const DeviceCsr& CudaDevice::resident_csr(Csr a, CsrAccess access, const float** values) {
  const DeviceCsr& m = csr(a);
  const bool stage_values = values && *values && host_values_bytes_.count(*values) > 0;
  const unsigned wanted = arrays_read(access) & host_arrays(m);
  if (wanted == 0 && !stage_values) return m;
  expect_compute_lane("resident_csr");
  if (StagedCsr* kept = stage_values ? nullptr : kept_csr(a, wanted)) {
    SLUICE_CUDA(cudaStreamWaitEvent(cur(), kept->ready.get(), 0));
    return *kept->view;
  }
  // A slot holding the matrix (prefetched, or staged by an earlier product), else the one the
  // next prefetch would take: the one it took before holds the matrix of the batch ahead.
  int k = next_staged_;
  for (int i = 0; i < 2; ++i)
    if (staged_csr_[i].id == a.id) k = i;
  StagedCsr& slot = staged_csr_[k];
  // After the transfer lane's copies into the slot.
  SLUICE_CUDA(cudaStreamWaitEvent(cur(), slot.ready.get(), 0));
  const bool complete = slot.id == a.id && (slot.arrays & wanted) == wanted &&
                        (!stage_values || slot.values_source == *values);
  if (!complete) {
    const std::int64_t before = counters_.h2d_csr_bytes;
    const float* staged_values = stage_values ? *values : nullptr;
    const std::int64_t values_bytes = stage_values ? host_values_bytes_.at(*values) : 0;
    stage_csr_arrays(slot, a, slot_base(slot, m, values_bytes, cur()), host_arrays(m), wanted,
                     staged_values, cur());
    counters_.h2d_csr_in_line_bytes += counters_.h2d_csr_bytes - before;
    SLUICE_CUDA(cudaEventRecord(slot.ready.get(), cur()));
  }
  if (stage_values) *values = slot.values;
  return *slot.view;
}

void CudaDevice::log_host_constants() {
  host_constants_reported_ = true;
  const std::string mib = cat(std::llround(double(constants_.host_bytes()) / double(1 << 20)));
  log_info("device ", index_, ": chunk structures exceed the GPU memory budget; ", mib,
           " MiB kept in pinned host memory (sparse matrices copied to the device before use, "
           "index lists read zero-copy)");
  log_debug("device ", index_, ": constants placed in ",
            format_seconds(constants_.pin_seconds() + constants_.copy_seconds()), " (pinning ",
            format_seconds(constants_.pin_seconds()), "), CSRs besides that ",
            format_seconds(csr_prepare_seconds_), " (checks ", format_seconds(csr_seconds_.checks),
            ", transposes ", format_seconds(csr_seconds_.transpose), " on ", omp_get_max_threads(),
            " threads)");
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

void CudaDevice::synchronize() {
  finish_setup();
  DeviceGuard guard(gpu_);
  for (const auto& lane : lanes_) SLUICE_CUDA(cudaStreamSynchronize(lane.get()));
  if (host_adds_) host_adds_->synchronize();
  deliver_losses();
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
    timers_.push_back(TimedRange{Event(gpu_, EventTiming::kOn), Event(gpu_, EventTiming::kOn), k});
  TimedRange& range = timers_[timers_used_];
  range.phase = k;
  range.lane = lane_;
  range.tag = tag;
  lane_tags_[lane_] = tag;
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
  if (timeline && has_time_origin_)
    for (std::size_t i = 0; i < op_used_; ++i) {
      const OpRange& range = op_ranges_[i];
      float begin_ms = 0.f, ms = 0.f;
      SLUICE_CUDA(cudaEventElapsedTime(&begin_ms, time_origin_.get(), range.begin.get()));
      SLUICE_CUDA(cudaEventElapsedTime(&ms, range.begin.get(), range.end.get()));
      PhaseRange op{Phase::kCompute, static_cast<Lane>(range.lane), range.tag,
                    double(begin_ms) * 1e-3, double(begin_ms + ms) * 1e-3};
      op.operation = range.name;
      timeline->push_back(op);
    }
  collect_op_times();
}

int CudaDevice::op_begin(const char* name) {
  if (!shared_.options.op_times) return -1;
  DeviceGuard guard(gpu_);
  if (op_used_ == op_ranges_.size())
    op_ranges_.push_back(OpRange{Event(gpu_, EventTiming::kOn), Event(gpu_, EventTiming::kOn)});
  OpRange& range = op_ranges_[op_used_];
  range.name = name;
  range.lane = lane_;
  range.tag = lane_tags_[lane_];
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
