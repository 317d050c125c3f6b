// Row-copy helpers of the CPU backend (kernels/cpu/cpu_util.hpp).
#include "kernels/cpu/cpu_util.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>

namespace sluice::cpu {

void check_indices(const vertex_t* index, std::int64_t n, std::int64_t limit, const char* what) {
  if (n == 0) return;
  SLUICE_EXPECTS(index != nullptr, what, ": null index array of ", n, " entries");
  for (std::int64_t i = 0; i < n; ++i)
    SLUICE_EXPECTS(index[i] >= 0 && index[i] < limit, what, ": index ", index[i], " at position ",
                   i, " outside [0, ", limit, ")");
}

void copy_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                       std::int64_t n) {
  SLUICE_EXPECTS(src.cols == dst.cols, "row copy: width ", src.cols, " vs ", dst.cols);
  if (src_rows)
    check_indices(src_rows, n, src.rows, "row copy source");
  else
    SLUICE_EXPECTS(n <= src.rows, "row copy: ", n, " rows from ", src.rows);
  if (dst_rows)
    check_indices(dst_rows, n, dst.rows, "row copy destination");
  else
    SLUICE_EXPECTS(n <= dst.rows, "row copy: ", n, " rows into ", dst.rows);
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
  SLUICE_EXPECTS(src.cols == dst.cols, "row add: width ", src.cols, " vs ", dst.cols);
  if (src_rows)
    check_indices(src_rows, n, src.rows, "row add source");
  else
    SLUICE_EXPECTS(n <= src.rows, "row add: ", n, " rows from ", src.rows);
  if (dst_rows)
    check_indices(dst_rows, n, dst.rows, "row add destination");
  else
    SLUICE_EXPECTS(n <= dst.rows, "row add: ", n, " rows into ", dst.rows);
  const std::int64_t cols = src.cols;
  if (n == 0 || cols == 0) return;
  // Column slices of at least 16 floats; each thread adds every row of its slice in order.
  const std::int64_t slices =
      std::max<std::int64_t>(1, std::min<std::int64_t>(omp_get_max_threads(), cols / 16));
#pragma omp parallel for schedule(static) if (slices > 1 && n * cols > kParallelThreshold)
  for (std::int64_t t = 0; t < slices; ++t) {
    const std::int64_t c0 = cols * t / slices, c1 = cols * (t + 1) / slices;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t s = src_rows ? src_rows[i] : i;
      const std::int64_t d = dst_rows ? dst_rows[i] : i;
      const float* x = src.data + s * src.ld;
      float* y = dst.data + d * dst.ld;
      for (std::int64_t j = c0; j < c1; ++j) y[j] += x[j];
    }
  }
}

void parallel_copy(const float* src, float* dst, std::int64_t n) {
  constexpr std::int64_t kBlock = 1 << 16;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    std::memcpy(dst + begin, src + begin, std::size_t(count) * sizeof(float));
  }
}

}  // namespace sluice::cpu
