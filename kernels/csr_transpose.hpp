// The transpose of a chunk CSR that both backends build at upload: for every column, the rows
// that hold it (ascending) and the positions of those entries in the CSR, as a counting sort by
// column over the rows in order gives them. Built with OpenMP threads; the result does not
// depend on the thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

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
  Offset* counts = t_offsets.data() + 1;
#pragma omp parallel for schedule(static)
  for (std::int64_t e = 0; e < nnz; ++e) {
#pragma omp atomic update
    ++counts[columns[std::size_t(e)]];
  }
  for (std::int64_t c = 0; c < cols; ++c)
    t_offsets[std::size_t(c) + 1] += t_offsets[std::size_t(c)];
  // Scatter in any order, then order each transposed row by entry position.
  std::vector<Offset> next(t_offsets.begin(), t_offsets.end() - 1);
#pragma omp parallel for schedule(dynamic, 4096)
  for (std::int64_t r = 0; r < rows; ++r)
    for (edge_t e = indptr[std::size_t(r)]; e < indptr[std::size_t(r) + 1]; ++e) {
      Offset k;
#pragma omp atomic capture
      k = next[std::size_t(columns[std::size_t(e)])]++;
      t_rows[std::size_t(k)] = static_cast<Index>(r);
      t_entries[std::size_t(k)] = static_cast<Entry>(e);
    }
  std::vector<Offset>().swap(next);
#pragma omp parallel
  {
    std::vector<std::pair<Entry, Index>> pairs;
#pragma omp for schedule(dynamic, 1024)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::size_t begin = std::size_t(t_offsets[std::size_t(c)]);
      const std::size_t end = std::size_t(t_offsets[std::size_t(c) + 1]);
      if (end - begin < 2) continue;
      pairs.clear();
      for (std::size_t k = begin; k < end; ++k) pairs.emplace_back(t_entries[k], t_rows[k]);
      std::sort(pairs.begin(), pairs.end());
      for (std::size_t k = begin; k < end; ++k) {
        t_entries[k] = pairs[k - begin].first;
        t_rows[k] = pairs[k - begin].second;
      }
    }
  }
}

}  // namespace sluice
