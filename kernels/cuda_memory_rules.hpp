// The rules by which the CUDA backend charges device memory, defined once for the backend
// (kernels/cuda/) and for the buffer layout that adds its charges up without a GPU
// (train/layout/buffer_layout.cpp, the memory estimate): allocation granules, the long-row
// threshold that sizes a CSR's long-row lists, a CSR's arrays, and the headroom the backend
// keeps free. Plain C++: no CUDA header, so that sluice-preprocess builds without CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/types.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

// Every allocation is charged in whole granules of 256 bytes (cudaMalloc's alignment).
inline constexpr std::int64_t kGranuleBytes = 256;
// `bytes` rounded up to whole granules.
constexpr std::int64_t rounded(std::int64_t bytes) {
  return (bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
}

// GAT rows with more than long_degree_for(nnz) entries get a block of warps each: one warp on a
// hub row of an RMAT graph (68k entries at scale 21) would run long after every other row is
// done. The threshold follows the matrix, nnz / 2048 between 128 and 1024, so that small chunks
// split their moderate rows too. On an H200, products-like GAT 4 x 64: 1024 against 4096 at
// C = 4, 0.541 vs 0.588 s per epoch on one GPU; at C = 452 (230k entries a chunk) 128 against
// 1024, 1.85 vs 2.42 s, while 128 at C = 4 costs 8 %.
constexpr std::int64_t long_degree_for(std::int64_t nnz) {
  return std::min<std::int64_t>(1024, std::max<std::int64_t>(128, nnz / 2048));
}

// The row SpMM splits a long row of more than long_segment_entries(nnz) entries into segments of
// that many (kernels/cuda/row_spmm.cu), each a block of warps, whose sums it then adds in segment
// order: on one block, a hub row of a small chunk (68k of a 650k-entry chunk's entries) takes
// longer than the rest of the product. At least nnz / kMaxSplitRows entries a segment, so fewer
// than kMaxSplitRows rows split, into fewer than kMaxLongSegments segments; each segment's sums
// (one row of the product) take scratch from the headroom below.
inline constexpr std::int64_t kMaxSplitRows = 512;
inline constexpr std::int64_t kMaxLongSegments = 2 * kMaxSplitRows;
inline constexpr std::int64_t kMinSegmentEntries = 2048;
constexpr std::int64_t long_segment_entries(std::int64_t nnz) {
  return std::max(kMinSegmentEntries, (nnz + kMaxSplitRows - 1) / kMaxSplitRows);
}

// GAT layers of at most 8 heads and 256 columns in all take the backward by source
// (kernels/cuda/gat.hpp), which needs no transposed coefficients (atilde, nnz x K). The heads are
// bounded by its shared memory: 4 x 32 x K floats per warp, and 16 warps on a long row.
inline constexpr int kGatBySourceMaxHeads = 8;
constexpr bool gat_backward_by_source(std::int64_t heads, std::int64_t width) {
  return heads > 0 && heads <= kGatBySourceMaxHeads && width > 0 && heads * width <= 256;
}

// GAT's layer 0 attending over its input rows (gat_input_forward, gat_input_backward; the rule
// sluice-train's --gat-layer-zero auto follows on either backend): at most 8 heads of input rows
// up to 256 floats wide, a head count (at least 4) times 16-byte words a lane at most 8 (the
// forward keeps a row's sums for every head in registers), rows a multiple of 4 floats (16-byte
// words, each head's too). The backward runs gat_input_blocks(nnz) blocks of kGatInputBlockWarps
// warps over the entries (128 entries a warp or more: a grid this wide shortens the pass,
// kernels/cuda/NOTES.md); gat_input_slices(n) slices of the source rows (cols) and of the
// destination rows each write K D partial sums, added in order afterwards.
inline constexpr std::int64_t kGatInputBlockWarps = 4;
constexpr std::int64_t gat_input_blocks(std::int64_t nnz) {
  return std::clamp<std::int64_t>((nnz + 511) / 512, 1, 16384);
}
constexpr std::int64_t gat_input_slices(std::int64_t rows) {
  return std::clamp<std::int64_t>((rows + 255) / 256, 1, 1024);
}
constexpr std::int64_t gat_input_partials(std::int64_t rows, std::int64_t cols) {
  return gat_input_slices(cols) + gat_input_slices(rows);
}
constexpr bool gat_inputs_fit(std::int64_t heads, std::int64_t width) {
  return heads > 0 && heads <= 8 && width > 0 && width <= 256 && width % 4 == 0 &&
         std::max<std::int64_t>(heads, 4) * ((width + 127) / 128) <= 8;
}

// Column sums (bias and GAT attention-vector gradients) cut the rows into slices of 64 or more
// rows, at most 256 slices (enough blocks to fill the GPU), each slice writing one partial sum
// per column to scratch, added in slice order afterwards: deterministic, unlike atomic adds.
constexpr std::int64_t column_sum_slices(std::int64_t rows) {
  return std::clamp<std::int64_t>((rows + 63) / 64, 1, 256);
}
// The scratch floats of the partial sums of a column sum over `rows` x `cols`.
constexpr std::int64_t column_sum_partials(std::int64_t rows, std::int64_t cols) {
  return column_sum_slices(rows) * cols;
}

// A chunk CSR's counts that size its arrays on the device: rows and transposed rows (columns)
// with more than long_degree_for(nnz) entries are listed for the GAT kernels.
struct CsrCounts {
  std::int64_t rows = 0, cols = 0, nnz = 0;
  std::int64_t long_rows = 0, long_columns = 0;
  CsrWeights weights = CsrWeights::kPerCall;  // what the transpose and the degrees hold
};

// CSR offsets, columns and the transpose's arrays are 64-bit from 2^31 - 1 entries on, else
// 32-bit.
constexpr bool wide_csr(std::int64_t nnz) {
  return nnz >= std::numeric_limits<std::int32_t>::max();
}

// What a device CSR charges (kernels/cuda/sparse.cpp, upload_structure()), each array a
// separate allocation: the long rows, offsets, columns, one self entry per row, the precomputed
// transpose (offsets over the columns, rows, with per-call values the entry permutation), with
// the symmetric norm one degree per column, and the long transposed rows. The same bytes are
// staged when the arrays stay in host memory (CudaDevice::prefetch_csr(), resident_csr()).
constexpr std::int64_t csr_bytes(const CsrCounts& csr) {
  const std::int64_t index = wide_csr(csr.nnz) ? 8 : 4;
  const std::int64_t vertex = sizeof(vertex_t);
  const std::int64_t permutation = csr.weights == CsrWeights::kPerCall ? csr.nnz * index : 0;
  const std::int64_t degrees =
      csr.weights == CsrWeights::kSymmetricNorm ? csr.cols * std::int64_t(sizeof(std::int32_t)) : 0;
  return rounded(csr.long_rows * vertex) + rounded((csr.rows + 1) * index) +
         rounded(csr.nnz * index) +           // columns
         rounded(csr.rows * vertex) +         // self entries (or their degrees)
         rounded((csr.cols + 1) * index) +    // transposed offsets
         rounded(csr.nnz * index) +           // transposed rows
         rounded(permutation) +               // transpose permutation
         rounded(degrees) +                   // column degrees
         rounded(csr.long_columns * vertex);  // long transposed rows
}

// The memory the backend keeps free for scratch it sizes on first use (SpMM workspace, GAT and
// staging buffers) when it places constants and overlap buffers: budget / kBudgetHeadroomDivisor
// of a device with a budget, else 1 / kGpuHeadroomDivisor of the GPU's memory (shared by the
// logical devices on it).
inline constexpr std::int64_t kBudgetHeadroomDivisor = 8;
inline constexpr std::int64_t kGpuHeadroomDivisor = 16;

// softmax_cross_entropy's device accumulators (CudaDevice): per slot the loss (a double) and 6
// split counters, one slot per target between two synchronize() calls.
inline constexpr std::int64_t kLossSlots = 4;
inline constexpr std::int64_t kLossSlotWords = 7;

// CSRs kept in host memory are staged into this many device slots, each sized for the largest
// (CudaDevice::prefetch_csr(), resident_csr()): one for the batch computing, one filling for the
// next.
inline constexpr std::int64_t kStagedCsrSlots = 2;

}  // namespace sluice::cuda
