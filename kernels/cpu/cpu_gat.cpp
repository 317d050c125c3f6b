// CpuDevice GAT edge operators (docs/model-math.md, "GAT layer"): scores, row softmax over the
// self entry and the in-neighbors, attention dropout, weighted sum, and their backward.
// The backward runs in two race-free phases: per row (softmax backward, per-entry score
// gradients), then per column through the transposed index (gradients of z, el and the
// attention vectors), so it is parallel and deterministic.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_device.hpp"
#include "kernels/cpu/cpu_util.hpp"

namespace sluice {
namespace {

constexpr float kNegativeSlope = 0.2f;

struct GatShape {
  std::int64_t heads, width;  // K, F
};

GatShape check_gat(const CpuCsr& m, const Mat& z, int heads, const Mat& el, const Mat& er,
                   const Mat& alpha, const char* what) {
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0, what, ": ", z.cols, " columns for ", heads,
                 " heads");
  SLUICE_EXPECTS(z.rows == m.cols, what, ": z has ", z.rows, " rows, A has ", m.cols, " columns");
  SLUICE_EXPECTS(el.rows == m.cols && el.cols == heads, what, ": el ", el.rows, " x ", el.cols);
  SLUICE_EXPECTS(er.rows == m.rows && er.cols == heads, what, ": er ", er.rows, " x ", er.cols);
  SLUICE_EXPECTS(alpha.rows == m.nnz && alpha.cols == heads, what, ": alpha ", alpha.rows, " x ",
                 alpha.cols);
  return GatShape{heads, z.cols / heads};
}

GatShape check_gat(const CpuCsr& m, const Mat& z, int heads, const Idx& row_keys, const Mat& el,
                   const Mat& er, const Mat& alpha, const char* what) {
  SLUICE_EXPECTS(row_keys.size == m.rows, what, ": ", row_keys.size, " row keys for ", m.rows,
                 " rows");
  cpu::expect_index(row_keys, what);
  return check_gat(m, z, heads, el, er, alpha, what);
}

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The attention-dropout multiplier of entry k of a row for head h (1 when disabled).
float attention_multiplier(const DropoutKey& key, std::int64_t row_key, std::int64_t k,
                           std::int64_t h) {
  if (key.rate <= 0.f) return 1.f;
  return cpu::keep(key, 2, row_key, k * 256 + h) ? 1.f / (1.f - key.rate) : 0.f;
}

// The softmax of head h over row entries [begin, end) with destination score `right`:
// score[k] = exp(LeakyReLU(el[u_k] + right) - max); returns their sum.
float softmax_terms(const CpuCsr& m, edge_t begin, edge_t end, const Mat& el, std::int64_t h,
                    float right, std::vector<float>& score) {
  float top = -INFINITY;
  for (edge_t e = begin; e < end; ++e) {
    float s = el.data[std::int64_t(m.columns[e]) * el.ld + h] + right;
    s = s > 0.f ? s : kNegativeSlope * s;
    score[std::size_t(e - begin)] = s;
    top = std::max(top, s);
  }
  float sum = 0.f;
  for (auto& s : score) {
    s = std::exp(s - top);
    sum += s;
  }
  return sum;
}

// gat_forward() with its weighted sums into *out, gat_coefficients() without (out null).
void gat_attention(const CpuCsr& m, const Mat& z, const float* att_src, const float* att_dst,
                   GatShape shape, const Idx& row_keys, const DropoutKey& attention_key,
                   const Mat& el, const Mat& er, const Mat& alpha, const Mat* out,
                   SourceScores source_scores) {
  const std::int64_t K = shape.heads, F = shape.width;
  const std::int64_t scored = source_scores == SourceScores::kKept ? 0 : m.cols;

#pragma omp parallel for schedule(static) if (m.cols * K * F > cpu::kParallelThreshold)
  for (std::int64_t u = 0; u < scored; ++u)
    for (std::int64_t h = 0; h < K; ++h)
      el.data[u * el.ld + h] = dot(z.data + u * z.ld + h * F, att_src + h * F, F);

#pragma omp parallel if (m.nnz * K * F > cpu::kParallelThreshold)
  {
    std::vector<float> score;
#pragma omp for schedule(dynamic, 32)
    for (std::int64_t i = 0; i < m.rows; ++i) {
      const edge_t begin = m.indptr[i], end = m.indptr[i + 1];
      float* o = out ? out->data + i * out->ld : nullptr;
      if (o) std::fill_n(o, K * F, 0.f);
      if (begin == end) {
        for (std::int64_t h = 0; h < K; ++h) er.data[i * er.ld + h] = 0.f;
        continue;
      }
      const std::int64_t self = m.columns[begin];
      score.resize(std::size_t(end - begin));
      for (std::int64_t h = 0; h < K; ++h) {
        const float right = dot(z.data + self * z.ld + h * F, att_dst + h * F, F);
        er.data[i * er.ld + h] = right;
        const float sum = softmax_terms(m, begin, end, el, h, right, score);
        for (edge_t e = begin; e < end; ++e) {
          const float coefficient = score[std::size_t(e - begin)] / sum;
          alpha.data[e * alpha.ld + h] = coefficient;
          if (!o) continue;
          const float weight =
              coefficient * attention_multiplier(attention_key, row_keys.data[i], e - begin, h);
          if (weight == 0.f) continue;
          const float* zu = z.data + std::int64_t(m.columns[e]) * z.ld + h * F;
          float* oh = o + h * F;
          for (std::int64_t f = 0; f < F; ++f) oh[f] += weight * zu[f];
        }
      }
    }
  }
}

}  // namespace

void CpuDevice::gat_source_scores(Mat z, Idx rows, const float* att_src, int heads, Mat el) {
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0 && el.cols >= heads,
                 "gat_source_scores: ", z.cols, " columns, ", heads, " heads, el ", el.cols,
                 " wide");
  const std::int64_t K = heads, F = z.cols / heads;
  for (std::int64_t i = 0; i < rows.size; ++i)
    SLUICE_EXPECTS(rows.data[i] >= 0 && rows.data[i] < std::min(z.rows, el.rows),
                   "gat_source_scores: row ", rows.data[i], " outside ", z.rows, " rows");
#pragma omp parallel for schedule(static) if (rows.size * K * F > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < rows.size; ++i) {
    const std::int64_t u = rows.data[i];
    for (std::int64_t h = 0; h < K; ++h)
      el.data[u * el.ld + h] = dot(z.data + u * z.ld + h * F, att_src + h * F, F);
  }
}

void CpuDevice::gat_input_scores(Mat x, Mat folded, int heads, Mat el, Mat er) {
  expect_input_scores_shapes(x, folded, heads, el, er);
  const std::int64_t K = heads, D = x.cols;
#pragma omp parallel for schedule(static) if (x.rows * D * 2 * K > cpu::kParallelThreshold)
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float* row = x.data + r * x.ld;
    for (std::int64_t j = 0; j < 2 * K; ++j) {
      if (j >= K && r >= er.rows) break;
      float sum = 0.f;
      for (std::int64_t c = 0; c < D; ++c) sum += row[c] * folded.data[c * folded.ld + j];
      (j < K ? el.data[r * el.ld + j] : er.data[r * er.ld + j - K]) = sum;
    }
  }
}

void CpuDevice::gat_forward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                            Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                            Mat alpha, Mat out, SourceScores source_scores) {
  const CpuCsr& m = product_csr(a, CsrAccess::kRows);
  const GatShape shape = check_gat(m, z, heads, row_keys, el, er, alpha, "gat_forward");
  SLUICE_EXPECTS(out.rows == m.rows && out.cols == shape.heads * shape.width, "gat_forward: out ",
                 out.rows, " x ", out.cols);
  SLUICE_EXPECTS(attention_key.rate >= 0.f && attention_key.rate < 1.f, "attention dropout ",
                 attention_key.rate, " not in [0, 1)");
  gat_attention(m, z, att_src, att_dst, shape, row_keys, attention_key, el, er, alpha, &out,
                source_scores);
}

void CpuDevice::gat_coefficients(Csr a, Mat z, const float* att_src, const float* att_dst,
                                 int heads, Mat el, Mat er, Mat alpha, SourceScores source_scores) {
  const CpuCsr& m = product_csr(a, CsrAccess::kRows);
  const GatShape shape = check_gat(m, z, heads, el, er, alpha, "gat_coefficients");
  gat_attention(m, z, att_src, att_dst, shape, Idx{}, DropoutKey{}, el, er, alpha, nullptr,
                source_scores);
}

void CpuDevice::gat_backward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                             Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                             Mat alpha, Mat out, Mat dout, Mat dz, float* d_att_src,
                             float* d_att_dst) {
  const CpuCsr& m = product_csr(a, CsrAccess::kBoth);
  const GatShape shape = check_gat(m, z, heads, row_keys, el, er, alpha, "gat_backward");
  const std::int64_t K = shape.heads, F = shape.width;
  // The reference sums alpha_k d(alpha)_k over each row's entries; out is only checked.
  SLUICE_EXPECTS(out.rows == m.rows && out.cols == K * F, "gat_backward: out ", out.rows, " x ",
                 out.cols);
  SLUICE_EXPECTS(dout.rows == m.rows && dout.cols == K * F, "gat_backward: dout ", dout.rows, " x ",
                 dout.cols);
  SLUICE_EXPECTS(dz.rows == m.cols && dz.cols == K * F, "gat_backward: dz ", dz.rows, " x ",
                 dz.cols);

  // Phase 1, per row: weight (dropped-out alpha) and score gradient of every entry, and the
  // gradient of er.
  scratch_.resize(std::size_t(2 * m.nnz * K + m.rows * K));
  float* weight = scratch_.data();
  float* d_score = weight + m.nnz * K;
  float* d_right = d_score + m.nnz * K;
#pragma omp parallel for schedule(dynamic, 32) if (m.nnz * K * F > cpu::kParallelThreshold)
  for (std::int64_t i = 0; i < m.rows; ++i) {
    const edge_t begin = m.indptr[i], end = m.indptr[i + 1];
    for (std::int64_t h = 0; h < K; ++h) {
      const float* g = dout.data + i * dout.ld + h * F;
      const float right = er.data[i * er.ld + h];
      // d_score temporarily holds d alpha (before the softmax backward).
      float weighted = 0.f;
      for (edge_t e = begin; e < end; ++e) {
        const std::int64_t u = m.columns[e];
        const float keep = attention_multiplier(attention_key, row_keys.data[i], e - begin, h);
        const float coefficient = alpha.data[e * alpha.ld + h];
        weight[e * K + h] = coefficient * keep;
        const float d_alpha = keep == 0.f ? 0.f : keep * dot(g, z.data + u * z.ld + h * F, F);
        d_score[e * K + h] = d_alpha;
        weighted += coefficient * d_alpha;
      }
      float row_sum = 0.f;
      for (edge_t e = begin; e < end; ++e) {
        const std::int64_t u = m.columns[e];
        const float s = el.data[u * el.ld + h] + right;
        const float d_e = alpha.data[e * alpha.ld + h] * (d_score[e * K + h] - weighted);
        const float d_s = s > 0.f ? d_e : kNegativeSlope * d_e;
        d_score[e * K + h] = d_s;
        row_sum += d_s;
      }
      d_right[i * K + h] = row_sum;
    }
  }

  // Phase 2, per column u (transposed index): dz_u += sum_e weight_e dout_row(e) +
  // d_el_u a_src + [self entries] d_er_row a_dst; attention-vector gradients reduced over
  // fixed column blocks in order.
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (m.cols + kBlock - 1) / kBlock;
  const std::int64_t KF = K * F;
  std::vector<double> partial(std::size_t(blocks * 2 * KF), 0.0);
#pragma omp parallel if (m.nnz * KF > cpu::kParallelThreshold)
  {
    std::vector<float> d_left(static_cast<std::size_t>(K));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < blocks; ++b) {
      double* p_src = partial.data() + b * 2 * KF;
      double* p_dst = p_src + KF;
      const std::int64_t end_col = std::min(m.cols, (b + 1) * kBlock);
      for (std::int64_t u = b * kBlock; u < end_col; ++u) {
        float* gz = dz.data + u * dz.ld;
        const float* zu = z.data + u * z.ld;
        std::fill(d_left.begin(), d_left.end(), 0.f);
        for (edge_t t = m.t_indptr[u]; t < m.t_indptr[u + 1]; ++t) {
          const std::int64_t row = m.t_rows[t];
          const edge_t e = m.t_entry[t];
          const float* g = dout.data + row * dout.ld;
          const bool self = e == m.indptr[row];
          for (std::int64_t h = 0; h < K; ++h) {
            d_left[std::size_t(h)] += d_score[e * K + h];
            const float w = weight[e * K + h];
            for (std::int64_t f = 0; f < F; ++f) gz[h * F + f] += w * g[h * F + f];
            if (self) {
              const float dr = d_right[row * K + h];
              for (std::int64_t f = 0; f < F; ++f) {
                gz[h * F + f] += dr * att_dst[h * F + f];
                p_dst[h * F + f] += double(dr) * zu[h * F + f];
              }
            }
          }
        }
        for (std::int64_t h = 0; h < K; ++h) {
          const float dl = d_left[std::size_t(h)];
          if (dl == 0.f) continue;
          for (std::int64_t f = 0; f < F; ++f) {
            gz[h * F + f] += dl * att_src[h * F + f];
            p_src[h * F + f] += double(dl) * zu[h * F + f];
          }
        }
      }
    }
  }
  for (std::int64_t j = 0; j < KF; ++j) {
    double s_src = 0.0, s_dst = 0.0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      s_src += partial[std::size_t(b * 2 * KF + j)];
      s_dst += partial[std::size_t(b * 2 * KF + KF + j)];
    }
    d_att_src[j] += float(s_src);
    d_att_dst[j] += float(s_dst);
  }
}

namespace {

// The shapes of a GAT layer over input rows x (a.cols x D) with K heads; returns D.
std::int64_t check_gat_inputs(const CpuCsr& m, const Mat& x, int heads, const Idx& row_keys,
                              const DropoutKey& key, const Mat& el, const Mat& er, const Mat& alpha,
                              const char* what) {
  SLUICE_EXPECTS(heads > 0, what, ": ", heads, " heads");
  SLUICE_EXPECTS(x.rows == m.cols, what, ": x has ", x.rows, " rows, A has ", m.cols, " columns");
  SLUICE_EXPECTS(el.rows == m.cols && el.cols == heads, what, ": el ", el.rows, " x ", el.cols);
  SLUICE_EXPECTS(er.rows == m.rows && er.cols == heads, what, ": er ", er.rows, " x ", er.cols);
  SLUICE_EXPECTS(alpha.rows == m.nnz && alpha.cols == heads, what, ": alpha ", alpha.rows, " x ",
                 alpha.cols);
  SLUICE_EXPECTS(key.rate >= 0.f && key.rate < 1.f, what, ": attention dropout ", key.rate,
                 " not in [0, 1)");
  if (key.rate > 0.f) {
    SLUICE_EXPECTS(row_keys.size == m.rows, what, ": ", row_keys.size, " row keys for ", m.rows,
                   " rows");
    cpu::expect_index(row_keys, what);
  }
  return x.cols;
}

}  // namespace

void CpuDevice::gat_input_forward(Csr a, Mat x, int heads, Idx row_keys,
                                  const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                  Mat agg) {
  const CpuCsr& m = product_csr(a, CsrAccess::kRows);
  const std::int64_t D =
      check_gat_inputs(m, x, heads, row_keys, attention_key, el, er, alpha, "gat_input_forward");
  const std::int64_t K = heads;
  SLUICE_EXPECTS(agg.rows == m.rows && agg.cols == K * D, "gat_input_forward: agg ", agg.rows,
                 " x ", agg.cols, " for ", m.rows, " rows of ", K, " x ", D);
#pragma omp parallel if (m.nnz * K * D > cpu::kParallelThreshold)
  {
    std::vector<float> score;
#pragma omp for schedule(dynamic, 32)
    for (std::int64_t i = 0; i < m.rows; ++i) {
      const edge_t begin = m.indptr[i], end = m.indptr[i + 1];
      float* o = agg.data + i * agg.ld;
      std::fill_n(o, K * D, 0.f);
      score.resize(std::size_t(end - begin));
      for (std::int64_t h = 0; h < K; ++h) {
        const float sum = softmax_terms(m, begin, end, el, h, er.data[i * er.ld + h], score);
        float* oh = o + h * D;
        for (edge_t e = begin; e < end; ++e) {
          const float coefficient = score[std::size_t(e - begin)] / sum;
          alpha.data[e * alpha.ld + h] = coefficient;
          const float weight =
              coefficient * attention_multiplier(attention_key,
                                                 attention_key.rate > 0.f ? row_keys.data[i] : 0,
                                                 e - begin, h);
          if (weight == 0.f) continue;
          const float* xu = x.data + std::int64_t(m.columns[e]) * x.ld;
          for (std::int64_t f = 0; f < D; ++f) oh[f] += weight * xu[f];
        }
      }
    }
  }
}

void CpuDevice::gat_input_backward(Csr a, Mat x, int heads, Idx row_keys,
                                   const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                   Mat head_dots, Mat g, Mat sums) {
  const CpuCsr& m = product_csr(a, CsrAccess::kRows);
  const std::int64_t D =
      check_gat_inputs(m, x, heads, row_keys, attention_key, el, er, alpha, "gat_input_backward");
  const std::int64_t K = heads;
  SLUICE_EXPECTS(head_dots.rows == m.rows && head_dots.cols == K, "gat_input_backward: head dots ",
                 head_dots.rows, " x ", head_dots.cols, " for ", m.rows, " rows and ", K, " heads");
  SLUICE_EXPECTS(g.rows == m.rows && g.cols == K * D, "gat_input_backward: g ", g.rows, " x ",
                 g.cols);
  SLUICE_EXPECTS(sums.rows == 2 * K && sums.cols == D, "gat_input_backward: sums ", sums.rows,
                 " x ", sums.cols);
  // Per fixed block of rows, the sums in double, then added over the blocks in order: the same
  // bits for any thread count.
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (m.rows + kBlock - 1) / kBlock, width = 2 * K * D;
  std::vector<double> partial(std::size_t(blocks * width), 0.0);
#pragma omp parallel if (m.nnz * K * D > cpu::kParallelThreshold)
  {
    std::vector<float> d_alpha;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t b = 0; b < blocks; ++b) {
      double* p_src = partial.data() + b * width;
      double* p_dst = p_src + K * D;
      for (std::int64_t i = b * kBlock; i < std::min(m.rows, (b + 1) * kBlock); ++i) {
        const edge_t begin = m.indptr[i], end = m.indptr[i + 1];
        if (begin == end) continue;
        d_alpha.resize(std::size_t(end - begin));
        const float* x_self = x.data + std::int64_t(m.columns[begin]) * x.ld;
        const std::int64_t key = attention_key.rate > 0.f ? row_keys.data[i] : 0;
        for (std::int64_t h = 0; h < K; ++h) {
          const float* gh = g.data + i * g.ld + h * D;
          const float right = er.data[i * er.ld + h];
          // The softmax backward's sum_k alpha_k d(alpha)_k, which is dO^h . O^h.
          const float weighted = head_dots.data[i * head_dots.ld + h];
          for (edge_t e = begin; e < end; ++e) {
            const float keep = attention_multiplier(attention_key, key, e - begin, h);
            const float* xu = x.data + std::int64_t(m.columns[e]) * x.ld;
            d_alpha[std::size_t(e - begin)] = keep == 0.f ? 0.f : keep * dot(gh, xu, D);
          }
          double row_sum = 0.0;
          for (edge_t e = begin; e < end; ++e) {
            const std::int64_t u = m.columns[e];
            const float s = el.data[u * el.ld + h] + right;
            const float d_e =
                alpha.data[e * alpha.ld + h] * (d_alpha[std::size_t(e - begin)] - weighted);
            const float d_s = s > 0.f ? d_e : kNegativeSlope * d_e;
            row_sum += d_s;
            const float* xu = x.data + u * x.ld;
            for (std::int64_t f = 0; f < D; ++f) p_src[h * D + f] += double(d_s) * xu[f];
          }
          for (std::int64_t f = 0; f < D; ++f) p_dst[h * D + f] += row_sum * x_self[f];
        }
      }
    }
  }
  for (std::int64_t j = 0; j < width; ++j) {
    double total = 0.0;
    for (std::int64_t b = 0; b < blocks; ++b) total += partial[std::size_t(b * width + j)];
    sums.data[(j / D) * sums.ld + j % D] = float(total);
  }
}

}  // namespace sluice
