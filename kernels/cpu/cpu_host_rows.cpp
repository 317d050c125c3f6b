// Row transfers between the CPU backend's device matrices (fp32) and host matrices of either
// precision (kernels/cpu/cpu_util.hpp): bf16 rows are widened on load and rounded on store with
// the shared conversion of kernels/bfloat16.hpp, at the same points as the CUDA kernels.
#include <omp.h>

#include "kernels/bfloat16.hpp"
#include "kernels/cpu/cpu_util.hpp"

namespace sluice::cpu {
namespace {

// The shape and index checks of the host-row helpers; `op` names the caller.
void check_host_rows(std::int64_t src_rows_total, const vertex_t* src_rows,
                     std::int64_t dst_rows_total, const vertex_t* dst_rows, std::int64_t n,
                     std::int64_t src_cols, std::int64_t dst_cols, const char* op) {
  SLUICE_EXPECTS(src_cols == dst_cols, op, ": width ", src_cols, " vs ", dst_cols);
  if (src_rows)
    check_indices(src_rows, n, src_rows_total, op);
  else
    SLUICE_EXPECTS(n <= src_rows_total, op, ": ", n, " rows from ", src_rows_total);
  if (dst_rows)
    check_indices(dst_rows, n, dst_rows_total, op);
  else
    SLUICE_EXPECTS(n <= dst_rows_total, op, ": ", n, " rows into ", dst_rows_total);
}

// op(y[j], x[j]) over the n row pairs: source row src_rows[i] (or i) of `from`, destination row
// dst_rows[i] (or i) of `to`; one thread per row (destination rows are unique).
template <typename From, typename To, typename Op>
void for_row_pairs(const From* from, std::int64_t from_ld, const vertex_t* src_rows, To* to,
                   std::int64_t to_ld, const vertex_t* dst_rows, std::int64_t n, std::int64_t cols,
                   Op op) {
#pragma omp parallel for schedule(static) if (n * cols > kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const From* x = from + (src_rows ? src_rows[i] : i) * from_ld;
    To* y = to + (dst_rows ? dst_rows[i] : i) * to_ld;
    for (std::int64_t j = 0; j < cols; ++j) op(y[j], x[j]);
  }
}

}  // namespace

void load_host_rows(HostMat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                    std::int64_t n) {
  if (src.precision == HostPrecision::kFp32) {
    copy_indexed_rows(fp32_view(src), src_rows, dst, dst_rows, n);
    return;
  }
  check_host_rows(src.rows, src_rows, dst.rows, dst_rows, n, src.cols, dst.cols, "bf16 row load");
  for_row_pairs(src.bf16(), src.ld, src_rows, dst.data, dst.ld, dst_rows, n, dst.cols,
                [](float& y, bf16_t x) { y = float_from_bf16(x); });
}

void store_host_rows(Mat src, const vertex_t* src_rows, HostMat dst, const vertex_t* dst_rows,
                     std::int64_t n) {
  if (dst.precision == HostPrecision::kFp32) {
    copy_indexed_rows(src, src_rows, fp32_view(dst), dst_rows, n);
    return;
  }
  check_host_rows(src.rows, src_rows, dst.rows, dst_rows, n, src.cols, dst.cols, "bf16 row store");
  for_row_pairs(src.data, src.ld, src_rows, dst.bf16(), dst.ld, dst_rows, n, src.cols,
                [](bf16_t& y, float x) { y = bf16_from_float(x); });
}

void add_host_rows(Mat src, const vertex_t* src_rows, HostMat dst, const vertex_t* dst_rows,
                   std::int64_t n) {
  if (dst.precision == HostPrecision::kFp32) {
    add_indexed_rows(src, src_rows, fp32_view(dst), dst_rows, n);
    return;
  }
  check_host_rows(src.rows, src_rows, dst.rows, dst_rows, n, src.cols, dst.cols, "bf16 row add");
  // Unique destination rows (the flush contract): one thread per row, no order to keep.
  for_row_pairs(
      src.data, src.ld, src_rows, dst.bf16(), dst.ld, dst_rows, n, src.cols,
      [](bf16_t& y, float x) { y = bf16_from_float(float_from_bf16(y) + round_to_bf16(x)); });
}

void round_rows(Mat m, const vertex_t* rows, std::int64_t n, HostPrecision precision) {
  if (precision == HostPrecision::kFp32) return;
  if (rows)
    check_indices(rows, n, m.rows, "round_rows");
  else
    SLUICE_EXPECTS(n <= m.rows, "round_rows: ", n, " rows of ", m.rows);
  const std::int64_t cols = m.cols;
#pragma omp parallel for schedule(static) if (n * cols > kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = m.data + (rows ? rows[i] : i) * m.ld;
    for (std::int64_t j = 0; j < cols; ++j) row[j] = round_to_bf16(row[j]);
  }
}

}  // namespace sluice::cpu
