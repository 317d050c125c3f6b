// Backend-independent parts of kernels/ops.hpp: names of phases, lanes, peer-access modes, host
// precisions and CSR weightings, the weighting check, the default setup groups, and the CUDA
// entry points when CUDA is not built.
#include "kernels/ops.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/parallel.hpp"

namespace sluice {

std::vector<std::vector<int>> Backend::setup_groups() const {
  std::vector<int> every(static_cast<std::size_t>(num_devices()));
  std::iota(every.begin(), every.end(), 0);
  return {every};
}

void Device::read_matrix(const HostMat& m, void* out) {
  SLUICE_EXPECTS(m.residence == Residence::kHost, "read_matrix: a ", m.rows, " x ", m.cols,
                 " matrix resident on ", name(), ", which cannot read it back");
  read_addressable_matrix(m, out);
}

void Device::read_addressable_matrix(const HostMat& m, void* out) {
  synchronize();
  const std::int64_t row_bytes = m.cols * m.element_bytes();
  auto* to = static_cast<char*>(out);
  for (std::int64_t r = 0; r < m.rows; ++r)
    std::memcpy(to + r * row_bytes, m.at(r, 0), static_cast<std::size_t>(row_bytes));
}

void expect_flush_shapes(const char* operation, const Mat& src, const Idx& src_rows,
                         const Idx& host_rows, const HostMat& host) {
  if (src_rows.size == 0)
    SLUICE_EXPECTS(src.rows >= host_rows.size, operation, ": ", src.rows, " source rows, ",
                   host_rows.size, " host rows");
  else
    SLUICE_EXPECTS(host_rows.size == src_rows.size, operation, ": ", src_rows.size,
                   " source rows, ", host_rows.size, " host rows");
  SLUICE_EXPECTS(src.cols == host.cols, operation, ": width ", src.cols, " vs ", host.cols);
}

void expect_input_scores_shapes(const Mat& x, const Mat& folded, int heads, const Mat& el,
                                const Mat& er) {
  SLUICE_EXPECTS(heads > 0 && folded.rows == x.cols && folded.cols == 2 * heads,
                 "gat_input_scores: folded ", folded.rows, " x ", folded.cols, " for ", x.cols,
                 "-float rows and ", heads, " heads");
  SLUICE_EXPECTS(el.rows == x.rows && el.cols == heads && er.rows <= x.rows && er.cols == heads,
                 "gat_input_scores: el ", el.rows, " x ", el.cols, ", er ", er.rows, " x ", er.cols,
                 " for ", x.rows, " rows and ", heads, " heads");
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kLoad:
      return "load";
    case Phase::kP2p:
      return "p2p";
    case Phase::kCompute:
      return "compute";
    case Phase::kStore:
      return "store";
    case Phase::kFlush:
      return "flush";
  }
  return "?";
}

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return "compute";
    case Lane::kTransfer:
      return "transfer";
    case Lane::kStore:
      return "store";
    case Lane::kPeer:
      return "peer";
  }
  return "?";
}

const char* peer_access_name(PeerAccess access) {
  switch (access) {
    case PeerAccess::kAuto:
      return "auto";
    case PeerAccess::kOff:
      return "off";
  }
  return "?";
}

PeerAccess parse_peer_access(const std::string& text, const std::string& option) {
  if (text == "auto") return PeerAccess::kAuto;
  if (text == "off") return PeerAccess::kOff;
  throw InputError(cat("unknown ", option, " '", text, "' (expected auto or off)"));
}

const char* host_precision_name(HostPrecision precision) {
  switch (precision) {
    case HostPrecision::kFp32:
      return "fp32";
    case HostPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

const char* csr_weights_name(CsrWeights weights) {
  switch (weights) {
    case CsrWeights::kPerCall:
      return "per-call values";
    case CsrWeights::kSymmetricNorm:
      return "symmetric degree norm";
    case CsrWeights::kNeighborMean:
      return "neighbor mean";
  }
  return "?";
}

void check_csr_weighting(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                         std::int64_t num_cols, const CsrWeighting& weighting,
                         const std::string& what) {
  const std::int64_t rows = std::int64_t(indptr.size()) - 1;
  switch (weighting.kind) {
    case CsrWeights::kPerCall:
      SLUICE_INPUT_CHECK(weighting.column_degrees.empty(), what,
                         ": column degrees given for a matrix of per-call values");
      return;
    case CsrWeights::kSymmetricNorm: {
      SLUICE_INPUT_CHECK(std::int64_t(weighting.column_degrees.size()) == num_cols, what, ": ",
                         weighting.column_degrees.size(), " column degrees for ", num_cols,
                         " columns");
      // Every column an entry reads needs a degree of at least 1 (0 marks an unused column).
      std::int64_t bad_entry = std::int64_t(columns.size());
#pragma omp parallel for schedule(static) \
    reduction(min                         \
              : bad_entry) if (worth_parallel(std::int64_t(columns.size())))
      for (std::int64_t e = 0; e < std::int64_t(columns.size()); ++e)
        if (weighting.column_degrees[std::size_t(columns[std::size_t(e)])] < 1)
          bad_entry = std::min(bad_entry, e);
      SLUICE_INPUT_CHECK(bad_entry == std::int64_t(columns.size()), what, ": entry ", bad_entry,
                         " reads column ", columns[std::size_t(bad_entry)], " of degree ",
                         weighting.column_degrees[std::size_t(columns[std::size_t(bad_entry)])]);
      return;
    }
    case CsrWeights::kNeighborMean: {
      SLUICE_INPUT_CHECK(weighting.column_degrees.empty(), what,
                         ": column degrees given for a neighbor-mean matrix");
      std::int64_t bad = rows;
#pragma omp parallel for schedule(dynamic, 1024) reduction(min : bad) if (worth_parallel(rows))
      for (std::int64_t r = 0; r < rows; ++r)
        for (edge_t e = indptr[std::size_t(r)] + 1; e < indptr[std::size_t(r) + 1]; ++e)
          if (columns[std::size_t(e)] == columns[std::size_t(indptr[std::size_t(r)])]) {
            bad = std::min(bad, r);
            break;
          }
      SLUICE_INPUT_CHECK(bad == rows, what, ": row ", bad,
                         " holds its self column twice (a neighbor mean excludes it)");
      return;
    }
  }
}

HostPrecision parse_host_precision(const std::string& text, const std::string& option) {
  if (text == "fp32") return HostPrecision::kFp32;
  if (text == "bf16") return HostPrecision::kBf16;
  throw InputError(cat("unknown ", option, " '", text, "' (expected fp32 or bf16)"));
}

#ifndef SLUICE_HAVE_CUDA
bool cuda_backend_available() {
  return false;
}
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw InputError("this build of Sluice has no CUDA backend (configure with -DSLUICE_CUDA=ON)");
}
#endif

}  // namespace sluice
