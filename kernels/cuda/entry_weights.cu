// The derived entry weights of a device CSR (sparse.hpp, fill_derived_weights): one warp per row
// of the matrix or of its transpose, lanes over the row's entries. The formulas are
// kernels/entry_weights.hpp's, shared with the CPU backend.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/sparse.hpp"
#include "kernels/entry_weights.hpp"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::lane_id;
using detail::warp_count;

// Entry e of row r: symmetric norm of the row's self column and e's column, or the neighbor
// mean (0 at the row's first entry).
template <typename Index>
__global__ void matrix_weights_kernel(CsrWeights kind, const Index* __restrict__ indptr,
                                      const Index* __restrict__ columns,
                                      const std::int32_t* __restrict__ degrees, std::int64_t rows,
                                      float* __restrict__ out) {
  const int lane = lane_id();
  for (std::int64_t r = global_warp(); r < rows; r += warp_count()) {
    const std::int64_t begin = indptr[r], end = indptr[r + 1];
    if (begin == end) continue;
    if (kind == CsrWeights::kSymmetricNorm) {
      const std::int32_t row_degree = degrees[columns[begin]];
      for (std::int64_t e = begin + lane; e < end; e += 32)
        out[e] = symmetric_norm(row_degree, degrees[columns[e]]);
    } else {
      const float mean = neighbor_mean(end - begin);
      for (std::int64_t e = begin + lane; e < end; e += 32) out[e] = e == begin ? 0.f : mean;
    }
  }
}

// Transposed entry e (column c, row r = t_columns[e]): the same weight as entry (r, c). A row's
// self column is self[r]; no other entry of row r holds it (CsrWeights::kNeighborMean).
template <typename Index>
__global__ void transposed_weights_kernel(CsrWeights kind, const Index* __restrict__ t_indptr,
                                          const Index* __restrict__ t_columns,
                                          const Index* __restrict__ indptr,
                                          const vertex_t* __restrict__ self,
                                          const std::int32_t* __restrict__ degrees,
                                          std::int64_t cols, float* __restrict__ out) {
  const int lane = lane_id();
  for (std::int64_t c = global_warp(); c < cols; c += warp_count()) {
    const std::int64_t begin = t_indptr[c], end = t_indptr[c + 1];
    if (kind == CsrWeights::kSymmetricNorm) {
      const std::int32_t column_degree = begin == end ? 0 : degrees[c];
      for (std::int64_t e = begin + lane; e < end; e += 32)
        out[e] = symmetric_norm(degrees[self[t_columns[e]]], column_degree);
    } else {
      for (std::int64_t e = begin + lane; e < end; e += 32) {
        const std::int64_t r = t_columns[e];
        out[e] = self[r] == c ? 0.f : neighbor_mean(indptr[r + 1] - indptr[r]);
      }
    }
  }
}

template <typename Index>
void fill(const DeviceCsr& a, EntryOrder order, float* out, cudaStream_t stream) {
  const std::int32_t* degrees = a.column_degrees.as<std::int32_t>();
  if (order == EntryOrder::kMatrix) {
    matrix_weights_kernel<Index>
        <<<detail::blocks_for(a.rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
            a.weights, a.indptr.as<Index>(), a.columns.as<Index>(), degrees, a.rows, out);
  } else {
    transposed_weights_kernel<Index>
        <<<detail::blocks_for(a.cols, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
            a.weights, a.t_indptr.as<Index>(), a.t_columns.as<Index>(), a.indptr.as<Index>(),
            a.self.as<vertex_t>(), degrees, a.cols, out);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace

void fill_derived_weights(const DeviceCsr& a, EntryOrder order, float* out, cudaStream_t stream) {
  SLUICE_EXPECTS(a.weights != CsrWeights::kPerCall,
                 "fill_derived_weights: the matrix takes its values per call");
  SLUICE_EXPECTS(a.weights != CsrWeights::kSymmetricNorm || a.column_degrees.get(),
                 "fill_derived_weights: the symmetric norm needs the column degrees");
  if (a.nnz == 0) return;
  if (a.wide) {
    fill<std::int64_t>(a, order, out, stream);
  } else {
    fill<std::int32_t>(a, order, out, stream);
  }
}

}  // namespace sluice::cuda
