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

// Sums v[j] over the warp for all 32 j at once: each step a lane keeps half its values, adds the
// partner's copy of them, and sends the other half. Lane l ends with the sum of v[l] in v[0].
__device__ __forceinline__ void transpose_sum(float (&v)[32], int lane) {
#pragma unroll
  for (int half = 16; half > 0; half /= 2) {
    const bool upper = (lane & half) != 0;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const float send = upper ? v[j] : v[j + half];
      const float keep = upper ? v[j + half] : v[j];
      v[j] = keep + __shfl_xor_sync(kFullMask, send, half);
    }
  }
}

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
    for (std::int64_t chunk = 0; chunk < degree; chunk += 32) {
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
      for (int j = 0; j < count; ++j) {
        const std::int64_t u = __shfl_sync(kFullMask, u_mine, j);
        float v[4 * kQuads];
        load_words<kQuads>(v, x + u * ldx, lane, width);
        float w[kHeads];
        load_heads<kHeads>(w, coef + j * kHeads);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h >= heads) break;
#pragma unroll
          for (int t = 0; t < 4 * kQuads; ++t) acc[h][t] += w[h] * v[t];
        }
      }
      __syncwarp();
    }
    float* row = agg + i * ldagg;
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h >= heads) break;
#pragma unroll
      for (int t = 0; t < 4 * kQuads; ++t) {
        const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
        if (c < width) row[h * width + c] = acc[h][t];
      }
    }
    __syncwarp();
  }
}

constexpr int kBackwardWarps = 2;  // per block; kGatInputWarps warps in all

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
  constexpr int kEntries = 32 / kHeads;
  // Per warp: the score gradients of one step's entries, entry-major.
  __shared__ __align__(16) float shared[kBackwardWarps * 32];
  const int lane = lane_id();
  float* step_ds = shared + (threadIdx.x / 32) * 32;
  const int my_entry = lane / kHeads, my_head = lane % kHeads;
  float source_sums[kHeads][4 * kQuads] = {}, row_sums[kHeads][4 * kQuads] = {};
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree == 0) continue;
    const std::uint64_t prefix = attention_prefix(dropout, i);
    // The softmax backward's per-head sums dO_i^h . O_i^h; the lane's head's.
    float my_sum = 0.f;
    for (int h = 0; h < heads; ++h) {
      float s = 0.f;
      for (std::int64_t f = lane; f < head_width; f += 32)
        s += dout[i * lddout + h * head_width + f] * out[i * ldout + h * head_width + f];
      s = warp_sum(s);
      if (h == my_head) my_sum = s;
    }
    float gi[kHeads][4 * kQuads];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < heads) {
        load_columns<kQuads>(gi[h], g + i * ldg + h * width, lane, width);
      } else {
#pragma unroll
        for (int t = 0; t < 4 * kQuads; ++t) gi[h][t] = 0.f;
      }
    }
    const float my_er = my_head < heads ? er[i * lder + my_head] : 0.f;
    float my_row_sum = 0.f;  // sum of the lane's entries' ds for its head
    for (std::int64_t first = 0; first < degree; first += kEntries) {
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
          for (int t = 0; t < 4 * kQuads; ++t) s += gi[h][t] * xv[e][t];
          part[e * kHeads + h] = s;
        }
      }
      transpose_sum(part, lane);
      float ds = 0.f;
      const std::int64_t k = first + my_entry;
      if (k < degree && my_head < heads) {
        const std::int64_t u = a.columns[begin + k];
        const float d_e = alpha[(begin + k) * ldalpha + my_head] *
                          (attention_scale(dropout, prefix, k, my_head) * part[0] - my_sum);
        ds = el[u * ldel + my_head] + my_er > 0.f ? d_e : kLeakySlope * d_e;
      }
      my_row_sum += ds;
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
    // The row's destination score gradients: the lanes of each head summed, then to every lane.
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
  float* mine = partials + global_warp() * 2 * heads * width;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h >= heads) break;
#pragma unroll
    for (int t = 0; t < 4 * kQuads; ++t) {
      const std::int64_t c = 128 * (t / 4) + 4 * lane + t % 4;
      if (c >= width) continue;
      mine[h * width + c] = source_sums[h][t];
      mine[(heads + h) * width + c] = row_sums[h][t];
    }
  }
}

// sums[j / width, j % width] = sum over warps w (in order) of partials[w * values + j].
__global__ void gat_input_sums_kernel(const float* __restrict__ partials, std::int64_t values,
                                      std::int64_t width, float* __restrict__ sums,
                                      std::int64_t ldsums) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= values) return;
  float total = 0.f;
  for (std::int64_t w = 0; w < kGatInputWarps; ++w) total += partials[w * values + j];
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
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, kRowThreads, 0, stream>>>(a, x, ldx, width, el, ldel, er, lder, heads,
                                               dropout, alpha, ldalpha, agg, ldagg);
  };
  if (heads <= 4 && width <= 128)
    launch(gat_input_forward_kernel<Index, 4, 1>);
  else if (heads <= 4)
    launch(gat_input_forward_kernel<Index, 4, 2>);
  else
    launch(gat_input_forward_kernel<Index, 8, 1>);
  SLUICE_CUDA_LAUNCH_CHECK();
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
  const unsigned blocks = static_cast<unsigned>(kGatInputWarps / kBackwardWarps);
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, 32 * kBackwardWarps, 0, stream>>>(
        a, x, ldx, width, el, ldel, er, lder, alpha, ldalpha, out, ldout, dout, lddout, head_width,
        g, ldg, heads, dropout, partials);
  };
  if (heads <= 4 && width <= 128)
    launch(gat_input_backward_kernel<Index, 4, 1>);
  else if (heads <= 4)
    launch(gat_input_backward_kernel<Index, 4, 2>);
  else
    launch(gat_input_backward_kernel<Index, 8, 1>);
  SLUICE_CUDA_LAUNCH_CHECK();
  const std::int64_t values = 2 * heads * width;
  gat_input_sums_kernel<<<static_cast<unsigned>((values + 255) / 256), 256, 0, stream>>>(
      partials, values, width, sums, ldsums);
  SLUICE_CUDA_LAUNCH_CHECK();
}

#define SLUICE_GAT_INPUT_INSTANTIATE(Index)                                                      \
  template void launch_gat_input_forward<Index>(                                                 \
      const CsrArrays<Index>&, const float*, std::int64_t, std::int64_t, const float*,           \
      std::int64_t, const float*, std::int64_t, int, const AttentionDropout&, float*,            \
      std::int64_t, float*, std::int64_t, cudaStream_t);                                         \
  template void launch_gat_input_backward<Index>(                                                \
      const CsrArrays<Index>&, const float*, std::int64_t, std::int64_t, const float*,           \
      std::int64_t, const float*, std::int64_t, const float*, std::int64_t, const float*,        \
      std::int64_t, const float*, std::int64_t, std::int64_t, const float*, std::int64_t, int,   \
      const AttentionDropout&, float*, float*, std::int64_t, cudaStream_t);
SLUICE_GAT_INPUT_INSTANTIATE(std::int32_t)
SLUICE_GAT_INPUT_INSTANTIATE(std::int64_t)
#undef SLUICE_GAT_INPUT_INSTANTIATE

}  // namespace sluice::cuda
