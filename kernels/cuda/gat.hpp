// Launchers of the GAT edge operators (docs/model-math.md, GAT layer). K heads of width F,
// z row-major (rows of the merged neighbor buffer) with heads concatenated. The chunk CSR's row i
// starts with its self entry; `self` holds that entry's column per row.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/types.hpp"
#include "kernels/cuda_memory_rules.hpp"

namespace sluice::cuda {

// Rows with more than `degree` entries, listed: the edge kernels give each of them a block of
// warps (one warp per row would leave a hub row's warp running long after the others finished)
// and skip them in their warp-per-row pass. count == 0: no such rows, or the split is off.
// The row SpMM's split of the list's longest rows (long_segment_entries()): its first `rows`
// rows have more than segment_entries entries and take `segments` blocks in all, one per
// segment_entries entries of each (the list's other rows follow them in row order).
struct LongSplit {
  std::int64_t rows = 0, segments = 0;
  std::int64_t segment_entries = INT64_MAX;
};

struct LongRows {
  const vertex_t* rows = nullptr;  // the split rows first, then in row order
  std::int64_t count = 0;
  std::int64_t degree = INT64_MAX;
  LongSplit split;
};

// A device CSR with Index-typed offsets and columns (int32 when nnz < 2^31, else int64).
template <typename Index>
struct CsrArrays {
  const Index* indptr = nullptr;   // rows + 1
  const Index* columns = nullptr;  // nnz
  const vertex_t* self = nullptr;  // rows: column of each row's first (self) entry
  std::int64_t rows = 0, cols = 0, nnz = 0;
  LongRows long_rows;
};

// The transpose of a CsrArrays matrix (a.cols rows): offsets, each transposed entry's row of the
// matrix and its entry there (perm), and the long transposed rows.
template <typename Index>
struct TransposedArrays {
  const Index* indptr = nullptr;
  const Index* columns = nullptr;
  const Index* perm = nullptr;
  LongRows long_rows;
};

// The attention-dropout key of docs/model-math.md: keep = u(seed, 2, salt, row_key, k*256+h)
// >= rate, salt = epoch * 1024 + layer. rate == 0 disables (row_keys may then be null).
struct AttentionDropout {
  std::uint64_t seed = 0;
  std::uint64_t salt = 0;
  float rate = 0.f;
  const vertex_t* row_keys = nullptr;
};

// score[r, h] = z[map(r), h*F .. h*F+F) . att[h*F .. h*F+F), map = row_map (or identity).
void launch_gat_scores(const float* z, std::int64_t ldz, const vertex_t* row_map, std::int64_t rows,
                       int heads, std::int64_t width, const float* att, float* score,
                       std::int64_t lds, cudaStream_t stream);
// el[r, h] = z[r, head h] . att_src[head h] and row_scores[r * K + h] = z[r, head h] .
// att_dst[head h] for r < rows, in one read of z; each the same bits as launch_gat_scores's.
void launch_gat_both_scores(const float* z, std::int64_t ldz, std::int64_t rows, int heads,
                            std::int64_t width, const float* att_src, float* el, std::int64_t ldel,
                            const float* att_dst, float* row_scores, cudaStream_t stream);
// out[i, h] = row_scores[row_map[i] * K + h] (0 where row_map[i] < 0) for i < rows.
void launch_gat_gather_scores(const float* row_scores, int heads, const vertex_t* row_map,
                              std::int64_t rows, float* out, std::int64_t ldout,
                              cudaStream_t stream);
// score[rows[i], h] = z[rows[i], h*F .. h*F+F) . att[h*F .. h*F+F) for i < count.
void launch_gat_scores_of_rows(const float* z, std::int64_t ldz, const vertex_t* rows,
                               std::int64_t count, int heads, std::int64_t width, const float* att,
                               float* score, std::int64_t lds, cudaStream_t stream);

// Per destination row: alpha (nnz x K) = softmax over the row of LeakyReLU(el[u] + er[i]) and
// out[i] = sum_k dropout(alpha_k) z[u_k] per head; out null: alpha alone, the same bits.
template <typename Index>
void launch_gat_aggregate(const CsrArrays<Index>& a, const float* z, std::int64_t ldz,
                          const float* el, std::int64_t ldel, const float* er, std::int64_t lder,
                          int heads, std::int64_t width, const AttentionDropout& dropout,
                          float* alpha, std::int64_t ldalpha, float* out, std::int64_t ldout,
                          cudaStream_t stream);

// Backward through attention dropout, softmax and LeakyReLU. Writes the dropped-out coefficients
// (entry-major, atilde[e * K + h], for launch_gat_transpose_aggregate), d_er (rows x K, ld K),
// and adds d_el (cols x K, ld K; must be zeroed first). dalpha: nnz x K scratch. Heads of a power
// of two <= 32 columns, K*F <= 256, take the warp-cooperative kernels; wider heads one lane per
// entry.
template <typename Index>
void launch_gat_backward_edges(const CsrArrays<Index>& a, const float* z, std::int64_t ldz,
                               const float* el, std::int64_t ldel, const float* er,
                               std::int64_t lder, const float* alpha, std::int64_t ldalpha,
                               const float* dout, std::int64_t lddout, int heads,
                               std::int64_t width, const AttentionDropout& dropout, float* dalpha,
                               float* atilde, float* d_el, float* d_er, cudaStream_t stream);

// dz[u] += sum over the transpose's entries of row u < t_rows (u <- v, forward entry t.perm) of
// atilde[e * K + h] * dout[v] per head (all heads in one pass; deterministic). t.perm null:
// atilde is in the transposed entry order.
template <typename Index>
void launch_gat_transpose_aggregate(const TransposedArrays<Index>& t, std::int64_t t_rows,
                                    const float* atilde, int heads, std::int64_t width,
                                    const float* dout, std::int64_t lddout, float* dz,
                                    std::int64_t lddz, cudaStream_t stream);

// The backward by source: for K <= 8 heads and K*F <= 256 columns (gat_backward_by_source_fits)
// one pass over the transposed CSR does the work of launch_gat_backward_edges and
// launch_gat_transpose_aggregate. A warp holds one source row's Z_u and reads each destination
// row dO_i once, for both the entry's attention gradient dO_i^h . Z_u^h and dz[u] += alpha~ dO_i.
// The softmax backward's S_h(i) = sum_k alpha_k d(alpha)_k equals dO_i^h . O_i^h (because
// O_i^h = sum_k alpha~_k Z_k^h), which launch_gat_row_sums computes per destination row first.
// (The rule that picks it: cuda::gat_backward_by_source(), kernels/cuda_memory_rules.hpp.)

// sums[i * ldsums + h] = dO_i^h . O_i^h for i < rows (out: the forward's concatenated head
// outputs). Heads of whole 32-column groups: a warp a row, each lane's products in column
// order, then summed over the warp (the activation backward's head dots give the same bits).
void launch_gat_row_sums(std::int64_t rows, const float* dout, std::int64_t lddout,
                         const float* out, std::int64_t ldout, int heads, std::int64_t width,
                         float* sums, std::int64_t ldsums, cudaStream_t stream);

template <typename Index>
struct GatBySource {
  CsrArrays<Index> a;         // the forward CSR: an entry's position in its row, e - indptr[i]
  TransposedArrays<Index> t;  // its transpose, perm: transposed entry -> forward entry
  const float* z = nullptr;
  std::int64_t ldz = 0;
  const float* el = nullptr;
  std::int64_t ldel = 0;
  const float* er = nullptr;
  std::int64_t lder = 0;
  const float* alpha = nullptr;  // before attention dropout, as gat_forward wrote it
  std::int64_t ldalpha = 0;
  const float* dout = nullptr;
  std::int64_t lddout = 0;
  const float* row_sums = nullptr;  // launch_gat_row_sums (a.rows x K)
  int heads = 0;
  std::int64_t width = 0;
  AttentionDropout dropout;
  float* dz = nullptr;  // a.cols x K*F, added to
  std::int64_t lddz = 0;
  // The source attention vector (K*F): dz[u] also gets d_el[u, h(c)] * att_src[c], the source
  // scores' share of launch_gat_scores_backward (whose call for d_el then passes no dz).
  const float* att_src = nullptr;
  float* d_el = nullptr;  // a.cols x K (ld K): stored for every source row with entries
  float* ds = nullptr;    // nnz x K (ld K), forward entry order: each entry's score gradient
};

// The pass by source (see above); then launch_gat_destination_sums for d_er.
template <typename Index>
void launch_gat_backward_by_source(const GatBySource<Index>& p, cudaStream_t stream);

// d_er[i * K + h] = sum over row i's entries e of ds[e * K + h] (in entry order per lane, then
// over lanes: deterministic); K <= 8, as the pass by source takes.
template <typename Index>
void launch_gat_destination_sums(const CsrArrays<Index>& a, const float* ds, int heads, float* d_er,
                                 cudaStream_t stream);

// Backward of launch_gat_scores: dz[map(r), c] += dscore[r, h(c)] * att[c] (atomic through a
// row map, whose rows might share a target) and d_att[c] += sum_r dscore[r, h(c)] *
// z[map(r), c], summed in a fixed order through `partials` (column_sum_partials(rows, K * F)
// floats of device scratch, cuda_memory_rules.hpp). dz null: d_att alone (the pass by source
// adds the source scores' share of dz itself).
void launch_gat_scores_backward(const float* dscore, std::int64_t lds, const vertex_t* row_map,
                                std::int64_t rows, int heads, std::int64_t width, const float* z,
                                std::int64_t ldz, const float* att, float* dz, std::int64_t lddz,
                                float* d_att, float* partials, cudaStream_t stream);

// ---- GAT's layer 0 attending over its input rows (gat_inputs.cu; shapes: gat_inputs_fit(),
// kernels/cuda_memory_rules.hpp).

// What both passes read: the chunk's CSR, its x rows and the scores of its K heads.
template <typename Index>
struct GatInputRows {
  CsrArrays<Index> a;
  const float* x = nullptr;  // a.cols x width, rows 16-byte aligned (ldx a multiple of 4)
  std::int64_t ldx = 0;
  std::int64_t width = 0;     // D
  const float* el = nullptr;  // source scores, a.cols x K
  std::int64_t ldel = 0;
  const float* er = nullptr;  // destination scores, a.rows x K
  std::int64_t lder = 0;
  int heads = 0;
  AttentionDropout dropout;
};

// Per destination row: alpha (nnz x K) = softmax over the row of LeakyReLU(el[u] + er[i]) and
// agg[i, h*D .. h*D+D) = sum_k dropout(alpha_k^h) x[u_k].
template <typename Index>
void launch_gat_input_forward(const GatInputRows<Index>& in, float* alpha, std::int64_t ldalpha,
                              float* agg, std::int64_t ldagg, cudaStream_t stream);

// GAT's layer-0 scores from its input rows, in one read of x (rows x width, width <= 128):
// el (rows x heads) = x folded[:, 0:K) and er (er_rows x heads, er_rows <= rows) = the first
// er_rows rows of x times folded[:, K:2K) (folded: width x 2K, row-major, ld ldfolded).
struct GatInputScores {
  const float* x;
  std::int64_t ldx, rows, width;
  const float* folded;
  std::int64_t ldfolded;
  int heads;
  float* el;
  std::int64_t ldel;
  float* er;
  std::int64_t lder, er_rows;
};
// Whether launch_gat_input_scores() takes rows of `width` floats and `heads` heads.
bool gat_input_scores_fit(std::int64_t width, int heads);
void launch_gat_input_scores(const GatInputScores& p, cudaStream_t stream);

// The backward's device scratch: rows (a.rows x K: the softmax backward's per-row sums, then
// d_er), sources (a.cols x K: d_el), entries (nnz x K: each entry's softmax gradient d_e) and
// partials (gat_input_partials(rows, cols) x K D floats).
struct GatInputScratch {
  float* rows = nullptr;
  float* sources = nullptr;
  float* entries = nullptr;
  float* partials = nullptr;
};

// The backward's operands beside the forward's (launch_gat_input_backward).
template <typename Index>
struct GatInputBackward {
  GatInputRows<Index> in;
  TransposedArrays<Index> t;     // in.a's transpose, for the sums by source
  const float* alpha = nullptr;  // the forward's coefficients, nnz x K
  std::int64_t ldalpha = 0;
  const float* head_dots = nullptr;  // dO_i^h . O_i^h, a.rows x K
  std::int64_t ldhead_dots = 0;
  const float* g = nullptr;  // g^h = dO^h W^hT, a.rows x K D, rows 16-byte aligned
  std::int64_t ldg = 0;
  GatInputScratch scratch;
  float* sums = nullptr;  // 2K x D
  std::int64_t ldsums = 0;
};

// The backward's score sums (Device::gat_input_backward): per entry and head
// ds = LeakyReLU'(el[u] + er[i]) alpha (scale g_i^h . x[u] - dO_i^h . O_i^h); sums row h = sum
// over entries ds x[u], row K + h = sum over rows (sum_k ds) x[self]. The entries' sums per
// source row (over the transpose t) and per destination row, then slices of the rows each
// writing one partial, added in order afterwards: deterministic.
template <typename Index>
void launch_gat_input_backward(const GatInputBackward<Index>& p, cudaStream_t stream);

}  // namespace sluice::cuda
