// Device CSR matrices for cuSPARSE SpMM: uploaded once (32-bit indices when nnz < 2^31, else
// 64-bit), with the self-entry column of every row (GAT) and, in the default transpose mode, a
// precomputed transposed structure plus the permutation that carries per-call values to it.
#pragma once

#include <cusparse.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/memory.hpp"

namespace sluice::cuda {

// How dx += A^T dy is computed: a precomputed transposed CSR (deterministic, default) or
// cuSPARSE's CUSPARSE_OPERATION_TRANSPOSE (SLUICE_SPMM_TRANSPOSE=op, for measurement).
// How spmm_transpose_add runs (SLUICE_SPMM_TRANSPOSE):
//   csr   cuSPARSE SpMM over the precomputed transposed CSR (values permuted per call);
//   op    cuSPARSE's transpose operation on the original CSR (not deterministic run to run);
//   warp  the GAT backward's warp-per-row transposed aggregation with one head over the
//         transposed CSR (hub rows on a block of warps; deterministic, no permutation);
//   auto  (default) per matrix and width, whichever of csr with cuSPARSE's default algorithm,
//         csr with CUSPARSE_SPMM_CSR_ALG3 and warp measured fastest on the first call.
enum class TransposeMode { kMeasured, kPrecomputed, kOperation, kWarp };
TransposeMode transpose_mode_from_env();

struct DeviceCsr {
  std::int64_t rows = 0, cols = 0, nnz = 0;
  bool wide = false;  // 64-bit offsets and columns
  // Read-only: in device memory, or in pinned host memory read zero-copy (ConstantStore).
  ConstantBuffer indptr, columns, self;
  bool has_transpose = false;
  ConstantBuffer t_indptr, t_columns, t_perm;  // the transpose: cols x rows; perm: nnz entries
  // Rows (and transposed rows) with more than long_degree entries, for the GAT kernels.
  std::int64_t long_degree = INT64_MAX, num_long = 0, num_t_long = 0;
  ConstantBuffer long_rows, t_long_rows;

  cusparseIndexType_t index_type() const { return wide ? CUSPARSE_INDEX_64I : CUSPARSE_INDEX_32I; }
  template <typename Index>
  CsrArrays<Index> arrays() const {
    return CsrArrays<Index>{indptr.as<Index>(),
                            columns.as<Index>(),
                            self.as<vertex_t>(),
                            rows,
                            cols,
                            nnz,
                            LongRows{long_rows.as<vertex_t>(), num_long, long_degree}};
  }
  LongRows transposed_long_rows() const {
    return LongRows{t_long_rows.as<vertex_t>(), num_t_long, long_degree};
  }
};

// Validates and uploads (synchronously; setup time); `store` places every array. Rows with more
// than long_degree entries (0: none) are listed for the GAT kernels (also of the transpose).
DeviceCsr upload_device_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                            std::int64_t num_cols, bool build_transpose, ConstantStore& store,
                            cudaStream_t stream, const std::string& what,
                            std::int64_t long_degree = 0);

// One dense operand of an SpMM (row-major, leading dimension ld).
struct DenseView {
  float* data = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0;
};

// cuSPARSE's CSR SpMM algorithm: 0 = CUSPARSE_SPMM_ALG_DEFAULT, 1..3 = CUSPARSE_SPMM_CSR_ALG1..3
// (SLUICE_SPMM_ALG; for measurements).
int spmm_algorithm_from_env();

// y = alpha A x (beta 0) or, with transpose, y += alpha A^T x, by cuSPARSE. `values`: nnz floats
// in A's entry order. use_transposed_csr: the transpose as a plain SpMM over the precomputed
// transposed CSR, its values permuted into `transposed_values` (nnz floats of scratch); else
// cuSPARSE's transpose operation. `workspace` grows as needed. timed_begin / timed_end (may be
// null): events recorded around the device work, after any workspace growth.
void run_spmm(cusparseHandle_t handle, const DeviceCsr& a, const float* values, DenseView x,
              DenseView y, bool transpose, bool use_transposed_csr, int algorithm, float alpha,
              float* transposed_values, Scratch& workspace, MemoryAccount& account,
              cudaStream_t stream, cudaEvent_t timed_begin = nullptr,
              cudaEvent_t timed_end = nullptr);

}  // namespace sluice::cuda
