// The CUDA implementation of kernels/ops.hpp: CudaDevice (one logical device = one partition,
// with its own streams, cuBLAS handle and accounted memory) and CudaBackend (P logical
// devices mapped round-robin onto the physical GPUs, pinned host matrices, NCCL all-reduce).
// CudaDevice is defined by concern, as CpuDevice is: cuda_device.cpp (construction, memory,
// lanes and timers), cuda_transfers.cpp, cuda_compute.cpp and cuda_gat.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/host_adds.hpp"
#include "kernels/cuda/memory.hpp"
#include "kernels/cuda/resources.hpp"
#include "kernels/cuda/row_spmm.hpp"
#include "kernels/cuda/sparse.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

inline constexpr std::int64_t kFloat = sizeof(float);  // bytes of one matrix element

// State shared by the devices of one backend.
struct BackendShared {
  BackendOptions options;
  int used_gpus = 1;
  // direct_peer[a][b]: GPU a's kernels may read and write GPU b's memory. False for every pair,
  // a GPU with itself included, with PeerAccess::kOff (every peer transfer is staged).
  std::vector<std::vector<bool>> direct_peer;
  PinnedRegistry host_memory;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, int gpu, BackendShared& shared);
  ~CudaDevice() override;

  int index() const override { return index_; }
  std::string name() const override { return name_; }
  int gpu() const { return gpu_; }
  // The compute lane's stream (cuBLAS, barriers, all-reduce).
  cudaStream_t stream() const { return lanes_[0].get(); }
  cudaEvent_t event() const { return event_.get(); }

  Mat alloc(std::int64_t rows, std::int64_t cols, const std::string& what) override;
  // Allocates only while the constants' headroom stays free (see ConstantStore).
  Mat try_alloc(std::int64_t rows, std::int64_t cols, const std::string& what) override;
  Idx upload(const std::vector<vertex_t>& values, const std::string& what) override;
  using Device::upload_csr;
  Csr upload_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                 std::int64_t num_cols, const CsrWeighting& weighting,
                 const std::string& what) override;
  // Read-only constants try the budgeted device memory first and otherwise stay in pinned,
  // mapped host memory owned by this device, read zero-copy (see ConstantStore).
  Mat upload_constant(const std::vector<float>& values, std::int64_t rows, std::int64_t cols,
                      const std::string& what) override;
  // Bytes of constants kept in pinned host memory (not counted by bytes_in_use()).
  std::int64_t host_constant_bytes() const { return constants_.host_bytes(); }
  std::int64_t bytes_in_use() const override { return account_.in_use(); }
  std::int64_t peak_bytes() const override { return account_.peak(); }
  void write(const float* host, std::int64_t count, float* device) override;
  void read(const float* device, std::int64_t count, float* host) override;
  void release(Mat m) override;
  // Charged to the budget with the constants' headroom left; the pinned host matrix stays.
  HostMat try_make_resident(HostMat m, const std::string& what) override;
  void read_matrix(const HostMat& m, void* out) override;

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
  void join_host_adds() override;
  void flush_store_rows(Mat src, Idx src_rows, Idx host_rows, HostMat host) override;
  void gather_rows(Mat src, Idx rows, Mat dst) override;
  void scatter_rows(Mat src, Idx rows, Mat dst) override;
  void scatter_dropout_rows(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key) override;
  void scatter_arrivals(Mat src, Idx rows, Mat dst, Idx keys, const DropoutKey& key,
                        Mat gradient) override;
  void scatter_add_rows(Mat src, Idx rows, Mat dst) override;
  void copy_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, RowCopy mode) override;
  void copy_dropout_rows(Mat src, Idx src_rows, Idx dst_rows, Mat dst, Idx keys,
                         const DropoutKey& key) override;
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
  void dropout_bias_activation_backward(Mat dh, Mat in, const float* bias, Activation act, Idx keys,
                                        const DropoutKey& key, Mat h, Mat head_dots) override;
  void head_dots(Mat a, Mat b, Mat dots) override;
  void dropout_relu_backward_from_output(Mat dh, Mat h, Idx keys, const DropoutKey& key) override;
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

  // Lanes are streams: compute at the GPU's highest priority, transfer and store at the lowest
  // (prefetches fill the SMs the compute kernels leave idle).
  void set_lane(Lane lane) override { lane_ = static_cast<int>(lane); }
  Lane lane() const override { return static_cast<Lane>(lane_); }
  void mark(int marker) override;
  void wait(int marker) override;
  void wait_peer(Device& other, int marker) override;
  void phase_begin(Phase phase, std::int32_t tag) override;
  void phase_end(Phase phase) override;
  void set_time_origin() override;
  void take_phase_times(double seconds[kPhases], std::vector<PhaseRange>* timeline) override;

  void synchronize() override;
  void synchronize_lane(Lane lane) override;

 private:
  // A buffer of `bytes` into `out` when it fits the budget (or the GPU) with the constants'
  // headroom left (ConstantStore::leaves_headroom); false, `out` untouched, otherwise.
  bool try_allocate(std::int64_t bytes, const std::string& what, AccountedBuffer& out);
  // A rows x cols matrix in `buffer`, which the device keeps (allocations_) until it goes away.
  Mat keep_matrix(AccountedBuffer buffer, std::int64_t rows, std::int64_t cols);
  // The current lane's stream: every operation is issued there.
  cudaStream_t cur() const { return lanes_[lane_].get(); }
  // cuBLAS and the GAT scratch are bound to the compute lane.
  void expect_compute_lane(const char* operation) const {
    SLUICE_EXPECTS(lane_ == 0, operation, " must be issued on the compute lane");
  }
  const DeviceCsr& csr(Csr a) const;
  // Chunk CSR arrays copied from pinned host memory into device scratch: one bulk copy per array
  // instead of zero-copy reads by every kernel, which are latency-bound. Each array sits at its
  // offset in the matrix's full layout, so arrays a later product reads join those already there.
  struct StagedCsr {
    Scratch buffer;
    int id = -1;
    unsigned arrays = 0;                   // bit i: array i of kStagedArrays is there
    const float* values_source = nullptr;  // the per-call values staged with it (host memory)
    const float* values = nullptr;         // their staged copy
    std::unique_ptr<DeviceCsr> view;
    Event ready;  // prefetch slots: recorded on the transfer lane after the copies
  };
  // The device memory of a prefetch slot, sized (once) for the largest matrix's staged layout.
  char* slot_base(StagedCsr& slot, const DeviceCsr& m, std::int64_t values_bytes,
                  cudaStream_t stream);
  // Copies the arrays in `arrays` that `slot` lacks (and host `values` when given) on `stream`
  // to `base`, where the arrays of `layout` lie in kStagedArrays' order (a slot: every host
  // array, so arrays a later product reads join those already there; a kept copy: only those it
  // holds).
  void stage_csr_arrays(StagedCsr& slot, Csr a, char* base, unsigned layout, unsigned arrays,
                        const float* values, cudaStream_t stream);
  StagedCsr* kept_csr(Csr a, unsigned wanted);
  // The matrix for a product on the compute lane that reads `access`, with every array it reads
  // in device memory (and *values, per-call entry values, when kept in host memory): from a
  // prefetch slot (the compute lane waits for its copy), else staged on the compute lane into
  // compute_csr_, kept while the same matrix comes back.
  const DeviceCsr& resident_csr(Csr a, CsrAccess access, const float** values = nullptr);
  // The device-visible address of rows [first_row, first_row + rows) of a host matrix.
  void* host_device_pointer(const HostMat& m, std::int64_t first_row, std::int64_t rows) const;
  // y (=|+=) A x by the row SpMM over m or its transposed CSR; values: m's per-call values in
  // its entry order (read through the transpose's permutation when walking the transpose), or
  // null for derived weights (computed per entry).
  // Rows `rows` of dx (=|+=) A^T dy by the row SpMM over the transpose: spmm_transpose,
  // spmm_transpose_add, spmm_transpose_rows.
  void transposed_product(Csr a, const float* values, Mat dy, Mat dx, RowSpmmWrite write,
                          RowRange rows, const char* operation);
  // src (on this GPU) into dst on GPU target_gpu, on the current lane, by a copy engine: put_block
  // and put_rows' staged copies.
  void copy_block_to(Mat src, int target_gpu, Mat dst);
  // Rows `rows` of y (=|+=) A x (over = kMatrix) or A^T x (kTransposed).
  void row_spmm(const DeviceCsr& m, RowSpmmOver over, const float* values, Mat x, Mat y,
                RowSpmmWrite write, RowRange rows);
  // dz[u] += sum over A's entries (v -> u) of weights[e * heads + h] * dout[v] per head, over
  // the transposed CSR (the GAT warp-per-row kernels); weights in A's entry order when m has a
  // transpose permutation, else in the transposed order.
  void transposed_aggregate(const DeviceCsr& m, const float* weights, int heads, std::int64_t width,
                            Mat dout, Mat dz);
  // Logs, once, how many bytes of constants live in host memory (called by the first
  // operations after setup, when every constant has been placed).
  // Every operation calls it: the first ends setup, freeing the upload scratch (upload_csr makes
  // it again if called later), and it logs once where the constants went.
  void finish_setup() {
    csr_upload_scratch_.reset();
    if (!host_constants_reported_ && constants_.host_bytes() > 0) log_host_constants();
  }
  void log_host_constants();

  int index_;
  int gpu_;
  // Grid caps of the zero-copy kernels that write over the host link and of those that read
  // over it (0: none).
  unsigned host_write_blocks_ = 0, host_read_blocks_ = 0;
  std::string name_;
  BackendShared& shared_;
  MemoryAccount account_;    // before every AccountedBuffer member
  ConstantStore constants_;  // before every ConstantBuffer member (owns the host slabs)
  std::vector<ConstantBuffer> constant_buffers_;
  bool host_constants_reported_ = false;
  Stream lanes_[kLanes];
  int lane_ = 0;
  Event event_;
  Event markers_[kMarkers];
  bool marked_[kMarkers] = {};
  // Phase timers: a pool of timing-event pairs, reused after take_phase_times().
  struct TimedRange {
    Event begin, end;
    int phase = 0;
    int lane = 0;
    std::int32_t tag = 0;
  };
  std::vector<TimedRange> timers_;
  // Operation timers (BackendOptions::op_times): OpScope records a pair of timing events around
  // one operation; take_phase_times() sums the finished ones into op_totals_ (lane, name).
  struct OpRange {
    Event begin, end;
    const char* name = nullptr;
    int lane = 0;
    std::int32_t tag = 0;  // of the lane's latest phase range
  };
  class OpScope {
   public:
    OpScope(CudaDevice& d, const char* name) : d_(d), index_(d.op_begin(name)) {}
    ~OpScope() { d_.op_end(index_); }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    CudaDevice& d_;
    const int index_;
  };
  int op_begin(const char* name);  // -1 when off
  void op_end(int index);          // never throws (runs in destructors)
  void collect_op_times();
  std::vector<OpRange> op_ranges_;
  std::size_t op_used_ = 0;
  int op_collections_ = 0;
  struct OpTotal {
    double ms = 0;
    std::int64_t calls = 0;
  };
  std::map<std::pair<int, std::string>, OpTotal> op_totals_;
  Event time_origin_;  // timing event; recorded by set_time_origin()
  bool has_time_origin_ = false;
  std::size_t timers_used_ = 0;
  int open_timer_[kPhases] = {-1, -1, -1, -1, -1};
  std::int32_t lane_tags_[kLanes] = {};  // each lane's latest phase_begin tag
  CublasHandle cublas_;
  std::vector<AccountedBuffer> allocations_;
  std::vector<AccountedBuffer> resident_matrices_;  // try_make_resident()
  std::vector<std::unique_ptr<DeviceCsr>> csrs_;
  // resident_csr(), prefetch_csr(): two slots, each sized for the largest matrix; a prefetch
  // takes next_staged_ (the slot it did not take last).
  StagedCsr staged_csr_[2];
  int next_staged_ = 0;
  // lend_csr_space(): what is left of each lent region, and the copies prefetch_csr() kept there
  // (CsrReuse::kAgain) by matrix id, each with the event its copies recorded.
  struct CsrSpace {
    char* next = nullptr;
    std::int64_t bytes = 0;
  };
  std::vector<CsrSpace> csr_space_;
  std::map<int, StagedCsr> kept_csrs_;
  std::int64_t kept_csr_bytes_ = 0, csrs_not_kept_ = 0;  // since lend_csr_space(), for one log line
  bool kept_csrs_logged_ = false;
  std::int64_t staged_slot_bytes_ = 0;
  std::int64_t largest_staged_csr_ = 0;  // over csrs_[0, staged_csrs_measured_)
  std::size_t staged_csrs_measured_ = 0;
  double csr_prepare_seconds_ = 0;  // upload_csr's time besides placing its arrays
  CsrUploadSeconds csr_seconds_;
  std::unique_ptr<CsrUploadScratch> csr_upload_scratch_;    // freed by finish_setup()
  std::map<const float*, std::int64_t> host_values_bytes_;  // upload_constant()s in host memory
  Scratch staging_, peer_source_;
  // flush_add_rows into host matrices: CPU threads add the staged rows (made by the first).
  std::unique_ptr<HostAdds> host_adds_;
  Scratch gat_dalpha_, gat_atilde_, gat_del_, gat_der_;
  Scratch gat_input_partials_;                               // gat_input_backward's per-slice sums
  float* merged_row_scratch(const DeviceCsr& m, int heads);  // gat_del_ (cuda_gat.cpp)
  Scratch column_partials_;    // per-slice column sums (elementwise.hpp), reduced in order
  Scratch long_segment_sums_;  // the row SpMM's split long rows, a row per segment (row_spmm.hpp)
  // softmax_cross_entropy()'s results stay on the device until synchronize() hands them over
  // (deliver_losses()), so no call waits on a host function: a slot of accumulators (the loss,
  // then 6 split counters) per distinct target, and the evaluation's predictions copied into
  // pinned staging.
  struct LossTarget {
    double* loss_sum = nullptr;
    SplitCounts* split_counts = nullptr;
  };
  struct PendingPredictions {
    std::int32_t* to = nullptr;
    std::int64_t offset = 0, rows = 0;
  };
  void deliver_losses();                  // after the compute lane finished every pending call
  std::vector<LossTarget> loss_targets_;  // slot k's target; empty: the slots need zeroing
  std::vector<PendingPredictions> pending_predictions_;
  std::int64_t pending_prediction_rows_ = 0;
  static constexpr std::int64_t kIndexBytes = sizeof(std::int32_t);
  Scratch loss_accumulator_, predictions_;
  PinnedScratch host_loss_, host_predictions_;
  TransferCounters counters_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options);
  ~CudaBackend() override;
  std::string name() const override;
  int num_devices() const override { return static_cast<int>(devices_.size()); }
  Device& device(int index) override;
  using Backend::alloc_host;
  HostMat alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                     const std::string& what) override;
  void release_host(const HostMat& m) override;
  void all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) override;
  void synchronize_all() override;
  // Event-only cross-stream barrier: one event recorded on every device's stream, then every
  // stream waits on every other device's event (no host blocking).
  void barrier() override;
  // ConstantStore::leaves_headroom()'s bound: a budget less its eighth, else the GPU's free
  // memory at the call less a sixteenth of its total, split evenly among its logical devices.
  std::int64_t placement_capacity(int index) const override;
  // A set per GPU: its logical devices share its memory (and its free-memory headroom checks).
  std::vector<std::vector<int>> setup_groups() const override;

 private:
  // all_reduce_sum across the GPUs' leading devices where each GPU may read every other's memory:
  // GPU g adds slice g of every buffer, in device order, then copies the other slices from their
  // GPUs. Each sum is the CPU backend's, on every GPU.
  void peer_all_reduce(const std::vector<float*>& buffers, std::int64_t n);
  // every_peer_direct(): each used GPU may read every other's memory.
  bool every_peer_direct() const;
  // Whether all_reduce_sum adds by peer reads (peer_all_reduce()) rather than by NCCL, whose
  // communicators then are not created: several GPUs, every one reading every other's memory,
  // at most kMaxSumInputs of them.
  bool sums_by_peer_reads() const;

  std::unique_ptr<BackendShared> shared_;
  std::vector<std::unique_ptr<CudaDevice>> devices_;
  std::vector<Event> barrier_events_;  // one per logical device, on its GPU
#if defined(SLUICE_HAVE_NCCL)
  NcclCommunicators nccl_;
#endif
};

}  // namespace sluice::cuda
