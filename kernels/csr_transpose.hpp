// The transpose of a chunk CSR that both backends build at upload: for every column, the rows
// that hold it (ascending) and the positions of those entries in the CSR, as a counting sort by
// column over the rows in order gives them. Built with OpenMP threads; the result does not
// depend on the thread count.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "common/types.hpp"

namespace sluice {

// t_offsets (cols + 1), t_rows and, unless null, t_entries (nnz each) of the CSR (indptr,
// columns) with `cols` columns; every column must lie in [0, cols) (the caller checks). Within
// a transposed row the entries ascend by position, hence by row.
//
// A two-level counting sort that reads the entries in order and never scatters over more than
// a bucket of kTransposeBucketColumns columns at once: threads count their row ranges' entries
// per bucket, move them (row, column, position) into bucket order, then sort each bucket by
// column on its own. Each thread keeps its rows' order, and the threads' ranges follow each
// other, so every step is stable.
inline constexpr std::int64_t kTransposeBucketColumns = std::int64_t(1) << 14;

// The bucket-ordered entries of transpose_csr(), kept by a caller that transposes many matrices
// so that their pages are touched once, not once per matrix.
struct CsrTransposeScratch {
  std::vector<vertex_t> rows, columns;
  std::vector<edge_t> entries;
};

template <typename Offset, typename Index, typename Entry>
void transpose_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                   std::int64_t cols, std::vector<Offset>& t_offsets, std::vector<Index>& t_rows,
                   std::vector<Entry>* t_entries, CsrTransposeScratch* scratch = nullptr) {
  const std::int64_t rows = std::int64_t(indptr.size()) - 1;
  const std::int64_t nnz = std::int64_t(columns.size());
  const std::int64_t buckets =
      std::max<std::int64_t>(1, (cols + kTransposeBucketColumns - 1) / kTransposeBucketColumns);
  resize_for_overwrite(t_offsets, std::size_t(cols) + 1);
  resize_for_overwrite(t_rows, std::size_t(nnz));
  if (t_entries) resize_for_overwrite(*t_entries, std::size_t(nnz));
  CsrTransposeScratch local;
  CsrTransposeScratch& ordered = scratch ? *scratch : local;
  resize_for_overwrite(ordered.rows, std::size_t(nnz));
  resize_for_overwrite(ordered.columns, std::size_t(nnz));
  if (t_entries) resize_for_overwrite(ordered.entries, std::size_t(nnz));
  vertex_t* const bucket_rows = ordered.rows.data();
  vertex_t* const bucket_columns = ordered.columns.data();
  edge_t* const bucket_entries = ordered.entries.data();
  // Per thread of the team (its size known only inside the region): a row range of about nnz /
  // threads entries, and counts[t * buckets + b], then the start of thread t's entries of
  // bucket b in bucket order.
  int threads = 1;
  std::vector<std::int64_t> first_row, counts;
#pragma omp parallel if (worth_parallel(nnz + cols))
  {
#pragma omp single
    {
      threads = omp_get_num_threads();
      first_row.assign(std::size_t(threads) + 1, rows);
      for (int t = 0; t < threads; ++t)
        first_row[std::size_t(t)] =
            std::lower_bound(indptr.begin(), indptr.end() - 1, edge_t(nnz * t / threads)) -
            indptr.begin();
      counts.assign(std::size_t(threads) * std::size_t(buckets), 0);
    }
    const int t = omp_get_thread_num();
    std::int64_t* mine = counts.data() + std::int64_t(t) * buckets;
    const edge_t begin = indptr[std::size_t(first_row[std::size_t(t)])];
    const edge_t end = indptr[std::size_t(first_row[std::size_t(t) + 1])];
    for (edge_t e = begin; e < end; ++e) ++mine[columns[std::size_t(e)] / kTransposeBucketColumns];
#pragma omp barrier
#pragma omp single
    {
      std::int64_t at = 0;
      for (std::int64_t b = 0; b < buckets; ++b)
        for (int u = 0; u < threads; ++u) {
          std::int64_t& slot = counts[std::size_t(u * buckets + b)];
          const std::int64_t count = slot;
          slot = at;
          at += count;
        }
    }
    for (std::int64_t r = first_row[std::size_t(t)]; r < first_row[std::size_t(t) + 1]; ++r)
      for (edge_t e = indptr[std::size_t(r)]; e < indptr[std::size_t(r) + 1]; ++e) {
        const vertex_t c = columns[std::size_t(e)];
        const std::int64_t k = mine[c / kTransposeBucketColumns]++;
        bucket_rows[std::size_t(k)] = vertex_t(r);
        bucket_columns[std::size_t(k)] = c;
        if (t_entries) bucket_entries[std::size_t(k)] = e;
      }
#pragma omp barrier
    // Bucket b's entries now end at counts[(threads - 1) * buckets + b]; they start where
    // bucket b - 1's end.
    std::vector<Offset> local(std::size_t(kTransposeBucketColumns) + 1);
#pragma omp for schedule(dynamic, 4)
    for (std::int64_t b = 0; b < buckets; ++b) {
      const std::int64_t last = std::int64_t(threads - 1) * buckets;
      const std::int64_t from = b == 0 ? 0 : counts[std::size_t(last + b - 1)];
      const std::int64_t to = counts[std::size_t(last + b)];
      const std::int64_t base = b * kTransposeBucketColumns;
      const std::int64_t width = std::min(kTransposeBucketColumns, cols - base);
      std::fill(local.begin(), local.begin() + width + 1, Offset(0));
      for (std::int64_t k = from; k < to; ++k) ++local[std::size_t(bucket_columns[k] - base) + 1];
      local[0] = Offset(from);
      for (std::int64_t c = 0; c < width; ++c) {
        local[std::size_t(c) + 1] += local[std::size_t(c)];
        t_offsets[std::size_t(base + c)] = local[std::size_t(c)];
      }
      for (std::int64_t k = from; k < to; ++k) {
        const Offset at = local[std::size_t(bucket_columns[k] - base)]++;
        t_rows[std::size_t(at)] = static_cast<Index>(bucket_rows[std::size_t(k)]);
        if (t_entries) (*t_entries)[std::size_t(at)] = static_cast<Entry>(bucket_entries[k]);
      }
    }
  }
  t_offsets[std::size_t(cols)] = static_cast<Offset>(nnz);
}

template <typename Offset, typename Index, typename Entry>
void transpose_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                   std::int64_t cols, std::vector<Offset>& t_offsets, std::vector<Index>& t_rows,
                   std::vector<Entry>& t_entries) {
  transpose_csr(indptr, columns, cols, t_offsets, t_rows, &t_entries);
}

}  // namespace sluice
