// Implementation of kernels/cuda/sparse.hpp.
#include "kernels/cuda/sparse.hpp"

#include <algorithm>
#include <limits>

#include "common/log.hpp"
#include "common/parallel.hpp"
#include "kernels/csr_transpose.hpp"
#include "kernels/cuda/gather.hpp"

namespace sluice::cuda {
namespace {

template <typename T>
ConstantBuffer upload_array(const std::vector<T>& host, ConstantStore& store, cudaStream_t stream,
                            const std::string& what) {
  return store.place(host, what, stream);
}

template <typename Offset>
std::int64_t row_length(const std::vector<Offset>& offsets, vertex_t r) {
  return static_cast<std::int64_t>(offsets[std::size_t(r) + 1] - offsets[std::size_t(r)]);
}

// Rows of `offsets` with more than `degree` entries, in row order, but for the rows the row SpMM
// splits into segments (those longer than long_segment_entries(nnz)): they come first, so that
// their segments start first, and the long-row kernels take the others in row order, so that the
// rows in flight at once are neighbors, whose sources share the L2 cache (ordering every long row
// longest first lost 1-16 % on the one-chunk epochs). `split` receives the split.
template <typename Offset>
std::vector<vertex_t> long_rows_of(const std::vector<Offset>& offsets, std::int64_t degree,
                                   std::int64_t nnz, LongSplit& split) {
  split = LongSplit{};
  split.segment_entries = long_segment_entries(nnz);
  std::vector<vertex_t> rows;
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r)
    if (row_length(offsets, vertex_t(r)) > degree) rows.push_back(static_cast<vertex_t>(r));
  std::stable_partition(rows.begin(), rows.end(),
                        [&](vertex_t r) { return row_length(offsets, r) > split.segment_entries; });
  for (const vertex_t r : rows) {
    const std::int64_t length = row_length(offsets, r);
    if (length <= split.segment_entries) break;
    ++split.rows;
    split.segments += (length + split.segment_entries - 1) / split.segment_entries;
  }
  SLUICE_EXPECTS(split.rows < kMaxSplitRows && split.segments < kMaxLongSegments,
                 "long-row split: ", split.rows, " rows in ", split.segments, " segments");
  return rows;
}

// Host buffers of one upload, of the matrix's index type: the caller's scratch or its own.
template <typename Index>
struct HostArrays {
  std::vector<Index>& offsets;
  std::vector<Index>& t_offsets;
  std::vector<Index>& t_rows;
  std::vector<Index>& t_entries;
  std::vector<vertex_t>& self;
  CsrTransposeScratch* transpose;
};

template <typename Index>
void upload_structure(DeviceCsr& csr, const std::vector<edge_t>& indptr,
                      const std::vector<vertex_t>& columns, const CsrWeighting& weighting,
                      ConstantStore& store, cudaStream_t stream, const std::string& what,
                      CsrUploadSeconds* seconds, const HostArrays<Index>& host) {
  if (csr.long_degree < INT64_MAX) {
    const std::vector<vertex_t> long_rows =
        long_rows_of(indptr, csr.long_degree, csr.nnz, csr.long_split);
    csr.num_long = static_cast<std::int64_t>(long_rows.size());
    if (!long_rows.empty())
      csr.long_rows = upload_array(long_rows, store, stream, what + " (long rows)");
  }
  const std::int64_t rows = csr.rows, cols = csr.cols;
  host.offsets.assign(indptr.begin(), indptr.end());
  csr.indptr = upload_array(host.offsets, store, stream, what + " (CSR offsets)");
  if constexpr (sizeof(Index) == sizeof(vertex_t)) {
    csr.columns = upload_array(columns, store, stream, what + " (CSR columns)");
  } else {
    std::vector<Index> wide(columns.begin(), columns.end());
    csr.columns = upload_array(wide, store, stream, what + " (CSR columns)");
  }
  std::vector<vertex_t>& self = host.self;
  self.assign(static_cast<std::size_t>(rows), -1);
  for (std::int64_t r = 0; r < rows; ++r)
    if (indptr[r + 1] > indptr[r]) self[r] = columns[indptr[r]];
  if (csr.weights == CsrWeights::kSymmetricNorm) {
    static_assert(sizeof(vertex_t) == sizeof(std::int32_t), "self_degrees replaces self");
    for (vertex_t& s : self) s = s < 0 ? 0 : weighting.column_degrees[std::size_t(s)];
    csr.self_degrees = upload_array(self, store, stream, what + " (self-entry degrees)");
  } else {
    csr.self = upload_array(self, store, stream, what + " (self entries)");
  }

  // Row r's entries land in ascending r within each transposed row.
  std::vector<Index>& t_indptr = host.t_offsets;
  std::vector<Index>& t_columns = host.t_rows;
  std::vector<Index>& perm = host.t_entries;
  const double start = now_seconds();
  transpose_csr(indptr, columns, cols, t_indptr, t_columns,
                csr.weights == CsrWeights::kPerCall ? &perm : nullptr, host.transpose);
  if (seconds) seconds->transpose += now_seconds() - start;
  csr.t_indptr = upload_array(t_indptr, store, stream, what + " (transposed offsets)");
  csr.t_columns = upload_array(t_columns, store, stream, what + " (transposed columns)");
  if (csr.weights == CsrWeights::kPerCall)
    csr.t_perm = upload_array(perm, store, stream, what + " (transpose permutation)");
  if (csr.weights == CsrWeights::kSymmetricNorm)
    csr.column_degrees =
        upload_array(weighting.column_degrees, store, stream, what + " (column degrees)");
  if (csr.long_degree < INT64_MAX) {
    const std::vector<vertex_t> long_rows =
        long_rows_of(t_indptr, csr.long_degree, csr.nnz, csr.t_long_split);
    csr.num_t_long = static_cast<std::int64_t>(long_rows.size());
    if (!long_rows.empty())
      csr.t_long_rows = upload_array(long_rows, store, stream, what + " (long transposed rows)");
  }
}

}  // namespace

DeviceCsr upload_device_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                            std::int64_t num_cols, const CsrWeighting& weighting,
                            ConstantStore& store, cudaStream_t stream, const std::string& what,
                            std::int64_t long_degree, CsrUploadSeconds* seconds,
                            CsrUploadScratch* scratch) {
  const double start = now_seconds();
  SLUICE_EXPECTS(!indptr.empty() && indptr.front() == 0, what, ": CSR offsets must start at 0");
  DeviceCsr csr;
  csr.weights = weighting.kind;
  if (long_degree > 0) csr.long_degree = long_degree;
  csr.rows = static_cast<std::int64_t>(indptr.size()) - 1;
  csr.cols = num_cols;
  csr.nnz = indptr.back();
  SLUICE_EXPECTS(csr.nnz == static_cast<std::int64_t>(columns.size()), what, ": offsets end at ",
                 csr.nnz, " but there are ", columns.size(), " columns");
  SLUICE_EXPECTS(num_cols >= 0 && num_cols <= std::numeric_limits<vertex_t>::max(), what,
                 ": bad column count ", num_cols);
  // The first bad offset and column, found in parallel (the checks name them).
  const std::int64_t rows = csr.rows, nnz = csr.nnz;
  std::int64_t bad_row = rows, bad_entry = nnz;
#pragma omp parallel for schedule(static) reduction(min : bad_row) if (worth_parallel(rows))
  for (std::int64_t r = 0; r < rows; ++r)
    if (indptr[r] > indptr[r + 1]) bad_row = std::min(bad_row, r);
  SLUICE_EXPECTS(bad_row == rows, what, ": CSR offsets decrease at row ", bad_row);
#pragma omp parallel for schedule(static) reduction(min : bad_entry) if (worth_parallel(nnz))
  for (std::int64_t e = 0; e < nnz; ++e)
    if (columns[e] < 0 || columns[e] >= num_cols) bad_entry = std::min(bad_entry, e);
  SLUICE_EXPECTS(bad_entry == nnz, what, ": column ", columns[std::size_t(bad_entry)], " of entry ",
                 bad_entry, " outside [0, ", num_cols, ")");
  check_csr_weighting(indptr, columns, num_cols, weighting, what);
  if (seconds) seconds->checks += now_seconds() - start;
  csr.wide = wide_csr(csr.nnz);
  if (csr.wide) {
    std::vector<std::int64_t> offsets, t_offsets, t_rows, t_entries;
    std::vector<vertex_t> self;
    upload_structure<std::int64_t>(csr, indptr, columns, weighting, store, stream, what, seconds,
                                   {offsets, t_offsets, t_rows, t_entries, self, nullptr});
  } else {
    CsrUploadScratch local;
    CsrUploadScratch& host = scratch ? *scratch : local;
    upload_structure<std::int32_t>(
        csr, indptr, columns, weighting, store, stream, what, seconds,
        {host.offsets, host.t_offsets, host.t_rows, host.t_entries, host.self, &host.transpose});
  }
  // The arrays are what csr_bytes() says a CSR of these counts charges (the memory estimate
  // adds that up).
  std::int64_t charged = 0;
  for (const ConstantBuffer* array :
       {&csr.long_rows, &csr.indptr, &csr.columns, &csr.self, &csr.self_degrees, &csr.t_indptr,
        &csr.t_columns, &csr.t_perm, &csr.column_degrees, &csr.t_long_rows})
    charged += rounded(array->bytes());
  const std::int64_t expected =
      csr_bytes({csr.rows, csr.cols, csr.nnz, csr.num_long, csr.num_t_long, csr.weights});
  if (charged != expected)
    SLUICE_FAIL(what, ": the device CSR has ", charged, " bytes, csr_bytes() says ", expected);
  return csr;
}

}  // namespace sluice::cuda
