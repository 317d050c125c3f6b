// The derived entry weights of a device CSR (sparse.hpp, fill_derived_weights) for cuSPARSE: one
// warp per row, lanes over the row's entries. The formulas are
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

template <typename Index>
void fill(const DeviceCsr& a, float* out, cudaStream_t stream) {
  matrix_weights_kernel<Index>
      <<<detail::blocks_for(a.rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
          a.weights, a.indptr.as<Index>(), a.columns.as<Index>(),
          a.column_degrees.as<std::int32_t>(), a.rows, out);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace

void fill_derived_weights(const DeviceCsr& a, float* out, cudaStream_t stream) {
  SLUICE_EXPECTS(a.weights != CsrWeights::kPerCall,
                 "fill_derived_weights: the matrix takes its values per call");
  SLUICE_EXPECTS(a.weights != CsrWeights::kSymmetricNorm || a.column_degrees.get(),
                 "fill_derived_weights: the symmetric norm needs the column degrees");
  if (a.nnz == 0) return;
  if (a.wide) {
    fill<std::int64_t>(a, out, stream);
  } else {
    fill<std::int32_t>(a, out, stream);
  }
}

}  // namespace sluice::cuda
