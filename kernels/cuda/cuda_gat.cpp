// CudaDevice GAT operators (docs/model-math.md, "GAT layer"): the host side of the edge kernels
// of gat.cu, with the attention-dropout key, the chunk CSR (staged to the device when it lives
// in host memory) and the backward's scratch.
#include <algorithm>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gat.hpp"

namespace sluice::cuda {
namespace {

// The kernels' attention-dropout key (docs/model-math.md): salt = epoch * 1024 + layer; no row
// keys when the rate is 0.
AttentionDropout attention_dropout(const DropoutKey& key, Idx row_keys) {
  return AttentionDropout{key.seed, key.salt(), key.rate, key.rate > 0.f ? row_keys.data : nullptr};
}

// launch_gat_backward_by_source over chunk CSR m and its transpose.
template <typename Index>
void by_source(const DeviceCsr& m, Mat z, Mat el, Mat er, Mat alpha, Mat dout, Mat dz, int heads,
               const float* att_src, const AttentionDropout& drop, const float* row_sums,
               float* d_el, float* ds, cudaStream_t stream) {
  GatBySource<Index> p;
  p.a = m.arrays<Index>();
  p.t = m.transposed_arrays<Index>();
  p.z = z.data;
  p.ldz = z.ld;
  p.el = el.data;
  p.ldel = el.ld;
  p.er = er.data;
  p.lder = er.ld;
  p.alpha = alpha.data;
  p.ldalpha = alpha.ld;
  p.dout = dout.data;
  p.lddout = dout.ld;
  p.row_sums = row_sums;
  p.heads = heads;
  p.width = z.cols / heads;
  p.dropout = drop;
  p.dz = dz.data;
  p.lddz = dz.ld;
  p.att_src = att_src;
  p.d_el = d_el;
  p.ds = ds;
  launch_gat_backward_by_source(p, stream);
}

// The width F of z's heads, after checking the shapes of a GAT forward's operands over m.
std::int64_t checked_head_width(const DeviceCsr& m, Mat z, int heads, Mat el, Mat er, Mat alpha,
                                const char* what) {
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0, what, ": ", z.cols,
                 " columns do not split into ", heads, " heads");
  SLUICE_EXPECTS(z.rows == m.cols && el.rows == m.cols && el.cols >= heads && er.rows == m.rows &&
                     er.cols >= heads && alpha.rows == m.nnz && alpha.cols >= heads,
                 what, " shapes (A ", m.rows, " x ", m.cols, ", nnz ", m.nnz, ")");
  return z.cols / heads;
}

// The scores of a GAT forward over m: el of every merged row (unless the caller kept them
// current) and er of every chunk row.
// Scores of the chunk: er of its rows and, unless they are current, el of every merged row. Then
// one read of z gives both, the destination scores of every merged row going to row_scores (m.cols
// x K of scratch) and from there to the chunk's rows; the same bits as scoring the rows alone.
void launch_scores(const DeviceCsr& m, Mat z, int heads, std::int64_t width, const float* att_src,
                   const float* att_dst, Mat el, Mat er, SourceScores source_scores,
                   float* row_scores, cudaStream_t stream) {
  const vertex_t* self = m.self.as<vertex_t>();
  if (source_scores == SourceScores::kKept) {
    launch_gat_scores(z.data, z.ld, self, m.rows, heads, width, att_dst, er.data, er.ld, stream);
    return;
  }
  launch_gat_both_scores(z.data, z.ld, m.cols, heads, width, att_src, el.data, el.ld, att_dst,
                         row_scores, stream);
  launch_gat_gather_scores(row_scores, heads, self, m.rows, er.data, er.ld, stream);
}

// launch_gat_aggregate over m in its index width; out null: the coefficients alone.
void launch_aggregate(const DeviceCsr& m, Mat z, Mat el, Mat er, int heads, std::int64_t width,
                      const AttentionDropout& drop, Mat alpha, float* out, std::int64_t ldout,
                      cudaStream_t stream) {
  m.with_index([&](auto index) {
    launch_gat_aggregate(m.arrays<decltype(index)>(), z.data, z.ld, el.data, el.ld, er.data, er.ld,
                         heads, width, drop, alpha.data, alpha.ld, out, ldout, stream);
  });
}

// GAT's layer 0 attending over its input rows: the shapes of x, el, er and alpha over m, and
// the row keys where attention dropout is on; returns D.
std::int64_t checked_input_width(const DeviceCsr& m, Mat x, int heads, Idx row_keys,
                                 const DropoutKey& key, Mat el, Mat er, Mat alpha,
                                 const char* what) {
  SLUICE_EXPECTS(heads > 0 && x.rows == m.cols && el.rows == m.cols && el.cols >= heads &&
                     er.rows == m.rows && er.cols >= heads && alpha.rows == m.nnz &&
                     alpha.cols >= heads,
                 what, " shapes (A ", m.rows, " x ", m.cols, ", nnz ", m.nnz, ", x ", x.rows, " x ",
                 x.cols, ", ", heads, " heads)");
  if (key.rate > 0.f)
    SLUICE_EXPECTS(row_keys.size == m.rows, what, ": ", m.rows, " rows but ", row_keys.size,
                   " row keys");
  return x.cols;
}

// The operands both passes over input rows read (checked_input_width()'s).
template <typename Index>
GatInputRows<Index> input_rows(const DeviceCsr& m, Mat x, std::int64_t width, Mat el, Mat er,
                               int heads, const AttentionDropout& drop) {
  GatInputRows<Index> in;
  in.a = m.arrays<Index>();
  in.x = x.data;
  in.ldx = x.ld;
  in.width = width;
  in.el = el.data;
  in.ldel = el.ld;
  in.er = er.data;
  in.lder = er.ld;
  in.heads = heads;
  in.dropout = drop;
  return in;
}

}  // namespace

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

void CudaDevice::gat_input_scores(Mat x, Mat folded, int heads, Mat el, Mat er) {
  OpScope op(*this, "gat_input_scores");
  expect_compute_lane("gat_input_scores");
  expect_input_scores_shapes(x, folded, heads, el, er);
  if (x.rows == 0) return;
  DeviceGuard guard(gpu_);
  if (!gat_input_scores_fit(x.cols, heads)) {  // rows too wide for one pass: two products
    gemm(Transpose::kNo, Transpose::kNo, 1.f, x, folded.col_block(0, heads), 0.f, el);
    gemm(Transpose::kNo, Transpose::kNo, 1.f, x.row_block(0, er.rows),
         folded.col_block(heads, heads), 0.f, er);
    return;
  }
  launch_gat_input_scores(GatInputScores{x.data, x.ld, x.rows, x.cols, folded.data, folded.ld,
                                         heads, el.data, el.ld, er.data, er.ld, er.rows},
                          cur());
}

void CudaDevice::gat_forward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                             Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                             Mat alpha, Mat out, SourceScores source_scores) {
  OpScope op(*this, "gat_forward");
  expect_compute_lane("gat_forward");
  finish_setup();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kRows);
  const std::int64_t width = checked_head_width(m, z, heads, el, er, alpha, "gat_forward");
  SLUICE_EXPECTS(out.rows == m.rows && out.cols == z.cols, "gat_forward: out ", out.rows, " x ",
                 out.cols, " for ", m.rows, " rows of ", z.cols);
  if (attention_key.rate > 0.f)
    SLUICE_EXPECTS(row_keys.size == m.rows, "gat_forward: ", m.rows, " rows but ", row_keys.size,
                   " row keys");
  {
    OpScope sub(*this, "gat_forward.scores");
    launch_scores(m, z, heads, width, att_src, att_dst, el, er, source_scores,
                  source_scores == SourceScores::kKept ? nullptr : merged_row_scratch(m, heads),
                  cur());
  }
  OpScope sub(*this, "gat_forward.aggregate");
  launch_aggregate(m, z, el, er, heads, width, attention_dropout(attention_key, row_keys), alpha,
                   out.data, out.ld, cur());
}

// A value per merged row and head: the destination scores of every merged row in a forward
// pass, d_el in a backward pass (GAT scratch, kGatSourceScoreGradients in the layout).
float* CudaDevice::merged_row_scratch(const DeviceCsr& m, int heads) {
  return gat_del_.ensure_as<float>(m.cols * heads, account_, cur(), "GAT scratch");
}

void CudaDevice::gat_coefficients(Csr a, Mat z, const float* att_src, const float* att_dst,
                                  int heads, Mat el, Mat er, Mat alpha,
                                  SourceScores source_scores) {
  OpScope op(*this, "gat_coefficients");
  expect_compute_lane("gat_coefficients");
  finish_setup();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kRows);
  const std::int64_t width = checked_head_width(m, z, heads, el, er, alpha, "gat_coefficients");
  launch_scores(m, z, heads, width, att_src, att_dst, el, er, source_scores,
                source_scores == SourceScores::kKept ? nullptr : merged_row_scratch(m, heads),
                cur());
  launch_aggregate(m, z, el, er, heads, width, AttentionDropout{}, alpha, nullptr, 0, cur());
}

void CudaDevice::gat_backward(Csr a, Mat z, const float* att_src, const float* att_dst, int heads,
                              Idx row_keys, const DropoutKey& attention_key, Mat el, Mat er,
                              Mat alpha, Mat out, Mat dout, Mat dz, float* d_att_src,
                              float* d_att_dst) {
  OpScope op(*this, "gat_backward");
  expect_compute_lane("gat_backward");
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kBoth);
  SLUICE_EXPECTS(heads > 0 && z.cols % heads == 0, "gat_backward: ", z.cols,
                 " columns do not split into ", heads, " heads");
  const std::int64_t width = z.cols / heads;
  SLUICE_EXPECTS(dout.rows == m.rows && dout.cols == z.cols && out.rows == m.rows &&
                     out.cols == z.cols && dz.rows == m.cols && dz.cols == z.cols,
                 "gat_backward shapes");
  if (attention_key.rate > 0.f)
    SLUICE_EXPECTS(row_keys.size == m.rows, "gat_backward: ", m.rows, " rows but ", row_keys.size,
                   " row keys");
  cudaStream_t s = cur();
  const std::int64_t k = heads;
  float* d_el = merged_row_scratch(m, heads);
  float* d_er = gat_der_.ensure_as<float>(m.rows * k, account_, s, "GAT scratch");
  if (m.cols > 0)
    SLUICE_CUDA(cudaMemsetAsync(d_el, 0, static_cast<std::size_t>(m.cols * k * kFloat), s));
  const AttentionDropout drop = attention_dropout(attention_key, row_keys);
  const bool by_source_pass = gat_backward_by_source(heads, width) && m.t_perm.get() != nullptr;
  if (by_source_pass) {
    // One pass by source; the per-entry score gradients in dalpha's scratch, the per-row sums
    // in d_er's until the destination sums replace them.
    float* ds = gat_dalpha_.ensure_as<float>(m.nnz * k, account_, s, "GAT scratch");
    {
      OpScope sub(*this, "gat_backward.rows");
      launch_gat_row_sums(m.rows, dout.data, dout.ld, out.data, out.ld, heads, width, d_er, heads,
                          s);
    }
    {
      OpScope sub(*this, "gat_backward.sources");
      m.with_index([&](auto index) {
        by_source<decltype(index)>(m, z, el, er, alpha, dout, dz, heads, att_src, drop, d_er, d_el,
                                   ds, s);
      });
    }
    OpScope sub(*this, "gat_backward.destinations");
    m.with_index([&](auto index) {
      launch_gat_destination_sums(m.arrays<decltype(index)>(), ds, heads, d_er, s);
    });
  } else {
    float* dalpha = gat_dalpha_.ensure_as<float>(m.nnz * k, account_, s, "GAT scratch");
    float* atilde = gat_atilde_.ensure_as<float>(m.nnz * k, account_, s, "GAT scratch");
    // Entry-major coefficients (atilde[e * K + h]), then one transposed aggregation over all
    // heads.
    {
      OpScope sub(*this, "gat_backward.edges");
      m.with_index([&](auto index) {
        launch_gat_backward_edges(m.arrays<decltype(index)>(), z.data, z.ld, el.data, el.ld,
                                  er.data, er.ld, alpha.data, alpha.ld, dout.data, dout.ld, heads,
                                  width, drop, dalpha, atilde, d_el, d_er, s);
      });
    }
    OpScope sub(*this, "gat_backward.transposed");
    transposed_aggregate(m, atilde, heads, width, dout, dz);
  }
  OpScope sub(*this, "gat_backward.scores");
  float* partials = column_partials_.ensure_as<float>(
      column_sum_partials(std::max(m.rows, m.cols), z.cols), account_, s, "column sum partials");
  // The pass by source added the source scores' share of dz (GatBySource::att_src).
  launch_gat_scores_backward(d_el, k, nullptr, m.cols, heads, width, z.data, z.ld, att_src,
                             by_source_pass ? nullptr : dz.data, dz.ld, d_att_src, partials, s);
  launch_gat_scores_backward(d_er, k, m.self.as<vertex_t>(), m.rows, heads, width, z.data, z.ld,
                             att_dst, dz.data, dz.ld, d_att_dst, partials, s);
}

void CudaDevice::gat_input_forward(Csr a, Mat x, int heads, Idx row_keys,
                                   const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                   Mat agg) {
  OpScope op(*this, "gat_input_forward");
  expect_compute_lane("gat_input_forward");
  finish_setup();
  DeviceGuard guard(gpu_);
  const DeviceCsr& m = resident_csr(a, CsrAccess::kRows);
  const std::int64_t width =
      checked_input_width(m, x, heads, row_keys, attention_key, el, er, alpha, "gat_input_forward");
  SLUICE_EXPECTS(agg.rows == m.rows && agg.cols == heads * width, "gat_input_forward: agg ",
                 agg.rows, " x ", agg.cols, " for ", m.rows, " rows of ", heads, " x ", width);
  const AttentionDropout drop = attention_dropout(attention_key, row_keys);
  const auto run = [&](auto index) {
    const auto in = input_rows<decltype(index)>(m, x, width, el, er, heads, drop);
    launch_gat_input_forward(in, alpha.data, alpha.ld, agg.data, agg.ld, cur());
  };
  m.with_index(run);
}

void CudaDevice::gat_input_backward(Csr a, Mat x, int heads, Idx row_keys,
                                    const DropoutKey& attention_key, Mat el, Mat er, Mat alpha,
                                    Mat head_dots, Mat g, Mat sums) {
  OpScope op(*this, "gat_input_backward");
  expect_compute_lane("gat_input_backward");
  DeviceGuard guard(gpu_);
  // The transpose too: the sums by source walk it.
  const DeviceCsr& m = resident_csr(a, CsrAccess::kBoth);
  const std::int64_t width = checked_input_width(m, x, heads, row_keys, attention_key, el, er,
                                                 alpha, "gat_input_backward");
  SLUICE_EXPECTS(head_dots.rows == m.rows && head_dots.cols == heads && g.rows == m.rows &&
                     g.cols == heads * width && sums.rows == 2 * heads && sums.cols == width,
                 "gat_input_backward shapes");
  SLUICE_EXPECTS(m.t_perm.get() != nullptr,
                 "gat_input_backward: the CSR has no transpose permutation");
  cudaStream_t s = cur();
  // The GAT backward's scratch (kGatDestinationScoreGradients, kGatSourceScoreGradients,
  // kGatEntryGradients, kGatInputScoreSums): d_er in gat_der_, d_el in gat_del_, the entries'
  // d_e in gat_dalpha_, the partial sums beside.
  GatInputScratch scratch;
  scratch.rows = gat_der_.ensure_as<float>(m.rows * heads, account_, s, "GAT scratch");
  scratch.sources = gat_del_.ensure_as<float>(m.cols * heads, account_, s, "GAT scratch");
  scratch.entries = gat_dalpha_.ensure_as<float>(m.nnz * heads, account_, s, "GAT scratch");
  scratch.partials = gat_input_partials_.ensure_as<float>(
      gat_input_partials(m.rows, m.cols) * heads * width, account_, s, "GAT scratch");
  const AttentionDropout drop = attention_dropout(attention_key, row_keys);
  const auto run = [&](auto index) {
    using Index = decltype(index);
    GatInputBackward<Index> p;
    p.in = input_rows<Index>(m, x, width, el, er, heads, drop);
    p.t = m.transposed_arrays<Index>();
    p.alpha = alpha.data;
    p.ldalpha = alpha.ld;
    p.head_dots = head_dots.data;
    p.ldhead_dots = head_dots.ld;
    p.g = g.data;
    p.ldg = g.ld;
    p.scratch = scratch;
    p.sums = sums.data;
    p.ldsums = sums.ld;
    launch_gat_input_backward(p, s);
  };
  m.with_index(run);
}

}  // namespace sluice::cuda
