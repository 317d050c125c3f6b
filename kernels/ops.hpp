// The operator interface: everything the training schedule (train/) asks of a "device" (one
// logical GPU = one partition). Implemented twice, side by side:
//   kernels/cpu/   CpuDevice   — OpenMP + BLAS on host memory; the numerical reference, runs in CI
//   kernels/cuda/  CudaDevice  — cuSPARSE/cuBLAS/own kernels; several logical devices may share
//                                one physical GPU (peer reads become local reads)
// The mathematics each operator serves is fixed in docs/model-math.md.
//
// Conventions
// - Every matrix is dense, row-major with a leading dimension (ld >= cols); device matrices are
//   float32, host matrices float32 or bfloat16 (HostMat::precision). Transfers between them widen
//   or round (to nearest even, kernels/bfloat16.hpp); a row added into a bf16 host matrix is
//   rounded, then added, then the sum rounded.
// - Device objects (Mat, Idx, Csr) are non-owning views of memory the Device allocated; the
//   Device owns and frees everything it allocated (allocate once at setup, never in the loop).
// - HostMat is host memory the Backend allocated (pinned + mapped for CUDA), shared by devices.
// - Operations are asynchronous and ordered per device (one in-order stream on CUDA).
//   Results read on the host (loss sums, predictions) are valid after synchronize().
//   Cross-device operations (pull_rows, put_block, put_rows) require the caller to have ordered
//   them after the other device's producing work (Device::wait_peer or Backend::barrier).
// - Index arrays hold 32-bit positions (vertex_t); counts are 64-bit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/types.hpp"

namespace sluice {

// A dense row-major float matrix view (device memory for Mat, host memory for HostMat).
struct Mat {
  float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;  // distance between rows, in floats

  Mat row_block(std::int64_t begin, std::int64_t count) const {
    SLUICE_EXPECTS(begin >= 0 && count >= 0 && begin + count <= rows, "row block [", begin, ", +",
                   count, ") outside ", rows, " rows");
    return Mat{data + begin * ld, count, cols, ld};
  }
  Mat col_block(std::int64_t begin, std::int64_t count) const {
    SLUICE_EXPECTS(begin >= 0 && count >= 0 && begin + count <= cols, "column block [", begin,
                   ", +", count, ") outside ", cols, " columns");
    return Mat{data + begin, rows, count, ld};
  }
  bool empty() const { return rows == 0 || cols == 0; }
};

// How a host matrix stores its elements. Device matrices (Mat) are always fp32; a kBf16 host
// matrix holds bfloat16 values (kernels/bfloat16.hpp), widened to fp32 when rows move to a
// device and rounded to nearest even when they move back, so vertex data in host memory and on
// the host link takes half the bytes while every operation computes in fp32.
enum class HostPrecision { kFp32, kBf16 };
const char* host_precision_name(HostPrecision precision);  // "fp32", "bf16"
// Parses "fp32" or "bf16"; throws InputError naming `option` otherwise.
HostPrecision parse_host_precision(const std::string& text, const std::string& option);
inline std::int64_t element_bytes(HostPrecision precision) {
  return precision == HostPrecision::kBf16 ? 2 : 4;
}

// Where a vertex matrix (HostMat) lives. kHost: host memory the Backend allocated (pinned +
// mapped on CUDA), which the devices reach over the host link. kDevice: memory of one device,
// which Device::try_make_resident moved it into, or a device buffer that holds its rows for a
// while; the transfer operations of that device then move its rows within device memory, and
// host code reads it only through Device::read_matrix.
enum class Residence { kHost, kDevice };

// A dense row-major vertex matrix view with a typed element, in host memory unless a device made
// it resident (Residence). ld and the blocks count elements.
struct HostMat {
  void* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;  // distance between rows, in elements
  HostPrecision precision = HostPrecision::kFp32;
  Residence residence = Residence::kHost;

  std::int64_t element_bytes() const { return ::sluice::element_bytes(precision); }
  // The elements of a kFp32 / kBf16 matrix (throws for the other precision).
  float* fp32() const {
    SLUICE_EXPECTS(precision == HostPrecision::kFp32, "host matrix holds ",
                   host_precision_name(precision), " elements, not fp32");
    return static_cast<float*>(data);
  }
  std::uint16_t* bf16() const {
    SLUICE_EXPECTS(precision == HostPrecision::kBf16, "host matrix holds ",
                   host_precision_name(precision), " elements, not bf16");
    return static_cast<std::uint16_t*>(data);
  }
  // The address of element (row, col).
  void* at(std::int64_t row, std::int64_t col) const {
    return static_cast<char*>(data) + (row * ld + col) * element_bytes();
  }
  HostMat row_block(std::int64_t begin, std::int64_t count) const {
    SLUICE_EXPECTS(begin >= 0 && count >= 0 && begin + count <= rows, "host row block [", begin,
                   ", +", count, ") outside ", rows, " rows");
    return HostMat{at(begin, 0), count, cols, ld, precision, residence};
  }
  HostMat col_block(std::int64_t begin, std::int64_t count) const {
    SLUICE_EXPECTS(begin >= 0 && count >= 0 && begin + count <= cols, "host column block [", begin,
                   ", +", count, ") outside ", cols, " columns");
    return HostMat{at(0, begin), rows, count, ld, precision, residence};
  }
  bool empty() const { return rows == 0 || cols == 0; }
  // Bytes from the first element to one past the last (0 when empty).
  std::int64_t span_bytes() const {
    return empty() ? 0 : ((rows - 1) * ld + cols) * element_bytes();
  }
};

// Evaluation counts by split (bit k of a row's loss mask: 0 train, 1 valid, 2 test).
struct SplitCounts {
  std::int64_t labeled[3] = {0, 0, 0};
  std::int64_t correct[3] = {0, 0, 0};
};

// Host-visible results of Device::softmax_cross_entropy, each optional (null).
struct LossOutputs {
  double* loss_sum = nullptr;           // += the loss rows' losses
  std::int32_t* predictions = nullptr;  // argmax per row (logits.rows entries)
  SplitCounts* split_counts = nullptr;  // += labeled and correctly predicted rows per split
};

// A device-resident array of 32-bit indices.
struct Idx {
  const vertex_t* data = nullptr;
  std::int64_t size = 0;

  // Positions [begin, end) of the list.
  Idx slice(std::int64_t begin, std::int64_t end) const { return Idx{data + begin, end - begin}; }
};

// How spmm and spmm_transpose_add weigh a CSR's entries, fixed when it is uploaded. A row's
// first entry is its self entry (the column holding the row's own vertex) in the derived kinds.
enum class CsrWeights {
  // The `values` each call passes (nnz floats in entry order, device memory).
  // The transpose keeps the permutation to the entry order (4 or 8 bytes per entry), which
  // spmm_transpose_add and the GAT backward read.
  kPerCall,
  // GCN, 1 / sqrt(deg(self(r)) deg(c)) for entry (r, c), computed in double and rounded to
  // float, deg: the column degrees given at upload (in-degree + 1 of the vertex in each column),
  // self(r): the column of row r's first entry.
  kSymmetricNorm,
  // GraphSAGE mean: 0 for each row's first entry, 1 / (entries of the row - 1) for the others;
  // no other entry of a row may hold its first entry's column.
  kNeighborMean,
};
const char* csr_weights_name(CsrWeights weights);

// What a sparse product reads of a chunk CSR: its rows (spmm, gat_forward, gat_coefficients),
// its transpose (spmm_transpose_add), or both (gat_backward).
enum class CsrAccess { kRows, kTransposed, kBoth };

// Whether a later pass reads a prefetched chunk CSR again before the space lent for chunk CSRs
// is released (Device::lend_csr_space): kAgain asks the device to keep its copy there.
enum class CsrReuse { kOnce, kAgain };

// A CSR's weighting as upload_csr takes it.
struct CsrWeighting {
  CsrWeights kind = CsrWeights::kPerCall;
  // kSymmetricNorm: one per column; >= 1 for every column an entry holds (0: an unused column).
  std::vector<std::int32_t> column_degrees;
};
// Throws InputError naming `what` unless `weighting` suits the CSR (indptr, columns) with
// num_cols columns, whose columns the caller checked: degrees for exactly the columns of a
// kSymmetricNorm matrix and none for the others, no self column twice in a kNeighborMean row.
void check_csr_weighting(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                         std::int64_t num_cols, const CsrWeighting& weighting,
                         const std::string& what);

// A device-resident CSR matrix (rows x cols) uploaded once; `id` lets a backend keep per-matrix
// state (cuSPARSE descriptors, workspaces). Matrices of CsrWeights::kPerCall take their values
// with each operation, so one structure serves changing weights (GAT attention); the derived
// kinds are computed on the device from the structure and store no values.
struct Csr {
  int id = -1;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t nnz = 0;
};

enum class Activation { kNone, kRelu, kElu };

// Whether Device::gemm takes an operand as it is or transposed.
enum class Transpose { kNo, kYes };

// Whether Device::copy_rows (and spmm_transpose_rows) overwrites its destination rows or adds
// into them.
enum class RowCopy { kOverwrite, kAdd };

// Rows [begin, end) of a matrix.
struct RowRange {
  std::int64_t begin = 0, end = 0;
};

// Whether Device::gat_forward and gat_coefficients compute every merged row's source scores el,
// or take el as it is (the caller kept the rows' scores current with gat_source_scores).
enum class SourceScores { kCompute, kKept };

// Keys of the counter-based dropout of docs/model-math.md.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int32_t layer = 0;
  float rate = 0.f;  // p; 0 disables
  // The hash's (epoch, layer) word: epoch * 1024 + layer.
  std::uint64_t salt() const { return static_cast<std::uint64_t>(epoch * 1024 + layer); }
};

// Byte/row counters per transfer path, kept by each device for metrics. Host-link bytes count
// the host matrix's elements (2 bytes each in bf16), which is what crosses the link. The
// transfers of a matrix made resident on the device (Residence::kDevice) cross no link: they
// count in resident_bytes alone.
struct TransferCounters {
  std::int64_t h2d_gather_rows = 0, h2d_gather_bytes = 0;  // load_rows
  std::int64_t h2d_block_bytes = 0;                        // load_block, staged chunk CSRs
  // Of h2d_block_bytes: chunk CSR arrays copied from host memory before products read them,
  // and of those the ones a product copied on the compute lane (no prefetch_csr() had). The CPU
  // backend counts what prefetches and unannounced products would copy were every CSR in host
  // memory (in these two, not in h2d_block_bytes).
  std::int64_t h2d_csr_bytes = 0, h2d_csr_in_line_bytes = 0;
  std::int64_t d2h_bytes = 0;  // store_block, flush_add_rows, flush_store_rows
  // The host-row ids that go with flush_add_rows' rows to the CPU threads adding them (CUDA:
  // those in device memory; the CPU backend counts all).
  std::int64_t d2h_index_bytes = 0;
  std::int64_t p2p_rows = 0, p2p_bytes = 0;  // pull_rows, put_block, put_rows
  std::int64_t resident_bytes = 0;           // the same operations on resident matrices

  // The counter a transfer of `m` adds its bytes to: `link` (one of the host-link counters
  // above) for a host matrix, resident_bytes for a resident one.
  std::int64_t& bytes_for(const HostMat& m, std::int64_t& link) {
    return m.residence == Residence::kHost ? link : resident_bytes;
  }
};

// Independent in-order queues of one device (CUDA: one stream each). Work is issued to the
// device's current lane (set_lane; kCompute by default); lanes run concurrently and are ordered
// against each other only by markers (mark/wait). kCompute holds every compute operation (cuBLAS
// and cuSPARSE are bound to it), the cross-device operations and everything Backend::barrier()
// orders; kTransfer prefetches host data; kStore writes results back to host memory. The CPU
// backend runs every operation at issue, so lanes and markers cost nothing there.
// The peer lane copies rows into other devices' buffers (Device::put_block, put_rows) beside the
// compute lane's work.
enum class Lane { kCompute = 0, kTransfer = 1, kStore = 2, kPeer = 3 };
inline constexpr int kLanes = 4;
inline constexpr int kMarkers = 23;  // marker ids 0 .. kMarkers-1 per device

// Work of one epoch timed per lane (device timers; CUDA events).
enum class Phase { kLoad = 0, kP2p, kCompute, kStore, kFlush };
inline constexpr int kPhases = 5;
const char* phase_name(Phase phase);  // "load", "p2p", "compute", "store", "flush"
const char* lane_name(Lane lane);     // "compute", "transfer", "store", "peer"

// One timed range of work on a lane (a timeline entry), in seconds since the device's time
// origin (Device::set_time_origin).
struct PhaseRange {
  Phase phase = Phase::kLoad;
  Lane lane = Lane::kCompute;
  std::int32_t tag = 0;  // the caller's label given to phase_begin
  double begin = 0, end = 0;
  // Set: the range of one operation (a backend's operation timers, e.g. CUDA's --op-times), not
  // of a phase; `phase` is then meaningless and `tag` is that of the lane's latest phase range.
  const char* operation = nullptr;
};

// gat_input_scores()'s shapes: folded x.cols x 2K, el x.rows x K, er at most x.rows rows of K.
void expect_input_scores_shapes(const Mat& x, const Mat& folded, int heads, const Mat& el,
                                const Mat& er);

// The shape checks of Device::flush_add_rows and flush_store_rows, for every backend: as many
// host rows as source rows (src's first rows when src_rows is empty), and equal widths.
void expect_flush_shapes(const char* operation, const Mat& src, const Idx& src_rows,
                         const Idx& host_rows, const HostMat& host);

// Thrown when an allocation would exceed the device's memory budget.
class OutOfDeviceMemory : public InputError {
 public:
  using InputError::InputError;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual int index() const = 0;  // logical device = partition index
  virtual std::string name() const = 0;

  // ---- memory (every allocation is accounted against the budget) ----
  // alloc() gives a working buffer: always device memory; throws OutOfDeviceMemory when it
  // does not fit the budget.
  virtual Mat alloc(std::int64_t rows, std::int64_t cols, const std::string& what) = 0;
  // upload(), upload_csr() and upload_constant() hold READ-ONLY per-chunk constants (index
  // lists, CSR structures, entry values), written once here and never written by any
  // operation. A backend may place them in host memory that its kernels read directly (CUDA:
  // pinned, mapped memory read zero-copy) when the device budget is exhausted, so their size
  // need not fit the budget; never pass them as an output of any operation.
  virtual Idx upload(const std::vector<vertex_t>& values, const std::string& what) = 0;
  // indptr: rows + 1 offsets; columns: indptr.back() entries in [0, num_cols). Throws
  // InputError naming `what` when the structure or the weighting breaks CsrWeights' rules.
  virtual Csr upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                         std::int64_t num_cols, const CsrWeighting& weighting,
                         const std::string& what) = 0;
  // A CsrWeights::kPerCall matrix.
  Csr upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                 std::int64_t num_cols, const std::string& what) {
    return upload_csr(indptr, columns, num_cols, CsrWeighting{}, what);
  }
  // A read-only rows x cols float matrix (values: rows * cols floats, row-major), e.g. a chunk's
  // entry values for spmm(). Default: alloc() + write().
  virtual Mat upload_constant(const std::vector<float>& values, std::int64_t rows,
                              std::int64_t cols, const std::string& what) {
    SLUICE_EXPECTS(rows >= 0 && cols >= 0 && std::int64_t(values.size()) == rows * cols,
                   "upload_constant: ", values.size(), " values for a ", rows, " x ", cols,
                   " matrix (", what, ")");
    Mat m = alloc(rows, cols, what);
    write(values.data(), rows * cols, m.data);
    return m;
  }
  // Like alloc() for OPTIONAL buffers (overlap double buffers): returns an empty Mat instead of
  // throwing when the buffer would not fit while leaving the memory the device keeps free for
  // scratch it sizes on first use. Default: alloc(), empty on OutOfDeviceMemory.
  virtual Mat try_alloc(std::int64_t rows, std::int64_t cols, const std::string& what) {
    try {
      return alloc(rows, cols, what);
    } catch (const OutOfDeviceMemory&) {
      return Mat{};
    }
  }
  // Frees a matrix alloc() or try_alloc() returned (its budget share with it); call it when no
  // queued operation uses the matrix.
  virtual void release(Mat m) = 0;
  virtual std::int64_t bytes_in_use() const = 0;
  virtual std::int64_t peak_bytes() const = 0;
  // Small synchronous copies (parameters, per-chunk constants): host <-> device floats.
  virtual void write(const float* host, std::int64_t count, float* device) = 0;
  virtual void read(const float* device, std::int64_t count, float* host) = 0;
  // Copies a host matrix, or a block of its rows, into this device's memory when it fits the
  // budget with the constants' headroom left (an optional placement, like try_alloc): returns
  // the resident copy, holding the same elements; returns `m` unchanged when it does not fit or
  // the backend has no device memory (CPU, unless CpuResidence::kResidentCopies). The host matrix
  // stays allocated (Backend::release_host frees it once no device reads it). Call it when the
  // device is idle; only this device's operations may then read or write the copy. Default: no
  // placement.
  virtual HostMat try_make_resident(HostMat m, const std::string& what) {
    (void)what;
    return m;
  }
  // Copies the elements of `m` (host or resident), rows packed (cols elements each, of m's
  // precision), into `out`; synchronous: waits for the device's work first.
  virtual void read_matrix(const HostMat& m, void* out);

  // ---- transfers ----
  // dst[dst_rows[i]] = src[src_rows[i]] for i < src_rows.size, or dst[i] = ... when dst_rows is
  // empty (zero-copy gather from host; src_rows ascending for full link speed).
  virtual void load_rows(HostMat src, Idx src_rows, Idx dst_rows, Mat dst) = 0;
  // dst = src rows [src_row, src_row + dst.rows) (contiguous host -> device).
  virtual void load_block(HostMat src, std::int64_t src_row, Mat dst) = 0;
  // Ahead of the products that read `access` of chunk CSR `a`, on the transfer lane: a backend
  // that keeps chunk structures in host memory copies those arrays into device memory now, so
  // the products find them there instead of copying them on the compute lane. CUDA keeps two
  // such copies, so a call may replace the copy of the call before the last; the products work
  // without it (the CPU backend ignores it).
  // With CsrReuse::kAgain, while space lent by lend_csr_space() holds the arrays, the copy goes
  // there instead, and every product and prefetch of `a` finds it until release_csr_space().
  virtual void prefetch_csr(Csr /*a*/, CsrAccess /*access*/, CsrReuse /*reuse*/) {}
  // Device memory nothing else touches until release_csr_space() (an evaluation's idle training
  // buffers), lent for copies of chunk CSRs that later passes read again (prefetch_csr with
  // CsrReuse::kAgain). release_csr_space() forgets those copies; every lane that read them has
  // been drained. A backend that reads chunk structures where they are ignores both.
  virtual void lend_csr_space(const std::vector<Mat>& /*regions*/) {}
  virtual void release_csr_space() {}
  // dst rows [dst_row, dst_row + src.rows) = src (contiguous device -> host).
  virtual void store_block(Mat src, HostMat dst, std::int64_t dst_row) = 0;
  // dst[dst_rows[i]] = owner_buf[owner_rows[i]] where owner_buf lives on `owner` (P2P pull).
  virtual void pull_rows(const Device& owner, Mat owner_buf, Idx owner_rows, Idx dst_rows,
                         Mat dst) = 0;
  // dst = src, dst on `peer` (same shape): one block copy into a peer's buffer (P2P put).
  virtual void put_block(Mat src, Device& peer, Mat dst) = 0;
  // dst[i] = src[src_rows[i]] for i < src_rows.size, dst on `peer` (dst.rows == src_rows.size):
  // rows gathered into a peer's buffer (P2P put).
  virtual void put_rows(Mat src, Idx src_rows, Device& peer, Mat dst) = 0;
  // host[host_rows[i]] += src[src_rows[i]] for i < host_rows.size, src[i] when src_rows is empty
  // (gradient flush of leaving rows; host_rows unique). The additions land in host memory later
  // than the lane's work: work that reads or writes the added rows must follow join_host_adds()
  // on its lane, or synchronize(). Additions into the same rows land in the order issued.
  // CUDA: the rows go into pinned staging on the current lane (a DMA copy for compact fp32 rows)
  // and CPU threads add them off the lanes; into a resident matrix the GPU adds at once. CPU:
  // a call's additions land at the next call, join_host_adds() or synchronize().
  virtual void flush_add_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) = 0;
  // Work issued later on the current lane starts after every flush_add_rows issued before on
  // this device has landed in host memory.
  virtual void join_host_adds() = 0;
  // host[host_rows[i]] = src[src_rows[i]], src[i] when src_rows is empty (first flush of a row:
  // no read of the host row; host_rows unique). CUDA: written by the GPU straight into mapped
  // host memory.
  virtual void flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) = 0;
  // dst = src[rows[i]] for i < rows.size (device-local gather into a compact matrix).
  virtual void gather_rows(Mat src, Idx rows, Mat dst) = 0;
  // dst[rows[i]] = src_i (device-local scatter of a compact matrix; rows unique).
  virtual void scatter_rows(Mat src, Idx rows, Mat dst) = 0;
  // The same with dropout: dst[rows[i], j] = src[i, j] * keep(key, keys[i], j) / (1 - rate), what
  // scatter_rows then dropout_rows(dst, rows, keys, key) give, in one pass.
  virtual void scatter_dropout_rows(Mat src, Idx rows, Mat dst, Idx keys,
                                    const DropoutKey& key) = 0;
  // Rows arriving in a merged buffer whose gradient twin starts from zero: what
  // scatter_dropout_rows(src, rows, dst, keys, key) then zero_rows(gradient, rows) give, reading
  // the index list once (it may lie in host memory).
  virtual void scatter_arrivals(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key,
                                Mat gradient) = 0;
  // dst[rows[i]] += src_i (device-local scatter-add of a compact matrix; rows may repeat).
  virtual void scatter_add_rows(Mat src, Idx rows, Mat dst) = 0;
  // dst[dst_rows[i]] = src[src_rows[i]], or += with RowCopy::kAdd (device-local; dst_rows
  // unique).
  virtual void copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, RowCopy mode) = 0;
  // dst[dst_rows[i]] = src[src_rows[i]] with scatter_dropout_rows' dropout of row i (keyed
  // keys[i]): what copy_rows then dropout_rows(dst, dst_rows, keys, key) give (the default), in
  // one pass where a backend fuses them.
  virtual void copy_dropout_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, Idx keys,
                                 const DropoutKey& key) {
    copy_rows(src, src_rows, dst_rows, dst, RowCopy::kOverwrite);
    if (key.rate > 0) dropout_rows(dst, dst_rows, keys, key);
  }
  virtual void zero_rows(Mat m, Idx rows) = 0;
  // m[i, j] = round_to_bf16(m[i, j]) (kernels/bfloat16.hpp) when `precision` is kBf16, nothing
  // for kFp32: device rows that stand in for a round trip through a host matrix of that
  // precision (rows handed to the next pass on the device, the kept tail) get the values the
  // round trip would give them. round_rows_to_host_precision does it for m's rows rows[i].
  virtual void round_to_host_precision(Mat m, HostPrecision precision) = 0;
  virtual void round_rows_to_host_precision(Mat m, Idx rows, HostPrecision precision) = 0;
  virtual void fill(Mat m, float value) = 0;
  virtual void copy(Mat src, Mat dst) = 0;  // same shape
  virtual const TransferCounters& counters() const = 0;
  virtual void reset_counters() = 0;

  // ---- dense / sparse compute ----
  // m[rows[i], j] *= keep(key, keys[i], j) / (1 - rate); keys are dataset vertex ids.
  virtual void dropout_rows(Mat m, Idx rows, Idx keys, const DropoutKey& key) = 0;
  // y = A x with A's entry weights (CsrWeights): `values` for a kPerCall matrix (nnz floats,
  // device), null for the derived kinds; x.rows == A.cols. y.rows <= A.rows: the product's first
  // y.rows rows (a CSR whose later rows only its transposed products read).
  virtual void spmm(Csr a, const float* values, Mat x, Mat y) = 0;
  // dx += A^T dy, weighted as spmm.
  virtual void spmm_transpose_add(Csr a, const float* values, Mat dy, Mat dx) = 0;
  // dx = A^T dy, weighted as spmm: every one of dx's A.cols rows is written (0 where no entry
  // of A lies in its column), so dx needs no zeroing first.
  virtual void spmm_transpose(Csr a, const float* values, Mat dy, Mat dx) = 0;
  // Rows [rows.begin, rows.end) of spmm_transpose (RowCopy::kOverwrite) or of
  // spmm_transpose_add (kAdd), dx's other rows untouched: a transposed product in parts, each
  // row the same sum as in one call.
  virtual void spmm_transpose_rows(Csr a, const float* values, Mat dy, Mat dx, RowRange rows,
                                   RowCopy write) = 0;
  // c = alpha * op_a(a) * op_b(b) + beta * c.
  virtual void gemm(Transpose op_a, Transpose op_b, float alpha, Mat a, Mat b, float beta,
                    Mat c) = 0;
  // out = act(z + bias) row-wise (bias: z.cols floats on device, may be null); out may alias z.
  virtual void bias_activation(Mat z, const float* bias, Activation act, Mat out) = 0;
  // The same, then dropout of row i keyed keys[i] (dropout_rows' mask): what bias_activation and
  // dropout_rows(out, 0..rows-1, keys, key) give, in one pass.
  virtual void bias_activation_dropout(Mat z, const float* bias, Activation act, Mat out, Idx keys,
                                       const DropoutKey& key) = 0;
  // dz = dout * act'(.) where `value` is the activation's input z for kElu/kRelu; for kRelu its
  // output relu(z) gives the same dz (the same sign test). dz may alias dout.
  virtual void activation_backward(Mat dout, Mat value, Activation act, Mat dz) = 0;
  // The backward of H = dropout(act(Z)) for a chunk's rows, with one mask for both results (row
  // i keyed keys[i], as dropout_rows keys it; key.rate 0: no dropout): dh = act'(z) *
  // dropout(dh), then z = dropout(act(z)), the H that a weight gradient reads. Gives exactly
  // dropout_rows(dh), activation_backward(dh, z, act, dh), bias_activation(z, null, act, z) and
  // dropout_rows(z) in one pass.
  virtual void dropout_activation_backward(Mat dh, Mat z, Activation act, Idx keys,
                                           const DropoutKey& key) = 0;
  // The same backward from a pre-activation given as in + bias (the bias added to every row),
  // writing H = dropout(act(z)) into h and leaving `in` as it is: exactly bias_activation(in,
  // bias, kNone, h), then dropout_activation_backward(dh, h, act, keys, key). head_dots, when
  // not empty (rows x K), gets what head_dots(dh, in, head_dots) would give after it: with GAT's
  // head outputs O as `in`, the dO^h . O^h that gat_input_backward takes.
  virtual void dropout_bias_activation_backward(Mat dh, Mat in, const float* bias, Activation act,
                                                Idx keys, const DropoutKey& key, Mat h,
                                                Mat head_dots) = 0;
  // dots[i, h] = a_i^h . b_i^h for K = dots.cols heads of a.cols / K columns each (a and b:
  // rows x K F): GAT's dO^h . O^h where no activation backward took them.
  virtual void head_dots(Mat a, Mat b, Mat dots) = 0;
  // The same backward for act = kRelu from the forward's H = dropout(relu(Z)) instead of Z:
  // dh = relu'(z) * dropout(dh) with relu'(z) read as h > 0 (h is positive exactly where the
  // mask keeps a positive z), the dh dropout_activation_backward(dh, z, kRelu, keys, key) gives,
  // bit for bit; h is only read.
  virtual void dropout_relu_backward_from_output(Mat dh, Mat h, Idx keys,
                                                 const DropoutKey& key) = 0;
  // out[j] += sum_i m[i, j] (out: m.cols floats on device).
  virtual void add_column_sums(Mat m, float* out) = 0;
  // y += alpha * x elementwise over n floats (device).
  virtual void axpy(std::int64_t n, float alpha, const float* x, float* y) = 0;

  // ---- loss and prediction ----
  // A row's mask holds its splits: bit 0 train (the rows of the loss), bit 1 valid, bit 2 test
  // (an empty mask: every row trains). For each row i with 0 <= labels[i] < classes and bit 0:
  // loss_sum += -log softmax(logits_i)[y]; grad_i = scale * (softmax(logits_i) - onehot(y));
  // other rows' grad = 0. predictions[i] = argmax_j logits_i (lowest index on ties); split_counts
  // count, per bit k, the labeled rows with bit k and those whose prediction is their label. The
  // host-visible outputs (each optional) are valid after synchronize(). grad may be an empty Mat
  // (evaluation).
  virtual void softmax_cross_entropy(Mat logits, Idx labels, Idx mask, float scale, Mat grad,
                                     const LossOutputs& out) = 0;

  // ---- GAT (docs/model-math.md); `a` is the chunk CSR whose row i starts with its self entry;
  //      z: a.cols x K*F (transformed merged rows); row_keys: dataset ids of the rows' vertices.
  // Computes el (a.cols x K; with SourceScores::kKept it takes el as it is: the caller kept the
  // rows' scores current with gat_source_scores), er (a.rows x K), alpha (nnz x K, after
  // softmax, BEFORE attention dropout) and out (a.rows x K*F, heads concatenated, using
  // dropped-out alpha when key.rate > 0). Intermediates are caller-owned device matrices.
  virtual void gat_forward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                           Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                           Mat out, SourceScores source_scores) = 0;
  // gat_forward's el, er and alpha alone, bit for bit, without the weighted sums: for a backward
  // pass that kept the layer's head outputs (alpha is before attention dropout, so no key).
  virtual void gat_coefficients(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                                Mat el, Mat er, Mat alpha, SourceScores source_scores) = 0;
  // el[rows[i], h] = z[rows[i], h*F .. h*F+F) . att_src[h*F .. h*F+F): the source scores of the
  // rows of z that changed.
  virtual void gat_source_scores(Mat z, Idx rows, const float* att_src, int heads, Mat el) = 0;
  // Given dout (a.rows x K*F, gradient w.r.t. concatenated O), accumulates: dz (a.cols x K*F)
  // +=, d_att_src/d_att_dst (K*F each) +=. Uses the same inputs as gat_forward, and its outputs
  // el, er, alpha and out (O itself: a backend may take the softmax backward's per-row sums
  // sum_k alpha_k d(alpha)_k as dO^h . O^h from it).
  virtual void gat_backward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                            Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                            Mat alpha, Mat out, Mat dout, Mat dz, float* d_att_src,
                            float* d_att_dst) = 0;
  // ---- GAT over input rows (a layer 0 that attends before it transforms, docs/model-math.md):
  //      x: a.cols x D (the merged input rows, after dropout); el (a.cols x K) and er (a.rows x K)
  //      are the scores x_u W^h a_src^h and x_self W^h a_dst^h, given (the caller multiplies,
  //      or gat_input_scores() forms them).
  // The scores where every row's self column is its own row: el (x.rows x K) = x folded[:, 0:K)
  // and er (er.rows x K, er.rows <= x.rows) = x's first er.rows rows times folded[:, K:2K),
  // folded: x.cols x 2K (W^h a_src^h, then W^h a_dst^h). The two products in one read of x.
  virtual void gat_input_scores(Mat x, Mat folded, int heads, Mat el, Mat er) = 0;
  // Writes alpha (nnz x K, after softmax, BEFORE attention dropout, the coefficients gat_forward
  // would compute from the same scores) and agg (a.rows x K*D): agg_i^h = sum_k alpha~_k^h x[u_k],
  // from which O^h = agg^h W^h.
  virtual void gat_input_forward(Csr a, Mat x, int heads, Idx row_keys,
                                 const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                 Mat agg) = 0;
  // Its backward up to the scores. head_dots (a.rows x K): dout_i^h . out_i^h with O and
  // dL/dO (head_dots(), or dropout_bias_activation_backward's); g (a.rows x K*D):
  // dout^h W^hT, so that dL/dalpha~_ik^h = g_i^h . x[u_k]. With the entry score gradients
  // ds_ik^h = LeakyReLU'(e_ik^h) alpha_ik^h (m_ik^h g_i^h . x[u_k] - head_dots[i, h])
  // (m the attention-dropout scale), writes sums (2K x D): row h = sum over entries ds x[u_k]
  // (the source scores' share), row K + h = sum over rows (sum_k ds_ik^h) x[self_i] (the
  // destination scores'). Then dL/da_src^h = sums_h W^h, dW^h += sums_h^T a_src^h, and the same
  // with row K + h and a_dst.
  virtual void gat_input_backward(Csr a, Mat x, int heads, Idx row_keys,
                                  const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                  Mat head_dots, Mat g, Mat sums) = 0;
  // Output-layer helpers: out (rows x F) = mean over heads of in (rows x K*F), and its backward
  // din (rows x K*F) = dout / K broadcast to every head.
  virtual void head_mean(Mat in, int heads, Mat out) = 0;
  virtual void head_mean_backward(Mat dout, int heads, Mat din) = 0;

  // ---- optimizer (parameters as flat device arrays of n floats) ----
  // g += weight_decay * w; then SGD or Adam (docs/model-math.md). step counts from 1.
  virtual void sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g) = 0;
  virtual void adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, std::int64_t step, float* w, float* g, float* m,
                         float* v) = 0;

  // ---- lanes, markers and timers (see Lane) ----
  virtual void set_lane(Lane lane) { (void)lane; }
  virtual Lane lane() const { return Lane::kCompute; }
  // mark(m): remembers the current end of the current lane's queue; wait(m): work issued later
  // on the current lane starts only after the work before the last mark(m). A wait on a marker
  // never marked is a no-op.
  virtual void mark(int marker) { (void)marker; }
  virtual void wait(int marker) { (void)marker; }
  // The same for another device's marker: work issued later on this device's current lane
  // starts only after the work `other` queued before its last mark(marker) (cross-device order
  // without blocking the host; CUDA: an event of the other GPU).
  virtual void wait_peer(Device& other, int marker) {
    (void)other;
    (void)marker;
  }
  // Times the work issued on the current lane between phase_begin and phase_end (CUDA: timing
  // events; CPU: wall clock, as operations run at issue). Ranges of one phase must not nest;
  // `tag` labels the range in the timeline.
  virtual void phase_begin(Phase phase, std::int32_t tag) = 0;
  virtual void phase_end(Phase phase) = 0;
  // Marks "now" on the compute lane as time 0 of the timeline (call when the device is idle,
  // right after a synchronize(), so that the origins of all devices agree).
  virtual void set_time_origin() = 0;
  // Adds the seconds of every range completed so far to seconds[phase], appends the ranges to
  // *timeline when given, and forgets them (call after synchronize()).
  virtual void take_phase_times(double seconds[kPhases], std::vector<PhaseRange>* timeline) = 0;

  // Waits for the work of every lane (host functions included).
  virtual void synchronize() = 0;
  // Waits for the work of one lane (host functions included); the other lanes run on.
  virtual void synchronize_lane(Lane lane) {
    (void)lane;
    synchronize();
  }

 protected:
  // read_matrix() where the host addresses m's elements (a host matrix, or a CPU device's
  // resident copy).
  void read_addressable_matrix(const HostMat& m, void* out);
};

// Issues work on one lane of a device for a scope, then returns to the compute lane.
class LaneScope {
 public:
  LaneScope(Device& device, Lane lane) : device_(device) { device_.set_lane(lane); }
  ~LaneScope() { device_.set_lane(Lane::kCompute); }
  LaneScope(const LaneScope&) = delete;
  LaneScope& operator=(const LaneScope&) = delete;

 private:
  Device& device_;
};

// A set of devices plus host memory. The CPU backend creates P CpuDevices; the CUDA backend maps
// P logical devices round-robin onto the visible GPUs.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int num_devices() const = 0;
  virtual Device& device(int index) = 0;
  // Host matrix (pinned + mapped on CUDA) of `precision` elements, zero-initialized; owned by
  // the backend.
  virtual HostMat alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                             const std::string& what) = 0;
  HostMat alloc_host(std::int64_t rows, std::int64_t cols, const std::string& what) {
    return alloc_host(rows, cols, HostPrecision::kFp32, what);
  }
  // Frees a matrix alloc_host returned (whole, not a block of it), once no device operation
  // reads or writes it any more: every device works on resident copies of its rows.
  virtual void release_host(const HostMat& m) = 0;
  // buffers[d] (n floats on device d) = sum over all devices, on every device.
  virtual void all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) = 0;
  // Host blocks until every device's queued work (every lane, host functions included) has
  // finished.
  virtual void synchronize_all() = 0;
  // Orders devices against each other without blocking the host: work queued on any device's
  // compute lane after barrier() starts only after all work queued on every device's compute
  // lane before it (host functions queued there and every flush_add_rows included; other lanes
  // are ordered by markers).
  // Serves the schedule's phase boundaries (cross-device reads and writes, host matrices written by
  // one device and read by another). Host-visible results (loss sums, predictions) and host writes
  // to memory the devices use still need synchronize_all(). Default: synchronize_all().
  virtual void barrier() { synchronize_all(); }
  // The bytes device `index` may hold in all before its optional placements (overlap buffers,
  // resident vertex data) stop for want of room: its budget less the share it keeps free, else
  // its share of its GPU's free memory less the share kept free there; -1 where placements are
  // not bounded by device memory (the CPU backend, which keeps no resident copies).
  virtual std::int64_t placement_capacity(int index) const {
    (void)index;
    return -1;
  }
  // Sets of devices whose setup (buffer allocations, constant uploads) may run side by side, a
  // set's devices one after the other: devices that share nothing but thread-safe host memory.
  // Default: every device in one set.
  virtual std::vector<std::vector<int>> setup_groups() const;
};

// How the CUDA backend moves rows between logical devices (pull_rows, put_block, put_rows).
enum class PeerAccess {
  kAuto,  // direct reads and writes where the GPUs allow them (always on one GPU), else staged
          // through host memory
  kOff,   // always staged (cudaMemcpyPeer, host-staged where needed): for machines whose
          // peer-to-peer path is broken; logical devices sharing a GPU stage too
};
const char* peer_access_name(PeerAccess access);  // "auto", "off"
// Parses "auto" or "off"; throws InputError naming `option` otherwise.
PeerAccess parse_peer_access(const std::string& text, const std::string& option);

// The CPU backend's devices and host matrices (Device::try_make_resident): kHostOnly, every host
// matrix stays in host memory, as a device without memory of its own; kResidentCopies, a device
// takes resident copies within its budget as a GPU does, so that the schedule's paths for vertex
// data in device memory (resident pulls, sends into the peers' slots, the next step's inputs
// queued in place) run and are checked without a GPU.
enum class CpuResidence { kHostOnly, kResidentCopies };

struct BackendOptions {
  int partitions = 1;                          // logical devices
  int gpus = 1;                                // CUDA: physical GPUs to use
  std::int64_t memory_budget = 0;              // bytes per device (0 = unlimited / physical)
  int threads = 0;                             // CPU threads (0 = OpenMP default)
  bool tf32 = false;                           // CUDA: allow TF32 in cuBLAS
  PeerAccess peer_access = PeerAccess::kAuto;  // CUDA
  // CUDA: time every operation (and GAT sub-kernel) on the device, sum the times per name and
  // lane over the run, leaving out the first Device::take_phase_times collection (warm-up),
  // and log the sums when the backend goes away. Costs a pair of timing events per operation.
  bool op_times = false;
  CpuResidence cpu_residence = CpuResidence::kHostOnly;  // CPU
};

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
// Defined only when built with CUDA; throws InputError when no GPU is usable.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);
bool cuda_backend_available();  // built with CUDA and at least one GPU present

}  // namespace sluice
