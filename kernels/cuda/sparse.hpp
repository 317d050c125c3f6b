// Device CSR matrices: uploaded once (32-bit indices when nnz < 2^31, else 64-bit), with the
// self-entry column of every row (GCN's symmetric norm: that column's degree instead, the one
// thing its transposed product needs of it), a precomputed transposed structure, for matrices of
// per-call values the permutation that carries those values to it (the transposed products and the
// GAT backward read it), for GCN's symmetric norm the column degrees, and the lists of long rows
// for the row SpMM and the GAT kernels. The products compute derived weights (CsrWeights) per entry
// (row_spmm.hpp), so such a matrix stores no value at all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"
#include "kernels/csr_transpose.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/memory.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

struct DeviceCsr {
  std::int64_t rows = 0, cols = 0, nnz = 0;
  bool wide = false;  // 64-bit offsets and columns
  CsrWeights weights = CsrWeights::kPerCall;
  // Read-only: in device memory, or in pinned host memory read zero-copy (ConstantStore).
  // self: each row's self-entry column; kSymmetricNorm keeps self_degrees instead, that column's
  // degree (rows 32-bit values: the same bytes), so that a transposed product reads one array
  // per entry for the row's degree, not self and then column_degrees.
  ConstantBuffer indptr, columns, self, self_degrees;
  // The transpose: cols x rows; perm: nnz entries, kPerCall only (else empty).
  ConstantBuffer t_indptr, t_columns, t_perm;
  ConstantBuffer column_degrees;  // kSymmetricNorm: cols 32-bit degrees
  // Rows (and transposed rows) with more than long_degree entries for the row SpMM and the GAT
  // kernels, the row SpMM's split rows first (LongSplit), then in row order.
  std::int64_t long_degree = INT64_MAX, num_long = 0, num_t_long = 0;
  ConstantBuffer long_rows, t_long_rows;
  LongSplit long_split, t_long_split;

  // f(Index{}) with the arrays' index type: std::int64_t where wide, else std::int32_t.
  template <typename F>
  void with_index(F&& f) const {
    if (wide)
      f(std::int64_t{});
    else
      f(std::int32_t{});
  }
  template <typename Index>
  CsrArrays<Index> arrays() const {
    return CsrArrays<Index>{indptr.as<Index>(),
                            columns.as<Index>(),
                            self.as<vertex_t>(),
                            rows,
                            cols,
                            nnz,
                            LongRows{long_rows.as<vertex_t>(), num_long, long_degree, long_split}};
  }
  LongRows transposed_long_rows() const {
    return LongRows{t_long_rows.as<vertex_t>(), num_t_long, long_degree, t_long_split};
  }
  // The transpose's arrays; perm is null unless the weights are kPerCall (t_perm).
  template <typename Index>
  TransposedArrays<Index> transposed_arrays() const {
    return TransposedArrays<Index>{t_indptr.as<Index>(), t_columns.as<Index>(), t_perm.as<Index>(),
                                   transposed_long_rows()};
  }
};

// Setup time of upload_device_csr() by step (for the -v log), accumulated.
struct CsrUploadSeconds {
  double checks = 0, transpose = 0;
};

// Host buffers upload_device_csr() reuses from one matrix to the next: setup uploads one or
// more matrices per chunk, and fresh buffers each time would fault every page in again.
struct CsrUploadScratch {
  CsrTransposeScratch transpose;
  std::vector<std::int32_t> offsets, t_offsets, t_rows, t_entries;
  std::vector<vertex_t> self;
};

// Validates and uploads (synchronously; setup time) the matrix and its transpose; `store` places
// every array; `seconds` (may be null) accumulates the time of the checks and the transpose;
// `scratch` (may be null) holds the host buffers of 32-bit matrices. Rows
// with more than long_degree entries (0: none) are listed for the row SpMM and the GAT kernels
// (also of the transpose).
DeviceCsr upload_device_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                            std::int64_t num_cols, const CsrWeighting& weighting,
                            ConstantStore& store, cudaStream_t stream, const std::string& what,
                            std::int64_t long_degree, CsrUploadSeconds* seconds = nullptr,
                            CsrUploadScratch* scratch = nullptr);

}  // namespace sluice::cuda
