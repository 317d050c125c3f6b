// GAT's layer 0 attending over its input rows (gat.hpp, "GAT's layer 0 attending over its input
// rows"). One warp per destination row; a lane holds 4 (or 8) columns of an x row as 16-byte
// words, so a row of up to 128 (256) floats is one load per lane.
// - Forward: per 32-entry chunk of the row, lane j computes the chunk's j-th coefficients for
//   every head into shared memory; then every lane adds the chunk's x rows, each read once, to
//   all K heads' sums.
// - Backward: over the entries, lane j of a 32-entry group forms entry j's dot products with its
//   row's g from the entry's whole x row, and from them its softmax gradient, stored per entry;
//   the score gradients' sums by destination and by source (over the transpose) follow, then the
//   x rows weighted by them. No pass by source over the rows: layer 0 has no input gradient.
// Rows longer than long_degree_for(nnz) take a block of warps in the forward and in the sums.
#include "kernels/cuda/gat_device.cuh"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::kRowThreads;
using detail::kRowWarps;
using detail::lane_id;
using detail::row_blocks;
using detail::warp_count;
using detail::warp_sum;
using gat_detail::attention_coefficient;
using gat_detail::attention_prefix;
using gat_detail::attention_scale;
using gat_detail::head_records;
using gat_detail::HeadRecords;
using gat_detail::kLeakySlope;
using gat_detail::launch_row_share_sums;
using gat_detail::load_head_words;
using gat_detail::row_softmax_stats;
using gat_detail::RowRanges;
using gat_detail::RowStride;
using gat_detail::softmax_stats_entries;
using gat_detail::softmax_stats_entries_all_heads;
using gat_detail::stage_entry_coefficients;
using gat_detail::store_head_words;
using gat_detail::with_head_instance;

constexpr unsigned kFullMask = 0xffffffffu;

// Row-major float matrices as kernel operands: row r starts at data + r * ld.
struct ConstRowMatrix {
  const float* __restrict__ data;
  std::int64_t ld;
};
struct RowMatrix {
  float* __restrict__ data;
  std::int64_t ld;
};

// A lane's words of x rows: columns 4 lane + 128 q .. + 3 for q < kQuads of row u of x (rows ld
// floats apart). A lane whose word lies at or beyond `width` (a multiple of 4, gat_inputs_fit():
// no word is partial) reads the row's first word instead, in a cache line the warp reads anyway,
// so that no load needs a test; its sums are never stored. With a 32-bit index type a word's
// address is one 32 x 32-bit multiply-add onto the lane's column (u * row bytes + column).
template <int kQuads>
struct LaneWords {
  const float* column[kQuads];  // x + the lane's q-th column
  RowStride stride;             // ld < RowStride::kMaxLd (check_input_shape())
  __device__ LaneWords(const float* x, int lane, std::int64_t width, std::int64_t ldx)
      : stride(ldx) {
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      const int c = 128 * q + 4 * lane;
      column[q] = x + (c < width ? c : 0);
    }
  }
  template <typename Index>
  __device__ __forceinline__ void load(float (&v)[4 * kQuads], Index u) const {
#pragma unroll
    for (int q = 0; q < kQuads; ++q) {
      const float4 w = __ldg(reinterpret_cast<const float4*>(stride.row(column[q], u)));
      v[4 * q] = w.x;
      v[4 * q + 1] = w.y;
      v[4 * q + 2] = w.z;
      v[4 * q + 3] = w.w;
    }
  }
};

// row[c] = v[t] for the lane's columns c (the layout of LaneWords) below width.
template <int kQuads>
__device__ __forceinline__ void store_columns(float* row, const float (&v)[4 * kQuads], int lane,
                                              std::int64_t width) {
#pragma unroll
  for (int t = 0; t < 4 * kQuads; ++t) {
    const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
    if (c < width) row[c] = v[t];
  }
}

// row[c] = v[t] for the lane's columns c (the layout of LaneWords) below width, as 16-byte words
// (row 16-byte aligned).
template <int kQuads>
__device__ __forceinline__ void store_words(float* row, const float (&v)[4 * kQuads], int lane,
                                            std::int64_t width) {
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const std::int64_t c = 128 * q + 4 * lane;
    if (c < width)
      *reinterpret_cast<float4*>(row + c) =
          make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
  }
}

// values[kHeads] from 16-byte aligned shared memory.
template <int kHeads>
__device__ __forceinline__ void load_heads(float (&w)[kHeads], const float* from) {
#pragma unroll
  for (int h = 0; h < kHeads; h += 4) {
    const float4 v = *reinterpret_cast<const float4*>(from + h);
    w[h] = v.x;
    w[h + 1] = v.y;
    w[h + 2] = v.z;
    w[h + 3] = v.w;
  }
}

// acc[h] += coef[j * kHeads + h] x[u_j] over the lane's columns for the count entries of a
// 32-entry group, u_j on lane j: four x rows in flight, added in entry order (kAllHeads: every
// one of the kHeads heads, so the head loop carries no test).
template <int kHeads, int kQuads, bool kAllHeads, typename Index>
__device__ __forceinline__ void add_weighted_rows(const LaneWords<kQuads>& words, Index u_mine,
                                                  int count, const float* coef, int heads,
                                                  float (&acc)[kHeads][4 * kQuads]) {
  int j = 0;
  for (; j + 3 < count; j += 4) {
    float v[4][4 * kQuads];
#pragma unroll
    for (int r = 0; r < 4; ++r) words.load(v[r], __shfl_sync(kFullMask, u_mine, j + r));
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float w[kHeads];
      load_heads<kHeads>(w, coef + (j + r) * kHeads);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (kAllHeads || h < heads) {
#pragma unroll
          for (int t = 0; t < 4 * kQuads; ++t) acc[h][t] += w[h] * v[r][t];
        }
      }
    }
  }
  for (; j < count; ++j) {
    float v[4 * kQuads];
    words.load(v, __shfl_sync(kFullMask, u_mine, j));
    float w[kHeads];
    load_heads<kHeads>(w, coef + j * kHeads);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (kAllHeads || h < heads) {
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) acc[h][t] += w[h] * v[t];
      }
    }
  }
}

// A forward pass over row i's 32-entry chunks first_chunk, first_chunk + step, ... with the row's
// head_max and head_inv: per chunk, lane j's coefficients of the chunk's j-th entry (alpha
// stored) into coef, then the chunk's x rows added to acc for every head.
template <typename Index, int kHeads, int kQuads, bool kAllHeads>
__device__ __forceinline__ void forward_chunks(
    const CsrArrays<Index>& a, std::int64_t i, std::int64_t begin, std::int64_t degree,
    std::int64_t first_chunk, std::int64_t step, const float* __restrict__ x, std::int64_t ldx,
    std::int64_t width, const float* __restrict__ el, std::int64_t ldel,
    const float* __restrict__ er, std::int64_t lder, int heads, const AttentionDropout& dropout,
    std::uint64_t prefix, const float* head_max, const float* head_inv, float* coef,
    float* __restrict__ alpha, std::int64_t ldalpha, int lane, float (&acc)[kHeads][4 * kQuads]) {
  constexpr int kWordHeads = kAllHeads ? kHeads : 0;  // head records read as words
  const LaneWords<kQuads> words(x, lane, width, ldx);
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    const std::int64_t k = chunk + lane;
    Index u_mine = 0;  // shuffled as the index type: one shuffle a row for 32-bit indices
    if (k < degree)
      u_mine = static_cast<Index>(stage_entry_coefficients<true, kWordHeads>(
          a, i, begin, k, el, ldel, er, lder, heads, dropout, prefix, head_max, head_inv, true,
          alpha, ldalpha, coef + lane * kHeads));
    __syncwarp();
    add_weighted_rows<kHeads, kQuads, kAllHeads>(
        words, u_mine, static_cast<int>(degree - chunk < 32 ? degree - chunk : 32), coef, heads,
        acc);
    __syncwarp();
  }
}

// Consecutive rows a warp of the forward takes (four or eight were slower: kernels/cuda/NOTES.md).
constexpr int kInputRowsPerWarp = 2;

// A warp per kInputRowsPerWarp consecutive rows of at most a.long_rows.degree entries; kAllHeads:
// heads == kHeads (no branch per head) and el, er and alpha rows head records, read and written as
// 16-byte words. Held to 64 registers (32 warps an SM), where the all-heads instance would take
// 66 and fit 28 warps.
template <typename Index, int kHeads, int kQuads, bool kAllHeads>
__global__ void __launch_bounds__(kRowThreads, 32 / kRowWarps)
    gat_input_forward_kernel(CsrArrays<Index> a, const float* __restrict__ x, std::int64_t ldx,
                             std::int64_t width, const float* __restrict__ el, std::int64_t ldel,
                             const float* __restrict__ er, std::int64_t lder, int heads,
                             AttentionDropout dropout, float* __restrict__ alpha,
                             std::int64_t ldalpha, float* __restrict__ agg, std::int64_t ldagg) {
  // Per warp: the coefficients of 32 entries (kHeads apart), then the heads' max and 1/sum.
  __shared__ __align__(16) float shared[kRowWarps * 34 * kHeads];
  const int lane = lane_id();
  float* coef = shared + (threadIdx.x / 32) * (34 * kHeads);
  float* head_max = coef + 32 * kHeads;
  float* head_inv = head_max + kHeads;
  // The grid has a warp for every kInputRowsPerWarp rows (row_blocks(): a chunk's rows are
  // vertex ids, far below the 2^33 rows its clamp would cut).
  const std::int64_t first = global_warp() * kInputRowsPerWarp;
  const std::int64_t end = first + kInputRowsPerWarp < a.rows ? first + kInputRowsPerWarp : a.rows;
  for (std::int64_t i = first; i < end; ++i) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // gat_input_forward_long_kernel's
    const std::uint64_t prefix = attention_prefix(dropout, i);
    row_softmax_stats<kAllHeads ? kHeads : 0>(a.columns, i, begin, degree, el, ldel, er, lder,
                                              heads, head_max, head_inv);
    __syncwarp();
    float acc[kHeads][4 * kQuads] = {};
    forward_chunks<Index, kHeads, kQuads, kAllHeads>(
        a, i, begin, degree, 0, 32, x, ldx, width, el, ldel, er, lder, heads, dropout, prefix,
        head_max, head_inv, coef, alpha, ldalpha, lane, acc);
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if (kAllHeads || h < heads)
        store_words<kQuads>(agg + i * ldagg + h * width, acc[h], lane, width);
    __syncwarp();
  }
}

// Long rows (a.long_rows): a block of kLongInputWarps warps per row, warp w taking the row's
// chunks w, w + kLongInputWarps, ...; the softmax statistics and the weighted sums combined over
// the warps in warp order through shared memory (dynamic: kLongInputWarps x K D floats).
constexpr int kLongInputWarps = 8;

template <typename Index, int kHeads, int kQuads, bool kAllHeads>
__global__ void __launch_bounds__(32 * kLongInputWarps)
    gat_input_forward_long_kernel(CsrArrays<Index> a, const float* __restrict__ x, std::int64_t ldx,
                                  std::int64_t width, const float* __restrict__ el,
                                  std::int64_t ldel, const float* __restrict__ er,
                                  std::int64_t lder, int heads, AttentionDropout dropout,
                                  float* __restrict__ alpha, std::int64_t ldalpha,
                                  float* __restrict__ agg, std::int64_t ldagg) {
  __shared__ __align__(16) float coefs[kLongInputWarps * 32 * kHeads];
  __shared__ float stats[kLongInputWarps * 2 * kHeads];
  __shared__ float head_max[kHeads], head_inv[kHeads];
  extern __shared__ float partial[];  // kLongInputWarps x heads * width
  const int lane = lane_id(), warp = static_cast<int>(threadIdx.x / 32);
  const std::int64_t values = heads * width;
  float* coef = coefs + warp * 32 * kHeads;
  for (std::int64_t r = blockIdx.x; r < a.long_rows.count; r += gridDim.x) {
    const std::int64_t i = a.long_rows.rows[r];
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    const std::uint64_t prefix = attention_prefix(dropout, i);
    if constexpr (kAllHeads) {
      float er_i[kHeads], m[kHeads], s[kHeads];
      load_head_words<kHeads>(er_i, er + i * lder);
      softmax_stats_entries_all_heads<kHeads>(a.columns, begin, degree, 32 * warp,
                                              32 * kLongInputWarps, el, ldel, er_i, m, s);
      if (lane == 0) {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          stats[warp * 2 * kHeads + h] = m[h];
          stats[warp * 2 * kHeads + kHeads + h] = s[h];
        }
      }
    } else {
      for (int h = 0; h < heads; ++h) {
        float m, s;
        softmax_stats_entries(a.columns, begin, degree, 32 * warp, 32 * kLongInputWarps, el, ldel,
                              h, er[i * lder + h], m, s);
        if (lane == 0) {
          stats[warp * 2 * kHeads + h] = m;
          stats[warp * 2 * kHeads + kHeads + h] = s;
        }
      }
    }
    __syncthreads();
    if (threadIdx.x < static_cast<unsigned>(heads)) {
      const int h = static_cast<int>(threadIdx.x);
      float m = stats[h], s = stats[kHeads + h];
      for (int w = 1; w < kLongInputWarps; ++w)
        gat_detail::merge_softmax_stats(m, s, stats[w * 2 * kHeads + h],
                                        stats[w * 2 * kHeads + kHeads + h]);
      head_max[h] = m;
      head_inv[h] = s > 0.f ? 1.f / s : 0.f;
    }
    __syncthreads();
    float acc[kHeads][4 * kQuads] = {};
    forward_chunks<Index, kHeads, kQuads, kAllHeads>(
        a, i, begin, degree, 32 * warp, 32 * kLongInputWarps, x, ldx, width, el, ldel, er, lder,
        heads, dropout, prefix, head_max, head_inv, coef, alpha, ldalpha, lane, acc);
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if (kAllHeads || h < heads)
        store_columns<kQuads>(partial + warp * values + h * width, acc[h], lane, width);
    __syncthreads();
    for (std::int64_t v = threadIdx.x; v < values; v += blockDim.x) {
      float sum = 0.f;
      for (int w = 0; w < kLongInputWarps; ++w) sum += partial[w * values + v];
      agg[i * ldagg + v] = sum;
    }
    __syncthreads();
  }
}

constexpr int kBackwardWarps = static_cast<int>(kGatInputBlockWarps);

// ---- Backward, entry-parallel: each warp takes a contiguous range of the chunk's entries, 32 at
// a time, whatever rows they belong to (a row's own work would leave most lanes idle on the many
// short rows and keep one warp on a hub row). Lane j takes entry j of a group alone: its row
// (found by a binary search among the rows the group can span), its x row in 16-byte words and
// its row's g (mostly the same rows for neighboring lanes, so the loads broadcast), every head's
// dot product g^h . x without any sum across lanes, and from them the entry's softmax gradient
// d_e = alpha (scale g^h . x - S), with the per-row sums S = dO^h . O^h given (head_dots). The
// score gradients' sums come from the stored d_e afterwards: per destination row over the CSR's
// rows, keeping only (slope - 1) d_e of the entries on the negative side (the rest sum to 0 over a
// row), and per source row over the transpose (LeakyReLU' d_e); then the x rows weighted by those
// sums, in slices of the rows. Each x row is read once per entry: the sums by source replace a
// second, weighted read of every entry's row.

// The row of entry e, given that it lies in rows [lo, hi] (indptr[lo] <= e < indptr[hi + 1]).
template <typename Index>
__device__ __forceinline__ std::int64_t row_of_entry(const Index* indptr, std::int64_t e,
                                                     std::int64_t lo, std::int64_t hi) {
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (static_cast<std::int64_t>(indptr[mid]) <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// kAllHeads: heads == kHeads, so no head's work is behind a branch (the loads of every head's g
// words can then be in flight together), and alpha, row_sums and d_entries rows are head records
// (16-byte words).
template <typename Index, int kHeads, bool kAllHeads>
__global__ void __launch_bounds__(32 * kBackwardWarps)
    gat_input_entries_kernel(CsrArrays<Index> a, std::int64_t per_warp, const float* __restrict__ x,
                             std::int64_t ldx, std::int64_t width, const float* __restrict__ alpha,
                             std::int64_t ldalpha, const float* __restrict__ row_sums,
                             std::int64_t ldrow_sums, const float* __restrict__ g, std::int64_t ldg,
                             int heads, AttentionDropout dropout, float* __restrict__ d_entries) {
  const int lane = lane_id();
  const std::int64_t nnz = a.indptr[a.rows];
  const std::int64_t first = global_warp() * per_warp;
  const std::int64_t last = first + per_warp < nnz ? first + per_warp : nnz;
  // The row of the group's first entry, carried from group to group.
  std::int64_t base = first < last ? row_of_entry(a.indptr, first, 0, a.rows - 1) : 0;
  for (std::int64_t group = first; group < last; group += 32) {
    const std::int64_t e = group + lane;
    if (e < last) {
      // 32 entries span at most 32 rows that have entries; past an empty row, all the rest.
      std::int64_t hi = base + 32 < a.rows - 1 ? base + 32 : a.rows - 1;
      if (static_cast<std::int64_t>(a.indptr[hi + 1]) <= e) hi = a.rows - 1;
      const std::int64_t i = row_of_entry(a.indptr, e, base, hi);
      const std::int64_t k = e - a.indptr[i];
      const float* row = x + static_cast<std::int64_t>(a.columns[e]) * ldx;
      const float* gi = g + i * ldg;
      float dot[kHeads] = {};
#pragma unroll 4
      for (std::int64_t c = 0; c < width; c += 4) {
        const float4 v = *reinterpret_cast<const float4*>(row + c);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (kAllHeads || h < heads) {
            const float4 w = *reinterpret_cast<const float4*>(gi + h * width + c);
            dot[h] += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
          }
        }
      }
      const std::uint64_t prefix = attention_prefix(dropout, i);
      if constexpr (kAllHeads) {
        float alpha_e[kHeads], sums_i[kHeads], d[kHeads];
        load_head_words<kHeads>(alpha_e, alpha + e * ldalpha);
        load_head_words<kHeads>(sums_i, row_sums + i * ldrow_sums);
#pragma unroll
        for (int h = 0; h < kHeads; ++h)
          d[h] = alpha_e[h] * (attention_scale(dropout, prefix, k, h) * dot[h] - sums_i[h]);
        store_head_words<kHeads>(d_entries + e * kHeads, d);
      } else {
#pragma unroll
        for (int h = 0; h < kHeads; ++h)
          if (h < heads)
            d_entries[e * heads + h] =
                alpha[e * ldalpha + h] *
                (attention_scale(dropout, prefix, k, h) * dot[h] - row_sums[i * ldrow_sums + h]);
      }
    }
    // The next group's first row: this group's last entry's or later.
    const std::int64_t next = group + 32;
    if (next < last) {
      std::int64_t hi = base + 33 < a.rows - 1 ? base + 33 : a.rows - 1;
      if (static_cast<std::int64_t>(a.indptr[hi + 1]) <= next) hi = a.rows - 1;
      base = row_of_entry(a.indptr, next, base, hi);
    }
  }
}

// The entries' softmax gradients d_e (entry-major) and the scores that tell an entry's side of
// the LeakyReLU. The all-heads instances (kAllHeads) read every record as 16-byte words.
struct EntryGradients {
  const float* __restrict__ d_entries;
  const float* __restrict__ el;
  std::int64_t ldel;
  const float* __restrict__ er;
  std::int64_t lder;
  int heads;
  // Entry e's d_e, source u's el and destination i's er for every head h < kHeads (kAllHeads: in
  // words; else the heads h < heads).
  template <int kHeads, bool kAllHeads>
  __device__ void load(std::int64_t e, std::int64_t u, std::int64_t i, float (&d)[kHeads],
                       float (&el_u)[kHeads], float (&er_i)[kHeads]) const {
    if constexpr (kAllHeads) {
      load_head_words<kHeads>(d, d_entries + e * kHeads);
      load_head_words<kHeads>(el_u, el + u * ldel);
      load_head_words<kHeads>(er_i, er + i * lder);
    } else {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h < heads) {
          d[h] = d_entries[e * heads + h];
          el_u[h] = el[u * ldel + h];
          er_i[h] = er[i * lder + h];
        }
      }
    }
  }
};

// Row i's shares of d_er[i, h] from its entry pos (source columns[pos]): (slope - 1) d_e on the
// negative side, else 0.
template <typename Index>
struct DestinationShares {
  const Index* __restrict__ columns;
  EntryGradients g;
  template <int kHeads, bool kAllHeads>
  __device__ void add(std::int64_t pos, std::int64_t i, float (&acc)[kHeads]) const {
    float d[kHeads], el_u[kHeads], er_i[kHeads];
    g.load<kHeads, kAllHeads>(pos, columns[pos], i, d, el_u, er_i);
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if ((kAllHeads || h < g.heads) && !(el_u[h] + er_i[h] > 0.f))
        acc[h] += (kLeakySlope - 1.f) * d[h];
  }
};

// Source u's shares of d_el[u, h] from transposed entry pos (destination columns[pos], forward
// entry perm[pos]): LeakyReLU'(el[u] + er[i]) d_e.
template <typename Index>
struct SourceShares {
  const Index* __restrict__ columns;
  const Index* __restrict__ perm;
  EntryGradients g;
  template <int kHeads, bool kAllHeads>
  __device__ void add(std::int64_t pos, std::int64_t u, float (&acc)[kHeads]) const {
    float d[kHeads], el_u[kHeads], er_i[kHeads];
    g.load<kHeads, kAllHeads>(perm[pos], u, columns[pos], d, el_u, er_i);
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      if (kAllHeads || h < g.heads) acc[h] += el_u[h] + er_i[h] > 0.f ? d[h] : kLeakySlope * d[h];
  }
};

// Per slice of rows r (rows_per_slice each; the block's), one partials slot of K D floats:
// row h of it = sum_r weights[r, h] x[map(r)] (map null: the identity; rows it maps to -1 are
// skipped). Block (32, kSliceRows): x over the columns' 16-byte words, y over the slice's rows
// (y, y + kSliceRows, ...), whose sums are added in y order through shared memory (K D <=
// kMaxInputValues floats).
constexpr int kSliceRows = 8;
constexpr int kMaxInputValues = 8 * 128;

// The rows r < count that a weighted sum reads, with their weights (count x K, ld K) and the map
// from r to x's rows (null: the identity).
struct WeightedRows {
  std::int64_t count;
  const vertex_t* __restrict__ map;
  const float* __restrict__ weights;
  int heads;
};

// Where the slices' sums go: one slot of K D floats in partials per rows_per_slice rows.
struct SlicePartials {
  std::int64_t rows_per_slice;
  float* __restrict__ partials;
};

__global__ void __launch_bounds__(32 * kSliceRows)
    gat_input_weighted_rows_kernel(WeightedRows weighted, ConstRowMatrix x_rows, std::int64_t width,
                                   SlicePartials slices) {
  const std::int64_t rows = weighted.count, rows_per_slice = slices.rows_per_slice;
  const vertex_t* __restrict__ map = weighted.map;
  const float* __restrict__ x = x_rows.data;
  const std::int64_t ldx = x_rows.ld;
  const float* __restrict__ weights = weighted.weights;
  const int heads = weighted.heads;
  float* __restrict__ partials = slices.partials;
  __shared__ float sums[kSliceRows * kMaxInputValues];
  const std::int64_t values = heads * width;
  float* slot = partials + blockIdx.x * values;
  const std::int64_t begin = blockIdx.x * rows_per_slice;
  const std::int64_t end = begin + rows_per_slice < rows ? begin + rows_per_slice : rows;
  for (std::int64_t c = 4 * threadIdx.x; c < width; c += 128) {
    float4 acc[8];
#pragma unroll
    for (int h = 0; h < 8; ++h) acc[h] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kSliceRows) {
      const std::int64_t row = map ? static_cast<std::int64_t>(map[r]) : r;
      if (row < 0) continue;
      const float4 v = *reinterpret_cast<const float4*>(x + row * ldx + c);
#pragma unroll
      for (int h = 0; h < 8; ++h) {
        if (h < heads) {
          const float w = weights[r * heads + h];
          acc[h].x += w * v.x;
          acc[h].y += w * v.y;
          acc[h].z += w * v.z;
          acc[h].w += w * v.w;
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 8; ++h)
      if (h < heads)
        *reinterpret_cast<float4*>(sums + threadIdx.y * kMaxInputValues + h * width + c) = acc[h];
  }
  __syncthreads();
  for (std::int64_t v = threadIdx.y * 32 + threadIdx.x; v < values; v += 32 * kSliceRows) {
    float total = 0.f;
    for (int y = 0; y < kSliceRows; ++y) total += sums[y * kMaxInputValues + v];
    slot[v] = total;
  }
}

// The slots gat_input_weighted_rows_kernel wrote, values = K D floats each: source_slots of the
// source slices, then row_slots of the destination slices.
struct PartialSlots {
  const float* __restrict__ partials;
  std::int64_t source_slots;
  std::int64_t row_slots;
  std::int64_t values;
};

// sums[j / width, j % width] for j < 2 K D: the first K D values summed over the source slices'
// slots, the others over the destination slices' (values = K D floats a slot). Block (32,
// kSliceRows): x over 32 values, y over every kSliceRows-th slot, the y sums added in order.
__global__ void __launch_bounds__(32 * kSliceRows)
    gat_input_sums_kernel(PartialSlots slices, RowMatrix sums_out, std::int64_t width) {
  const float* __restrict__ partials = slices.partials;
  const std::int64_t source_slots = slices.source_slots, row_slots = slices.row_slots;
  const std::int64_t values = slices.values;
  float* __restrict__ sums = sums_out.data;
  const std::int64_t ldsums = sums_out.ld;
  __shared__ float part[kSliceRows][32];
  const std::int64_t j = blockIdx.x * 32 + threadIdx.x;
  const bool rows_half = j >= values;
  const std::int64_t slots = rows_half ? row_slots : source_slots;
  const float* first = partials + (rows_half ? source_slots * values + j - values : j);
  float total = 0.f;
  if (j < 2 * values)
    for (std::int64_t w = threadIdx.y; w < slots; w += kSliceRows) total += first[w * values];
  part[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && j < 2 * values) {
    float sum = 0.f;
    for (int y = 0; y < kSliceRows; ++y) sum += part[y][threadIdx.x];
    sums[(j / width) * ldsums + j % width] = sum;
  }
}

void check_input_shape(int heads, std::int64_t width, const float* x, std::int64_t ldx) {
  SLUICE_EXPECTS(gat_inputs_fit(heads, width), "GAT over input rows: ", heads, " heads of ", width,
                 " columns do not fit its kernels (at most 8 heads, 256 columns, 8 x 128 in all)");
  SLUICE_EXPECTS(detail::rows_aligned16(x, ldx), "GAT over input rows: x rows not 16-byte aligned");
  SLUICE_EXPECTS(ldx < RowStride::kMaxLd, "GAT over input rows: x rows ", ldx, " floats apart");
}

}  // namespace

template <typename Index>
void launch_gat_input_forward(const GatInputRows<Index>& in, float* alpha, std::int64_t ldalpha,
                              float* agg, std::int64_t ldagg, cudaStream_t stream) {
  const CsrArrays<Index>& a = in.a;
  if (a.rows <= 0) return;
  check_input_shape(in.heads, in.width, in.x, in.ldx);
  SLUICE_EXPECTS(detail::rows_aligned16(agg, ldagg),
                 "GAT over input rows: agg rows not 16-byte aligned");
  const unsigned blocks = row_blocks((a.rows + kInputRowsPerWarp - 1) / kInputRowsPerWarp);
  const std::size_t long_shared =
      static_cast<std::size_t>(kLongInputWarps) * in.heads * in.width * sizeof(float);
  const auto launch = [&](auto kernel, auto long_kernel) {
    kernel<<<blocks, kRowThreads, 0, stream>>>(a, in.x, in.ldx, in.width, in.el, in.ldel, in.er,
                                               in.lder, in.heads, in.dropout, alpha, ldalpha, agg,
                                               ldagg);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (a.long_rows.count == 0) return;
    long_kernel<<<gat_detail::long_blocks(a.long_rows.count), 32 * kLongInputWarps, long_shared,
                  stream>>>(a, in.x, in.ldx, in.width, in.el, in.ldel, in.er, in.lder, in.heads,
                            in.dropout, alpha, ldalpha, agg, ldagg);
    SLUICE_CUDA_LAUNCH_CHECK();
  };
  // All heads (heads == kHeads, records aligned) without a branch per head; fewer behind one.
  const HeadRecords records = head_records({{in.el, in.ldel}, {in.er, in.lder}, {alpha, ldalpha}});
  const auto launch_quads = [&](auto quads) {
    constexpr int kQuads = decltype(quads)::value;
    with_head_instance(in.heads, records, [&](auto heads_max, auto all_heads) {
      constexpr int kHeads = decltype(heads_max)::value;
      constexpr bool kAllHeads = decltype(all_heads)::value;
      // More than 4 heads take one quad (gat_inputs_fit(), checked above): no 8 x 2 instance.
      if constexpr (kHeads == 4 || kQuads == 1)
        launch(gat_input_forward_kernel<Index, kHeads, kQuads, kAllHeads>,
               gat_input_forward_long_kernel<Index, kHeads, kQuads, kAllHeads>);
    });
  };
  if (in.width <= 128)
    launch_quads(std::integral_constant<int, 1>{});
  else
    launch_quads(std::integral_constant<int, 2>{});
}

template <typename Index>
void launch_gat_input_backward(const GatInputBackward<Index>& p, cudaStream_t stream) {
  const GatInputRows<Index>& in = p.in;
  const CsrArrays<Index>& a = in.a;
  const int heads = in.heads;
  const GatInputScratch& scratch = p.scratch;
  check_input_shape(heads, in.width, in.x, in.ldx);
  SLUICE_EXPECTS(detail::rows_aligned16(p.g, p.ldg),
                 "GAT over input rows: g rows not 16-byte aligned");
  const std::int64_t values = heads * in.width;
  if (a.nnz > 0) {
    // Each warp's entries: whole 32-entry groups.
    const std::int64_t blocks = gat_input_blocks(a.nnz);
    const std::int64_t warps = blocks * kBackwardWarps;
    const std::int64_t per_warp = ((a.nnz + warps - 1) / warps + 31) / 32 * 32;
    const HeadRecords records = head_records(
        {{p.alpha, p.ldalpha}, {p.head_dots, p.ldhead_dots}, {scratch.entries, heads}});
    with_head_instance(heads, records, [&](auto heads_max, auto all_heads) {
      gat_input_entries_kernel<Index, decltype(heads_max)::value, decltype(all_heads)::value>
          <<<static_cast<unsigned>(blocks), 32 * kBackwardWarps, 0, stream>>>(
              a, per_warp, in.x, in.ldx, in.width, p.alpha, p.ldalpha, p.head_dots, p.ldhead_dots,
              p.g, p.ldg, heads, in.dropout, scratch.entries);
    });
    SLUICE_CUDA_LAUNCH_CHECK();
  }
  // d_er per row, d_el per source; 0 for rows without entries.
  const EntryGradients entries{scratch.entries, in.el, in.ldel, in.er, in.lder, heads};
  const HeadRecords share_records =
      head_records({{scratch.entries, heads}, {in.el, in.ldel}, {in.er, in.lder}});
  launch_row_share_sums(RowRanges<Index>{a.indptr, a.rows, a.long_rows},
                        DestinationShares<Index>{a.columns, entries}, heads, share_records,
                        scratch.rows, stream);
  launch_row_share_sums(RowRanges<Index>{p.t.indptr, a.cols, p.t.long_rows},
                        SourceShares<Index>{p.t.columns, p.t.perm, entries}, heads, share_records,
                        scratch.sources, stream);
  const std::int64_t source_slices = gat_input_slices(a.cols);
  const std::int64_t row_slices = gat_input_slices(a.rows);
  const dim3 slice_block(32, kSliceRows);
  const ConstRowMatrix x{in.x, in.ldx};
  gat_input_weighted_rows_kernel<<<static_cast<unsigned>(source_slices), slice_block, 0, stream>>>(
      WeightedRows{a.cols, nullptr, scratch.sources, heads}, x, in.width,
      SlicePartials{(a.cols + source_slices - 1) / source_slices, scratch.partials});
  SLUICE_CUDA_LAUNCH_CHECK();
  gat_input_weighted_rows_kernel<<<static_cast<unsigned>(row_slices), slice_block, 0, stream>>>(
      WeightedRows{a.rows, a.self, scratch.rows, heads}, x, in.width,
      SlicePartials{(a.rows + row_slices - 1) / row_slices,
                    scratch.partials + source_slices * values});
  SLUICE_CUDA_LAUNCH_CHECK();
  gat_input_sums_kernel<<<static_cast<unsigned>((2 * values + 31) / 32), slice_block, 0, stream>>>(
      PartialSlots{scratch.partials, source_slices, row_slices, values},
      RowMatrix{p.sums, p.ldsums}, in.width);
  SLUICE_CUDA_LAUNCH_CHECK();
}

// ---- Layer 0's scores from its input rows in one read of them: a warp per row of x at a time,
// lane l holding columns l, l + 32, ... (up to kScoreQuads x 32 of them) and, in registers for
// all its rows, those columns of the folded attention vectors; the N dot products (N = 2K
// rounded up to a power of two) are summed over the warp by halving: at each of log2 N steps a
// lane keeps half of its values and adds its partner's other half, so that lane l ends with
// product index(l), then the lanes below the last step's offset add theirs.
constexpr int kScoreQuads = 4;         // rows of up to 128 floats
constexpr int kScoreRowsPerWarp = 64;  // rows a warp takes (its folded columns loaded once)

template <int kN>
__global__ void __launch_bounds__(kRowThreads)
    gat_input_scores_kernel(ConstRowMatrix x, std::int64_t rows, std::int64_t width,
                            const float* __restrict__ folded, std::int64_t ldf, int heads,
                            RowMatrix el, RowMatrix er, std::int64_t er_rows) {
  const int lane = lane_id();
  float f[kScoreQuads][kN];
#pragma unroll
  for (int t = 0; t < kScoreQuads; ++t) {
    const std::int64_t c = lane + 32 * t;
#pragma unroll
    for (int j = 0; j < kN; ++j) f[t][j] = c < width && j < 2 * heads ? folded[c * ldf + j] : 0.f;
  }
  // The lane's product after the halving steps, and the offset below which lanes add theirs.
  int index = 0;
#pragma unroll
  for (int o = 16, n = kN; n > 1; o /= 2, n /= 2) index += (lane & o) ? n / 2 : 0;
  constexpr int kLast = 32 / kN;  // the offsets kLast / 2, ..., 1 remain
  for (std::int64_t r = global_warp(); r < rows; r += warp_count()) {
    const float* row = x.data + r * x.ld;
    float v[kScoreQuads];
#pragma unroll
    for (int t = 0; t < kScoreQuads; ++t) {
      const std::int64_t c = lane + 32 * t;
      v[t] = c < width ? row[c] : 0.f;
    }
    float acc[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      acc[j] = 0.f;
#pragma unroll
      for (int t = 0; t < kScoreQuads; ++t) acc[j] += v[t] * f[t][j];
    }
#pragma unroll
    for (int o = 16, n = kN; n > 1; o /= 2, n /= 2) {
      const bool upper = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < n / 2; ++i) {
        const float keep = upper ? acc[i + n / 2] : acc[i];
        const float send = upper ? acc[i] : acc[i + n / 2];
        acc[i] = keep + __shfl_xor_sync(kFullMask, send, o);
      }
    }
#pragma unroll
    for (int o = kLast / 2; o > 0; o /= 2) acc[0] += __shfl_xor_sync(kFullMask, acc[0], o);
    if (lane % kLast == 0) {
      if (index < heads)
        el.data[r * el.ld + index] = acc[0];
      else if (index < 2 * heads && r < er_rows)
        er.data[r * er.ld + index - heads] = acc[0];
    }
  }
}

template <int kN>
void launch_input_scores(const GatInputScores& p, cudaStream_t stream) {
  const std::int64_t per_block = std::int64_t(kRowWarps) * kScoreRowsPerWarp;
  const auto blocks = static_cast<unsigned>((p.rows + per_block - 1) / per_block);
  gat_input_scores_kernel<kN><<<blocks, kRowThreads, 0, stream>>>(
      ConstRowMatrix{p.x, p.ldx}, p.rows, p.width, p.folded, p.ldfolded, p.heads,
      RowMatrix{p.el, p.ldel}, RowMatrix{p.er, p.lder}, p.er_rows);
  SLUICE_CUDA_LAUNCH_CHECK();
}

bool gat_input_scores_fit(std::int64_t width, int heads) {
  return width <= 32 * kScoreQuads && heads >= 1 && 2 * heads <= 32;
}

void launch_gat_input_scores(const GatInputScores& p, cudaStream_t stream) {
  SLUICE_EXPECTS(gat_input_scores_fit(p.width, p.heads), "input scores of ", p.width,
                 "-float rows for ", p.heads, " heads");
  if (p.rows <= 0) return;
  const int n = 2 * p.heads;
  if (n <= 2)
    launch_input_scores<2>(p, stream);
  else if (n <= 4)
    launch_input_scores<4>(p, stream);
  else if (n <= 8)
    launch_input_scores<8>(p, stream);
  else if (n <= 16)
    launch_input_scores<16>(p, stream);
  else
    launch_input_scores<32>(p, stream);
}

#define SLUICE_GAT_INPUT_INSTANTIATE(Index)                                                       \
  template void launch_gat_input_forward<Index>(const GatInputRows<Index>&, float*, std::int64_t, \
                                                float*, std::int64_t, cudaStream_t);              \
  template void launch_gat_input_backward<Index>(const GatInputBackward<Index>&, cudaStream_t);
SLUICE_GAT_INPUT_INSTANTIATE(std::int32_t)
SLUICE_GAT_INPUT_INSTANTIATE(std::int64_t)
#undef SLUICE_GAT_INPUT_INSTANTIATE

}  // namespace sluice::cuda
