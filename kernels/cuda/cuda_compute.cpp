// CudaDevice compute: dropout, sparse products (the row SpMM), dense products (cuBLAS),
// elementwise operators, the loss, the head mean of GAT output layers and the optimizers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "common/log.hpp"
#include "common/parallel.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/loss.hpp"

namespace sluice::cuda {
namespace {

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

}  // namespace

void CudaDevice::dropout_rows(Mat m, Idx rows, Idx keys, const DropoutKey& key) {
  OpScope op(*this, "dropout_rows");
  if (key.rate <= 0.f) return;
  SLUICE_EXPECTS(keys.size == rows.size, "dropout_rows: ", rows.size, " rows but ", keys.size,
                 " keys");
  SLUICE_EXPECTS(key.rate < 1.f, "dropout rate must be below 1, got ", key.rate);
  DeviceGuard guard(gpu_);
  launch_dropout_rows(m.data, m.ld, m.cols, rows.data, keys.data, rows.size, key.seed, key.salt(),
                      key.rate, cur());
}

namespace {

// A matrix of per-call values takes them; one of derived weights takes none.
void check_product_values(const DeviceCsr& m, const float* values, const char* op) {
  if (m.weights == CsrWeights::kPerCall) {
    SLUICE_EXPECTS(values || m.nnz == 0, op, ": the matrix takes its values per call");
  } else {
    SLUICE_EXPECTS(!values, op, ": values passed for a matrix of ", csr_weights_name(m.weights));
  }
}

}  // namespace

void CudaDevice::spmm(Csr a, const float* values, Mat x, Mat y) {
  OpScope op(*this, "spmm");
  expect_compute_lane("spmm");
  finish_setup();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kRows, &values);
  SLUICE_EXPECTS(x.rows == m.cols && y.rows <= m.rows && x.cols == y.cols, "SpMM shapes: A is ",
                 m.rows, " x ", m.cols, ", x is ", x.rows, " x ", x.cols, ", y is ", y.rows, " x ",
                 y.cols);
  if (y.rows == 0 || y.cols == 0) return;
  check_product_values(m, values, "spmm");
  if (m.nnz == 0) {
    launch_fill(y.data, y.rows, y.cols, y.ld, 0.f, cur());
    return;
  }
  // Always the row SpMM: it sums each row in a fixed order, so products repeat bit for bit, and
  // it was faster than cuSPARSE's on every measured matrix and width (kernels/cuda/NOTES.md).
  row_spmm(m, RowSpmmOver::kMatrix, values, x, y, RowSpmmWrite::kStore, RowRange{0, y.rows});
}

namespace {

template <typename Index>
RowSpmmMatrix<Index> row_spmm_matrix(const DeviceCsr& m, RowSpmmOver over, const float* values) {
  RowSpmmMatrix<Index> r;
  r.over = over;
  r.weights = m.weights;
  r.values = values;
  r.degrees = m.column_degrees.as<std::int32_t>();
  r.nnz = m.nnz;
  if (over == RowSpmmOver::kMatrix) {
    r.indptr = m.indptr.as<Index>();
    r.columns = m.columns.as<Index>();
    r.rows = m.rows;
    r.long_rows = m.arrays<Index>().long_rows;
  } else {
    r.indptr = m.t_indptr.as<Index>();
    r.columns = m.t_columns.as<Index>();
    r.rows = m.cols;
    r.long_rows = m.transposed_long_rows();
    r.perm = m.t_perm.as<Index>();
    r.self = m.self.as<vertex_t>();
    r.self_degrees = m.self_degrees.as<std::int32_t>();
    r.matrix_indptr = m.indptr.as<Index>();
  }
  return r;
}

}  // namespace

void CudaDevice::row_spmm(const DeviceCsr& m, RowSpmmOver over, const float* values, Mat x, Mat y,
                          RowSpmmWrite write, RowRange rows) {
  SLUICE_EXPECTS((values != nullptr) == (m.weights == CsrWeights::kPerCall),
                 "row SpMM: per-call values for a matrix of derived weights, or none for one of "
                 "per-call values");
  SLUICE_EXPECTS(over == RowSpmmOver::kMatrix || !values || m.t_perm.get(),
                 "row SpMM: per-call values without the transpose's permutation");
  const LongSplit& split = over == RowSpmmOver::kMatrix ? m.long_split : m.t_long_split;
  float* segment_sums = split.segments == 0
                            ? nullptr
                            : long_segment_sums_.ensure_as<float>(split.segments * y.cols, account_,
                                                                  cur(), "long-row segment sums");
  m.with_index([&](auto index) {
    auto matrix = row_spmm_matrix<decltype(index)>(m, over, values);
    matrix.first_row = rows.begin;
    matrix.end_row = rows.end;
    launch_row_spmm(matrix, x.data, x.ld, y.data, y.ld, y.cols, write, segment_sums, cur());
  });
}

void CudaDevice::spmm_transpose_add(Csr a, const float* values, Mat dy, Mat dx) {
  OpScope op(*this, "spmm_transpose_add");
  transposed_product(a, values, dy, dx, RowSpmmWrite::kAdd, RowRange{0, dx.rows},
                     "spmm_transpose_add");
}

void CudaDevice::spmm_transpose(Csr a, const float* values, Mat dy, Mat dx) {
  OpScope op(*this, "spmm_transpose");
  transposed_product(a, values, dy, dx, RowSpmmWrite::kStore, RowRange{0, dx.rows},
                     "spmm_transpose");
}

void CudaDevice::spmm_transpose_rows(Csr a, const float* values, Mat dy, Mat dx, RowRange rows,
                                     RowCopy write) {
  OpScope op(*this, "spmm_transpose_rows");
  transposed_product(a, values, dy, dx,
                     write == RowCopy::kAdd ? RowSpmmWrite::kAdd : RowSpmmWrite::kStore, rows,
                     "spmm_transpose_rows");
}

void CudaDevice::transposed_product(Csr a, const float* values, Mat dy, Mat dx, RowSpmmWrite write,
                                    RowRange rows, const char* operation) {
  expect_compute_lane(operation);
  finish_setup();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kTransposed, &values);
  SLUICE_EXPECTS(dy.rows == m.rows && dx.rows == m.cols && dy.cols == dx.cols, "SpMM shapes: A is ",
                 m.rows, " x ", m.cols, " (transposed), dy is ", dy.rows, " x ", dy.cols,
                 ", dx is ", dx.rows, " x ", dx.cols);
  SLUICE_EXPECTS(rows.begin >= 0 && rows.begin <= rows.end && rows.end <= dx.rows, operation,
                 ": rows [", rows.begin, ", ", rows.end, ") of ", dx.rows);
  if (dx.cols == 0 || rows.begin == rows.end) return;
  if (m.nnz == 0) {
    if (write == RowSpmmWrite::kStore) {
      const Mat block = dx.row_block(rows.begin, rows.end - rows.begin);
      launch_fill(block.data, block.rows, block.cols, block.ld, 0.f, cur());
    }
    return;
  }
  check_product_values(m, values, operation);
  // The row SpMM over the transposed CSR, like spmm().
  row_spmm(m, RowSpmmOver::kTransposed, values, dy, dx, write, rows);
}

void CudaDevice::transposed_aggregate(const DeviceCsr& m, const float* weights, int heads,
                                      std::int64_t width, Mat dout, Mat dz) {
  m.with_index([&](auto index) {
    launch_gat_transpose_aggregate(m.transposed_arrays<decltype(index)>(), m.cols, weights, heads,
                                   width, dout.data, dout.ld, dz.data, dz.ld, cur());
  });
}

void CudaDevice::gemm(Transpose op_a, Transpose op_b, float alpha, Mat a, Mat b, float beta,
                      Mat c) {
  const bool transpose_a = op_a == Transpose::kYes, transpose_b = op_b == Transpose::kYes;
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

void CudaDevice::bias_activation_dropout(Mat z, const float* bias, Activation act, Mat out,
                                         Idx keys, const DropoutKey& key) {
  OpScope op(*this, "bias_activation_dropout");
  SLUICE_EXPECTS(z.rows == out.rows && z.cols == out.cols, "bias_activation_dropout shapes");
  SLUICE_EXPECTS(keys.size == z.rows, "bias_activation_dropout: ", z.rows, " rows but ", keys.size,
                 " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  DeviceGuard guard(gpu_);
  launch_bias_activation_dropout(z.data, z.ld, bias, code(act), out.data, out.ld, z.rows, z.cols,
                                 keys.data, key.seed, key.salt(), key.rate, cur());
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

void CudaDevice::dropout_activation_backward(Mat dh, Mat z, Activation act, Idx keys,
                                             const DropoutKey& key) {
  OpScope op(*this, "dropout_activation_backward");
  SLUICE_EXPECTS(dh.rows == z.rows && dh.cols == z.cols, "dropout_activation_backward shapes");
  SLUICE_EXPECTS(keys.size == dh.rows, "dropout_activation_backward: ", dh.rows, " rows but ",
                 keys.size, " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  DeviceGuard guard(gpu_);
  launch_dropout_activation_backward(dh.data, dh.ld, z.data, z.ld, dh.rows, dh.cols, code(act),
                                     keys.data, key.seed, key.salt(), key.rate, cur());
}

void CudaDevice::dropout_bias_activation_backward(Mat dh, Mat in, const float* bias, Activation act,
                                                  Idx keys, const DropoutKey& key, Mat h,
                                                  Mat head_dots) {
  OpScope op(*this, "dropout_bias_activation_backward");
  SLUICE_EXPECTS(dh.rows == in.rows && dh.cols == in.cols && h.rows == in.rows &&
                     h.cols == in.cols && bias != nullptr,
                 "dropout_bias_activation_backward shapes");
  SLUICE_EXPECTS(keys.size == dh.rows, "dropout_bias_activation_backward: ", dh.rows, " rows but ",
                 keys.size, " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  SLUICE_EXPECTS(head_dots.empty() || head_dots.rows == dh.rows,
                 "dropout_bias_activation_backward: ", head_dots.rows, " head dots for ", dh.rows,
                 " rows");
  DeviceGuard guard(gpu_);
  // Heads that are not whole multiples of 32 columns: the dots in a pass of their own.
  const bool fused = !head_dots.empty() && fused_head_dots_fit(dh.cols, head_dots.cols);
  const HeadDots dots =
      fused ? HeadDots{head_dots.data, head_dots.ld, static_cast<int>(head_dots.cols)} : HeadDots{};
  launch_dropout_bias_activation_backward(dh.data, dh.ld, in.data, in.ld, bias, h.data, h.ld,
                                          dh.rows, dh.cols, code(act), keys.data, key.seed,
                                          key.salt(), key.rate, dots, cur());
  if (!head_dots.empty() && !fused) this->head_dots(dh, in, head_dots);
}

void CudaDevice::head_dots(Mat a, Mat b, Mat dots) {
  OpScope op(*this, "head_dots");
  SLUICE_EXPECTS(a.rows == b.rows && a.cols == b.cols && dots.rows == a.rows && dots.cols > 0 &&
                     a.cols % dots.cols == 0,
                 "head_dots: ", dots.rows, " x ", dots.cols, " dots of ", a.rows, " x ", a.cols,
                 " and ", b.rows, " x ", b.cols, " rows");
  DeviceGuard guard(gpu_);
  launch_gat_row_sums(a.rows, a.data, a.ld, b.data, b.ld, static_cast<int>(dots.cols),
                      a.cols / dots.cols, dots.data, dots.ld, cur());
}

void CudaDevice::dropout_relu_backward_from_output(Mat dh, Mat h, Idx keys, const DropoutKey& key) {
  OpScope op(*this, "dropout_relu_backward_from_output");
  SLUICE_EXPECTS(dh.rows == h.rows && dh.cols == h.cols,
                 "dropout_relu_backward_from_output shapes");
  SLUICE_EXPECTS(keys.size == dh.rows, "dropout_relu_backward_from_output: ", dh.rows, " rows but ",
                 keys.size, " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  DeviceGuard guard(gpu_);
  launch_dropout_relu_backward_from_output(dh.data, dh.ld, h.data, h.ld, dh.rows, dh.cols,
                                           keys.data, key.seed, key.salt(), key.rate, cur());
}

void CudaDevice::add_column_sums(Mat m, float* out) {
  OpScope op(*this, "add_column_sums");
  DeviceGuard guard(gpu_);
  if (m.rows <= 0 || m.cols <= 0) return;
  float* partials = column_partials_.ensure_as<float>(column_sum_partials(m.rows, m.cols), account_,
                                                      cur(), "column sum partials");
  launch_add_column_sums(m.data, m.ld, m.rows, m.cols, out, partials, cur());
}

void CudaDevice::axpy(std::int64_t n, float alpha, const float* x, float* y) {
  DeviceGuard guard(gpu_);
  launch_axpy(n, alpha, x, y, cur());
}

// ---- loss ----

void CudaDevice::softmax_cross_entropy(Mat logits, Idx labels, Idx mask, float scale, Mat grad,
                                       const LossOutputs& out) {
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
  const bool wants_sums = out.loss_sum != nullptr || out.split_counts != nullptr;
  auto same_target = [&](const LossTarget& t) {
    return t.loss_sum == out.loss_sum && t.split_counts == out.split_counts;
  };
  auto slot = std::find_if(loss_targets_.begin(), loss_targets_.end(), same_target);
  if (wants_sums && slot == loss_targets_.end() &&
      static_cast<int>(loss_targets_.size()) == kLossSlots) {
    SLUICE_CUDA(cudaStreamSynchronize(cur()));
    deliver_losses();
    slot = loss_targets_.end();
  }
  double* sums = loss_accumulator_.ensure_as<double>(kLossSlots * kLossSlotWords, account_, cur(),
                                                     "loss accumulator");
  if (wants_sums && slot == loss_targets_.end()) {
    if (loss_targets_.empty())
      SLUICE_CUDA(cudaMemsetAsync(sums, 0, kLossSlots * kLossSlotWords * 8, cur()));
    loss_targets_.push_back(LossTarget{out.loss_sum, out.split_counts});
    slot = loss_targets_.end() - 1;
  }
  double* loss = wants_sums ? sums + (slot - loss_targets_.begin()) * kLossSlotWords : nullptr;
  std::int32_t* device_predictions =
      out.predictions ? predictions_.ensure_as<std::int32_t>(std::max<std::int64_t>(rows, 1),
                                                             account_, cur(), "predictions")
                      : nullptr;
  launch_softmax_cross_entropy(
      logits.data, logits.ld, rows, logits.cols, labels.size ? labels.data : nullptr,
      mask.size ? mask.data : nullptr, scale, has_grad ? grad.data : nullptr, grad.ld, loss,
      device_predictions,
      out.split_counts ? reinterpret_cast<unsigned long long*>(loss + 1) : nullptr, cur());
  if (!out.predictions || rows == 0) return;
  if (!host_predictions_.fits((pending_prediction_rows_ + rows) * kIndexBytes)) {
    if (!pending_predictions_.empty()) {
      SLUICE_CUDA(cudaStreamSynchronize(cur()));
      deliver_losses();
    }
    // Doubling: an evaluation's calls fill the staging a chunk at a time.
    host_predictions_.ensure(std::max(2 * host_predictions_.bytes(),
                                      2 * (pending_prediction_rows_ + rows) * kIndexBytes),
                             cur());
  }
  auto* staging = static_cast<std::int32_t*>(host_predictions_.get());
  SLUICE_CUDA(cudaMemcpyAsync(staging + pending_prediction_rows_, device_predictions,
                              static_cast<std::size_t>(rows * kIndexBytes), cudaMemcpyDeviceToHost,
                              cur()));
  pending_predictions_.push_back(
      PendingPredictions{out.predictions, pending_prediction_rows_, rows});
  pending_prediction_rows_ += rows;
}

void CudaDevice::deliver_losses() {
  if (!loss_targets_.empty()) {
    const std::int64_t words = static_cast<std::int64_t>(loss_targets_.size()) * kLossSlotWords;
    auto* host = static_cast<double*>(
        host_loss_.ensure(kLossSlots * kLossSlotWords * 8, lanes_[int(Lane::kCompute)].get()));
    const cudaStream_t compute = lanes_[static_cast<int>(Lane::kCompute)].get();
    SLUICE_CUDA(cudaMemcpyAsync(host, loss_accumulator_.get(), static_cast<std::size_t>(words * 8),
                                cudaMemcpyDeviceToHost, compute));
    SLUICE_CUDA(cudaStreamSynchronize(compute));
    for (std::size_t k = 0; k < loss_targets_.size(); ++k) {
      const double* slot = host + k * kLossSlotWords;
      const auto* counts = reinterpret_cast<const unsigned long long*>(slot + 1);
      const LossTarget& t = loss_targets_[k];
      if (t.loss_sum) *t.loss_sum += slot[0];
      if (t.split_counts)
        for (int s = 0; s < 3; ++s) {
          t.split_counts->labeled[s] += static_cast<std::int64_t>(counts[s]);
          t.split_counts->correct[s] += static_cast<std::int64_t>(counts[3 + s]);
        }
    }
    loss_targets_.clear();
  }
  if (!pending_predictions_.empty()) {
    const auto* staging = static_cast<const std::int32_t*>(host_predictions_.get());
    for (const PendingPredictions& p : pending_predictions_)
      parallel_copy(staging + p.offset, p.rows, p.to);
    pending_predictions_.clear();
    pending_prediction_rows_ = 0;
  }
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

}  // namespace sluice::cuda
