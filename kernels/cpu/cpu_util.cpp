// Row-copy helpers of the CPU backend (kernels/cpu/cpu_util.hpp).
#include "kernels/cpu/cpu_util.hpp"
#include "common/parallel.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace sluice::cpu {

void check_indices(const vertex_t* index, std::int64_t n, std::int64_t limit, const char* what) {
  if (n == 0) return;
  SLUICE_EXPECTS(index != nullptr, what, ": null index array of ", n, " entries");
  for (std::int64_t i = 0; i < n; ++i)
    SLUICE_EXPECTS(index[i] >= 0 && index[i] < limit, what, ": index ", index[i], " at position ",
                   i, " outside [0, ", limit, ")");
}

namespace {
// The shape and index checks shared by the indexed row copies and adds; `op` names the caller.
void check_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                        std::int64_t n, const std::string& op) {
  SLUICE_EXPECTS(src.cols == dst.cols, op, ": width ", src.cols, " vs ", dst.cols);
  if (src_rows)
    check_indices(src_rows, n, src.rows, (op + " source").c_str());
  else
    SLUICE_EXPECTS(n <= src.rows, op, ": ", n, " rows from ", src.rows);
  if (dst_rows)
    check_indices(dst_rows, n, dst.rows, (op + " destination").c_str());
  else
    SLUICE_EXPECTS(n <= dst.rows, op, ": ", n, " rows into ", dst.rows);
}
}  // namespace

void copy_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                       std::int64_t n) {
  check_indexed_rows(src, src_rows, dst, dst_rows, n, "row copy");
  const std::size_t bytes = std::size_t(src.cols) * sizeof(float);
#pragma omp parallel for schedule(static) if (n * src.cols > kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t s = src_rows ? src_rows[i] : i;
    const std::int64_t d = dst_rows ? dst_rows[i] : i;
    std::memcpy(dst.data + d * dst.ld, src.data + s * src.ld, bytes);
  }
}

void add_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                      std::int64_t n) {
  check_indexed_rows(src, src_rows, dst, dst_rows, n, "row add");
  const std::int64_t cols = src.cols;
  if (n == 0 || cols == 0) return;
  auto add_row = [&](std::int64_t i) {
    const std::int64_t s = src_rows ? src_rows[i] : i;
    const std::int64_t d = dst_rows ? dst_rows[i] : i;
    const float* x = src.data + s * src.ld;
    float* y = dst.data + d * dst.ld;
    for (std::int64_t j = 0; j < cols; ++j) y[j] += x[j];
  };
  if (n * cols <= kParallelThreshold || omp_get_max_threads() == 1) {
    for (std::int64_t i = 0; i < n; ++i) add_row(i);
    return;
  }
  // Group the additions by destination row (stable: within a group in order of i); each group
  // belongs to one thread, so repeated destinations are race-free and the result deterministic.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[std::size_t(i)] = i;
  if (dst_rows)
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int64_t a, std::int64_t b) { return dst_rows[a] < dst_rows[b]; });
  std::vector<std::int64_t> group_begin;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t i = order[std::size_t(k)];
    if (k == 0 || !dst_rows || dst_rows[i] != dst_rows[order[std::size_t(k - 1)]])
      group_begin.push_back(k);
  }
  group_begin.push_back(n);
  const std::int64_t groups = std::int64_t(group_begin.size()) - 1;
#pragma omp parallel for schedule(dynamic, 64) if (worth_parallel(n))
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t k = group_begin[std::size_t(g)]; k < group_begin[std::size_t(g + 1)]; ++k)
      add_row(order[std::size_t(k)]);
}

}  // namespace sluice::cpu
