// The transpose of a chunk CSR that both backends build at upload: for every column, the rows
// that hold it (ascending) and the positions of those entries in the CSR, as a counting sort by
// column over the rows in order gives them. Built with OpenMP threads, each filling the
// transposed rows of its own columns; the result does not depend on the thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/parallel.hpp"
#include "common/types.hpp"

namespace sluice {

// t_offsets (cols + 1), t_rows and t_entries (nnz each) of the CSR (indptr, columns) with `cols`
// columns; every column must lie in [0, cols) (the caller checks). Within a transposed row the
// entries ascend by position, hence by row.
template <typename Offset, typename Index, typename Entry>
void transpose_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                   std::int64_t cols, std::vector<Offset>& t_offsets, std::vector<Index>& t_rows,
                   std::vector<Entry>& t_entries) {
  const std::int64_t rows = std::int64_t(indptr.size()) - 1;
  const std::int64_t nnz = std::int64_t(columns.size());
  t_offsets.assign(std::size_t(cols) + 1, 0);
  t_rows.resize(std::size_t(nnz));
  t_entries.resize(std::size_t(nnz));
  // Each thread owns a range of columns and scans every entry in CSR order for those in its
  // range: no two threads write the same place, and every transposed row fills in row order.
  Offset* counts = t_offsets.data() + 1;
#pragma omp parallel if (worth_parallel(nnz + cols))
  {
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const std::int64_t begin = cols * t / threads, end = cols * (t + 1) / threads;
    for (std::int64_t e = 0; e < nnz; ++e) {
      const vertex_t c = columns[std::size_t(e)];
      if (c >= begin && c < end) ++counts[c];
    }
  }
  for (std::int64_t c = 0; c < cols; ++c)
    t_offsets[std::size_t(c) + 1] += t_offsets[std::size_t(c)];
  std::vector<Offset> next(t_offsets.begin(), t_offsets.end() - 1);
#pragma omp parallel if (worth_parallel(nnz + cols))
  {
    // Column ranges of about equal entry counts (a column with many entries may stand alone).
    const std::int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const auto column_at = [&](std::int64_t part) {
      const Offset target = static_cast<Offset>(nnz * part / threads);
      return std::int64_t(std::lower_bound(t_offsets.begin(), t_offsets.end() - 1, target) -
                          t_offsets.begin());
    };
    const std::int64_t begin = t == 0 ? 0 : column_at(t);
    const std::int64_t end = t + 1 == threads ? cols : column_at(t + 1);
    if (begin < end)
      for (std::int64_t r = 0; r < rows; ++r)
        for (edge_t e = indptr[std::size_t(r)]; e < indptr[std::size_t(r) + 1]; ++e) {
          const vertex_t c = columns[std::size_t(e)];
          if (c < begin || c >= end) continue;
          const Offset k = next[std::size_t(c)]++;
          t_rows[std::size_t(k)] = static_cast<Index>(r);
          t_entries[std::size_t(k)] = static_cast<Entry>(e);
        }
  }
}

}  // namespace sluice
