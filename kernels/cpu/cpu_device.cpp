// CpuDevice memory (accounted host allocations) and transfers (row copies with exact counters).
#include "kernels/cpu/cpu_device.hpp"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "kernels/cpu/cpu_util.hpp"
#include "kernels/csr_transpose.hpp"
#include "kernels/entry_weights.hpp"

namespace sluice {

namespace {

// Buffers from this size on get a mapping of their own, on huge pages where the kernel grants
// them, whose (zero) pages the whole team faults in: the CPU backend's working buffers and host
// matrices reach GiBs on a products-sized graph, too many pages for one thread to zero.
constexpr std::size_t kMappedBytes = std::size_t(2) << 20;

std::size_t rounded_bytes(std::size_t bytes) {
  return (bytes + 63) / 64 * 64;
}

}  // namespace

AlignedBuffer::AlignedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const std::size_t rounded = rounded_bytes(bytes);
  if (rounded >= kMappedBytes) {
    void* pages =
        mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages == MAP_FAILED) throw std::bad_alloc();
    madvise(pages, rounded, MADV_HUGEPAGE);  // a hint: 4 KiB pages serve as well
    populate_in_parallel(pages, rounded);
    data_ = pages;
    return;
  }
  data_ = std::aligned_alloc(64, rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

void AlignedBuffer::release() noexcept {
  if (data_ == nullptr) return;
  const std::size_t rounded = rounded_bytes(bytes_);
  if (rounded >= kMappedBytes)
    munmap(data_, rounded);
  else
    std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  release();
}

CpuDevice::CpuDevice(int index, std::int64_t memory_budget, CpuResidence residence)
    : index_(index), memory_budget_(memory_budget), residence_(residence) {}

HostMat CpuDevice::try_make_resident(HostMat m, const std::string& what) {
  if (residence_ == CpuResidence::kHostOnly || m.residence == Residence::kDevice || m.empty())
    return m;
  SLUICE_EXPECTS(m.ld == m.cols, "try_make_resident: ", what, " is a view (ld ", m.ld, ", ", m.cols,
                 " columns), not a host matrix or a block of its rows");
  const std::int64_t bytes = m.rows * m.cols * m.element_bytes();
  if (memory_budget_ > 0 && bytes_in_use_ + bytes > memory_budget_) return m;
  account(bytes, what);
  buffers_.emplace_back(static_cast<std::size_t>(bytes));
  std::memcpy(buffers_.back().data(), m.data, static_cast<std::size_t>(bytes));
  HostMat resident = m;
  resident.data = buffers_.back().data();
  resident.residence = Residence::kDevice;
  return resident;
}

void CpuDevice::read_matrix(const HostMat& m, void* out) {
  read_addressable_matrix(m, out);  // resident copies are in host memory too
}

std::string CpuDevice::name() const {
  return cat("cpu:", index_);
}

void CpuDevice::account(std::int64_t bytes, const std::string& what) {
  SLUICE_EXPECTS(bytes >= 0, "negative allocation of ", bytes, " bytes for ", what);
  if (memory_budget_ > 0 && bytes_in_use_ + bytes > memory_budget_) {
    throw OutOfDeviceMemory(cat("device ", name(), " is out of memory allocating '", what,
                                "': requested ", bytes, " bytes, ", bytes_in_use_,
                                " bytes in use, budget ", memory_budget_, " bytes"));
  }
  bytes_in_use_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes_in_use_);
}

void CpuDevice::account_constant(std::int64_t bytes, const std::string& what) {
  // Like the CUDA backend, read-only constants that do not fit the budget "stay in host
  // memory" instead of failing: only working buffers must fit.
  if (memory_budget_ > 0 && bytes_in_use_ + bytes > memory_budget_) {
    if (host_constant_bytes_ == 0)
      log_info("device ", name(), ": chunk constants exceed the memory budget; those that do not",
               " fit (first: '", what, "') are kept outside it");
    host_constant_bytes_ += bytes;
    return;
  }
  account(bytes, what);
}

Mat CpuDevice::upload_constant(const std::vector<float>& values, std::int64_t rows,
                               std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0 && std::int64_t(values.size()) == rows * cols,
                 "upload_constant: ", values.size(), " values for a ", rows, " x ", cols,
                 " matrix (", what, ")");
  account_constant(rows * cols * std::int64_t(sizeof(float)), what);
  buffers_.emplace_back(values.size() * sizeof(float));
  float* data = static_cast<float*>(buffers_.back().data());
  std::copy(values.begin(), values.end(), data);
  return Mat{data, rows, cols, cols};
}

Mat CpuDevice::alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
  SLUICE_EXPECTS(rows >= 0 && cols >= 0, "bad shape ", rows, " x ", cols, " for ", what);
  const std::int64_t bytes = rows * cols * std::int64_t(sizeof(float));
  account(bytes, what);
  buffers_.emplace_back(static_cast<std::size_t>(bytes));
  return Mat{static_cast<float*>(buffers_.back().data()), rows, cols, cols};
}

void CpuDevice::release(Mat m) {
  if (m.data == nullptr) return;
  const auto it = std::find_if(buffers_.begin(), buffers_.end(),
                               [&](const AlignedBuffer& b) { return b.data() == m.data; });
  SLUICE_EXPECTS(it != buffers_.end(), "release: not a matrix of ", name());
  bytes_in_use_ -= std::int64_t(it->bytes());
  buffers_.erase(it);
}

Idx CpuDevice::upload(const std::vector<vertex_t>& values, const std::string& what) {
  account_constant(std::int64_t(values.size() * sizeof(vertex_t)), what);
  index_arrays_.push_back(std::make_unique<std::vector<vertex_t>>(values));
  const auto& stored = *index_arrays_.back();
  return Idx{stored.data(), std::int64_t(stored.size())};
}

Csr CpuDevice::upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                          std::int64_t num_cols, const CsrWeighting& weighting,
                          const std::string& what) {
  SLUICE_EXPECTS(!indptr.empty() && indptr.front() == 0, "CSR ", what, " has no row offsets");
  const std::int64_t rows = std::int64_t(indptr.size()) - 1;
  const edge_t nnz = indptr.back();
  SLUICE_EXPECTS(nnz == edge_t(columns.size()), "CSR ", what, ": indptr ends at ", nnz, " but ",
                 columns.size(), " columns given");
  // The first bad offset and column, found in parallel (the checks name them).
  std::int64_t bad_row = rows, bad_entry = nnz;
#pragma omp parallel for schedule(static) reduction(min : bad_row) if (worth_parallel(rows))
  for (std::int64_t r = 0; r < rows; ++r)
    if (indptr[r] > indptr[r + 1]) bad_row = std::min(bad_row, r);
  SLUICE_EXPECTS(bad_row == rows, "CSR ", what, ": offsets decrease at row ", bad_row);
#pragma omp parallel for schedule(static) \
    reduction(min                         \
              : bad_entry) if (worth_parallel(std::int64_t(nnz)))
  for (edge_t e = 0; e < nnz; ++e)
    if (columns[e] < 0 || columns[e] >= num_cols) bad_entry = std::min(bad_entry, e);
  SLUICE_EXPECTS(bad_entry == nnz, "CSR ", what, ": column ", columns[std::size_t(bad_entry)],
                 " of entry ", bad_entry, " outside [0, ", num_cols, ")");
  check_csr_weighting(indptr, columns, num_cols, weighting, what);
  // Accounted as a device would store it: offsets, column indices and column degrees. The
  // transpose is this backend's private acceleration structure and is not part of the modelled
  // device memory.
  account_constant(std::int64_t(indptr.size() * sizeof(edge_t) + columns.size() * sizeof(vertex_t) +
                                weighting.column_degrees.size() * sizeof(std::int32_t)),
                   what);

  auto m = std::make_unique<CpuCsr>();
  m->rows = rows;
  m->cols = num_cols;
  m->nnz = nnz;
  assign_populated(m->indptr, indptr);
  assign_populated(m->columns, columns);
  m->weights = weighting.kind;
  if (weighting.kind != CsrWeights::kPerCall) {
    resize_populated(m->derived, std::size_t(nnz));
#pragma omp parallel for schedule(dynamic, 1024) if (worth_parallel(std::int64_t(nnz)))
    for (std::int64_t r = 0; r < rows; ++r) {
      const edge_t first = indptr[std::size_t(r)], end = indptr[std::size_t(r) + 1];
      for (edge_t e = first; e < end; ++e)
        m->derived[std::size_t(e)] =
            weighting.kind == CsrWeights::kSymmetricNorm
                ? symmetric_norm(weighting.column_degrees[std::size_t(columns[std::size_t(first)])],
                                 weighting.column_degrees[std::size_t(columns[std::size_t(e)])])
            : e == first ? 0.f
                         : neighbor_mean(end - first);
    }
  }
  transpose_csr(indptr, columns, num_cols, m->t_indptr, m->t_rows, m->t_entry);
  csrs_.push_back(std::move(m));
  return Csr{int(csrs_.size()) - 1, rows, num_cols, nnz};
}

const CpuCsr& CpuDevice::csr(const Csr& a) const {
  SLUICE_EXPECTS(a.id >= 0 && a.id < int(csrs_.size()), "CSR id ", a.id, " unknown on ", name());
  const CpuCsr& m = *csrs_[a.id];
  SLUICE_EXPECTS(m.rows == a.rows && m.cols == a.cols && m.nnz == a.nnz, "CSR ", a.id,
                 " shape differs from its upload on ", name());
  return m;
}

namespace {

// What a CUDA device would copy of `m` were its arrays in host memory: the rows' offsets and
// columns, and the transpose's.
std::int64_t host_csr_bytes(const CpuCsr& m, bool rows, bool transposed) {
  const std::int64_t offset = sizeof(edge_t), index = sizeof(vertex_t);
  return (rows ? (m.rows + 1) * offset + m.nnz * index : 0) +
         (transposed ? (m.cols + 1) * offset + m.nnz * index : 0);
}

}  // namespace

void CpuDevice::prefetch_csr(Csr a, CsrAccess access, CsrReuse reuse) {
  const CpuCsr& m = csr(a);
  const bool rows = access != CsrAccess::kTransposed, transposed = access != CsrAccess::kRows;
  if (kept_holds(a, rows, transposed)) return;
  if (reuse == CsrReuse::kAgain && kept_.count(a.id) == 0) {
    const std::int64_t bytes = host_csr_bytes(m, rows, transposed);
    for (CsrSpace& space : csr_space_) {
      if (space.bytes < bytes) continue;
      // The CUDA backend's copy overwrites the lent memory: so does this one (with NaNs), so
      // that a pass reading that memory as its own computes NaNs here too.
      std::memset(space.next, 0xff, std::size_t(bytes));
      space.next += bytes;
      space.bytes -= bytes;
      kept_[a.id] = AnnouncedCsr{a.id, rows, transposed};
      counters_.h2d_csr_bytes += bytes;
      return;
    }
  }
  for (int k = 0; k < 2; ++k) {
    AnnouncedCsr& slot = announced_[k];
    if (slot.id != a.id) continue;
    counters_.h2d_csr_bytes +=
        host_csr_bytes(m, rows && !slot.rows, transposed && !slot.transposed);
    slot.rows = slot.rows || rows;
    slot.transposed = slot.transposed || transposed;
    next_announced_ = 1 - k;
    return;
  }
  counters_.h2d_csr_bytes += host_csr_bytes(m, rows, transposed);
  announced_[next_announced_] = AnnouncedCsr{a.id, rows, transposed};
  next_announced_ = 1 - next_announced_;
}

void CpuDevice::lend_csr_space(const std::vector<Mat>& regions) {
  SLUICE_EXPECTS(csr_space_.empty() && kept_.empty(), "lend_csr_space on ", name(),
                 " before the space lent last was released");
  for (const Mat& region : regions)
    if (region.data && region.rows * region.ld > 0)
      csr_space_.push_back(CsrSpace{reinterpret_cast<char*>(region.data),
                                    region.rows * region.ld * std::int64_t(sizeof(float))});
}

bool CpuDevice::kept_holds(const Csr& a, bool rows, bool transposed) const {
  const auto kept = kept_.find(a.id);
  return kept != kept_.end() && (kept->second.rows || !rows) &&
         (kept->second.transposed || !transposed);
}

void CpuDevice::release_csr_space() {
  csr_space_.clear();
  kept_.clear();
}

const CpuCsr& CpuDevice::product_csr(const Csr& a, CsrAccess access) {
  const CpuCsr& m = csr(a);
  const bool rows = access != CsrAccess::kTransposed, transposed = access != CsrAccess::kRows;
  if (kept_holds(a, rows, transposed)) return m;
  // As CudaDevice::resident_csr(): the slot holding the matrix, else the one the next
  // announcement would take.
  int k = next_announced_;
  for (int i = 0; i < 2; ++i)
    if (announced_[i].id == a.id) k = i;
  AnnouncedCsr& slot = announced_[k];
  if (slot.id != a.id) slot = AnnouncedCsr{a.id, false, false};
  counters_.h2d_csr_in_line_bytes +=
      host_csr_bytes(m, rows && !slot.rows, transposed && !slot.transposed);
  slot.rows = slot.rows || rows;
  slot.transposed = slot.transposed || transposed;
  return m;
}

void CpuDevice::write(const float* host, std::int64_t count, float* device) {
  if (count > 0) std::memcpy(device, host, std::size_t(count) * sizeof(float));
}

void CpuDevice::read(const float* device, std::int64_t count, float* host) {
  if (count > 0) std::memcpy(host, device, std::size_t(count) * sizeof(float));
}

void CpuDevice::load_rows(HostMat src, Idx src_rows, Idx dst_rows, Mat dst) {
  cpu::expect_index(src_rows, "src_rows");
  cpu::expect_index(dst_rows, "dst_rows");
  SLUICE_EXPECTS(src_rows.size == dst_rows.size || dst_rows.size == 0, "load_rows: ", src_rows.size,
                 " source rows, ", dst_rows.size, " destination rows");
  SLUICE_EXPECTS(src.cols == dst.cols, "load_rows: width ", src.cols, " vs ", dst.cols);
  // An empty dst_rows: rows land compact, in order (the copy checks they fit).
  cpu::load_host_rows(src, src_rows.data, dst, dst_rows.size ? dst_rows.data : nullptr,
                      src_rows.size);
  if (src.residence == Residence::kHost) counters_.h2d_gather_rows += src_rows.size;
  counters_.bytes_for(src, counters_.h2d_gather_bytes) +=
      src_rows.size * dst.cols * src.element_bytes();
}

void CpuDevice::load_block(HostMat src, std::int64_t src_row, Mat dst) {
  SLUICE_EXPECTS(src.cols == dst.cols, "load_block: width ", src.cols, " vs ", dst.cols);
  const HostMat block = src.row_block(src_row, dst.rows);
  if (block.precision == HostPrecision::kFp32)
    copy(cpu::fp32_view(block), dst);
  else
    cpu::load_host_rows(block, nullptr, dst, nullptr, dst.rows);
  counters_.bytes_for(src, counters_.h2d_block_bytes) += dst.rows * dst.cols * src.element_bytes();
}

void CpuDevice::store_block(Mat src, HostMat dst, std::int64_t dst_row) {
  SLUICE_EXPECTS(src.cols == dst.cols, "store_block: width ", src.cols, " vs ", dst.cols);
  const HostMat block = dst.row_block(dst_row, src.rows);
  if (block.precision == HostPrecision::kFp32)
    copy(src, cpu::fp32_view(block));
  else
    cpu::store_host_rows(src, nullptr, block, nullptr, src.rows);
  counters_.bytes_for(dst, counters_.d2h_bytes) += src.rows * src.cols * dst.element_bytes();
}

void CpuDevice::pull_rows(const Device& owner, Mat owner_buf, Idx owner_rows, Idx dst_rows,
                          Mat dst) {
  cpu::expect_index(owner_rows, "owner_rows");
  cpu::expect_index(dst_rows, "dst_rows");
  SLUICE_EXPECTS(owner_rows.size == dst_rows.size, "pull_rows: ", owner_rows.size, " owner rows, ",
                 dst_rows.size, " destination rows");
  SLUICE_EXPECTS(owner_buf.cols == dst.cols, "pull_rows: width ", owner_buf.cols, " vs ", dst.cols);
  (void)owner;  // host memory: the owner's buffer is directly readable
  cpu::copy_indexed_rows(owner_buf, owner_rows.data, dst, dst_rows.data, owner_rows.size);
  counters_.p2p_rows += owner_rows.size;
  counters_.p2p_bytes += owner_rows.size * dst.cols * std::int64_t(sizeof(float));
}

void CpuDevice::put_block(Mat src, Device& peer, Mat dst) {
  SLUICE_EXPECTS(src.rows == dst.rows && src.cols == dst.cols, "put_block: ", src.rows, " x ",
                 src.cols, " into ", dst.rows, " x ", dst.cols);
  SLUICE_EXPECTS(dynamic_cast<CpuDevice*>(&peer) != nullptr, "put_block: peer ", peer.name(),
                 " is not a CPU device");
  cpu::copy_indexed_rows(src, nullptr, dst, nullptr, src.rows);
  counters_.p2p_rows += src.rows;
  counters_.p2p_bytes += src.rows * src.cols * std::int64_t(sizeof(float));
}

void CpuDevice::put_rows(Mat src, Idx src_rows, Device& peer, Mat dst) {
  cpu::expect_index(src_rows, "src_rows");
  SLUICE_EXPECTS(src_rows.size == dst.rows && src.cols == dst.cols, "put_rows: ", src_rows.size,
                 " rows of width ", src.cols, " into ", dst.rows, " x ", dst.cols);
  SLUICE_EXPECTS(dynamic_cast<CpuDevice*>(&peer) != nullptr, "put_rows: peer ", peer.name(),
                 " is not a CPU device");
  cpu::copy_indexed_rows(src, src_rows.data, dst, nullptr, src_rows.size);
  counters_.p2p_rows += src_rows.size;
  counters_.p2p_bytes += src_rows.size * src.cols * std::int64_t(sizeof(float));
}

void CpuDevice::expect_flush(const char* operation, Mat src, Idx src_rows, Idx host_rows,
                             HostMat host) {
  cpu::expect_index(src_rows, "src_rows");
  cpu::expect_index(host_rows, "host_rows");
  expect_flush_shapes(operation, src, src_rows, host_rows, host);
}

void CpuDevice::flush_add_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  expect_flush("flush_add_rows", src, src_rows, host_rows, host);
  land_pending_add();  // additions into the same rows land in order
  const std::int64_t n = host_rows.size;
  PendingAdd pending{std::vector<float>(static_cast<std::size_t>(n * src.cols)),
                     std::vector<vertex_t>(host_rows.data, host_rows.data + n), host};
  cpu::copy_indexed_rows(src, src_rows.data, Mat{pending.rows.data(), n, src.cols, src.cols},
                         nullptr, n);
  pending_add_ = std::move(pending);
  counters_.bytes_for(host, counters_.d2h_bytes) += n * src.cols * host.element_bytes();
  if (host.residence == Residence::kHost)
    counters_.d2h_index_bytes += n * std::int64_t(sizeof(vertex_t));
}

void CpuDevice::flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) {
  expect_flush("flush_store_rows", src, src_rows, host_rows, host);
  cpu::store_host_rows(src, src_rows.data, host, host_rows.data, host_rows.size);
  counters_.bytes_for(host, counters_.d2h_bytes) +=
      host_rows.size * src.cols * host.element_bytes();
}

void CpuDevice::land_pending_add() {
  if (!pending_add_) return;
  PendingAdd& p = *pending_add_;
  const std::int64_t n = static_cast<std::int64_t>(p.host_rows.size());
  const std::int64_t cols = p.host.cols;
  cpu::add_host_rows(Mat{p.rows.data(), n, cols, cols}, nullptr, p.host, p.host_rows.data(), n);
  pending_add_.reset();
}

void CpuDevice::scatter_rows(Mat src, Idx rows, Mat dst) {
  cpu::expect_index(rows, "rows");
  SLUICE_EXPECTS(src.rows == rows.size && dst.cols == src.cols, "scatter_rows: ", src.rows, " x ",
                 src.cols, " with ", rows.size, " rows into width ", dst.cols);
  cpu::copy_indexed_rows(src, nullptr, dst, rows.data, rows.size);
}

void CpuDevice::scatter_dropout_rows(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key) {
  cpu::expect_index(rows, "rows");
  SLUICE_EXPECTS(src.rows == rows.size && dst.cols == src.cols && keys.size == rows.size,
                 "scatter_dropout_rows: ", src.rows, " x ", src.cols, " with ", rows.size,
                 " rows and ", keys.size, " keys into width ", dst.cols);
  scatter_rows(src, rows, dst);
  dropout_rows(dst, rows, keys, key);
}

void CpuDevice::phase_begin(Phase phase, std::int32_t tag) {
  open_[int(phase)] = PhaseRange{phase, Lane::kCompute, tag, now_seconds() - time_origin_, 0};
}

void CpuDevice::phase_end(Phase phase) {
  PhaseRange range = open_[int(phase)];
  range.end = now_seconds() - time_origin_;
  ranges_.push_back(range);
}

void CpuDevice::set_time_origin() {
  time_origin_ = now_seconds();
}

void CpuDevice::take_phase_times(double seconds[kPhases], std::vector<PhaseRange>* timeline) {
  for (const PhaseRange& range : ranges_) seconds[int(range.phase)] += range.end - range.begin;
  if (timeline) timeline->insert(timeline->end(), ranges_.begin(), ranges_.end());
  ranges_.clear();
}

void CpuDevice::gather_rows(Mat src, Idx rows, Mat dst) {
  cpu::expect_index(rows, "rows");
  SLUICE_EXPECTS(dst.rows == rows.size && dst.cols == src.cols, "gather_rows: ", rows.size,
                 " rows of width ", src.cols, " into ", dst.rows, " x ", dst.cols);
  cpu::copy_indexed_rows(src, rows.data, dst, nullptr, rows.size);
}

void CpuDevice::scatter_add_rows(Mat src, Idx rows, Mat dst) {
  cpu::expect_index(rows, "rows");
  SLUICE_EXPECTS(src.rows == rows.size && dst.cols == src.cols, "scatter_add_rows: ", src.rows,
                 " x ", src.cols, " with ", rows.size, " rows into width ", dst.cols);
  cpu::add_indexed_rows(src, nullptr, dst, rows.data, rows.size);
}

void CpuDevice::copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, RowCopy mode) {
  cpu::expect_index(src_rows, "src_rows");
  cpu::expect_index(dst_rows, "dst_rows");
  SLUICE_EXPECTS(src_rows.size == dst_rows.size && src.cols == dst.cols,
                 "copy_rows: ", src_rows.size, " source rows of width ", src.cols, " into ",
                 dst_rows.size, " rows of width ", dst.cols);
  if (mode == RowCopy::kAdd) {
    cpu::add_indexed_rows(src, src_rows.data, dst, dst_rows.data, src_rows.size);
  } else {
    cpu::copy_indexed_rows(src, src_rows.data, dst, dst_rows.data, src_rows.size);
  }
}

void CpuDevice::scatter_arrivals(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key,
                                 Mat gradient) {
  scatter_dropout_rows(src, rows, dst, keys, key);
  zero_rows(gradient, rows);
}

void CpuDevice::zero_rows(Mat m, Idx rows) {
  const std::int64_t n = rows.size;
  cpu::check_indices(rows.data, n, m.rows, "zero_rows");
#pragma omp parallel for schedule(static) if (n * m.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) std::fill_n(m.data + rows.data[i] * m.ld, m.cols, 0.f);
}

void CpuDevice::round_to_host_precision(Mat m, HostPrecision precision) {
  cpu::round_rows(m, nullptr, m.rows, precision);
}

void CpuDevice::round_rows_to_host_precision(Mat m, Idx rows, HostPrecision precision) {
  cpu::expect_index(rows, "rows");
  cpu::round_rows(m, rows.data, rows.size, precision);
}

void CpuDevice::fill(Mat m, float value) {
#pragma omp parallel for schedule(static) if (m.rows * m.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < m.rows; ++i) std::fill_n(m.data + i * m.ld, m.cols, value);
}

void CpuDevice::copy(Mat src, Mat dst) {
  SLUICE_EXPECTS(src.rows == dst.rows && src.cols == dst.cols, "copy: ", src.rows, " x ", src.cols,
                 " into ", dst.rows, " x ", dst.cols);
  if (src.empty()) return;
  if (src.ld == src.cols && dst.ld == dst.cols) {
    parallel_copy(src.data, src.rows * src.cols, dst.data);
    return;
  }
#pragma omp parallel for schedule(static) if (src.rows * src.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < src.rows; ++i)
    std::memcpy(dst.data + i * dst.ld, src.data + i * src.ld, std::size_t(src.cols) * 4);
}

}  // namespace sluice
