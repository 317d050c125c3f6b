// GAT's layer 0 attending over its input rows (gat.hpp, "GAT's layer 0 attending over its input
// rows"). One warp per destination row; a lane holds 4 (or 8) columns of an x row as 16-byte
// words, so a row of up to 128 (256) floats is one load per lane.
// - Forward: per 32-entry chunk of the row, lane j computes the chunk's j-th coefficients for
//   every head into shared memory; then every lane adds the chunk's x rows, each read once, to
//   all K heads' sums.
// - Backward: 32 / K entries at a time (K padded to 4 or 8), each lane takes the partial dot
//   products of the row's g^h with its columns of those entries' x rows; one transposing
//   reduction over the warp leaves each lane the full dot product of one entry and head, from
//   which it computes that entry's score gradient; the lanes then add the score gradients times
//   the x rows they still hold to their per-warp sums. No pass by source: layer 0 has no input
//   gradient.
#include <algorithm>

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
using gat_detail::attention_prefix;
using gat_detail::attention_scale;
using gat_detail::kLeakySlope;
using gat_detail::leaky_relu;
using gat_detail::softmax_stats_entries;

constexpr unsigned kFullMask = 0xffffffffu;

// row[4 lane + 128 q .. + 3] for q < kQuads into v[4 q .. 4 q + 3], 0 at and beyond `width` (the
// row's last word may hold padding columns).
template <int kQuads>
__device__ __forceinline__ void load_words(float (&v)[4 * kQuads], const float* row, int lane,
                                           std::int64_t width) {
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const std::int64_t c = 128 * q + 4 * lane;
    float4 w = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < width) w = *reinterpret_cast<const float4*>(row + c);
    v[4 * q] = w.x;
    v[4 * q + 1] = c + 1 < width ? w.y : 0.f;
    v[4 * q + 2] = c + 2 < width ? w.z : 0.f;
    v[4 * q + 3] = c + 3 < width ? w.w : 0.f;
  }
}

// The same columns of a row that need not be 16-byte aligned (a head's block of g).
template <int kQuads>
__device__ __forceinline__ void load_columns(float (&v)[4 * kQuads], const float* row, int lane,
                                             std::int64_t width) {
#pragma unroll
  for (int t = 0; t < 4 * kQuads; ++t) {
    const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
    v[t] = c < width ? row[c] : 0.f;
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

// One step of transpose_sum(): lanes with bit kHalf set keep values kHalf .. 2 kHalf - 1 (moved
// to 0 .. kHalf - 1), the others 0 .. kHalf - 1, each adding its partner's copy.
template <int kHalf>
__device__ __forceinline__ void transpose_step(float (&v)[32], int lane) {
  const bool upper = (lane & kHalf) != 0;
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const float send = upper ? v[j] : v[j + kHalf];
    const float keep = upper ? v[j + kHalf] : v[j];
    v[j] = keep + __shfl_xor_sync(kFullMask, send, kHalf);
  }
}

// Sums v[j] over the warp for all 32 j at once (31 shuffles): lane l ends with the sum of v[l]
// in v[0]. The steps are spelled out so that every index is a constant (v stays in registers).
__device__ __forceinline__ void transpose_sum(float (&v)[32], int lane) {
  transpose_step<16>(v, lane);
  transpose_step<8>(v, lane);
  transpose_step<4>(v, lane);
  transpose_step<2>(v, lane);
  transpose_step<1>(v, lane);
}

// A forward pass over row i's 32-entry chunks first_chunk, first_chunk + step, ... with the row's
// head_max and head_inv: per chunk, lane j's coefficients of the chunk's j-th entry (alpha
// stored) into coef, then the chunk's x rows added to acc for every head.
template <typename Index, int kHeads, int kQuads>
__device__ __forceinline__ void forward_chunks(
    const CsrArrays<Index>& a, std::int64_t i, std::int64_t begin, std::int64_t degree,
    std::int64_t first_chunk, std::int64_t step, const float* __restrict__ x, std::int64_t ldx,
    std::int64_t width, const float* __restrict__ el, std::int64_t ldel,
    const float* __restrict__ er, std::int64_t lder, int heads, const AttentionDropout& dropout,
    std::uint64_t prefix, const float* head_max, const float* head_inv, float* coef,
    float* __restrict__ alpha, std::int64_t ldalpha, int lane, float (&acc)[kHeads][4 * kQuads]) {
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    const std::int64_t k = chunk + lane;
    std::int64_t u_mine = 0;
    if (k < degree) {
      u_mine = a.columns[begin + k];
      for (int h = 0; h < heads; ++h) {
        const float e = leaky_relu(el[u_mine * ldel + h] + er[i * lder + h]);
        const float coefficient = expf(e - head_max[h]) * head_inv[h];
        alpha[(begin + k) * ldalpha + h] = coefficient;
        coef[lane * kHeads + h] = coefficient * attention_scale(dropout, prefix, k, h);
      }
    }
    __syncwarp();
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    int j = 0;
    // Four x rows in flight, added in entry order.
    for (; j + 3 < count; j += 4) {
      float v[4][4 * kQuads];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const std::int64_t u = __shfl_sync(kFullMask, u_mine, j + r);
        load_words<kQuads>(v[r], x + u * ldx, lane, width);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float w[kHeads];
        load_heads<kHeads>(w, coef + (j + r) * kHeads);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h < heads) {
#pragma unroll
            for (int t = 0; t < 4 * kQuads; ++t) acc[h][t] += w[h] * v[r][t];
          }
        }
      }
    }
    for (; j < count; ++j) {
      const std::int64_t u = __shfl_sync(kFullMask, u_mine, j);
      float v[4 * kQuads];
      load_words<kQuads>(v, x + u * ldx, lane, width);
      float w[kHeads];
      load_heads<kHeads>(w, coef + j * kHeads);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h < heads) {
#pragma unroll
          for (int t = 0; t < 4 * kQuads; ++t) acc[h][t] += w[h] * v[t];
        }
      }
    }
    __syncwarp();
  }
}

// One warp per row of at most a.long_rows.degree entries.
template <typename Index, int kHeads, int kQuads>
__global__ void __launch_bounds__(kRowThreads)
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
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // gat_input_forward_long_kernel's
    const std::uint64_t prefix = attention_prefix(dropout, i);
    for (int h = 0; h < heads; ++h) {
      float m, s;
      softmax_stats_entries(a.columns, begin, degree, 0, 32, el, ldel, h, er[i * lder + h], m, s);
      if (lane == 0) {
        head_max[h] = m;
        head_inv[h] = s > 0.f ? 1.f / s : 0.f;
      }
    }
    __syncwarp();
    float acc[kHeads][4 * kQuads] = {};
    forward_chunks<Index, kHeads, kQuads>(a, i, begin, degree, 0, 32, x, ldx, width, el, ldel, er,
                                          lder, heads, dropout, prefix, head_max, head_inv, coef,
                                          alpha, ldalpha, lane, acc);
    float* row = agg + i * ldagg;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < heads) {
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) {
          const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
          if (c < width) row[h * width + c] = acc[h][t];
        }
      }
    }
    __syncwarp();
  }
}

// Long rows (a.long_rows): a block of kLongInputWarps warps per row, warp w taking the row's
// chunks w, w + kLongInputWarps, ...; the softmax statistics and the weighted sums combined over
// the warps in warp order through shared memory (dynamic: kLongInputWarps x K D floats).
constexpr int kLongInputWarps = 8;

template <typename Index, int kHeads, int kQuads>
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
    for (int h = 0; h < heads; ++h) {
      float m, s;
      softmax_stats_entries(a.columns, begin, degree, 32 * warp, 32 * kLongInputWarps, el, ldel, h,
                            er[i * lder + h], m, s);
      if (lane == 0) {
        stats[warp * 2 * kHeads + h] = m;
        stats[warp * 2 * kHeads + kHeads + h] = s;
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
    forward_chunks<Index, kHeads, kQuads>(a, i, begin, degree, 32 * warp, 32 * kLongInputWarps, x,
                                          ldx, width, el, ldel, er, lder, heads, dropout, prefix,
                                          head_max, head_inv, coef, alpha, ldalpha, lane, acc);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < heads) {
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) {
          const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
          if (c < width) partial[warp * values + h * width + c] = acc[h][t];
        }
      }
    }
    __syncthreads();
    for (std::int64_t v = threadIdx.x; v < values; v += blockDim.x) {
      float sum = 0.f;
      for (int w = 0; w < kLongInputWarps; ++w) sum += partial[w * values + v];
      agg[i * ldagg + v] = sum;
    }
    __syncthreads();
  }
}

// The backward's per-row values of row i for a warp: the lane's head's softmax sum
// dO_i^h . O_i^h and destination score, and g_i in the lane's columns.
template <int kHeads, int kQuads>
struct BackwardRow {
  float my_sum = 0.f, my_er = 0.f;
  float g[kHeads][4 * kQuads];
};

template <int kHeads, int kQuads>
__device__ __forceinline__ void backward_row(std::int64_t i, const float* __restrict__ er,
                                             std::int64_t lder, const float* __restrict__ out,
                                             std::int64_t ldout, const float* __restrict__ dout,
                                             std::int64_t lddout, std::int64_t head_width,
                                             const float* __restrict__ g, std::int64_t ldg,
                                             std::int64_t width, int heads, int lane, int my_head,
                                             BackwardRow<kHeads, kQuads>& row) {
  for (int h = 0; h < heads; ++h) {
    float s = 0.f;
    for (std::int64_t f = lane; f < head_width; f += 32)
      s += dout[i * lddout + h * head_width + f] * out[i * ldout + h * head_width + f];
    s = warp_sum(s);
    if (h == my_head) row.my_sum = s;
  }
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h < heads) {
      load_columns<kQuads>(row.g[h], g + i * ldg + h * width, lane, width);
    } else {
#pragma unroll
      for (int t = 0; t < 4 * kQuads; ++t) row.g[h][t] = 0.f;
    }
  }
  row.my_er = my_head < heads ? er[i * lder + my_head] : 0.f;
}

// The backward over row i's steps of 32 / kHeads entries first, first + step, ...: the score
// gradients of each step's entries (one per lane), their x rows' share of source_sums, and in
// my_row_sum the lane's head's share of the row's destination score gradient.
template <typename Index, int kHeads, int kQuads>
__device__ __forceinline__ void backward_steps(
    const CsrArrays<Index>& a, std::int64_t begin, std::int64_t degree, std::int64_t first_step,
    std::int64_t step, const float* __restrict__ x, std::int64_t ldx, std::int64_t width,
    const float* __restrict__ el, std::int64_t ldel, const float* __restrict__ alpha,
    std::int64_t ldalpha, int heads, const AttentionDropout& dropout, std::uint64_t prefix,
    const BackwardRow<kHeads, kQuads>& row, float* step_ds, int lane, int my_entry, int my_head,
    float& my_row_sum, float (&source_sums)[kHeads][4 * kQuads]) {
  constexpr int kEntries = 32 / kHeads;
  for (std::int64_t first = first_step; first < degree; first += step) {
    // The lane's entry and head: its coefficient, score side and dropout scale, loaded before the
    // x rows so that both loads are in flight together.
    const std::int64_t k = first + my_entry;
    const bool mine = k < degree && my_head < heads;
    float my_alpha = 0.f, my_scale = 0.f;
    bool positive = true;
    if (mine) {
      const std::int64_t u = a.columns[begin + k];
      my_alpha = alpha[(begin + k) * ldalpha + my_head];
      positive = el[u * ldel + my_head] + row.my_er > 0.f;
      my_scale = attention_scale(dropout, prefix, k, my_head);
    }
    float xv[kEntries][4 * kQuads];
    float part[32];
#pragma unroll
    for (int e = 0; e < kEntries; ++e) {
      if (first + e < degree) {
        const std::int64_t u = a.columns[begin + first + e];
        load_words<kQuads>(xv[e], x + u * ldx, lane, width);
      } else {
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) xv[e][t] = 0.f;
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        float s = 0.f;
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) s += row.g[h][t] * xv[e][t];
        part[e * kHeads + h] = s;
      }
    }
    transpose_sum(part, lane);
    float ds = 0.f;
    if (mine) {
      const float d_e = my_alpha * (my_scale * part[0] - row.my_sum);
      if (positive) {
        ds = d_e;
      } else {
        ds = kLeakySlope * d_e;
        // The row's sum of ds is that of d_e, which is 0 (sum_k alpha_k d_e,k = S - S sum_k
        // alpha_k), plus (slope - 1) d_e of the entries on the negative side: summed so, it keeps
        // none of the rounding of the terms that cancel.
        my_row_sum += (kLeakySlope - 1.f) * d_e;
      }
    }
    step_ds[lane] = ds;
    __syncwarp();
#pragma unroll
    for (int e = 0; e < kEntries; ++e) {
      float w[kHeads];
      load_heads<kHeads>(w, step_ds + e * kHeads);
#pragma unroll
      for (int h = 0; h < kHeads; ++h)
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) source_sums[h][t] += w[h] * xv[e][t];
    }
    __syncwarp();
  }
}

// The end of a warp's share of row i: my_row_sum summed over the lanes of each head, times the
// row's own x row, into row_sums.
template <typename Index, int kHeads, int kQuads>
__device__ __forceinline__ void backward_row_end(const CsrArrays<Index>& a, std::int64_t begin,
                                                 const float* __restrict__ x, std::int64_t ldx,
                                                 std::int64_t width, int lane, float my_row_sum,
                                                 float (&row_sums)[kHeads][4 * kQuads]) {
#pragma unroll
  for (int offset = 16; offset >= kHeads; offset /= 2)
    my_row_sum += __shfl_xor_sync(kFullMask, my_row_sum, offset);
  float self[4 * kQuads];
  load_words<kQuads>(self, x + static_cast<std::int64_t>(a.columns[begin]) * ldx, lane, width);
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    const float d = __shfl_sync(kFullMask, my_row_sum, h);
#pragma unroll
    for (int t = 0; t < 4 * kQuads; ++t) row_sums[h][t] += d * self[t];
  }
}

// The block's warps' sums added in warp order (through `combine`, 2 K D floats of shared
// memory) into the block's partials slot. Called by the whole block.
template <int kHeads, int kQuads>
__device__ __forceinline__ void write_block_partials(float* slot, float* combine, int warps,
                                                     int heads, std::int64_t width, int lane,
                                                     const float (&source_sums)[kHeads][4 * kQuads],
                                                     const float (&row_sums)[kHeads][4 * kQuads]) {
  const int warp = static_cast<int>(threadIdx.x / 32);
  for (int w = 0; w < warps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h < heads) {
#pragma unroll
          for (int t = 0; t < 4 * kQuads; ++t) {
            const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
            if (c < width) {
              float* source = combine + h * width + c;
              float* row = combine + (heads + h) * width + c;
              *source = w == 0 ? source_sums[h][t] : *source + source_sums[h][t];
              *row = w == 0 ? row_sums[h][t] : *row + row_sums[h][t];
            }
          }
        }
      }
    }
    __syncthreads();
  }
  for (std::int64_t v = threadIdx.x; v < 2 * heads * width; v += blockDim.x) slot[v] = combine[v];
}

constexpr int kBackwardWarps = static_cast<int>(kGatInputBlockWarps);

// Rows of at most a.long_rows.degree entries, one warp each, gat_input_blocks(a.rows) blocks; the
// sums into partials slot blockIdx.x.
template <typename Index, int kHeads, int kQuads>
__global__ void __launch_bounds__(32 * kBackwardWarps)
    gat_input_backward_kernel(CsrArrays<Index> a, const float* __restrict__ x, std::int64_t ldx,
                              std::int64_t width, const float* __restrict__ el, std::int64_t ldel,
                              const float* __restrict__ er, std::int64_t lder,
                              const float* __restrict__ alpha, std::int64_t ldalpha,
                              const float* __restrict__ out, std::int64_t ldout,
                              const float* __restrict__ dout, std::int64_t lddout,
                              std::int64_t head_width, const float* __restrict__ g,
                              std::int64_t ldg, int heads, AttentionDropout dropout,
                              float* __restrict__ partials) {
  __shared__ __align__(16) float shared[kBackwardWarps * 32];
  const int lane = lane_id();
  float* step_ds = shared + (threadIdx.x / 32) * 32;
  const int my_entry = lane / kHeads, my_head = lane % kHeads;
  float source_sums[kHeads][4 * kQuads] = {}, row_sums[kHeads][4 * kQuads] = {};
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree == 0 || degree > a.long_rows.degree) continue;
    BackwardRow<kHeads, kQuads> row;
    backward_row<kHeads, kQuads>(i, er, lder, out, ldout, dout, lddout, head_width, g, ldg, width,
                                 heads, lane, my_head, row);
    float my_row_sum = 0.f;
    backward_steps<Index, kHeads, kQuads>(a, begin, degree, 0, 32 / kHeads, x, ldx, width, el, ldel,
                                          alpha, ldalpha, heads, dropout,
                                          attention_prefix(dropout, i), row, step_ds, lane,
                                          my_entry, my_head, my_row_sum, source_sums);
    backward_row_end<Index, kHeads, kQuads>(a, begin, x, ldx, width, lane, my_row_sum, row_sums);
  }
  extern __shared__ float combine[];
  write_block_partials<kHeads, kQuads>(partials + blockIdx.x * 2 * heads * width, combine,
                                       kBackwardWarps, heads, width, lane, source_sums, row_sums);
}

// Long rows: kGatInputLongBlocks blocks of kLongBackwardWarps warps, a block per row, its warps
// taking the row's steps in turn; each warp sums its share (the destination score gradient is a
// sum over the row's entries too), and the block's sums go to partials slot blockIdx.x.
constexpr int kLongBackwardWarps = 4;

template <typename Index, int kHeads, int kQuads>
__global__ void __launch_bounds__(32 * kLongBackwardWarps) gat_input_backward_long_kernel(
    CsrArrays<Index> a, const float* __restrict__ x, std::int64_t ldx, std::int64_t width,
    const float* __restrict__ el, std::int64_t ldel, const float* __restrict__ er,
    std::int64_t lder, const float* __restrict__ alpha, std::int64_t ldalpha,
    const float* __restrict__ out, std::int64_t ldout, const float* __restrict__ dout,
    std::int64_t lddout, std::int64_t head_width, const float* __restrict__ g, std::int64_t ldg,
    int heads, AttentionDropout dropout, float* __restrict__ partials) {
  constexpr int kEntries = 32 / kHeads;
  __shared__ __align__(16) float shared[kLongBackwardWarps * 32];
  const int lane = lane_id(), warp = static_cast<int>(threadIdx.x / 32);
  float* step_ds = shared + warp * 32;
  const int my_entry = lane / kHeads, my_head = lane % kHeads;
  float source_sums[kHeads][4 * kQuads] = {}, row_sums[kHeads][4 * kQuads] = {};
  for (std::int64_t r = blockIdx.x; r < a.long_rows.count; r += gridDim.x) {
    const std::int64_t i = a.long_rows.rows[r];
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    BackwardRow<kHeads, kQuads> row;
    backward_row<kHeads, kQuads>(i, er, lder, out, ldout, dout, lddout, head_width, g, ldg, width,
                                 heads, lane, my_head, row);
    float my_row_sum = 0.f;
    backward_steps<Index, kHeads, kQuads>(
        a, begin, degree, kEntries * warp, kEntries * kLongBackwardWarps, x, ldx, width, el, ldel,
        alpha, ldalpha, heads, dropout, attention_prefix(dropout, i), row, step_ds, lane, my_entry,
        my_head, my_row_sum, source_sums);
    backward_row_end<Index, kHeads, kQuads>(a, begin, x, ldx, width, lane, my_row_sum, row_sums);
  }
  extern __shared__ float combine[];
  write_block_partials<kHeads, kQuads>(partials + blockIdx.x * 2 * heads * width, combine,
                                       kLongBackwardWarps, heads, width, lane, source_sums,
                                       row_sums);
}

// sums[j / width, j % width] = sum over slots w < slots (in order) of partials[w * values + j].
__global__ void gat_input_sums_kernel(const float* __restrict__ partials, std::int64_t slots,
                                      std::int64_t values, std::int64_t width,
                                      float* __restrict__ sums, std::int64_t ldsums) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= values) return;
  float total = 0.f;
  for (std::int64_t w = 0; w < slots; ++w) total += partials[w * values + j];
  sums[(j / width) * ldsums + j % width] = total;
}

void check_input_shape(int heads, std::int64_t width, const float* x, std::int64_t ldx) {
  SLUICE_EXPECTS(gat_inputs_fit(heads, width), "GAT over input rows: ", heads, " heads of ", width,
                 " columns do not fit its kernels (at most 8 heads, 256 columns, 8 x 128 in all)");
  SLUICE_EXPECTS(ldx % 4 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0,
                 "GAT over input rows: x rows not 16-byte aligned");
}

}  // namespace

template <typename Index>
void launch_gat_input_forward(const CsrArrays<Index>& a, const float* x, std::int64_t ldx,
                              std::int64_t width, const float* el, std::int64_t ldel,
                              const float* er, std::int64_t lder, int heads,
                              const AttentionDropout& dropout, float* alpha, std::int64_t ldalpha,
                              float* agg, std::int64_t ldagg, cudaStream_t stream) {
  if (a.rows <= 0) return;
  check_input_shape(heads, width, x, ldx);
  const unsigned blocks = row_blocks(a.rows);
  const unsigned long_blocks =
      static_cast<unsigned>(std::min<std::int64_t>(a.long_rows.count, 65535));
  const std::size_t long_shared =
      static_cast<std::size_t>(kLongInputWarps) * heads * width * sizeof(float);
  const auto launch = [&](auto kernel, auto long_kernel) {
    kernel<<<blocks, kRowThreads, 0, stream>>>(a, x, ldx, width, el, ldel, er, lder, heads, dropout,
                                               alpha, ldalpha, agg, ldagg);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (long_blocks == 0) return;
    long_kernel<<<long_blocks, 32 * kLongInputWarps, long_shared, stream>>>(
        a, x, ldx, width, el, ldel, er, lder, heads, dropout, alpha, ldalpha, agg, ldagg);
    SLUICE_CUDA_LAUNCH_CHECK();
  };
  if (heads <= 4 && width <= 128)
    launch(gat_input_forward_kernel<Index, 4, 1>, gat_input_forward_long_kernel<Index, 4, 1>);
  else if (heads <= 4)
    launch(gat_input_forward_kernel<Index, 4, 2>, gat_input_forward_long_kernel<Index, 4, 2>);
  else
    launch(gat_input_forward_kernel<Index, 8, 1>, gat_input_forward_long_kernel<Index, 8, 1>);
}

template <typename Index>
void launch_gat_input_backward(const CsrArrays<Index>& a, const float* x, std::int64_t ldx,
                               std::int64_t width, const float* el, std::int64_t ldel,
                               const float* er, std::int64_t lder, const float* alpha,
                               std::int64_t ldalpha, const float* out, std::int64_t ldout,
                               const float* dout, std::int64_t lddout, std::int64_t head_width,
                               const float* g, std::int64_t ldg, int heads,
                               const AttentionDropout& dropout, float* partials, float* sums,
                               std::int64_t ldsums, cudaStream_t stream) {
  check_input_shape(heads, width, x, ldx);
  const std::int64_t blocks = gat_input_blocks(a.rows);
  const std::int64_t slots = gat_input_partials(a.rows, a.long_rows.count);
  const std::int64_t values = 2 * heads * width;
  const std::size_t combine = static_cast<std::size_t>(values) * sizeof(float);
  const auto launch = [&](auto kernel, auto long_kernel) {
    kernel<<<static_cast<unsigned>(blocks), 32 * kBackwardWarps, combine, stream>>>(
        a, x, ldx, width, el, ldel, er, lder, alpha, ldalpha, out, ldout, dout, lddout, head_width,
        g, ldg, heads, dropout, partials);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (a.long_rows.count == 0) return;
    long_kernel<<<static_cast<unsigned>(kGatInputLongBlocks), 32 * kLongBackwardWarps, combine,
                  stream>>>(a, x, ldx, width, el, ldel, er, lder, alpha, ldalpha, out, ldout, dout,
                            lddout, head_width, g, ldg, heads, dropout, partials + blocks * values);
    SLUICE_CUDA_LAUNCH_CHECK();
  };
  if (heads <= 4 && width <= 128)
    launch(gat_input_backward_kernel<Index, 4, 1>, gat_input_backward_long_kernel<Index, 4, 1>);
  else if (heads <= 4)
    launch(gat_input_backward_kernel<Index, 4, 2>, gat_input_backward_long_kernel<Index, 4, 2>);
  else
    launch(gat_input_backward_kernel<Index, 8, 1>, gat_input_backward_long_kernel<Index, 8, 1>);
  gat_input_sums_kernel<<<static_cast<unsigned>((values + 255) / 256), 256, 0, stream>>>(
      partials, slots, values, width, sums, ldsums);
  SLUICE_CUDA_LAUNCH_CHECK();
}

#define SLUICE_GAT_INPUT_INSTANTIATE(Index)                                                    \
  template void launch_gat_input_forward<Index>(                                               \
      const CsrArrays<Index>&, const float*, std::int64_t, std::int64_t, const float*,         \
      std::int64_t, const float*, std::int64_t, int, const AttentionDropout&, float*,          \
      std::int64_t, float*, std::int64_t, cudaStream_t);                                       \
  template void launch_gat_input_backward<Index>(                                              \
      const CsrArrays<Index>&, const float*, std::int64_t, std::int64_t, const float*,         \
      std::int64_t, const float*, std::int64_t, const float*, std::int64_t, const float*,      \
      std::int64_t, const float*, std::int64_t, std::int64_t, const float*, std::int64_t, int, \
      const AttentionDropout&, float*, float*, std::int64_t, cudaStream_t);
SLUICE_GAT_INPUT_INSTANTIATE(std::int32_t)
SLUICE_GAT_INPUT_INSTANTIATE(std::int64_t)
#undef SLUICE_GAT_INPUT_INSTANTIATE

}  // namespace sluice::cuda
