// CpuDevice: one logical device of the CPU backend (kernels/ops.hpp) on host memory, with
// OpenMP-parallel loops and OpenBLAS GEMM. It is the numerical reference of the operators, so
// every reduction is deterministic (independent of the thread count): transposed sparse products
// run as gathers over a transposed index built at upload time, scatter-adds group additions by
// destination row (one thread per row, in order), and column sums reduce fixed row blocks in a
// fixed order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/ops.hpp"

namespace sluice {

// A zero-initialized, 64-byte-aligned host allocation (move-only).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// The structure of an uploaded CSR plus its transpose (CSC), kept by the device under Csr::id.
// The transpose lists, per column, the rows and the entry positions (to index entry values).
struct CpuCsr {
  std::int64_t rows = 0, cols = 0, nnz = 0;
  std::vector<edge_t> indptr;     // rows + 1
  std::vector<vertex_t> columns;  // nnz
  std::vector<edge_t> t_indptr;   // cols + 1
  std::vector<vertex_t> t_rows;   // nnz: row of each transposed entry
  std::vector<edge_t> t_entry;    // nnz: position of the entry in `columns` / values
  CsrWeights weights = CsrWeights::kPerCall;
  // The derived kinds' weights, computed once at upload (like the transpose, this backend's own
  // acceleration structure): the products read them as they read per-call values.
  std::vector<float> derived;
};

class CpuDevice final : public Device {
 public:
  CpuDevice(int index, std::int64_t memory_budget, CpuResidence residence);

  int index() const override { return index_; }
  std::string name() const override;

  Mat alloc(std::int64_t rows, std::int64_t cols, const std::string& what) override;
  void release(Mat m) override;
  Idx upload(const std::vector<vertex_t>& values, const std::string& what) override;
  using Device::upload_csr;
  Csr upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                 std::int64_t num_cols, const CsrWeighting& weighting,
                 const std::string& what) override;
  Mat upload_constant(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                      const std::string& what) override;
  // A resident copy within the budget where the backend takes them (CpuResidence).
  HostMat try_make_resident(HostMat m, const std::string& what) override;
  void read_matrix(const HostMat& m, void* out) override;
  // Bytes of read-only constants kept outside the budget because they did not fit.
  std::int64_t host_constant_bytes() const { return host_constant_bytes_; }
  std::int64_t bytes_in_use() const override { return bytes_in_use_; }
  std::int64_t peak_bytes() const override { return peak_bytes_; }
  void write(const float* host, std::int64_t count, float* device) override;
  void read(const float* device, std::int64_t count, float* host) override;

  void load_rows(HostMat src, Idx src_rows, Idx dst_rows, Mat dst) override;
  void load_block(HostMat src, std::int64_t src_row, Mat dst) override;
  void prefetch_csr(Csr a, CsrAccess access, CsrReuse reuse) override;
  void lend_csr_space(const std::vector<Mat>& regions) override;
  void release_csr_space() override;
  void store_block(Mat src, HostMat dst, std::int64_t dst_row) override;
  void pull_rows(const Device& owner, Mat owner_buf, Idx owner_rows, Idx dst_rows,
                 Mat dst) override;
  void put_block(Mat src, Device& peer, Mat dst) override;
  void put_rows(Mat src, Idx src_rows, Device& peer, Mat dst) override;
  void flush_add_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) override;
  void join_host_adds() override { land_pending_add(); }
  void flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) override;
  void gather_rows(Mat src, Idx rows, Mat dst) override;
  void scatter_rows(Mat src, Idx rows, Mat dst) override;
  void scatter_dropout_rows(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key) override;
  void scatter_arrivals(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key,
                        Mat gradient) override;
  void scatter_add_rows(Mat src, Idx rows, Mat dst) override;
  void copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, RowCopy mode) override;
  void zero_rows(Mat m, Idx rows) override;
  void round_to_host_precision(Mat m, HostPrecision precision) override;
  void round_rows_to_host_precision(Mat m, Idx rows, HostPrecision precision) override;
  void fill(Mat m, float value) override;
  void copy(Mat src, Mat dst) override;
  const TransferCounters& counters() const override { return counters_; }
  void reset_counters() override { counters_ = TransferCounters{}; }

  void dropout_rows(Mat m, Idx rows, Idx keys, const DropoutKey& key) override;
  void spmm(Csr a, const float* values, Mat x, Mat y) override;
  void spmm_transpose_add(Csr a, const float* values, Mat dy, Mat dx) override;
  void spmm_transpose(Csr a, const float* values, Mat dy, Mat dx) override;
  void spmm_transpose_rows(Csr a, const float* values, Mat dy, Mat dx, RowRange rows,
                           RowCopy write) override;
  void gemm(Transpose op_a, Transpose op_b, float alpha, Mat a, Mat b, float beta, Mat c) override;
  void bias_activation(Mat z, const float* bias, Activation act, Mat out) override;
  void bias_activation_dropout(Mat z, const float* bias, Activation act, Mat out, Idx keys,
                               const DropoutKey& key) override;
  void activation_backward(Mat dout, Mat value, Activation act, Mat dz) override;
  void dropout_activation_backward(Mat dh, Mat z, Activation act, Idx keys,
                                   const DropoutKey& key) override;
  void dropout_relu_backward_from_output(Mat dh, Mat h, Idx keys, const DropoutKey& key) override;
  void dropout_bias_activation_backward(Mat dh, Mat in, const float* bias, Activation act, Idx keys,
                                        const DropoutKey& key, Mat h, Mat head_dots) override;
  void head_dots(Mat a, Mat b, Mat dots) override;
  void add_column_sums(Mat m, float* out) override;
  void axpy(std::int64_t n, float alpha, const float* x, float* y) override;

  void softmax_cross_entropy(Mat logits, Idx labels, Idx mask, float scale, Mat grad,
                             const LossOutputs& out) override;

  void gat_forward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                   Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                   Mat out, SourceScores source_scores) override;
  void gat_coefficients(Csr a, Mat z, const float* att_src, const float* att_dst, int heads, Mat el,
                        Mat er, Mat alpha, SourceScores source_scores) override;
  void gat_source_scores(Mat z, Idx rows, const float* att_src, int heads, Mat el) override;
  void gat_backward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                    Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                    Mat out, Mat dout, Mat dz, float* d_att_src, float* d_att_dst) override;
  void gat_input_scores(Mat x, Mat folded, int heads, Mat el, Mat er) override;
  void gat_input_forward(Csr a, Mat x, int heads, Idx row_keys, const DropoutKey& attention_key,
                         Mat el, Mat er, Mat alpha, Mat agg) override;
  void gat_input_backward(Csr a, Mat x, int heads, Idx row_keys, const DropoutKey& attention_key,
                          Mat el, Mat er, Mat alpha, Mat head_dots, Mat g, Mat sums) override;
  void head_mean(Mat in, int heads, Mat out) override;
  void head_mean_backward(Mat dout, int heads, Mat din) override;

  void sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g) override;
  void adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                 std::int64_t step, float* w, float* g, float* m, float* v) override;

  // Operations run at issue: a phase's time is the host time between begin and end.
  void phase_begin(Phase phase, std::int32_t tag) override;
  void phase_end(Phase phase) override;
  void set_time_origin() override;
  void take_phase_times(double seconds[kPhases], std::vector<PhaseRange>* timeline) override;

  // synchronize() lands the held flush_add_rows; synchronize_lane() does not, as on CUDA.
  void synchronize() override { land_pending_add(); }
  void synchronize_lane(Lane) override {}

 private:
  // Accounts `bytes` against the budget (throws OutOfDeviceMemory naming `what`).
  void account(std::int64_t bytes, const std::string& what);
  // Accounts a read-only constant; over the budget it is counted in host_constant_bytes_.
  void account_constant(std::int64_t bytes, const std::string& what);
  const CpuCsr& csr(const Csr& a) const;
  // The matrix for a product that reads `access`. prefetch_csr()'s announcements are kept as the
  // CUDA backend keeps its two staging slots and its copies in lent space; a product that finds
  // its access in none counts what it reads of the CSR in h2d_csr_in_line_bytes, as prefetches
  // count theirs in h2d_csr_bytes, as if every CSR lived in host memory, so that the schedule's
  // announcements are checked without a GPU.
  const CpuCsr& product_csr(const Csr& a, CsrAccess access);
  // Whether the announcements kept in lent space hold `a`'s rows (if `rows`) and transpose (if
  // `transposed`), as CudaDevice::kept_csr() finds a kept copy.
  bool kept_holds(const Csr& a, bool rows, bool transposed) const;
  // Rows `rows` of dx (=|+=) A^T dy: spmm_transpose (kStore), spmm_transpose_add (kAdd) and
  // spmm_transpose_rows.
  enum class ProductWrite { kStore, kAdd };
  void transposed_product(Csr a, const float* values, Mat dy, Mat dx, ProductWrite write,
                          RowRange rows, const char* operation);
  // The argument checks of flush_add_rows and flush_store_rows: the shared shapes
  // (expect_flush_shapes) and index arrays with data.
  static void expect_flush(const char* operation, Mat src, Idx src_rows, Idx host_rows,
                           HostMat host);
  // Adds the held flush_add_rows into its host matrix, if one is held.
  void land_pending_add();

  int index_;
  std::int64_t memory_budget_;
  CpuResidence residence_;
  std::int64_t bytes_in_use_ = 0;
  std::int64_t peak_bytes_ = 0;
  std::int64_t host_constant_bytes_ = 0;
  std::vector<AlignedBuffer> buffers_;
  std::vector<std::unique_ptr<std::vector<vertex_t>>> index_arrays_;
  std::vector<std::unique_ptr<CpuCsr>> csrs_;
  TransferCounters counters_;
  // The last flush_add_rows, held until the next one, join_host_adds() or synchronize(): the
  // CUDA backend's additions land late too, and a schedule that reads a host row before it
  // joins them then computes wrong numbers here as well, every time.
  struct PendingAdd {
    std::vector<float> rows;  // the source rows, compact
    std::vector<vertex_t> host_rows;
    HostMat host;
  };
  std::optional<PendingAdd> pending_add_;
  double time_origin_ = 0;
  PhaseRange open_[kPhases];  // begin in host seconds until phase_end
  std::vector<PhaseRange> ranges_;
  std::vector<float> scratch_;  // per-entry temporaries of gat_backward (not device memory)
  struct AnnouncedCsr {
    int id = -1;
    bool rows = false, transposed = false;
  };
  AnnouncedCsr announced_[2];  // prefetch_csr(); the next announcement takes next_announced_
  int next_announced_ = 0;
  // lend_csr_space(): what is left of each region, and the announcements kept there (by id).
  struct CsrSpace {
    char* next = nullptr;
    std::int64_t bytes = 0;
  };
  std::vector<CsrSpace> csr_space_;
  std::map<int, AnnouncedCsr> kept_;
};

// The CPU backend: P CpuDevices and zero-initialized host matrices.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options);
  std::string name() const override { return "cpu"; }
  int num_devices() const override { return static_cast<int>(devices_.size()); }
  Device& device(int index) override;
  using Backend::alloc_host;
  HostMat alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                     const std::string& what) override;
  void release_host(const HostMat& m) override;
  void all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) override;
  void synchronize_all() override {}

 private:
  std::vector<std::unique_ptr<CpuDevice>> devices_;
  std::mutex host_mutex_;
  std::vector<AlignedBuffer> host_buffers_;
};

}  // namespace sluice
