// The row SpMM: y = A x (or y += A x) with a warp per row of A, every sparse product of
// CudaDevice (faster than cuSPARSE's on every measured matrix and width, kernels/cuda/NOTES.md). It
// reads the dense rows in 16-byte words when x and y have 16-byte aligned rows (leading
// dimensions a multiple of 4, 16-byte aligned bases), else a float at a time; narrow products
// split the warp into groups of lanes that take different entries at once, and products of at
// most 32 columns, or of at most 128 over a transpose of short rows (a small chunk's), give each
// row of at most 32 entries a group of its own. Derived weights
// (GCN's symmetric norm, SAGE's mean) are computed per entry from the structure, bit for bit
// those of kernels/entry_weights.hpp, so the product needs no weight array. Run over the
// transposed CSR it is the transposed product. Every row's sum is taken in a fixed order
// (deterministic).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gat.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

// Which structure the row SpMM walks: a CSR's rows, or its transposed CSR's (whose entry (c, r)
// is the CSR's entry (r, c): the transposed product).
enum class RowSpmmOver { kMatrix, kTransposed };

// The sparse operand: a CSR (or a transposed CSR) and where its entry weights come from.
template <typename Index>
struct RowSpmmMatrix {
  const Index* indptr = nullptr;  // rows + 1 (of the structure walked)
  const Index* columns = nullptr;
  std::int64_t rows = 0;
  std::int64_t nnz = 0;  // entries of the structure walked (its mean row length picks the grid)
  LongRows long_rows;    // rows of more entries: a block of warps each (the longest, per segment)
  RowSpmmOver over = RowSpmmOver::kMatrix;
  // kPerCall: values[perm ? perm[e] : e]. Derived, per entry (r, c) of the CSR:
  // kSymmetricNorm from degrees (of c, and of row r's self column); kNeighborMean from row r's
  // length (0 at its self entry). Walking the transpose, they also need the CSR's self-column
  // degrees (kSymmetricNorm) or its self columns and offsets (kNeighborMean).
  CsrWeights weights = CsrWeights::kPerCall;
  const float* values = nullptr;
  const Index* perm = nullptr;
  const std::int32_t* degrees = nullptr;
  const vertex_t* self = nullptr;              // kTransposed, kNeighborMean
  const std::int32_t* self_degrees = nullptr;  // kTransposed, kSymmetricNorm
  const Index* matrix_indptr = nullptr;        // kTransposed, kNeighborMean
  // The rows the product writes: [first_row, end_row) (end_row -1: through the last row); the
  // others are left as they are.
  std::int64_t first_row = 0, end_row = -1;
};

// Transposed structures of at most this many entries a row on average (a lane group's row, 32
// entries) give each row of at most 32 entries a lane group of its own at up to 128 columns,
// several rows a warp; their longer rows take the warp. On such structures a warp per row runs a
// chain of dependent reads (offsets, columns, source row, target row) with a row's few loads in
// flight: a small chunk's transposed CSR (products-like under a quarter of its working set, C =
// 164: 180 k rows of 3.6 entries on average a chunk) took 143 us a call against 86 us with
// 8-lane groups (one H200, Nsight Compute, the kernels alone), and the transpose of products-
// like's loss rows in its one-chunk fused pass (2.1 M rows of about 12 entries, 47 columns) 2.24
// against 1.69 ms (--op-times; kernels/cuda/NOTES.md). Forward products over structures as
// short keep a warp per row, whose lane groups take several of a row's entries at once: the
// capped epoch's few took 107-120 us a call against 115-150 us grouped.
inline constexpr std::int64_t kRowSpmmShortMean = 32;

// Whether the product stores its rows or adds them to what y holds.
enum class RowSpmmWrite { kStore, kAdd };

// y[r, 0..cols) (=|+=) sum over row r's entries e of weight(e) x[columns[e], 0..cols).
// segment_sums: scratch of a.long_rows.split.segments x cols floats (may be null without split
// rows).
template <typename Index>
void launch_row_spmm(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                     std::int64_t ldy, std::int64_t cols, RowSpmmWrite write, float* segment_sums,
                     cudaStream_t stream);

}  // namespace sluice::cuda
