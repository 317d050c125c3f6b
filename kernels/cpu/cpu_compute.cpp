// CpuDevice compute: dropout, sparse and dense products, elementwise operators, the loss and the
// optimizers (docs/model-math.md). Every loop writes disjoint outputs per thread, and reductions
// use fixed blocks, so results do not depend on the number of threads.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_device.hpp"
#include "kernels/cpu/cpu_util.hpp"

namespace sluice {
namespace {

float activate(float x, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return x > 0.f ? x : 0.f;
    case Activation::kElu:
      return x > 0.f ? x : std::expm1(x);
    case Activation::kNone:
      break;
  }
  return x;
}

float activation_derivative(float z, Activation act) {
  switch (act) {
    case Activation::kRelu:
      return z > 0.f ? 1.f : 0.f;
    case Activation::kElu:
      return z > 0.f ? 1.f : std::exp(z);
    case Activation::kNone:
      break;
  }
  return 1.f;
}

void expect_same_shape(const Mat& a, const Mat& b, const char* what) {
  SLUICE_EXPECTS(a.rows == b.rows && a.cols == b.cols, what, ": ", a.rows, " x ", a.cols, " vs ",
                 b.rows, " x ", b.cols);
}

}  // namespace

void CpuDevice::dropout_rows(Mat m, Idx rows, Idx keys, const DropoutKey& key) {
  SLUICE_EXPECTS(rows.size == keys.size, "dropout_rows: ", rows.size, " rows, ", keys.size,
                 " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  if (key.rate == 0.f) return;
  cpu::check_indices(rows.data, rows.size, m.rows, "dropout_rows");
  cpu::expect_index(keys, "dropout_rows keys");
  const float scale = 1.f / (1.f - key.rate);
#pragma omp parallel for schedule(static) if (rows.size * m.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < rows.size; ++i) {
    float* row = m.data + std::int64_t(rows.data[i]) * m.ld;
    const std::uint64_t prefix =
        key_hash_prefix(key.seed, 1, key.salt(), std::uint64_t(keys.data[i]));
    for (std::int64_t j = 0; j < m.cols; ++j)
      row[j] = hash_to_unit(key_hash_finish(prefix, std::uint64_t(j))) >= key.rate ? row[j] * scale
                                                                                   : 0.f;
  }
}

namespace {

// The entry weights a product of m reads: `values` for a matrix of per-call values (null: all
// ones), else its derived weights.
const float* product_values(const CpuCsr& m, const float* values, const char* op) {
  if (m.weights == CsrWeights::kPerCall) return values;
  SLUICE_EXPECTS(values == nullptr, op, ": values passed for a matrix of ",
                 csr_weights_name(m.weights));
  return m.derived.data();
}

}  // namespace

void CpuDevice::spmm(Csr a, const float* values, Mat x, Mat y) {
  const CpuCsr& m = product_csr(a, CsrAccess::kRows);
  values = product_values(m, values, "spmm");
  SLUICE_EXPECTS(y.rows <= m.rows && x.rows == m.cols && x.cols == y.cols, "spmm: A ", m.rows,
                 " x ", m.cols, ", x ", x.rows, " x ", x.cols, ", y ", y.rows, " x ", y.cols);
  const std::int64_t cols = x.cols;
#pragma omp parallel for schedule(dynamic, 64) if (m.nnz * cols > cpu::kParallelThreshold)
  for (std::int64_t r = 0; r < y.rows; ++r) {
    float* out = y.data + r * y.ld;
    std::fill_n(out, cols, 0.f);
    for (edge_t e = m.indptr[r]; e < m.indptr[r + 1]; ++e) {
      const float w = values ? values[e] : 1.f;
      const float* in = x.data + std::int64_t(m.columns[e]) * x.ld;
      for (std::int64_t j = 0; j < cols; ++j) out[j] += w * in[j];
    }
  }
}

void CpuDevice::spmm_transpose_add(Csr a, const float* values, Mat dy, Mat dx) {
  transposed_product(a, values, dy, dx, ProductWrite::kAdd, RowRange{0, dx.rows},
                     "spmm_transpose_add");
}

void CpuDevice::spmm_transpose(Csr a, const float* values, Mat dy, Mat dx) {
  transposed_product(a, values, dy, dx, ProductWrite::kStore, RowRange{0, dx.rows},
                     "spmm_transpose");
}

void CpuDevice::spmm_transpose_rows(Csr a, const float* values, Mat dy, Mat dx, RowRange rows,
                                    RowCopy write) {
  transposed_product(a, values, dy, dx,
                     write == RowCopy::kAdd ? ProductWrite::kAdd : ProductWrite::kStore, rows,
                     "spmm_transpose_rows");
}

void CpuDevice::transposed_product(Csr a, const float* values, Mat dy, Mat dx, ProductWrite write,
                                   RowRange rows, const char* operation) {
  const CpuCsr& m = product_csr(a, CsrAccess::kTransposed);
  values = product_values(m, values, operation);
  SLUICE_EXPECTS(dy.rows == m.rows && dx.rows == m.cols && dx.cols == dy.cols, operation, ": A ",
                 m.rows, " x ", m.cols, ", dy ", dy.rows, " x ", dy.cols, ", dx ", dx.rows, " x ",
                 dx.cols);
  SLUICE_EXPECTS(rows.begin >= 0 && rows.begin <= rows.end && rows.end <= m.cols, operation,
                 ": rows [", rows.begin, ", ", rows.end, ") of ", m.cols);
  const std::int64_t cols = dy.cols;
  // A gather over the transpose: each output row is owned by one thread (deterministic).
#pragma omp parallel for schedule(dynamic, 64) if (m.nnz * cols > cpu::kParallelThreshold)
  for (std::int64_t c = rows.begin; c < rows.end; ++c) {
    float* out = dx.data + c * dx.ld;
    if (write == ProductWrite::kStore) std::fill_n(out, cols, 0.f);
    for (edge_t t = m.t_indptr[c]; t < m.t_indptr[c + 1]; ++t) {
      const float w = values ? values[m.t_entry[t]] : 1.f;
      const float* in = dy.data + std::int64_t(m.t_rows[t]) * dy.ld;
      for (std::int64_t j = 0; j < cols; ++j) out[j] += w * in[j];
    }
  }
}

void CpuDevice::gemm(Transpose op_a, Transpose op_b, float alpha, Mat a, Mat b, float beta, Mat c) {
  const bool transpose_a = op_a == Transpose::kYes, transpose_b = op_b == Transpose::kYes;
  const std::int64_t m = transpose_a ? a.cols : a.rows;
  const std::int64_t k = transpose_a ? a.rows : a.cols;
  const std::int64_t kb = transpose_b ? b.cols : b.rows;
  const std::int64_t n = transpose_b ? b.rows : b.cols;
  SLUICE_EXPECTS(m == c.rows && n == c.cols && k == kb, "gemm: op(a) ", m, " x ", k, ", op(b) ", kb,
                 " x ", n, ", c ", c.rows, " x ", c.cols);
  if (c.empty()) return;
  if (k == 0 || alpha == 0.f) {  // BLAS would not be called with an empty inner dimension
    for (std::int64_t i = 0; i < c.rows; ++i)
      for (std::int64_t j = 0; j < c.cols; ++j) {
        float& x = c.data[i * c.ld + j];
        x = beta == 0.f ? 0.f : beta * x;
      }
    return;
  }
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a.data,
              int(std::max<std::int64_t>(1, a.ld)), b.data, int(std::max<std::int64_t>(1, b.ld)),
              beta, c.data, int(std::max<std::int64_t>(1, c.ld)));
}

void CpuDevice::bias_activation(Mat z, const float* bias, Activation act, Mat out) {
  expect_same_shape(z, out, "bias_activation");
#pragma omp parallel for schedule(static) if (z.rows * z.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < z.rows; ++i) {
    const float* in = z.data + i * z.ld;
    float* o = out.data + i * out.ld;
    for (std::int64_t j = 0; j < z.cols; ++j) o[j] = activate(in[j] + (bias ? bias[j] : 0.f), act);
  }
}

void CpuDevice::bias_activation_dropout(Mat z, const float* bias, Activation act, Mat out, Idx keys,
                                        const DropoutKey& key) {
  expect_same_shape(z, out, "bias_activation_dropout");
  SLUICE_EXPECTS(keys.size == z.rows, "bias_activation_dropout: ", z.rows, " rows, ", keys.size,
                 " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  const bool drop = key.rate > 0.f;
  if (drop) cpu::expect_index(keys, "bias_activation_dropout keys");
  const float scale = drop ? 1.f / (1.f - key.rate) : 1.f;
#pragma omp parallel for schedule(static) if (z.rows * z.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < z.rows; ++i) {
    const float* in = z.data + i * z.ld;
    float* o = out.data + i * out.ld;
    const std::uint64_t prefix =
        drop ? key_hash_prefix(key.seed, 1, key.salt(), std::uint64_t(keys.data[i])) : 0;
    for (std::int64_t j = 0; j < z.cols; ++j) {
      const float h = activate(in[j] + (bias ? bias[j] : 0.f), act);
      o[j] = !drop || hash_to_unit(key_hash_finish(prefix, std::uint64_t(j))) >= key.rate
                 ? (drop ? h * scale : h)
                 : 0.f;
    }
  }
}

void CpuDevice::activation_backward(Mat dout, Mat value, Activation act, Mat dz) {
  expect_same_shape(dout, value, "activation_backward");
  expect_same_shape(dout, dz, "activation_backward");
#pragma omp parallel for schedule(static) if (dout.rows * dout.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < dout.rows; ++i) {
    const float* g = dout.data + i * dout.ld;
    const float* v = value.data + i * value.ld;
    float* o = dz.data + i * dz.ld;
    for (std::int64_t j = 0; j < dout.cols; ++j) o[j] = g[j] * activation_derivative(v[j], act);
  }
}

namespace {

// What the backward of H = dropout(act(Z)) reads of the forward's rows: Z (then it also turns Z
// into H), or for ReLU the output H itself (h > 0 exactly where the mask keeps a positive z).
enum class BackwardFrom { kPreactivation, kReluOutput };

template <BackwardFrom kFrom>
void dropout_activation_backward_rows(Mat dh, Mat z, Activation act, Idx keys,
                                      const DropoutKey& key, const char* op) {
  expect_same_shape(dh, z, op);
  SLUICE_EXPECTS(keys.size == dh.rows, op, ": ", dh.rows, " rows, ", keys.size, " keys");
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, "dropout rate ", key.rate, " not in [0, 1)");
  const bool drop = key.rate > 0.f;
  if (drop) cpu::expect_index(keys, op);
  const float scale = drop ? 1.f / (1.f - key.rate) : 1.f;
#pragma omp parallel for schedule(static) if (dh.rows * dh.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < dh.rows; ++i) {
    float* g = dh.data + i * dh.ld;
    float* v = z.data + i * z.ld;
    const std::uint64_t prefix =
        drop ? key_hash_prefix(key.seed, 1, key.salt(), std::uint64_t(keys.data[i])) : 0;
    for (std::int64_t j = 0; j < dh.cols; ++j) {
      const bool keep =
          !drop || hash_to_unit(key_hash_finish(prefix, std::uint64_t(j))) >= key.rate;
      const float gradient = drop ? (keep ? g[j] * scale : 0.f) : g[j];
      if constexpr (kFrom == BackwardFrom::kReluOutput) {
        g[j] = gradient * (v[j] > 0.f ? 1.f : 0.f);
      } else {
        g[j] = gradient * activation_derivative(v[j], act);
        const float h = activate(v[j] + 0.f, act);
        v[j] = drop ? (keep ? h * scale : 0.f) : h;
      }
    }
  }
}

}  // namespace

void CpuDevice::dropout_activation_backward(Mat dh, Mat z, Activation act, Idx keys,
                                            const DropoutKey& key) {
  dropout_activation_backward_rows<BackwardFrom::kPreactivation>(dh, z, act, keys, key,
                                                                 "dropout_activation_backward");
}

void CpuDevice::dropout_relu_backward_from_output(Mat dh, Mat h, Idx keys, const DropoutKey& key) {
  dropout_activation_backward_rows<BackwardFrom::kReluOutput>(
      dh, h, Activation::kRelu, keys, key, "dropout_relu_backward_from_output");  // reads h only
}

void CpuDevice::dropout_bias_activation_backward(Mat dh, Mat in, const float* bias, Activation act,
                                                 Idx keys, const DropoutKey& key, Mat h,
                                                 Mat head_dots) {
  SLUICE_EXPECTS(bias != nullptr, "dropout_bias_activation_backward: no bias");
  expect_same_shape(dh, in, "dropout_bias_activation_backward");
  bias_activation(in, bias, Activation::kNone, h);
  dropout_activation_backward(dh, h, act, keys, key);
  if (!head_dots.empty()) this->head_dots(dh, in, head_dots);
}

void CpuDevice::head_dots(Mat a, Mat b, Mat dots) {
  expect_same_shape(a, b, "head_dots");
  const std::int64_t K = dots.cols;
  SLUICE_EXPECTS(dots.rows == a.rows && K > 0 && a.cols % K == 0, "head_dots: ", dots.rows, " x ",
                 K, " dots of ", a.rows, " x ", a.cols, " rows");
  const std::int64_t F = a.cols / K;
#pragma omp parallel for schedule(static) if (a.rows * a.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t h = 0; h < K; ++h) {
      const float* x = a.data + i * a.ld + h * F;
      const float* y = b.data + i * b.ld + h * F;
      double sum = 0.0;
      for (std::int64_t f = 0; f < F; ++f) sum += double(x[f]) * y[f];
      dots.data[i * dots.ld + h] = float(sum);
    }
}

void CpuDevice::add_column_sums(Mat m, float* out) {
  if (m.empty()) return;
  // Partial sums over fixed row blocks (double), then added in block order: deterministic.
  constexpr std::int64_t kBlock = 1024;
  const std::int64_t blocks = (m.rows + kBlock - 1) / kBlock;
  std::vector<double> partial(std::size_t(blocks * m.cols), 0.0);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    double* p = partial.data() + b * m.cols;
    const std::int64_t end = std::min(m.rows, (b + 1) * kBlock);
    for (std::int64_t i = b * kBlock; i < end; ++i)
      for (std::int64_t j = 0; j < m.cols; ++j) p[j] += m.data[i * m.ld + j];
  }
  for (std::int64_t j = 0; j < m.cols; ++j) {
    double s = 0.0;
    for (std::int64_t b = 0; b < blocks; ++b) s += partial[std::size_t(b * m.cols + j)];
    out[j] += float(s);
  }
}

void CpuDevice::axpy(std::int64_t n, float alpha, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (n > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuDevice::softmax_cross_entropy(Mat logits, Idx labels, Idx mask, float scale, Mat grad,
                                      const LossOutputs& out) {
  SLUICE_EXPECTS(labels.size == logits.rows, "softmax_cross_entropy: ", labels.size, " labels for ",
                 logits.rows, " rows");
  SLUICE_EXPECTS(mask.size == logits.rows || mask.size == 0, "softmax_cross_entropy: mask of ",
                 mask.size, " entries for ", logits.rows, " rows");
  const bool has_grad = !grad.empty();
  if (has_grad) expect_same_shape(logits, grad, "softmax_cross_entropy gradient");
  const std::int64_t classes = logits.cols;
  for (std::int64_t i = 0; i < labels.size; ++i)
    SLUICE_EXPECTS(labels.data[i] < classes, "softmax_cross_entropy: label ", labels.data[i],
                   " of row ", i, " not below ", classes, " classes");
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (logits.rows + kBlock - 1) / kBlock;
  std::vector<double> partial(std::size_t(blocks), 0.0);
  std::vector<SplitCounts> partial_counts(out.split_counts ? std::size_t(blocks) : 0);
#pragma omp parallel for schedule(static) if (logits.rows * classes > cpu::kParallelThreshold)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t end = std::min(logits.rows, (b + 1) * kBlock);
    double block_loss = 0.0;
    for (std::int64_t i = b * kBlock; i < end; ++i) {
      const float* x = logits.data + i * logits.ld;
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < classes; ++j)
        if (x[j] > x[best]) best = j;
      if (out.predictions) out.predictions[i] = std::int32_t(best);
      const std::int32_t y = labels.data[i];
      const vertex_t splits = mask.size == 0 ? 1 : mask.data[i];
      if (out.split_counts && y >= 0 && classes > 0) {
        SplitCounts& counts = partial_counts[std::size_t(b)];
        for (int k = 0; k < 3; ++k)
          if ((splits >> k) & 1) {
            ++counts.labeled[k];
            counts.correct[k] += best == y;
          }
      }
      const bool counted = y >= 0 && (splits & 1) != 0;
      float* g = has_grad ? grad.data + i * grad.ld : nullptr;
      if (!counted || classes == 0) {
        if (g) std::fill_n(g, classes, 0.f);
        continue;
      }
      const double top = x[best];
      double sum = 0.0;
      for (std::int64_t j = 0; j < classes; ++j) sum += std::exp(double(x[j]) - top);
      const double log_sum = top + std::log(sum);
      block_loss += log_sum - double(x[y]);
      if (g) {
        for (std::int64_t j = 0; j < classes; ++j) {
          const double p = std::exp(double(x[j]) - log_sum);
          g[j] = float(scale * (p - (j == y ? 1.0 : 0.0)));
        }
      }
    }
    partial[std::size_t(b)] = block_loss;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  if (out.loss_sum) *out.loss_sum += total;
  for (const SplitCounts& c : partial_counts)
    for (int k = 0; k < 3; ++k) {
      out.split_counts->labeled[k] += c.labeled[k];
      out.split_counts->correct[k] += c.correct[k];
    }
}

void CpuDevice::head_mean(Mat in, int heads, Mat out) {
  SLUICE_EXPECTS(heads > 0 && in.rows == out.rows && in.cols == out.cols * heads, "head_mean: in ",
                 in.rows, " x ", in.cols, ", out ", out.rows, " x ", out.cols, ", ", heads,
                 " heads");
  const std::int64_t f = out.cols;
  const float inv = 1.f / float(heads);
#pragma omp parallel for schedule(static) if (in.rows * in.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < in.rows; ++i) {
    const float* x = in.data + i * in.ld;
    float* o = out.data + i * out.ld;
    for (std::int64_t j = 0; j < f; ++j) {
      float s = 0.f;
      for (int h = 0; h < heads; ++h) s += x[h * f + j];
      o[j] = s * inv;
    }
  }
}

void CpuDevice::head_mean_backward(Mat dout, int heads, Mat din) {
  SLUICE_EXPECTS(heads > 0 && din.rows == dout.rows && din.cols == dout.cols * heads,
                 "head_mean_backward: dout ", dout.rows, " x ", dout.cols, ", din ", din.rows,
                 " x ", din.cols, ", ", heads, " heads");
  const std::int64_t f = dout.cols;
  const float inv = 1.f / float(heads);
#pragma omp parallel for schedule(static) if (din.rows * din.cols > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < dout.rows; ++i) {
    const float* g = dout.data + i * dout.ld;
    float* o = din.data + i * din.ld;
    for (int h = 0; h < heads; ++h)
      for (std::int64_t j = 0; j < f; ++j) o[h * f + j] = g[j] * inv;
  }
}

void CpuDevice::sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g) {
#pragma omp parallel for schedule(static) if (n > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    g[i] += weight_decay * w[i];
    w[i] -= lr * g[i];
  }
}

void CpuDevice::adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, std::int64_t step, float* w, float* g, float* m,
                          float* v) {
  SLUICE_EXPECTS(step >= 1, "adam_step: step ", step, " (counts from 1)");
  const float correction1 = float(1.0 - std::pow(double(beta1), double(step)));
  const float correction2 = float(1.0 - std::pow(double(beta2), double(step)));
#pragma omp parallel for schedule(static) if (n > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    g[i] += weight_decay * w[i];
    m[i] = beta1 * m[i] + (1.f - beta1) * g[i];
    v[i] = beta2 * v[i] + (1.f - beta2) * g[i] * g[i];
    const float m_hat = m[i] / correction1;
    const float v_hat = v[i] / correction2;
    w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

}  // namespace sluice
