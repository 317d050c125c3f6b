// GAT edge operators (see gat.hpp). Destination rows are processed one warp each; the
// aggregation handles a row's entries 32 at a time, one lane computing one entry's coefficients
// (all heads) into shared memory, then all lanes accumulating columns of the weighted sum. Rows
// longer than LongRows::degree get a block of warps instead: a short-row kernel and its long-row
// version share their per-chunk loops (the device helpers below) and differ only in which chunks
// a warp takes and in how the warps' partial results are combined.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "common/hash.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/gat_device.cuh"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

using detail::aligned16;
using detail::global_warp;
using detail::lane_id;
using detail::rows_aligned16;
using detail::warp_count;
using gat_detail::attention_coefficient;
using gat_detail::attention_prefix;
using gat_detail::attention_scale;
using gat_detail::kLeakySlope;
using gat_detail::kLongThreads;
using gat_detail::kLongWarps;
using gat_detail::long_blocks;
using gat_detail::merge_softmax_stats;
using gat_detail::row_softmax_stats;
using gat_detail::softmax_stats_entries;
using gat_detail::stage_entry_coefficients;
using gat_detail::sum_over_warps;

// The warp-per-row aggregations (forward, and the backward by source) run on row-local grids
// (launch.cuh).
using detail::kRowThreads;
using detail::kRowWarps;
using detail::row_blocks;
constexpr int kMaxHeads = 32;  // keeps the per-block shared memory under 48 KiB

// Columns a lane holds in the warp-per-row kernels, for a row of `total_cols` floats (every
// head): 2 up to 64, 4 up to 128, else 8.
int columns_per_lane(std::int64_t total_cols) {
  return total_cols <= 64 ? 2 : total_cols <= 128 ? 4 : 8;
}

// Calls launch(PerLane, Vec4) with std::integral_constant<int, columns_per_lane(total_cols)> and
// std::bool_constant<vec4> (16-byte words; never with 2 columns a lane), so that a launcher names
// the kernel instantiation once: launch_by_lanes(cols, vec4, [&](auto lanes, auto words) {
// kernel<Index, lanes.value, words.value><<<...>>>(...); }).
template <typename Launch>
void launch_by_lanes(std::int64_t total_cols, bool vec4, Launch&& launch) {
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  using Eight = std::integral_constant<int, 8>;
  switch (columns_per_lane(total_cols)) {
    case 2:
      launch(Two{}, std::false_type{});
      break;
    case 4:
      vec4 ? launch(Four{}, std::true_type{}) : launch(Four{}, std::false_type{});
      break;
    default:
      vec4 ? launch(Eight{}, std::true_type{}) : launch(Eight{}, std::false_type{});
      break;
  }
}

// The head dot products of one row of Z (zr) with one or two attention vectors (att_b null: one),
// written by the lane that ends with each sum into out_a[h] (and out_b[h]). Each vector's sums
// are the same bits whether or not the other is computed beside it. kQuads: 16-byte words of
// 4 columns a lane, 128 columns a step, a head (width a divisor of 128 and a multiple of 4) being
// an aligned group of width / 4 lanes summed over that group alone; else a lane per column and
// a warp sum per head.
template <bool kQuads>
__device__ __forceinline__ void row_scores(const float* zr, int heads, int width,
                                           const float* att_a, float* out_a, const float* att_b,
                                           float* out_b, int lane) {
  if constexpr (kQuads) {
    const int total = heads * width, group = width / 4;
    for (int c0 = 0; c0 < total; c0 += 128) {
      const int c = c0 + 4 * lane;
      float sa = 0.f, sb = 0.f;
      if (c < total) {
        const float4 v = *reinterpret_cast<const float4*>(zr + c);
        const float4 a = *reinterpret_cast<const float4*>(att_a + c);
        sa = v.x * a.x + v.y * a.y + v.z * a.z + v.w * a.w;
        if (att_b != nullptr) {
          const float4 b = *reinterpret_cast<const float4*>(att_b + c);
          sb = v.x * b.x + v.y * b.y + v.z * b.z + v.w * b.w;
        }
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        if (offset >= group) continue;
        sa += __shfl_xor_sync(0xffffffffu, sa, offset);
        sb += __shfl_xor_sync(0xffffffffu, sb, offset);
      }
      if (c < total && lane % group == 0) {
        out_a[c / width] = sa;
        if (att_b != nullptr) out_b[c / width] = sb;
      }
    }
  } else {
    for (int h = 0; h < heads; ++h) {
      float sa = 0.f, sb = 0.f;
      for (int f = lane; f < width; f += 32) {
        const float v = zr[h * width + f];
        sa += v * att_a[h * width + f];
        if (att_b != nullptr) sb += v * att_b[h * width + f];
      }
      sa = detail::warp_sum(sa);
      sb = detail::warp_sum(sb);
      if (lane == 0) {
        out_a[h] = sa;
        if (att_b != nullptr) out_b[h] = sb;
      }
    }
  }
}

// Scores of rows i (Z row row_map[i], or i) with att_a into score_a (and att_b into score_b),
// a warp per row; the output row is i, or the Z row when map_output. A row mapped to -1 (an
// empty row, no self entry) scores 0.
template <bool kQuads>
__global__ void gat_scores_kernel(const float* __restrict__ z, std::int64_t ldz,
                                  const vertex_t* __restrict__ row_map, std::int64_t rows,
                                  int heads, int width, const float* __restrict__ att_a,
                                  float* __restrict__ score_a, std::int64_t ld_a,
                                  const float* __restrict__ att_b, float* __restrict__ score_b,
                                  std::int64_t ld_b, bool map_output) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < rows; i += warp_count()) {
    const std::int64_t source = row_map ? row_map[i] : i;
    const std::int64_t r = map_output ? source : i;
    if (source < 0) {
      for (int h = lane; h < heads; h += 32) {
        score_a[r * ld_a + h] = 0.f;
        if (att_b != nullptr) score_b[r * ld_b + h] = 0.f;
      }
      continue;
    }
    row_scores<kQuads>(z + source * ldz, heads, width, att_a, score_a + r * ld_a, att_b,
                       att_b != nullptr ? score_b + r * ld_b : nullptr, lane);
  }
}

// One head's scores over rows of at most 64 floats in 16-byte words (launch_scores_kernel): 8
// lanes a row, four rows a warp; lane s of a row's group takes words s and s + 8, the group sums
// by xor shuffles. The attention vectors sit in registers for the whole kernel, read a float at a
// time (they need not be aligned).
__global__ void gat_narrow_scores_kernel(const float* __restrict__ z, std::int64_t ldz,
                                         const vertex_t* __restrict__ row_map, std::int64_t rows,
                                         int width, const float* __restrict__ att_a,
                                         float* __restrict__ score_a, std::int64_t ld_a,
                                         const float* __restrict__ att_b,
                                         float* __restrict__ score_b, std::int64_t ld_b,
                                         bool map_output) {
  const int lane = lane_id(), sub = lane & 7;
  float a[8], b[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int c = 4 * (sub + 8 * (k / 4)) + k % 4;
    a[k] = c < width ? att_a[c] : 0.f;
    b[k] = c < width && att_b != nullptr ? att_b[c] : 0.f;
  }
  for (std::int64_t first = global_warp() * 4; first < rows; first += warp_count() * 4) {
    const std::int64_t i = first + (lane >> 3);
    const std::int64_t source = i < rows ? (row_map ? row_map[i] : i) : -1;
    float sa = 0.f, sb = 0.f;
    if (source >= 0) {
      const float* zr = z + source * ldz;
#pragma unroll
      for (int word = 0; word < 2; ++word) {
        const int c = 4 * (sub + 8 * word);
        if (c >= width) continue;
        const float4 v = *reinterpret_cast<const float4*>(zr + c);
        // Columns past the width may hold anything: only theirs are left out.
        const float x[4] = {v.x, c + 1 < width ? v.y : 0.f, c + 2 < width ? v.z : 0.f,
                            c + 3 < width ? v.w : 0.f};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          sa = __fmaf_rn(x[k], a[4 * word + k], sa);
          sb = __fmaf_rn(x[k], b[4 * word + k], sb);
        }
      }
    }
#pragma unroll
    for (int offset = 4; offset > 0; offset /= 2) {
      sa += __shfl_xor_sync(0xffffffffu, sa, offset);
      sb += __shfl_xor_sync(0xffffffffu, sb, offset);
    }
    if (sub == 0 && i < rows) {
      const std::int64_t r = map_output ? source : i;
      if (r >= 0) {
        score_a[r * ld_a] = sa;
        if (att_b != nullptr) score_b[r * ld_b] = sb;
      }
    }
  }
}

// out[i * ldout + h] = scores[row_map[i] * heads + h] (0 where row_map[i] < 0), a thread per value.
__global__ void gat_gather_scores_kernel(const float* __restrict__ scores, int heads,
                                         const vertex_t* __restrict__ row_map, std::int64_t rows,
                                         float* __restrict__ out, std::int64_t ldout) {
  const std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (x >= rows * heads) return;
  const std::int64_t i = x / heads, h = x % heads;
  const std::int64_t source = row_map[i];
  out[i * ldout + h] = source < 0 ? 0.f : scores[source * heads + h];
}

// acc[0..3] += w * x[0..3], x read as one 16-byte word (the kVec4 kernels' inner step).
__device__ __forceinline__ void add_scaled4(float* acc, float w, const float* x) {
  const float4 v = *reinterpret_cast<const float4*>(x);
  acc[0] += w * v.x;
  acc[1] += w * v.y;
  acc[2] += w * v.z;
  acc[3] += w * v.w;
}

// ---- Column passes. A warp accumulates one row of its output 32 * kColumnsPerLane columns at a
// time: lane `lane` holds columns column_base + lane + 32 t (t < kColumnsPerLane). kVec4: it
// holds them as float4 words instead (columns column_base + 128 g + 4 lane .. + 3, t = 4 g ..
// 4 g + 3), for rows 16-byte aligned and heads a multiple of 4 wide; the same sums in the same
// order, in a quarter of the load instructions.

// Starts a pass: zero accumulators and the head of each of the lane's columns.
template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void start_column_pass(float (&acc)[kColumnsPerLane],
                                                  int (&head_of)[kColumnsPerLane],
                                                  std::int64_t column_base, int lane,
                                                  std::int64_t width, std::int64_t total_cols) {
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) {
    acc[t] = 0.f;
    const std::int64_t c =
        kVec4 ? column_base + 128 * (t / 4) + 4 * lane + t % 4 : column_base + lane + 32 * t;
    head_of[t] = c < total_cols ? static_cast<int>(c / width) : 0;
  }
}

// acc += weights[head of the column] * row[column] over the lane's columns of the pass.
template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void accumulate_row(float (&acc)[kColumnsPerLane],
                                               const int (&head_of)[kColumnsPerLane],
                                               const float* weights, const float* row,
                                               std::int64_t column_base, int lane,
                                               std::int64_t total_cols) {
  if constexpr (kVec4) {
#pragma unroll
    for (int g = 0; g < kColumnsPerLane / 4; ++g) {
      const std::int64_t c = column_base + 128 * g + 4 * lane;
      if (c >= total_cols) continue;
      add_scaled4(acc + 4 * g, weights[head_of[4 * g]], row + c);
    }
  } else {
#pragma unroll
    for (int t = 0; t < kColumnsPerLane; ++t) {
      const std::int64_t c = column_base + lane + 32 * t;
      if (c < total_cols) acc[t] += weights[head_of[t]] * row[c];
    }
  }
}

// The column a lane holds in slot t of a pass from column 0, in either layout above.
template <bool kVec4>
__device__ __forceinline__ int lane_column(int lane, int t) {
  return kVec4 ? 128 * (t / 4) + 4 * lane + t % 4 : lane + 32 * t;
}

// row[c] for the lane's columns c of the pass from column_base (0 beyond total_cols).
template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void load_lane_columns(float (&v)[kColumnsPerLane], const float* row,
                                                  std::int64_t column_base, int lane,
                                                  std::int64_t total_cols) {
  if constexpr (kVec4) {
#pragma unroll
    for (int g = 0; g < kColumnsPerLane / 4; ++g) {
      const std::int64_t c = column_base + 128 * g + 4 * lane;
      const float4 x = c < total_cols ? *reinterpret_cast<const float4*>(row + c)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
      v[4 * g] = x.x;
      v[4 * g + 1] = x.y;
      v[4 * g + 2] = x.z;
      v[4 * g + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int t = 0; t < kColumnsPerLane; ++t) {
      const std::int64_t c = column_base + lane + 32 * t;
      v[t] = c < total_cols ? row[c] : 0.f;
    }
  }
}

// How a finished pass reaches the output row: stored, or added to what it holds.
enum class PassWrite { kStore, kAdd };

// Writes the lane's accumulators of a pass into row[column_base ..] (one warp per row).
template <int kColumnsPerLane, bool kVec4, PassWrite kWrite>
__device__ __forceinline__ void write_column_pass(const float (&acc)[kColumnsPerLane], float* row,
                                                  std::int64_t column_base, int lane,
                                                  std::int64_t total_cols) {
  if constexpr (kVec4) {
#pragma unroll
    for (int g = 0; g < kColumnsPerLane / 4; ++g) {
      const std::int64_t c = column_base + 128 * g + 4 * lane;
      if (c >= total_cols) continue;
      float4* target = reinterpret_cast<float4*>(row + c);
      if constexpr (kWrite == PassWrite::kAdd) {
        float4 y = *target;
        y.x += acc[4 * g];
        y.y += acc[4 * g + 1];
        y.z += acc[4 * g + 2];
        y.w += acc[4 * g + 3];
        *target = y;
      } else {
        *target = make_float4(acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3]);
      }
    }
  } else {
#pragma unroll
    for (int t = 0; t < kColumnsPerLane; ++t) {
      const std::int64_t c = column_base + lane + 32 * t;
      if (c >= total_cols) continue;
      if constexpr (kWrite == PassWrite::kAdd) {
        row[c] += acc[t];
      } else {
        row[c] = acc[t];
      }
    }
  }
}

// ---- Long rows: one block of kLongWarps warps per row (gat_device.cuh).
constexpr std::size_t kMaxLongShared = 48 * 1024;  // the default dynamic shared memory limit

// Ends a pass of a long row: the warps' accumulators (scalar layout) summed per column in warp
// order through `partial` (kLongWarps * 32 * kColumnsPerLane floats of shared memory) and
// written into row[column_base ..]. Called by the whole block.
template <int kColumnsPerLane, PassWrite kWrite>
__device__ __forceinline__ void write_long_column_pass(const float (&acc)[kColumnsPerLane],
                                                       float* partial, float* row,
                                                       std::int64_t column_base, int warp, int lane,
                                                       std::int64_t total_cols) {
  constexpr int kSpan = 32 * kColumnsPerLane;
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) partial[warp * kSpan + lane + 32 * t] = acc[t];
  __syncthreads();
  for (int c = static_cast<int>(threadIdx.x); c < kSpan; c += kLongThreads) {
    const std::int64_t column = column_base + c;
    if (column >= total_cols) continue;
    const float sum = sum_over_warps(partial + c, kSpan);
    if constexpr (kWrite == PassWrite::kAdd) {
      row[column] += sum;
    } else {
      row[column] = sum;
    }
  }
  __syncthreads();
}

// ---- Forward: attention coefficients and the weighted sum.

// What the forward kernels write: alpha and the weighted sums (gat_forward), or alpha alone
// (gat_coefficients), with the same coefficients bit for bit.
enum class Aggregate { kWeightedSums, kCoefficientsOnly };

// One column pass of row i over its 32-entry chunks first_chunk, first_chunk + step, ...: per
// chunk, lane j computes the coefficients of the chunk's j-th entry for every head (softmax
// with the row's head_max / head_inv, then attention dropout) into coef[j * K + h], storing
// alpha on the first pass; then every lane adds the chunk's entries to its columns.
template <typename Index, int kColumnsPerLane, bool kVec4, Aggregate kWhat>
__device__ __forceinline__ void aggregate_chunks(
    const CsrArrays<Index>& a, std::int64_t i, std::int64_t begin, std::int64_t degree,
    std::int64_t first_chunk, std::int64_t step, const float* z, std::int64_t ldz, const float* el,
    std::int64_t ldel, const float* er, std::int64_t lder, int heads,
    const AttentionDropout& dropout, std::uint64_t prefix, const float* head_max,
    const float* head_inv, float* coef, float* alpha, std::int64_t ldalpha,
    std::int64_t column_base, std::int64_t total_cols, int lane, float (&acc)[kColumnsPerLane],
    const int (&head_of)[kColumnsPerLane]) {
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    const std::int64_t k = chunk + lane;
    std::int64_t u_mine = 0;
    if (k < degree)
      u_mine = stage_entry_coefficients<kWhat == Aggregate::kWeightedSums>(
          a, i, begin, k, el, ldel, er, lder, heads, dropout, prefix, head_max, head_inv,
          column_base == 0, alpha, ldalpha, coef + lane * heads);
    if constexpr (kWhat == Aggregate::kCoefficientsOnly) continue;
    __syncwarp();
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    int j = 0;
    // Two source rows in flight, added in entry order (the same sums as one at a time).
    for (; j + 1 < count; j += 2) {
      const std::int64_t u0 = __shfl_sync(0xffffffffu, u_mine, j);
      const std::int64_t u1 = __shfl_sync(0xffffffffu, u_mine, j + 1);
      float v0[kColumnsPerLane], v1[kColumnsPerLane];
      load_lane_columns<kColumnsPerLane, kVec4>(v0, z + u0 * ldz, column_base, lane, total_cols);
      load_lane_columns<kColumnsPerLane, kVec4>(v1, z + u1 * ldz, column_base, lane, total_cols);
#pragma unroll
      for (int t = 0; t < kColumnsPerLane; ++t) acc[t] += coef[j * heads + head_of[t]] * v0[t];
#pragma unroll
      for (int t = 0; t < kColumnsPerLane; ++t)
        acc[t] += coef[(j + 1) * heads + head_of[t]] * v1[t];
    }
    if (j < count) {
      const std::int64_t u = __shfl_sync(0xffffffffu, u_mine, j);
      accumulate_row<kColumnsPerLane, kVec4>(acc, head_of, coef + j * heads, z + u * ldz,
                                             column_base, lane, total_cols);
    }
    __syncwarp();
  }
}

// One warp per row (rows up to a.long_rows.degree entries).
template <typename Index, int kColumnsPerLane, bool kVec4, Aggregate kWhat>
__global__ void __launch_bounds__(kRowThreads)
    gat_aggregate_kernel(CsrArrays<Index> a, const float* __restrict__ z, std::int64_t ldz,
                         const float* __restrict__ el, std::int64_t ldel,
                         const float* __restrict__ er, std::int64_t lder, int heads,
                         std::int64_t width, AttentionDropout dropout, float* __restrict__ alpha,
                         std::int64_t ldalpha, float* __restrict__ out, std::int64_t ldout) {
  extern __shared__ float shared[];
  const int lane = lane_id();
  // Per warp: coefficients of 32 entries x heads, then the per-head max and 1/sum.
  float* coef = shared + (threadIdx.x / 32) * (34 * heads);
  float* head_max = coef + 32 * heads;
  float* head_inv = head_max + heads;
  const std::int64_t total_cols = heads * width;

  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // gat_aggregate_long_kernel's row
    const std::uint64_t prefix = attention_prefix(dropout, i);
    // Online softmax statistics per head.
    row_softmax_stats(a.columns, i, begin, degree, el, ldel, er, lder, heads, head_max, head_inv);
    __syncwarp();

    for (std::int64_t column_base = 0; column_base < total_cols;
         column_base += 32 * kColumnsPerLane) {
      float acc[kColumnsPerLane];
      int head_of[kColumnsPerLane];
      start_column_pass<kColumnsPerLane, kVec4>(acc, head_of, column_base, lane, width, total_cols);
      aggregate_chunks<Index, kColumnsPerLane, kVec4, kWhat>(
          a, i, begin, degree, 0, 32, z, ldz, el, ldel, er, lder, heads, dropout, prefix, head_max,
          head_inv, coef, alpha, ldalpha, column_base, total_cols, lane, acc, head_of);
      if constexpr (kWhat == Aggregate::kCoefficientsOnly) break;  // alpha is written
      write_column_pass<kColumnsPerLane, kVec4, PassWrite::kStore>(acc, out + i * ldout,
                                                                   column_base, lane, total_cols);
    }
    __syncwarp();
  }
}

std::size_t aggregate_long_shared(int heads, int per_lane) {
  return sizeof(float) * (static_cast<std::size_t>(kLongWarps) * 32 * heads +
                          2 * static_cast<std::size_t>(kLongWarps) * heads + 2 * heads +
                          static_cast<std::size_t>(kLongWarps) * 32 * per_lane);
}

// One block per long row (a.long_rows); shared memory: aggregate_long_shared().
template <typename Index, int kColumnsPerLane, Aggregate kWhat>
__global__ void __launch_bounds__(kLongThreads)
    gat_aggregate_long_kernel(CsrArrays<Index> a, const float* __restrict__ z, std::int64_t ldz,
                              const float* __restrict__ el, std::int64_t ldel,
                              const float* __restrict__ er, std::int64_t lder, int heads,
                              std::int64_t width, AttentionDropout dropout,
                              float* __restrict__ alpha, std::int64_t ldalpha,
                              float* __restrict__ out, std::int64_t ldout) {
  extern __shared__ float shared[];
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  float* coef = shared + warp * 32 * heads;          // per warp: 32 entries x heads
  float* part_m = shared + kLongWarps * 32 * heads;  // [warp][head]
  float* part_s = part_m + kLongWarps * heads;       // [warp][head]
  float* head_max = part_s + kLongWarps * heads;     // [head]
  float* head_inv = head_max + heads;                // [head]
  float* partial = head_inv + heads;                 // [warp][32 * kColumnsPerLane]
  const std::int64_t total_cols = heads * width;
  const std::int64_t step = 32 * kLongWarps;
  for (std::int64_t r = blockIdx.x; r < a.long_rows.count; r += gridDim.x) {
    const std::int64_t i = a.long_rows.rows[r];
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    const std::uint64_t prefix = attention_prefix(dropout, i);
    for (int h = 0; h < heads; ++h) {
      float m, s;
      softmax_stats_entries(a.columns, begin, degree, warp * 32, step, el, ldel, h,
                            er[i * lder + h], m, s);
      if (lane == 0) {
        part_m[warp * heads + h] = m;
        part_s[warp * heads + h] = s;
      }
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < heads) {
      const int h = static_cast<int>(threadIdx.x);
      float m = -FLT_MAX, s = 0.f;
      for (int w = 0; w < kLongWarps; ++w)
        merge_softmax_stats(m, s, part_m[w * heads + h], part_s[w * heads + h]);
      head_max[h] = m;
      head_inv[h] = s > 0.f ? 1.f / s : 0.f;
    }
    __syncthreads();
    for (std::int64_t column_base = 0; column_base < total_cols;
         column_base += 32 * kColumnsPerLane) {
      float acc[kColumnsPerLane];
      int head_of[kColumnsPerLane];
      start_column_pass<kColumnsPerLane, false>(acc, head_of, column_base, lane, width, total_cols);
      aggregate_chunks<Index, kColumnsPerLane, false, kWhat>(
          a, i, begin, degree, warp * 32, step, z, ldz, el, ldel, er, lder, heads, dropout, prefix,
          head_max, head_inv, coef, alpha, ldalpha, column_base, total_cols, lane, acc, head_of);
      if constexpr (kWhat == Aggregate::kCoefficientsOnly) break;  // alpha is written
      write_long_column_pass<kColumnsPerLane, PassWrite::kStore>(
          acc, partial, out + i * ldout, column_base, warp, lane, total_cols);
    }
  }
}

// ---- Backward: attention coefficients.

// Backward through attention dropout of entry e (the k-th of row i), head h, given
// dot = dO_i^h . Z_u^h = d(alpha~): stores d(alpha) = dot * mask and alpha~ = alpha * mask
// (entry-major, atilde[e * K + h]) and returns the entry's term alpha * d(alpha) of
// S_h = sum_k alpha_k d(alpha)_k. Shared by every backward kernel.
__device__ __forceinline__ float dropout_backward_entry(const AttentionDropout& dropout,
                                                        std::uint64_t prefix, std::int64_t k, int h,
                                                        std::int64_t e, float dot,
                                                        const float* __restrict__ alpha,
                                                        std::int64_t ldalpha, int heads,
                                                        float* dalpha, float* atilde) {
  const float mask = attention_scale(dropout, prefix, k, h);
  const float a_eh = alpha[e * ldalpha + h];
  const float d = dot * mask;
  dalpha[e * heads + h] = d;
  atilde[e * heads + h] = a_eh * mask;
  return a_eh * d;
}

// dO_i^h . Z_u^h over one head's F columns (a: dO_i^h, b: Z_u^h), in column order; with 16-byte
// loads when both rows allow them (vec4: F, both leading dimensions and both bases multiples of
// 4 floats).
__device__ __forceinline__ float head_dot(const float* __restrict__ a, const float* __restrict__ b,
                                          std::int64_t width, bool vec4) {
  float dot = 0.f;
  if (vec4) {
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    for (std::int64_t f = 0; f < width / 4; ++f) {
      const float4 x = a4[f], y = b4[f];
      dot += x.x * y.x;
      dot += x.y * y.y;
      dot += x.z * y.z;
      dot += x.w * y.w;
    }
  } else {
    for (std::int64_t f = 0; f < width; ++f) dot += a[f] * b[f];
  }
  return dot;
}

// The warp-cooperative kernels (F a power of two <= 32) keep a row's dO_i in registers, column
// c = lane + 32 t in slot t; lane c % F == 0 holds head c / F's per-entry dot product and
// coefficient sums (-1: this (lane, slot) holds none).
__device__ __forceinline__ int coop_head_of(int lane, int t, int width, int total_cols) {
  const int c = lane + 32 * t;
  return c < total_cols && (lane & (width - 1)) == 0 ? c / width : -1;
}

// One entry (row i, its k-th, CSR entry e, source row zu) of the warp-cooperative attention
// backward: the K dot products dO_i^h . Z_u^h by the whole warp (coalesced row reads), reduced
// over each head's F lanes; the holding lane (coop_head_of) writes the entry's coefficients and
// adds alpha * d(alpha) into weighted[slot].
template <int kColumnsPerLane>
__device__ __forceinline__ void coop_backward_entry(
    const float (&dv)[kColumnsPerLane], const float* __restrict__ zu, int lane, int width,
    int total_cols, const AttentionDropout& dropout, std::uint64_t prefix, std::int64_t k,
    std::int64_t e, const float* __restrict__ alpha, std::int64_t ldalpha, int heads, float* dalpha,
    float* atilde, float (&weighted)[kColumnsPerLane]) {
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) {
    const int c = lane + 32 * t;
    float dot = c < total_cols ? dv[t] * zu[c] : 0.f;
    for (int offset = width / 2; offset > 0; offset /= 2)
      dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    const int h = coop_head_of(lane, t, width, total_cols);
    if (h >= 0)
      weighted[t] += dropout_backward_entry(dropout, prefix, k, h, e, dot, alpha, ldalpha, heads,
                                            dalpha, atilde);
  }
}

// Backward through softmax and LeakyReLU of row i, head h, given S_h (`total`), over the row's
// entries first + lane, first + lane + step, ...: per entry
// ds = LeakyReLU'(el_u + er_i) * alpha (d(alpha) - S_h), added to d_el[u]; returns the warp's sum
// of ds (its share of d_er[i]). Called by the whole warp; shared by the backward kernels.
template <typename Index>
__device__ __forceinline__ float softmax_leaky_backward_entries(
    const Index* columns, std::int64_t begin, std::int64_t degree, std::int64_t first,
    std::int64_t step, std::int64_t i, int h, float total, const float* __restrict__ el,
    std::int64_t ldel, const float* __restrict__ er, std::int64_t lder,
    const float* __restrict__ alpha, std::int64_t ldalpha, const float* __restrict__ dalpha,
    int heads, float* d_el) {
  float d_er_sum = 0.f;
  for (std::int64_t k = first + lane_id(); k < degree; k += step) {
    const std::int64_t e = begin + k;
    const std::int64_t u = columns[e];
    const float de = alpha[e * ldalpha + h] * (dalpha[e * heads + h] - total);
    const float pre = el[u * ldel + h] + er[i * lder + h];
    const float ds = pre > 0.f ? de : kLeakySlope * de;
    atomicAdd(d_el + u * heads + h, ds);
    d_er_sum += ds;
  }
  return detail::warp_sum(d_er_sum);
}

// The whole row on one warp: writes d_er[i, h].
template <typename Index>
__device__ __forceinline__ void softmax_leaky_backward_row(
    const Index* columns, std::int64_t begin, std::int64_t degree, std::int64_t i, int h,
    float total, const float* __restrict__ el, std::int64_t ldel, const float* __restrict__ er,
    std::int64_t lder, const float* __restrict__ alpha, std::int64_t ldalpha,
    const float* __restrict__ dalpha, int heads, float* d_el, float* __restrict__ d_er) {
  const float sum =
      softmax_leaky_backward_entries(columns, begin, degree, 0, 32, i, h, total, el, ldel, er, lder,
                                     alpha, ldalpha, dalpha, heads, d_el);
  if (lane_id() == 0) d_er[i * heads + h] = sum;
}

// The lane-per-entry share of S_h = sum_k alpha_k d(alpha)_k over the row's entries first + lane,
// first + lane + step, ...: per entry the dot product dO_i^h . Z_u^h and its backward through
// attention dropout (dropout_backward_entry). Returns the lane's sum.
template <typename Index>
__device__ __forceinline__ float attention_gradient_entries(
    const Index* columns, std::int64_t begin, std::int64_t degree, std::int64_t first,
    std::int64_t step, int h, const float* dout_i, const float* z, std::int64_t ldz,
    std::int64_t width, bool vec4, const AttentionDropout& dropout, std::uint64_t prefix,
    const float* alpha, std::int64_t ldalpha, int heads, float* dalpha, float* atilde) {
  float weighted = 0.f;
  for (std::int64_t k = first + lane_id(); k < degree; k += step) {
    const std::int64_t e = begin + k;
    const float dot =
        head_dot(dout_i + h * width, z + static_cast<std::int64_t>(columns[e]) * ldz + h * width,
                 width, vec4);
    weighted += dropout_backward_entry(dropout, prefix, k, h, e, dot, alpha, ldalpha, heads, dalpha,
                                       atilde);
  }
  return weighted;
}

// The warp-cooperative kernels' row setup: the lane's columns of dO_i in registers (slot t:
// column lane + 32 t), the per-slot sums zeroed.
template <int kColumnsPerLane>
__device__ __forceinline__ void load_coop_row(float (&dv)[kColumnsPerLane],
                                              float (&weighted)[kColumnsPerLane],
                                              const float* dout_i, int lane, int total_cols) {
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) {
    const int c = lane + 32 * t;
    dv[t] = c < total_cols ? dout_i[c] : 0.f;
    weighted[t] = 0.f;
  }
}

// The warp-cooperative backward (coop_backward_entry) over the row's 32-entry chunks
// first_chunk, first_chunk + step, ...
template <typename Index, int kColumnsPerLane>
__device__ __forceinline__ void coop_backward_chunks(
    const Index* columns, std::int64_t begin, std::int64_t degree, std::int64_t first_chunk,
    std::int64_t step, const float (&dv)[kColumnsPerLane], const float* z, std::int64_t ldz,
    int lane, int width, int total_cols, const AttentionDropout& dropout, std::uint64_t prefix,
    const float* alpha, std::int64_t ldalpha, int heads, float* dalpha, float* atilde,
    float (&weighted)[kColumnsPerLane]) {
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    const std::int64_t u_mine = chunk + lane < degree ? columns[begin + chunk + lane] : 0;
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    for (int j = 0; j < count; ++j) {
      const std::int64_t u = __shfl_sync(0xffffffffu, u_mine, j);
      coop_backward_entry(dv, z + u * ldz, lane, width, total_cols, dropout, prefix, chunk + j,
                          begin + chunk + j, alpha, ldalpha, heads, dalpha, atilde, weighted);
    }
  }
}

// head_sums[h] = the warp's S_h, from the slots that hold a head's sum (coop_head_of).
template <int kColumnsPerLane>
__device__ __forceinline__ void store_coop_head_sums(const float (&weighted)[kColumnsPerLane],
                                                     float* head_sums, int lane, int width,
                                                     int total_cols) {
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) {
    const int h = coop_head_of(lane, t, width, total_cols);
    if (h >= 0) head_sums[h] = weighted[t];
  }
}

// Lane per entry, one warp per row (rows up to a.long_rows.degree entries).
template <typename Index>
__global__ void gat_backward_edges_kernel(CsrArrays<Index> a, const float* __restrict__ z,
                                          std::int64_t ldz, const float* __restrict__ el,
                                          std::int64_t ldel, const float* __restrict__ er,
                                          std::int64_t lder, const float* __restrict__ alpha,
                                          std::int64_t ldalpha, const float* __restrict__ dout,
                                          std::int64_t lddout, int heads, std::int64_t width,
                                          AttentionDropout dropout, float* __restrict__ dalpha,
                                          float* __restrict__ atilde, bool vec4, float* d_el,
                                          float* __restrict__ d_er) {
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // the long-row kernel's row
    const std::uint64_t prefix = attention_prefix(dropout, i);
    const float* dout_i = dout + i * lddout;
    for (int h = 0; h < heads; ++h) {
      // d(alpha) = d(alpha~) * mask; S = sum_k alpha_k d(alpha)_k.
      const float total = detail::warp_sum(
          attention_gradient_entries(a.columns, begin, degree, 0, 32, h, dout_i, z, ldz, width,
                                     vec4, dropout, prefix, alpha, ldalpha, heads, dalpha, atilde));
      softmax_leaky_backward_row(a.columns, begin, degree, i, h, total, el, ldel, er, lder, alpha,
                                 ldalpha, dalpha, heads, d_el, d_er);
    }
  }
}

// Backward of the attention coefficients when F is a power of two <= 32 and K*F <= 256: each
// entry's K dot products dO_v^h . Z_u^h are computed by the whole warp (lanes over columns,
// coalesced row reads; coop_backward_entry). Wider heads take the lane-per-entry kernels with
// 16-byte reads (a warp per entry was 3x slower at F = 64: each entry then waits on a 5-step
// shuffle reduction per 32 columns).
template <typename Index, int kColumnsPerLane>
__global__ void gat_backward_edges_coop_kernel(
    CsrArrays<Index> a, const float* __restrict__ z, std::int64_t ldz, const float* __restrict__ el,
    std::int64_t ldel, const float* __restrict__ er, std::int64_t lder,
    const float* __restrict__ alpha, std::int64_t ldalpha, const float* __restrict__ dout,
    std::int64_t lddout, int heads, int width, AttentionDropout dropout, float* __restrict__ dalpha,
    float* __restrict__ atilde, float* d_el, float* __restrict__ d_er) {
  extern __shared__ float shared[];
  float* head_total = shared + (threadIdx.x / 32) * heads;  // per warp: S_h
  const int lane = lane_id();
  const int total_cols = heads * width;
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // the long-row kernel's row
    const std::uint64_t prefix = attention_prefix(dropout, i);
    float dv[kColumnsPerLane], weighted[kColumnsPerLane];
    load_coop_row(dv, weighted, dout + i * lddout, lane, total_cols);
    coop_backward_chunks(a.columns, begin, degree, 0, 32, dv, z, ldz, lane, width, total_cols,
                         dropout, prefix, alpha, ldalpha, heads, dalpha, atilde, weighted);
    store_coop_head_sums(weighted, head_total, lane, width, total_cols);
    __syncwarp();
    for (int h = 0; h < heads; ++h) {
      const float total = head_total[h];
      softmax_leaky_backward_row(a.columns, begin, degree, i, h, total, el, ldel, er, lder, alpha,
                                 ldalpha, dalpha, heads, d_el, d_er);
    }
    __syncwarp();
  }
}

// Long-row version of gat_backward_edges_kernel (lanes over entries).
template <typename Index>
__global__ void __launch_bounds__(kLongThreads)
    gat_backward_edges_long_kernel(CsrArrays<Index> a, const float* __restrict__ z,
                                   std::int64_t ldz, const float* __restrict__ el,
                                   std::int64_t ldel, const float* __restrict__ er,
                                   std::int64_t lder, const float* __restrict__ alpha,
                                   std::int64_t ldalpha, const float* __restrict__ dout,
                                   std::int64_t lddout, int heads, std::int64_t width,
                                   AttentionDropout dropout, float* __restrict__ dalpha,
                                   float* __restrict__ atilde, bool vec4, float* d_el,
                                   float* __restrict__ d_er) {
  __shared__ float part[kLongWarps];
  __shared__ float head_total;
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const std::int64_t step = 32 * kLongWarps;
  for (std::int64_t r = blockIdx.x; r < a.long_rows.count; r += gridDim.x) {
    const std::int64_t i = a.long_rows.rows[r];
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    const std::uint64_t prefix = attention_prefix(dropout, i);
    const float* dout_i = dout + i * lddout;
    for (int h = 0; h < heads; ++h) {
      const float weighted = detail::warp_sum(attention_gradient_entries(
          a.columns, begin, degree, warp * 32, step, h, dout_i, z, ldz, width, vec4, dropout,
          prefix, alpha, ldalpha, heads, dalpha, atilde));
      if (lane == 0) part[warp] = weighted;
      __syncthreads();
      if (threadIdx.x == 0) head_total = sum_over_warps(part, 1);
      __syncthreads();
      const float sum = softmax_leaky_backward_entries(a.columns, begin, degree, warp * 32, step, i,
                                                       h, head_total, el, ldel, er, lder, alpha,
                                                       ldalpha, dalpha, heads, d_el);
      __syncthreads();  // every warp has read head_total
      if (lane == 0) part[warp] = sum;
      __syncthreads();
      if (threadIdx.x == 0) d_er[i * heads + h] = sum_over_warps(part, 1);
      __syncthreads();
    }
  }
}

// Long-row version of gat_backward_edges_coop_kernel. Shared: kLongWarps * heads + heads floats.
template <typename Index, int kColumnsPerLane>
__global__ void __launch_bounds__(kLongThreads) gat_backward_edges_coop_long_kernel(
    CsrArrays<Index> a, const float* __restrict__ z, std::int64_t ldz, const float* __restrict__ el,
    std::int64_t ldel, const float* __restrict__ er, std::int64_t lder,
    const float* __restrict__ alpha, std::int64_t ldalpha, const float* __restrict__ dout,
    std::int64_t lddout, int heads, int width, AttentionDropout dropout, float* __restrict__ dalpha,
    float* __restrict__ atilde, float* d_el, float* __restrict__ d_er) {
  extern __shared__ float shared[];
  float* part = shared;                           // [warp][head]
  float* head_total = part + kLongWarps * heads;  // [head]
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int total_cols = heads * width;
  const std::int64_t step = 32 * kLongWarps;
  for (std::int64_t r = blockIdx.x; r < a.long_rows.count; r += gridDim.x) {
    const std::int64_t i = a.long_rows.rows[r];
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    const std::uint64_t prefix = attention_prefix(dropout, i);
    float dv[kColumnsPerLane], weighted[kColumnsPerLane];
    load_coop_row(dv, weighted, dout + i * lddout, lane, total_cols);
    coop_backward_chunks(a.columns, begin, degree, warp * 32, step, dv, z, ldz, lane, width,
                         total_cols, dropout, prefix, alpha, ldalpha, heads, dalpha, atilde,
                         weighted);
    store_coop_head_sums(weighted, part + warp * heads, lane, width, total_cols);
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < heads)
      head_total[threadIdx.x] = sum_over_warps(part + threadIdx.x, heads);
    __syncthreads();
    for (int h = 0; h < heads; ++h) {
      const float sum = softmax_leaky_backward_entries(a.columns, begin, degree, warp * 32, step, i,
                                                       h, head_total[h], el, ldel, er, lder, alpha,
                                                       ldalpha, dalpha, heads, d_el);
      if (lane == 0) part[warp * heads + h] = sum;
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < heads)
      d_er[i * heads + threadIdx.x] = sum_over_warps(part + threadIdx.x, heads);
    __syncthreads();
  }
}

// ---- Backward: the transposed aggregation dz[u, c] += sum over entries (v -> u) of
// atilde[e, h(c)] * dout[v, c], over the transposed CSR (t_perm maps a transposed entry to its
// original entry e; without t_perm, atilde follows the transposed entry order): deterministic,
// no atomics.

// One column pass of transposed row u over its 32-entry chunks first_chunk, first_chunk + step,
// ...
template <typename Index, int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void transpose_chunks(
    const Index* t_columns, const Index* t_perm, std::int64_t begin, std::int64_t degree,
    std::int64_t first_chunk, std::int64_t step, const float* atilde, int heads, const float* dout,
    std::int64_t lddout, std::int64_t column_base, std::int64_t total_cols, int lane,
    float (&acc)[kColumnsPerLane], const int (&head_of)[kColumnsPerLane]) {
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    std::int64_t v_mine = 0, e_mine = 0;
    if (chunk + lane < degree) {
      v_mine = t_columns[begin + chunk + lane];
      e_mine = t_perm ? t_perm[begin + chunk + lane] : begin + chunk + lane;
    }
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    for (int j = 0; j < count; ++j) {
      const std::int64_t v = __shfl_sync(0xffffffffu, v_mine, j);
      const std::int64_t e = __shfl_sync(0xffffffffu, e_mine, j);
      accumulate_row<kColumnsPerLane, kVec4>(acc, head_of, atilde + e * heads, dout + v * lddout,
                                             column_base, lane, total_cols);
    }
  }
}

// One warp per source row (rows up to skip_degree entries).
template <typename Index, int kColumnsPerLane, bool kVec4>
__global__ void gat_transpose_aggregate_kernel(
    const Index* __restrict__ t_indptr, const Index* __restrict__ t_columns,
    const Index* __restrict__ t_perm, std::int64_t t_rows, std::int64_t skip_degree,
    const float* __restrict__ atilde, int heads, std::int64_t width, const float* __restrict__ dout,
    std::int64_t lddout, float* __restrict__ dz, std::int64_t lddz) {
  const int lane = lane_id();
  const std::int64_t total_cols = heads * width;
  for (std::int64_t u = global_warp(); u < t_rows; u += warp_count()) {
    const std::int64_t begin = t_indptr[u];
    const std::int64_t degree = t_indptr[u + 1] - begin;
    // Rows without entries add nothing; longer rows are the long-row kernel's.
    if (degree == 0 || degree > skip_degree) continue;
    for (std::int64_t column_base = 0; column_base < total_cols;
         column_base += 32 * kColumnsPerLane) {
      float acc[kColumnsPerLane];
      int head_of[kColumnsPerLane];
      start_column_pass<kColumnsPerLane, kVec4>(acc, head_of, column_base, lane, width, total_cols);
      transpose_chunks<Index, kColumnsPerLane, kVec4>(t_columns, t_perm, begin, degree, 0, 32,
                                                      atilde, heads, dout, lddout, column_base,
                                                      total_cols, lane, acc, head_of);
      write_column_pass<kColumnsPerLane, kVec4, PassWrite::kAdd>(acc, dz + u * lddz, column_base,
                                                                 lane, total_cols);
    }
  }
}

// Long-row version of gat_transpose_aggregate_kernel. Shared: kLongWarps * 32 * kColumnsPerLane.
template <typename Index, int kColumnsPerLane>
__global__ void __launch_bounds__(kLongThreads)
    gat_transpose_aggregate_long_kernel(const Index* __restrict__ t_indptr,
                                        const Index* __restrict__ t_columns,
                                        const Index* __restrict__ t_perm, LongRows t_long,
                                        const float* __restrict__ atilde, int heads,
                                        std::int64_t width, const float* __restrict__ dout,
                                        std::int64_t lddout, float* __restrict__ dz,
                                        std::int64_t lddz) {
  extern __shared__ float partial[];  // [warp][32 * kColumnsPerLane]
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const std::int64_t total_cols = heads * width;
  const std::int64_t step = 32 * kLongWarps;
  for (std::int64_t r = blockIdx.x; r < t_long.count; r += gridDim.x) {
    const std::int64_t u = t_long.rows[r];
    const std::int64_t begin = t_indptr[u];
    const std::int64_t degree = t_indptr[u + 1] - begin;
    for (std::int64_t column_base = 0; column_base < total_cols;
         column_base += 32 * kColumnsPerLane) {
      float acc[kColumnsPerLane];
      int head_of[kColumnsPerLane];
      start_column_pass<kColumnsPerLane, false>(acc, head_of, column_base, lane, width, total_cols);
      transpose_chunks<Index, kColumnsPerLane, false>(t_columns, t_perm, begin, degree, warp * 32,
                                                      step, atilde, heads, dout, lddout,
                                                      column_base, total_cols, lane, acc, head_of);
      write_long_column_pass<kColumnsPerLane, PassWrite::kAdd>(acc, partial, dz + u * lddz,
                                                               column_base, warp, lane, total_cols);
    }
  }
}

// ---- Backward by source (gat.hpp, launch_gat_backward_by_source): a warp per transposed row u.
// Layout of the lane's columns as in the column passes (kVec4: words of 4 columns); a word never
// spans two heads (F % 4 == 0 with kVec4). HeadSum::kLaneGroup: a head's columns within a word are
// an aligned group of `group` lanes (F / 4 with kVec4, F without), so the warp reduces each word's
// dot product with log2(group) shuffles instead of a full warp sum per head.

// 32 warps resident per SM (64 registers a thread): the kernel waits on its rows' loads, and
// more warps in flight beat the few bytes of stack the register cap costs (products-like layer
// 0 on one H100: 28.4 ms at 24 warps, 26.8 ms at 32, 29.6 ms at 16).
constexpr int kBySourceBlocksPerSm = 32 / kRowWarps;
// The narrow head's pass holds 4 columns a lane and fits 48 registers: 40 warps an SM
// (kernels/cuda/NOTES.md, "One narrow head").
constexpr int kNarrowBySourceBlocksPerSm = 40 / kRowWarps;
// Warps per long row: hub rows of RMAT graphs hold tens of thousands of entries. The kernel's
// shared memory (by_source_long_shared()) then exceeds the default 48 KiB and is requested.
constexpr int kBySourceLongWarps = 16;
constexpr int kBySourceLongThreads = 32 * kBySourceLongWarps;

// A warp's state for one source row u.
template <int kColumnsPerLane, bool kVec4>
struct SourceRow {
  static constexpr int kPerWord = kVec4 ? 4 : 1;
  static constexpr int kWords = kColumnsPerLane / kPerWord;
  float z[kColumnsPerLane];    // Z_u
  float acc[kColumnsPerLane];  // sum of alpha~ dO_i
  float del;                   // d_el[u, h] on lane h (h < K)
  int head[kWords];            // -1: beyond the columns
  bool leads[kWords];          // the word holds its head's first column
};

template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void start_source_row(SourceRow<kColumnsPerLane, kVec4>& r,
                                                 const float* z_u, int lane, int total_cols,
                                                 int width) {
  using R = SourceRow<kColumnsPerLane, kVec4>;
  load_lane_columns<kColumnsPerLane, kVec4>(r.z, z_u, 0, lane, total_cols);
#pragma unroll
  for (int t = 0; t < kColumnsPerLane; ++t) r.acc[t] = 0.f;
  r.del = 0.f;
#pragma unroll
  for (int w = 0; w < R::kWords; ++w) {
    const int c = lane_column<kVec4>(lane, w * R::kPerWord);
    r.head[w] = c < total_cols ? c / width : -1;
    r.leads[w] = c < total_cols && c % width == 0;
  }
}

// How the lanes' shares of an entry's head dot products are summed: within aligned groups of
// lanes that each hold one head of a word (kLaneGroup), over the whole warp head by head (kWarp),
// or over the whole warp at once when the layer has one head (kWarpOneHead).
enum class HeadSum { kLaneGroup, kWarp, kWarpOneHead };

// Entries in flight per warp: narrow rows leave registers for more, and each entry waits on a
// row load and a shuffle reduction, so several of them hide each other's latency.
template <int kColumnsPerLane>
constexpr int by_source_in_flight() {
  return kColumnsPerLane <= 2 ? 8 : kColumnsPerLane <= 4 ? 4 : 2;
}

// s[x] summed over the warp for every x, the reductions of the kIn values interleaved.
template <int kIn>
__device__ __forceinline__ void warp_sums(float (&s)[kIn]) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
    for (int x = 0; x < kIn; ++x) s[x] += __shfl_xor_sync(0xffffffffu, s[x], offset);
  }
}

// The head dot products dO_i^h . Z_u^h of kIn entries (rows dv[x]), per word of the lane:
// summed within the word, then over the head's lanes (kSum; kLaneGroup: groups of `group`
// lanes). The reductions of the entries are independent steps.
template <int kIn, int kColumnsPerLane, bool kVec4, HeadSum kSum>
__device__ __forceinline__ void by_source_dots(
    const SourceRow<kColumnsPerLane, kVec4>& r, const float (&dv)[kIn][kColumnsPerLane], int heads,
    int group, float (&dot)[kIn][SourceRow<kColumnsPerLane, kVec4>::kWords]) {
  using R = SourceRow<kColumnsPerLane, kVec4>;
#pragma unroll
  for (int x = 0; x < kIn; ++x) {
#pragma unroll
    for (int w = 0; w < R::kWords; ++w) {
      float s = 0.f;
#pragma unroll
      for (int y = 0; y < R::kPerWord; ++y)
        s += dv[x][w * R::kPerWord + y] * r.z[w * R::kPerWord + y];
      dot[x][w] = s;
    }
  }
  if constexpr (kSum == HeadSum::kLaneGroup) {
    // Unrolled over every possible step; the group size (uniform) skips the wider ones.
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      if (offset >= group) continue;
#pragma unroll
      for (int x = 0; x < kIn; ++x) {
#pragma unroll
        for (int w = 0; w < R::kWords; ++w)
          dot[x][w] += __shfl_xor_sync(0xffffffffu, dot[x][w], offset);
      }
    }
  } else if constexpr (kSum == HeadSum::kWarpOneHead) {
    float total[kIn];
#pragma unroll
    for (int x = 0; x < kIn; ++x) {
      total[x] = 0.f;
#pragma unroll
      for (int w = 0; w < R::kWords; ++w) total[x] += dot[x][w];
    }
    warp_sums(total);
#pragma unroll
    for (int x = 0; x < kIn; ++x) {
#pragma unroll
      for (int w = 0; w < R::kWords; ++w) dot[x][w] = total[x];
    }
  } else {
    float reduced[kIn][R::kWords];
    for (int h = 0; h < heads; ++h) {
      float s[kIn];
#pragma unroll
      for (int x = 0; x < kIn; ++x) {
        s[x] = 0.f;
#pragma unroll
        for (int w = 0; w < R::kWords; ++w) s[x] += r.head[w] == h ? dot[x][w] : 0.f;
      }
      warp_sums(s);
#pragma unroll
      for (int x = 0; x < kIn; ++x) {
#pragma unroll
        for (int w = 0; w < R::kWords; ++w)
          if (r.head[w] == h) reduced[x][w] = s[x];
      }
    }
#pragma unroll
    for (int x = 0; x < kIn; ++x) {
#pragma unroll
      for (int w = 0; w < R::kWords; ++w) dot[x][w] = reduced[x][w];
    }
  }
}

// One entry (slot j of the chunk) of source row r, given its row dO_i (dv) and head dot
// products: dZ_u += alpha~ dO_i, and the word that leads a head stages the head's dot product
// for finish_by_source_chunk() (stage: alpha~, alpha * S(i), slope, dot; 32 x K floats each).
template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void by_source_apply(
    SourceRow<kColumnsPerLane, kVec4>& r, const float (&dv)[kColumnsPerLane],
    const float (&dot)[SourceRow<kColumnsPerLane, kVec4>::kWords], int j, int heads, float* stage) {
  using R = SourceRow<kColumnsPerLane, kVec4>;
  const float* at = stage + j * heads;
  float* dots = stage + (96 + j) * heads;
#pragma unroll
  for (int w = 0; w < R::kWords; ++w) {
    const int h = r.head[w];
    if (h < 0) continue;
    const float a = at[h];
#pragma unroll
    for (int y = 0; y < R::kPerWord; ++y) r.acc[w * R::kPerWord + y] += a * dv[w * R::kPerWord + y];
    if (r.leads[w]) dots[h] = dot[w];
  }
}

// Lane `lane` stages entry chunk + lane of source row u (when the row has it): its destination
// row i_mine and forward entry e_mine, and per head alpha~ (alpha with its attention dropout),
// alpha * S(i) and the LeakyReLU slope at the entry's score, into stage (4 x 32 x K floats:
// alpha~, alpha * S(i), slope, then room for the dot products dO_i^h . Z_u^h).
template <typename Index, int kFixedHeads = 0>
__device__ __forceinline__ void stage_by_source_entry(const GatBySource<Index>& p, std::int64_t u,
                                                      std::int64_t begin, std::int64_t degree,
                                                      std::int64_t chunk, int lane, float* stage,
                                                      std::int64_t& i_mine, std::int64_t& e_mine) {
  if (chunk + lane >= degree) return;
  const int heads = kFixedHeads > 0 ? kFixedHeads : p.heads;
  i_mine = p.t.columns[begin + chunk + lane];
  e_mine = p.t.perm[begin + chunk + lane];
  const std::int64_t k = e_mine - p.a.indptr[i_mine];
  const std::uint64_t prefix = attention_prefix(p.dropout, i_mine);
  for (int h = 0; h < heads; ++h) {
    const float a = p.alpha[e_mine * p.ldalpha + h];
    const float pre = p.el[u * p.ldel + h] + p.er[i_mine * p.lder + h];
    stage[lane * heads + h] = a * attention_scale(p.dropout, prefix, k, h);
    stage[(32 + lane) * heads + h] = a * p.row_sums[i_mine * heads + h];
    stage[(64 + lane) * heads + h] = pre > 0.f ? 1.f : kLeakySlope;
  }
}

// Ends a chunk: lane j turns entry j's staged dot products into its score
// gradients, ds = LeakyReLU' (alpha~ dot - alpha S(i)) (d(alpha) = dot * mask, and alpha
// d(alpha) = alpha~ dot), written in forward entry order; the warp sums them per head into
// `del` on lane h.
template <typename Index, int kFixedHeads = 0>
__device__ __forceinline__ void finish_by_source_chunk(const GatBySource<Index>& p,
                                                       std::int64_t degree, std::int64_t chunk,
                                                       int lane, const float* stage,
                                                       std::int64_t e_mine, float& del) {
  const int heads = kFixedHeads > 0 ? kFixedHeads : p.heads;
  const bool mine = chunk + lane < degree;
  for (int h = 0; h < heads; ++h) {
    float d = 0.f;
    if (mine) {
      const int x = lane * heads + h;
      d = stage[64 * heads + x] * (stage[x] * stage[96 * heads + x] - stage[32 * heads + x]);
      p.ds[e_mine * heads + h] = d;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) d += __shfl_xor_sync(0xffffffffu, d, offset);
    if (lane == h) del += d;
  }
}

// Source row u's 32-entry chunks first_chunk, first_chunk + step, ...: lane j stages entry j's
// coefficients for every head, then the warp takes the entries by_source_in_flight() at a time,
// applying them in entry order.
template <typename Index, int kColumnsPerLane, bool kVec4, HeadSum kSum>
__device__ __forceinline__ void by_source_chunks(const GatBySource<Index>& p,
                                                 SourceRow<kColumnsPerLane, kVec4>& r,
                                                 std::int64_t u, std::int64_t begin,
                                                 std::int64_t degree, std::int64_t first_chunk,
                                                 std::int64_t step, int group, float* stage) {
  using R = SourceRow<kColumnsPerLane, kVec4>;
  constexpr int kIn = by_source_in_flight<kColumnsPerLane>();
  const int lane = lane_id();
  const int heads = p.heads;
  const int total_cols = static_cast<int>(heads * p.width);
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    std::int64_t i_mine = 0, e_mine = 0;
    stage_by_source_entry(p, u, begin, degree, chunk, lane, stage, i_mine, e_mine);
    __syncwarp();
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    for (int j0 = 0; j0 < count; j0 += kIn) {
      float dv[kIn][kColumnsPerLane];
#pragma unroll
      for (int x = 0; x < kIn; ++x) {
        const std::int64_t i = __shfl_sync(0xffffffffu, i_mine, (j0 + x) & 31);
        if (j0 + x < count) {
          load_lane_columns<kColumnsPerLane, kVec4>(dv[x], p.dout + i * p.lddout, 0, lane,
                                                    total_cols);
        } else {
#pragma unroll
          for (int t = 0; t < kColumnsPerLane; ++t) dv[x][t] = 0.f;
        }
      }
      float dot[kIn][R::kWords];
      by_source_dots<kIn, kColumnsPerLane, kVec4, kSum>(r, dv, heads, group, dot);
#pragma unroll
      for (int x = 0; x < kIn; ++x)
        if (j0 + x < count) by_source_apply(r, dv[x], dot[x], j0 + x, heads, stage);
    }
    __syncwarp();
    finish_by_source_chunk(p, degree, chunk, lane, stage, e_mine, r.del);
    __syncwarp();
  }
}

// The source scores' backward into the row's sums: acc[c] += d_el[u, h(c)] * att_src[c], with
// d_el[u, h] on lane h (r.del).
template <int kColumnsPerLane, bool kVec4>
__device__ __forceinline__ void add_source_score_terms(SourceRow<kColumnsPerLane, kVec4>& r,
                                                       const float* att_src, int lane,
                                                       int total_cols) {
  using R = SourceRow<kColumnsPerLane, kVec4>;
#pragma unroll
  for (int w = 0; w < R::kWords; ++w) {
    const int h = r.head[w];
    const float del = __shfl_sync(0xffffffffu, r.del, h < 0 ? 0 : h);
    if (h < 0) continue;
#pragma unroll
    for (int y = 0; y < R::kPerWord; ++y) {
      const int c = lane_column<kVec4>(lane, w * R::kPerWord + y);
      if (c < total_cols) r.acc[w * R::kPerWord + y] += del * att_src[c];
    }
  }
}

// One warp per transposed row (rows up to p.t.long_rows.degree entries). Shared: per warp
// 4 x 32 x K floats of staged coefficients.
template <typename Index, int kColumnsPerLane, bool kVec4, HeadSum kSum>
__global__ void __launch_bounds__(kRowThreads, kBySourceBlocksPerSm)
    gat_by_source_kernel(GatBySource<Index> p, int group) {
  extern __shared__ float shared[];
  using R = SourceRow<kColumnsPerLane, kVec4>;
  const int lane = lane_id();
  float* stage = shared + (threadIdx.x / 32) * (128 * p.heads);
  const int total_cols = static_cast<int>(p.heads * p.width);
  const int width = static_cast<int>(p.width);
  for (std::int64_t u = global_warp(); u < p.a.cols; u += warp_count()) {
    const std::int64_t begin = p.t.indptr[u];
    const std::int64_t degree = p.t.indptr[u + 1] - begin;
    if (degree == 0 || degree > p.t.long_rows.degree) continue;
    R r;
    start_source_row<kColumnsPerLane, kVec4>(r, p.z + u * p.ldz, lane, total_cols, width);
    by_source_chunks<Index, kColumnsPerLane, kVec4, kSum>(p, r, u, begin, degree, 0, 32, group,
                                                          stage);
    add_source_score_terms<kColumnsPerLane, kVec4>(r, p.att_src, lane, total_cols);
    write_column_pass<kColumnsPerLane, kVec4, PassWrite::kAdd>(r.acc, p.dz + u * p.lddz, 0, lane,
                                                               total_cols);
    if (lane < p.heads) p.d_el[u * p.heads + lane] = r.del;
  }
}

std::size_t by_source_long_shared(int heads, int per_lane) {
  return sizeof(float) * static_cast<std::size_t>(kBySourceLongWarps) *
         (128 * static_cast<std::size_t>(heads) + 32 * per_lane + heads);
}

// Long-row version: a block of kBySourceLongWarps warps per transposed row, the warps' sums
// combined in warp order. Shared: by_source_long_shared().
template <typename Index, int kColumnsPerLane, bool kVec4, HeadSum kSum>
__global__ void __launch_bounds__(kBySourceLongThreads)
    gat_by_source_long_kernel(GatBySource<Index> p, int group) {
  extern __shared__ float shared[];
  using R = SourceRow<kColumnsPerLane, kVec4>;
  constexpr int kSpan = 32 * kColumnsPerLane;
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int heads = p.heads;
  float* stage = shared + warp * (128 * heads);
  float* partial = shared + kBySourceLongWarps * 128 * heads;  // [warp][kSpan]
  float* part_del = partial + kBySourceLongWarps * kSpan;      // [warp][head]
  const int total_cols = static_cast<int>(heads * p.width);
  const int width = static_cast<int>(p.width);
  for (std::int64_t r_index = blockIdx.x; r_index < p.t.long_rows.count; r_index += gridDim.x) {
    const std::int64_t u = p.t.long_rows.rows[r_index];
    const std::int64_t begin = p.t.indptr[u];
    const std::int64_t degree = p.t.indptr[u + 1] - begin;
    R r;
    start_source_row<kColumnsPerLane, kVec4>(r, p.z + u * p.ldz, lane, total_cols, width);
    by_source_chunks<Index, kColumnsPerLane, kVec4, kSum>(p, r, u, begin, degree, warp * 32,
                                                          32 * kBySourceLongWarps, group, stage);
#pragma unroll
    for (int t = 0; t < kColumnsPerLane; ++t) partial[warp * kSpan + lane + 32 * t] = r.acc[t];
    if (lane < heads) part_del[warp * heads + lane] = r.del;
    __syncthreads();
    for (int x = static_cast<int>(threadIdx.x); x < kSpan; x += kBySourceLongThreads) {
      const int c = lane_column<kVec4>(x % 32, x / 32);
      if (c >= total_cols) continue;
      float sum = 0.f, del = 0.f;
      for (int w = 0; w < kBySourceLongWarps; ++w) sum += partial[w * kSpan + x];
      for (int w = 0; w < kBySourceLongWarps; ++w) del += part_del[w * heads + c / width];
      p.dz[u * p.lddz + c] += sum + del * p.att_src[c];
    }
    if (static_cast<int>(threadIdx.x) < heads) {
      float sum = 0.f;
      for (int w = 0; w < kBySourceLongWarps; ++w) sum += part_del[w * heads + threadIdx.x];
      p.d_el[u * heads + threadIdx.x] = sum;
    }
    __syncthreads();
  }
}

// ---- Backward by source, one narrow head (K = 1, F <= 4 x 16): the warp of transposed row u
// splits into 32 / kGroup groups of kGroup lanes. Lane g of a group holds Z_u's columns g,
// g + kGroup, g + 2 kGroup, g + 3 kGroup; group s takes the chunk's entries s, s + 32 / kGroup,
// ..., so the warp works on 32 / kGroup entries at once and sums each dot product over
// log2(kGroup) lanes instead of 32. The groups' sums are combined in a fixed tree at the end.
constexpr int kNarrowColumnsPerLane = 4;
constexpr int kNarrowMaxColumns = 16 * kNarrowColumnsPerLane;

template <int kGroup>
struct NarrowSourceRow {
  float z[kNarrowColumnsPerLane];    // Z_u
  float acc[kNarrowColumnsPerLane];  // the group's sum of alpha~ dO_i
  float del = 0.f;                   // d_el[u], on lane 0
};

template <int kGroup>
__device__ __forceinline__ void load_narrow_columns(float (&v)[kNarrowColumnsPerLane],
                                                    const float* row, int g, int columns) {
#pragma unroll
  for (int t = 0; t < kNarrowColumnsPerLane; ++t) {
    const int c = g + kGroup * t;
    v[t] = c < columns ? row[c] : 0.f;
  }
}

// Source row u's chunks first_chunk, first_chunk + step, ...: the chunk's entries are staged
// and finished as in by_source_chunks(); between, each group takes two of its entries per step.
template <typename Index, int kGroup>
__device__ __forceinline__ void narrow_by_source_chunks(const GatBySource<Index>& p,
                                                        NarrowSourceRow<kGroup>& r, std::int64_t u,
                                                        std::int64_t begin, std::int64_t degree,
                                                        std::int64_t first_chunk, std::int64_t step,
                                                        float* stage) {
  constexpr int kSlots = 32 / kGroup;
  const int lane = lane_id();
  const int g = lane % kGroup, slot = lane / kGroup;
  const int columns = static_cast<int>(p.width);
  const float* at = stage;
  float* dots = stage + 96;
  // The lane's columns of a dO row; one past the width reads column 0 instead (no test per load):
  // Z_u is 0 there, so its products add nothing to the dot products, and its sums are never
  // written. Entries past count read row 0 (lanes without an entry keep i = 0) and are not added.
  const gat_detail::RowStride dout_rows(p.lddout);
  for (std::int64_t chunk = first_chunk; chunk < degree; chunk += step) {
    std::int64_t i_mine = 0, e_mine = 0;
    stage_by_source_entry<Index, 1>(p, u, begin, degree, chunk, lane, stage, i_mine, e_mine);
    __syncwarp();
    const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
    for (int j0 = 0; j0 < count; j0 += 2 * kSlots) {
      float dv[2][kNarrowColumnsPerLane];
      float dot[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int j = j0 + x * kSlots + slot;
        const Index i = __shfl_sync(0xffffffffu, static_cast<Index>(i_mine), j & 31);
        const float* row = dout_rows.row(p.dout, i);
#pragma unroll
        for (int t = 0; t < kNarrowColumnsPerLane; ++t)
          dv[x][t] = __ldg(row + (g + kGroup * t < columns ? g + kGroup * t : 0));
        dot[x] = 0.f;
#pragma unroll
        for (int t = 0; t < kNarrowColumnsPerLane; ++t) dot[x] += dv[x][t] * r.z[t];
      }
#pragma unroll
      for (int offset = kGroup / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int x = 0; x < 2; ++x) dot[x] += __shfl_xor_sync(0xffffffffu, dot[x], offset);
      }
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int j = j0 + x * kSlots + slot;
        if (j >= count) continue;
        const float a = at[j];
#pragma unroll
        for (int t = 0; t < kNarrowColumnsPerLane; ++t) r.acc[t] += a * dv[x][t];
        if (g == 0) dots[j] = dot[x];
      }
    }
    __syncwarp();
    finish_by_source_chunk<Index, 1>(p, degree, chunk, lane, stage, e_mine, r.del);
    __syncwarp();
  }
}

// Starts row u: Z_u's columns of the lane, zero sums.
template <int kGroup>
__device__ __forceinline__ void start_narrow_row(NarrowSourceRow<kGroup>& r, const float* z_u,
                                                 int lane, int columns) {
  load_narrow_columns<kGroup>(r.z, z_u, lane % kGroup, columns);
#pragma unroll
  for (int t = 0; t < kNarrowColumnsPerLane; ++t) r.acc[t] = 0.f;
  r.del = 0.f;
}

// Sums the groups' acc over the warp (a fixed tree): every group then holds the warp's.
template <int kGroup>
__device__ __forceinline__ void combine_narrow_groups(NarrowSourceRow<kGroup>& r) {
#pragma unroll
  for (int offset = kGroup; offset < 32; offset *= 2) {
#pragma unroll
    for (int t = 0; t < kNarrowColumnsPerLane; ++t)
      r.acc[t] += __shfl_xor_sync(0xffffffffu, r.acc[t], offset);
  }
}

// One warp per transposed row (rows up to p.t.long_rows.degree entries); shared memory as
// gat_by_source_kernel's with one head.
template <typename Index, int kGroup>
__global__ void __launch_bounds__(kRowThreads, kNarrowBySourceBlocksPerSm)
    gat_narrow_by_source_kernel(GatBySource<Index> p) {
  extern __shared__ float shared[];
  const int lane = lane_id();
  float* stage = shared + (threadIdx.x / 32) * 128;
  const int columns = static_cast<int>(p.width);
  for (std::int64_t u = global_warp(); u < p.a.cols; u += warp_count()) {
    const std::int64_t begin = p.t.indptr[u];
    const std::int64_t degree = p.t.indptr[u + 1] - begin;
    if (degree == 0 || degree > p.t.long_rows.degree) continue;
    NarrowSourceRow<kGroup> r;
    start_narrow_row(r, p.z + u * p.ldz, lane, columns);
    narrow_by_source_chunks<Index, kGroup>(p, r, u, begin, degree, 0, 32, stage);
    combine_narrow_groups(r);
    const float del = __shfl_sync(0xffffffffu, r.del, 0);
    if (lane < kGroup) {
#pragma unroll
      for (int t = 0; t < kNarrowColumnsPerLane; ++t) {
        const int c = lane + kGroup * t;
        if (c < columns) p.dz[u * p.lddz + c] += r.acc[t] + del * p.att_src[c];
      }
    }
    if (lane == 0) p.d_el[u] = r.del;
  }
}

// One narrow head (K = 1, F <= 64): the warp of row i in groups of kGroup lanes, each group
// adding every (32 / kGroup)-th entry of a chunk over 4 columns a lane (as the narrow pass by
// source below), the groups' sums combined in a fixed tree at the end of the row. The
// coefficients are gat_aggregate_kernel's, with the row's softmax statistics of lane 0. kWords
// (rows of z 16-byte aligned): lane g holds columns 4 g .. 4 g + 3, one 16-byte load a row (a
// last word's padding columns are added too, into sums that are never written); else columns g,
// g + kGroup, ... as the pass by source. The same sums in the same order either way.
template <typename Index, int kGroup, bool kWords>
__global__ void __launch_bounds__(kRowThreads)
    gat_narrow_aggregate_kernel(CsrArrays<Index> a, const float* __restrict__ z, std::int64_t ldz,
                                const float* __restrict__ el, std::int64_t ldel,
                                const float* __restrict__ er, std::int64_t lder, int columns,
                                AttentionDropout dropout, float* __restrict__ alpha,
                                std::int64_t ldalpha, float* __restrict__ out, std::int64_t ldout) {
  extern __shared__ float shared[];
  constexpr int kSlots = 32 / kGroup;
  constexpr int kPerLane = 4;
  const int lane = lane_id();
  const int g = lane % kGroup, slot = lane / kGroup;
  float* coef = shared + (threadIdx.x / 32) * 32;
  // kWords: the lane's word of a z row; a lane past the columns reads the row's first word (its
  // sums are never written), so that no load needs a test.
  const float* z_word = z + (4 * g < columns ? 4 * g : 0);
  const gat_detail::RowStride z_rows(ldz);
  for (std::int64_t i = global_warp(); i < a.rows; i += warp_count()) {
    const std::int64_t begin = a.indptr[i];
    const std::int64_t degree = a.indptr[i + 1] - begin;
    if (degree > a.long_rows.degree) continue;  // gat_aggregate_long_kernel's row
    const std::uint64_t prefix = attention_prefix(dropout, i);
    const float er_i = er[i * lder];
    float m, s;
    softmax_stats_entries(a.columns, begin, degree, 0, 32, el, ldel, 0, er_i, m, s);
    m = __shfl_sync(0xffffffffu, m, 0);
    s = __shfl_sync(0xffffffffu, s, 0);
    const float inv = s > 0.f ? 1.f / s : 0.f;
    float acc[kPerLane] = {0.f, 0.f, 0.f, 0.f};
    for (std::int64_t chunk = 0; chunk < degree; chunk += 32) {
      const std::int64_t k = chunk + lane;
      Index u_mine = 0;  // lanes past the row's entries keep row 0, a row kWords may read
      if (k < degree) {
        u_mine = a.columns[begin + k];
        const float coefficient = attention_coefficient(el[u_mine * ldel], er_i, m, inv);
        alpha[(begin + k) * ldalpha] = coefficient;
        coef[lane] = coefficient * attention_scale(dropout, prefix, k, 0);
      }
      __syncwarp();
      const int count = static_cast<int>(degree - chunk < 32 ? degree - chunk : 32);
      for (int j0 = 0; j0 < count; j0 += 2 * kSlots) {
        float v[2][kPerLane];
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const int j = j0 + x * kSlots + slot;
          const Index u = __shfl_sync(0xffffffffu, u_mine, j & 31);
          if constexpr (kWords) {  // entries past count are loaded but not added
            const float4 w = __ldg(reinterpret_cast<const float4*>(z_rows.row(z_word, u)));
            v[x][0] = w.x;
            v[x][1] = w.y;
            v[x][2] = w.z;
            v[x][3] = w.w;
          } else if (j < count) {
            load_narrow_columns<kGroup>(v[x], z + u * ldz, g, columns);
          } else {
#pragma unroll
            for (int t = 0; t < kPerLane; ++t) v[x][t] = 0.f;
          }
        }
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          const int j = j0 + x * kSlots + slot;
          if (j >= count) continue;
          const float c = coef[j];
#pragma unroll
          for (int t = 0; t < kPerLane; ++t) acc[t] += c * v[x][t];
        }
      }
      __syncwarp();
    }
#pragma unroll
    for (int offset = kGroup; offset < 32; offset *= 2) {
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
    }
    if (lane < kGroup) {
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int c = kWords ? 4 * lane + t : lane + kGroup * t;
        if (c < columns) out[i * ldout + c] = acc[t];
      }
    }
  }
}

std::size_t narrow_by_source_long_shared(int group) {
  return sizeof(float) * static_cast<std::size_t>(kBySourceLongWarps) *
         (128 + static_cast<std::size_t>(group) * kNarrowColumnsPerLane + 1);
}

// Long-row version: a block of kBySourceLongWarps warps per transposed row, the warps' sums
// combined in warp order. Shared: narrow_by_source_long_shared().
template <typename Index, int kGroup>
__global__ void __launch_bounds__(kBySourceLongThreads)
    gat_narrow_by_source_long_kernel(GatBySource<Index> p) {
  extern __shared__ float shared[];
  constexpr int kSpan = kGroup * kNarrowColumnsPerLane;
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  float* stage = shared + warp * 128;
  float* partial = shared + kBySourceLongWarps * 128;      // [warp][kSpan]
  float* part_del = partial + kBySourceLongWarps * kSpan;  // [warp]
  const int columns = static_cast<int>(p.width);
  for (std::int64_t r_index = blockIdx.x; r_index < p.t.long_rows.count; r_index += gridDim.x) {
    const std::int64_t u = p.t.long_rows.rows[r_index];
    const std::int64_t begin = p.t.indptr[u];
    const std::int64_t degree = p.t.indptr[u + 1] - begin;
    NarrowSourceRow<kGroup> r;
    start_narrow_row(r, p.z + u * p.ldz, lane, columns);
    narrow_by_source_chunks<Index, kGroup>(p, r, u, begin, degree, warp * 32,
                                           32 * kBySourceLongWarps, stage);
    combine_narrow_groups(r);
    if (lane < kGroup) {
#pragma unroll
      for (int t = 0; t < kNarrowColumnsPerLane; ++t)
        partial[warp * kSpan + lane + kGroup * t] = r.acc[t];
    }
    if (lane == 0) part_del[warp] = r.del;
    __syncthreads();
    for (int c = static_cast<int>(threadIdx.x); c < columns; c += kBySourceLongThreads) {
      float sum = 0.f, del = 0.f;
      for (int w = 0; w < kBySourceLongWarps; ++w) sum += partial[w * kSpan + c];
      for (int w = 0; w < kBySourceLongWarps; ++w) del += part_del[w];
      p.dz[u * p.lddz + c] += sum + del * p.att_src[c];
    }
    if (threadIdx.x == 0) {
      float sum = 0.f;
      for (int w = 0; w < kBySourceLongWarps; ++w) sum += part_del[w];
      p.d_el[u] = sum;
    }
    __syncthreads();
  }
}

// sums[i * K + h] = dO_i^h . O_i^h, a warp per row.
__global__ void gat_row_sums_kernel(std::int64_t rows, const float* __restrict__ dout,
                                    std::int64_t lddout, const float* __restrict__ out,
                                    std::int64_t ldout, int heads, std::int64_t width,
                                    float* __restrict__ sums, std::int64_t ldsums) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < rows; i += warp_count()) {
    for (int h = 0; h < heads; ++h) {
      float s = 0.f;
      for (std::int64_t f = lane; f < width; f += 32)
        s = __fmaf_rn(dout[i * lddout + h * width + f], out[i * ldout + h * width + f], s);
      s = detail::warp_sum(s);
      if (lane == 0) sums[i * ldsums + h] = s;
    }
  }
}

// launch_gat_row_sums over one-head rows of at most 64 floats, 16-byte aligned, whose width is
// not a whole number of 32-column groups: 8 lanes a row, four rows a warp, as
// gat_narrow_scores_kernel. (Whole groups keep the warp a row: the order the activation
// backward's head dots follow.)
__global__ void gat_narrow_row_sums_kernel(std::int64_t rows, const float* __restrict__ dout,
                                           std::int64_t lddout, const float* __restrict__ out,
                                           std::int64_t ldout, int width, float* __restrict__ sums,
                                           std::int64_t ldsums) {
  const int lane = lane_id(), sub = lane & 7;
  for (std::int64_t first = global_warp() * 4; first < rows; first += warp_count() * 4) {
    const std::int64_t i = first + (lane >> 3);
    float s = 0.f;
    if (i < rows) {
#pragma unroll
      for (int word = 0; word < 2; ++word) {
        const int c = 4 * (sub + 8 * word);
        if (c >= width) continue;
        const float4 g = *reinterpret_cast<const float4*>(dout + i * lddout + c);
        const float4 o = *reinterpret_cast<const float4*>(out + i * ldout + c);
        const float gs[4] = {g.x, g.y, g.z, g.w}, os[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (c + k < width) s = __fmaf_rn(gs[k], os[k], s);
      }
    }
#pragma unroll
    for (int offset = 4; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (sub == 0 && i < rows) sums[i * ldsums] = s;
  }
}

// Each entry's stored share of d_er (gat_backward_by_source's ds), entry-major (kAllHeads: read
// as 16-byte words).
struct StoredShares {
  const float* __restrict__ ds;
  int heads;
  template <int kHeads, bool kAllHeads>
  __device__ void add(std::int64_t pos, std::int64_t, float (&acc)[kHeads]) const {
    if constexpr (kAllHeads) {
      float d[kHeads];
      gat_detail::load_head_words<kHeads>(d, ds + pos * kHeads);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) acc[h] += d[h];
    } else {
#pragma unroll
      for (int h = 0; h < kHeads; ++h)
        if (h < heads) acc[h] += ds[pos * heads + h];
    }
  }
};

// Block (32, kScoreRows): x over columns, y over rows; the block reduces d_att over y into its
// slice's partial sums (slice blockIdx.y). A thread takes its rows kScoreRowsAhead at a time,
// their loads first (the rows' latencies overlap), then their sums in row order.
constexpr int kScoreRows = 8;
constexpr int kScoreRowsAhead = 4;
__global__ void gat_scores_backward_kernel(const float* __restrict__ dscore, std::int64_t lds,
                                           const vertex_t* __restrict__ row_map, std::int64_t rows,
                                           std::int64_t width, std::int64_t total_cols,
                                           const float* __restrict__ z, std::int64_t ldz,
                                           const float* __restrict__ att, float* dz,
                                           std::int64_t lddz, float* __restrict__ partials) {
  __shared__ float partial[kScoreRows][33];
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  float sum = 0.f;
  if (c < total_cols) {
    const std::int64_t h = c / width;
    const float att_c = att[c];
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
    for (std::int64_t r = blockIdx.y * static_cast<std::int64_t>(blockDim.y) + threadIdx.y;
         r < rows; r += kScoreRowsAhead * stride) {
      std::int64_t target[kScoreRowsAhead];
      float d[kScoreRowsAhead], value[kScoreRowsAhead];
#pragma unroll
      for (int u = 0; u < kScoreRowsAhead; ++u) {
        const std::int64_t row = r + u * stride;
        target[u] = row >= rows ? -1 : row_map ? row_map[row] : row;
        d[u] = target[u] < 0 ? 0.f : dscore[row * lds + h];
        value[u] = target[u] < 0 ? 0.f : z[target[u] * ldz + c];
      }
#pragma unroll
      for (int u = 0; u < kScoreRowsAhead; ++u) {
        if (target[u] < 0) continue;
        sum += d[u] * value[u];
        if (dz == nullptr) continue;  // the caller added d * att to dz already
        if (row_map) {
          atomicAdd(dz + target[u] * lddz + c, d[u] * att_c);
        } else {
          dz[target[u] * lddz + c] += d[u] * att_c;
        }
      }
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < total_cols) {
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < kScoreRows; ++y) total += partial[y][threadIdx.x];
    partials[blockIdx.y * total_cols + c] = total;
  }
}

unsigned warp_blocks(std::int64_t rows) {
  return detail::blocks_for(rows, detail::kWarpsPerBlock);
}

}  // namespace

namespace {

// The scores kernel for narrow one-head rows, or in 16-byte words where the layout allows
// (row_scores()). The choice depends only on the rows' shape and z, so that every call on a
// layer's rows gives the same bits.
void launch_scores_kernel(const float* z, std::int64_t ldz, const vertex_t* row_map,
                          std::int64_t rows, int heads, std::int64_t width, const float* att_a,
                          float* score_a, std::int64_t ld_a, const float* att_b, float* score_b,
                          std::int64_t ld_b, bool map_output, cudaStream_t stream) {
  const bool quads = width % 4 == 0 && 128 % width == 0 && rows_aligned16(z, ldz) &&
                     aligned16(att_a) && (att_b == nullptr || aligned16(att_b));
  const int w = static_cast<int>(width);
  if (heads == 1 && width <= 64 && rows_aligned16(z, ldz)) {
    gat_narrow_scores_kernel<<<detail::blocks_for((rows + 3) / 4, detail::kWarpsPerBlock),
                               detail::kBlockThreads, 0, stream>>>(
        z, ldz, row_map, rows, w, att_a, score_a, ld_a, att_b, score_b, ld_b, map_output);
  } else if (quads) {
    gat_scores_kernel<true><<<warp_blocks(rows), detail::kBlockThreads, 0, stream>>>(
        z, ldz, row_map, rows, heads, w, att_a, score_a, ld_a, att_b, score_b, ld_b, map_output);
  } else {
    gat_scores_kernel<false><<<warp_blocks(rows), detail::kBlockThreads, 0, stream>>>(
        z, ldz, row_map, rows, heads, w, att_a, score_a, ld_a, att_b, score_b, ld_b, map_output);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_gat_scores(const float* z, std::int64_t ldz, const vertex_t* row_map, std::int64_t rows,
                       int heads, std::int64_t width, const float* att, float* score,
                       std::int64_t lds, cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return;
  launch_scores_kernel(z, ldz, row_map, rows, heads, width, att, score, lds, nullptr, nullptr, 0,
                       false, stream);
}

void launch_gat_both_scores(const float* z, std::int64_t ldz, std::int64_t rows, int heads,
                            std::int64_t width, const float* att_src, float* el, std::int64_t ldel,
                            const float* att_dst, float* row_scores, cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return;
  launch_scores_kernel(z, ldz, nullptr, rows, heads, width, att_src, el, ldel, att_dst, row_scores,
                       heads, false, stream);
}

void launch_gat_gather_scores(const float* row_scores, int heads, const vertex_t* row_map,
                              std::int64_t rows, float* out, std::int64_t ldout,
                              cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return;
  gat_gather_scores_kernel<<<detail::blocks_for(rows * heads, detail::kBlockThreads),
                             detail::kBlockThreads, 0, stream>>>(row_scores, heads, row_map, rows,
                                                                 out, ldout);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_gat_scores_of_rows(const float* z, std::int64_t ldz, const vertex_t* rows,
                               std::int64_t count, int heads, std::int64_t width, const float* att,
                               float* score, std::int64_t lds, cudaStream_t stream) {
  if (count <= 0 || heads <= 0) return;
  launch_scores_kernel(z, ldz, rows, count, heads, width, att, score, lds, nullptr, nullptr, 0,
                       true, stream);
}

template <typename Index>
void launch_gat_aggregate(const CsrArrays<Index>& a, const float* z, std::int64_t ldz,
                          const float* el, std::int64_t ldel, const float* er, std::int64_t lder,
                          int heads, std::int64_t width, const AttentionDropout& dropout,
                          float* alpha, std::int64_t ldalpha, float* out, std::int64_t ldout,
                          cudaStream_t stream) {
  if (a.rows <= 0 || heads <= 0) return;
  SLUICE_EXPECTS(heads <= kMaxHeads, "GAT supports at most ", kMaxHeads, " heads, got ", heads);
  const std::int64_t total_cols = heads * width;
  const unsigned blocks = row_blocks(a.rows);
  const std::size_t shared = static_cast<std::size_t>(kRowWarps) * 34 * heads * sizeof(float);
  const int per_lane = columns_per_lane(total_cols);
  const std::size_t long_shared = aggregate_long_shared(heads, per_lane);
  const bool long_path = a.long_rows.count > 0 && long_shared <= kMaxLongShared;
  CsrArrays<Index> short_rows = a;
  if (!long_path) short_rows.long_rows = LongRows{};  // one warp per row for every row
  const unsigned long_grid = long_path ? long_blocks(a.long_rows.count) : 0;
  if (out == nullptr) {  // the coefficients alone: rows split between the kernels as above
    gat_aggregate_kernel<Index, 2, false, Aggregate::kCoefficientsOnly>
        <<<blocks, kRowThreads, shared, stream>>>(short_rows, z, ldz, el, ldel, er, lder, heads,
                                                  width, dropout, alpha, ldalpha, nullptr, 0);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (long_path)
      gat_aggregate_long_kernel<Index, 2, Aggregate::kCoefficientsOnly>
          <<<long_grid, kLongThreads, aggregate_long_shared(heads, 2), stream>>>(
              a, z, ldz, el, ldel, er, lder, heads, width, dropout, alpha, ldalpha, nullptr, 0);
    SLUICE_CUDA_LAUNCH_CHECK();
    return;
  }
  const bool vec4 =
      per_lane >= 4 && width % 4 == 0 && rows_aligned16(z, ldz) && rows_aligned16(out, ldout);
  const std::size_t narrow_shared = static_cast<std::size_t>(kRowWarps) * 32 * sizeof(float);
  const int columns = static_cast<int>(total_cols);
  const auto narrow = [&](auto group) {
    constexpr int kGroup = decltype(group)::value;
    if (rows_aligned16(z, ldz) && ldz < gat_detail::RowStride::kMaxLd)
      gat_narrow_aggregate_kernel<Index, kGroup, true>
          <<<blocks, kRowThreads, narrow_shared, stream>>>(
              short_rows, z, ldz, el, ldel, er, lder, columns, dropout, alpha, ldalpha, out, ldout);
    else
      gat_narrow_aggregate_kernel<Index, kGroup, false>
          <<<blocks, kRowThreads, narrow_shared, stream>>>(
              short_rows, z, ldz, el, ldel, er, lder, columns, dropout, alpha, ldalpha, out, ldout);
  };
  if (heads == 1 && total_cols <= 4 * 4) {
    narrow(std::integral_constant<int, 4>{});
  } else if (heads == 1 && total_cols <= 8 * 4) {
    narrow(std::integral_constant<int, 8>{});
  } else if (heads == 1 && total_cols <= 16 * 4) {
    narrow(std::integral_constant<int, 16>{});
  } else {
    launch_by_lanes(total_cols, vec4, [&](auto lanes, auto words) {
      gat_aggregate_kernel<Index, lanes.value, words.value, Aggregate::kWeightedSums>
          <<<blocks, kRowThreads, shared, stream>>>(short_rows, z, ldz, el, ldel, er, lder, heads,
                                                    width, dropout, alpha, ldalpha, out, ldout);
    });
  }
  SLUICE_CUDA_LAUNCH_CHECK();
  if (!long_path) return;
  launch_by_lanes(total_cols, false, [&](auto lanes, auto) {
    gat_aggregate_long_kernel<Index, lanes.value, Aggregate::kWeightedSums>
        <<<long_grid, kLongThreads, long_shared, stream>>>(
            a, z, ldz, el, ldel, er, lder, heads, width, dropout, alpha, ldalpha, out, ldout);
  });
  SLUICE_CUDA_LAUNCH_CHECK();
}

template <typename Index>
void launch_gat_backward_edges(const CsrArrays<Index>& a, const float* z, std::int64_t ldz,
                               const float* el, std::int64_t ldel, const float* er,
                               std::int64_t lder, const float* alpha, std::int64_t ldalpha,
                               const float* dout, std::int64_t lddout, int heads,
                               std::int64_t width, const AttentionDropout& dropout, float* dalpha,
                               float* atilde, float* d_el, float* d_er, cudaStream_t stream) {
  if (a.rows <= 0 || heads <= 0) return;
  const std::int64_t total_cols = heads * width;
  const bool power_of_two = width > 0 && width <= 32 && (width & (width - 1)) == 0;
  const bool vec4 = width % 4 == 0 && rows_aligned16(z, ldz) && rows_aligned16(dout, lddout);
  const unsigned blocks = warp_blocks(a.rows);
  const bool coop = power_of_two && total_cols <= 256 && heads <= 1024;
  const std::size_t long_shared =
      coop ? (static_cast<std::size_t>(kLongWarps) + 1) * heads * sizeof(float) : 0;
  const bool long_path = a.long_rows.count > 0 && long_shared <= kMaxLongShared;
  CsrArrays<Index> short_rows = a;
  if (!long_path) short_rows.long_rows = LongRows{};  // one warp per row for every row
  const unsigned long_grid = long_path ? long_blocks(a.long_rows.count) : 0;
  if (coop) {
    const std::size_t shared = static_cast<std::size_t>(detail::kWarpsPerBlock) * heads * 4;
    const int w = static_cast<int>(width);
    if (total_cols <= 64) {
      gat_backward_edges_coop_kernel<Index, 2><<<blocks, detail::kBlockThreads, shared, stream>>>(
          short_rows, z, ldz, el, ldel, er, lder, alpha, ldalpha, dout, lddout, heads, w, dropout,
          dalpha, atilde, d_el, d_er);
      SLUICE_CUDA_LAUNCH_CHECK();
      if (long_path)
        gat_backward_edges_coop_long_kernel<Index, 2>
            <<<long_grid, kLongThreads, long_shared, stream>>>(a, z, ldz, el, ldel, er, lder, alpha,
                                                               ldalpha, dout, lddout, heads, w,
                                                               dropout, dalpha, atilde, d_el, d_er);
    } else if (total_cols <= 128) {
      gat_backward_edges_coop_kernel<Index, 4><<<blocks, detail::kBlockThreads, shared, stream>>>(
          short_rows, z, ldz, el, ldel, er, lder, alpha, ldalpha, dout, lddout, heads, w, dropout,
          dalpha, atilde, d_el, d_er);
      SLUICE_CUDA_LAUNCH_CHECK();
      if (long_path)
        gat_backward_edges_coop_long_kernel<Index, 4>
            <<<long_grid, kLongThreads, long_shared, stream>>>(a, z, ldz, el, ldel, er, lder, alpha,
                                                               ldalpha, dout, lddout, heads, w,
                                                               dropout, dalpha, atilde, d_el, d_er);
    } else {
      gat_backward_edges_coop_kernel<Index, 8><<<blocks, detail::kBlockThreads, shared, stream>>>(
          short_rows, z, ldz, el, ldel, er, lder, alpha, ldalpha, dout, lddout, heads, w, dropout,
          dalpha, atilde, d_el, d_er);
      SLUICE_CUDA_LAUNCH_CHECK();
      if (long_path)
        gat_backward_edges_coop_long_kernel<Index, 8>
            <<<long_grid, kLongThreads, long_shared, stream>>>(a, z, ldz, el, ldel, er, lder, alpha,
                                                               ldalpha, dout, lddout, heads, w,
                                                               dropout, dalpha, atilde, d_el, d_er);
    }
  } else {
    gat_backward_edges_kernel<Index><<<blocks, detail::kBlockThreads, 0, stream>>>(
        short_rows, z, ldz, el, ldel, er, lder, alpha, ldalpha, dout, lddout, heads, width, dropout,
        dalpha, atilde, vec4, d_el, d_er);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (long_path)
      gat_backward_edges_long_kernel<Index><<<long_grid, kLongThreads, 0, stream>>>(
          a, z, ldz, el, ldel, er, lder, alpha, ldalpha, dout, lddout, heads, width, dropout,
          dalpha, atilde, vec4, d_el, d_er);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

template <typename Index>
void launch_gat_transpose_aggregate(const TransposedArrays<Index>& t, std::int64_t t_rows,
                                    const float* atilde, int heads, std::int64_t width,
                                    const float* dout, std::int64_t lddout, float* dz,
                                    std::int64_t lddz, cudaStream_t stream) {
  const std::int64_t total_cols = heads * width;
  if (t_rows <= 0 || total_cols <= 0) return;
  const unsigned blocks = warp_blocks(t_rows);
  const bool long_path = t.long_rows.count > 0;
  const std::int64_t skip = long_path ? t.long_rows.degree : INT64_MAX;
  const unsigned long_grid = long_path ? long_blocks(t.long_rows.count) : 0;
  const int per_lane = columns_per_lane(total_cols);
  const std::size_t long_shared =
      static_cast<std::size_t>(kLongWarps) * 32 * per_lane * sizeof(float);
  const bool vec4 =
      per_lane >= 4 && width % 4 == 0 && rows_aligned16(dout, lddout) && rows_aligned16(dz, lddz);
  launch_by_lanes(total_cols, vec4, [&](auto lanes, auto words) {
    gat_transpose_aggregate_kernel<Index, lanes.value, words.value>
        <<<blocks, detail::kBlockThreads, 0, stream>>>(t.indptr, t.columns, t.perm, t_rows, skip,
                                                       atilde, heads, width, dout, lddout, dz,
                                                       lddz);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (long_path)
      gat_transpose_aggregate_long_kernel<Index, lanes.value>
          <<<long_grid, kLongThreads, long_shared, stream>>>(t.indptr, t.columns, t.perm,
                                                             t.long_rows, atilde, heads, width,
                                                             dout, lddout, dz, lddz);
  });
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_gat_row_sums(std::int64_t rows, const float* dout, std::int64_t lddout,
                         const float* out, std::int64_t ldout, int heads, std::int64_t width,
                         float* sums, std::int64_t ldsums, cudaStream_t stream) {
  if (rows <= 0 || heads <= 0) return;
  if (heads == 1 && width <= 64 && width % 32 != 0 && rows_aligned16(dout, lddout) &&
      rows_aligned16(out, ldout)) {
    gat_narrow_row_sums_kernel<<<detail::blocks_for((rows + 3) / 4, detail::kWarpsPerBlock),
                                 detail::kBlockThreads, 0, stream>>>(
        rows, dout, lddout, out, ldout, static_cast<int>(width), sums, ldsums);
  } else {
    gat_row_sums_kernel<<<warp_blocks(rows), detail::kBlockThreads, 0, stream>>>(
        rows, dout, lddout, out, ldout, heads, width, sums, ldsums);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

namespace {

template <typename Index, int kColumnsPerLane, bool kVec4, HeadSum kSum>
void launch_by_source_variant(const GatBySource<Index>& p, int group, cudaStream_t stream) {
  const std::size_t shared = sizeof(float) * static_cast<std::size_t>(kRowWarps) * 128 * p.heads;
  gat_by_source_kernel<Index, kColumnsPerLane, kVec4, kSum>
      <<<row_blocks(p.a.cols), kRowThreads, shared, stream>>>(p, group);
  SLUICE_CUDA_LAUNCH_CHECK();
  if (p.t.long_rows.count == 0) return;
  const auto long_kernel = gat_by_source_long_kernel<Index, kColumnsPerLane, kVec4, kSum>;
  const std::size_t long_shared = by_source_long_shared(p.heads, kColumnsPerLane);
  if (long_shared > kMaxLongShared)
    SLUICE_CUDA(cudaFuncSetAttribute(long_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(long_shared)));
  long_kernel<<<long_blocks(p.t.long_rows.count), kBySourceLongThreads, long_shared, stream>>>(
      p, group);
  SLUICE_CUDA_LAUNCH_CHECK();
}

template <typename Index, int kColumnsPerLane, bool kVec4>
void launch_by_source_layout(const GatBySource<Index>& p, int group, cudaStream_t stream) {
  if (group > 0) {
    launch_by_source_variant<Index, kColumnsPerLane, kVec4, HeadSum::kLaneGroup>(p, group, stream);
  } else if (p.heads == 1) {
    launch_by_source_variant<Index, kColumnsPerLane, kVec4, HeadSum::kWarpOneHead>(p, 0, stream);
  } else {
    launch_by_source_variant<Index, kColumnsPerLane, kVec4, HeadSum::kWarp>(p, 0, stream);
  }
}

template <typename Index, int kGroup>
void launch_narrow_by_source(const GatBySource<Index>& p, cudaStream_t stream) {
  SLUICE_EXPECTS(p.lddout < gat_detail::RowStride::kMaxLd, "GAT backward: dO rows ", p.lddout,
                 " floats apart");
  const std::size_t shared = sizeof(float) * static_cast<std::size_t>(kRowWarps) * 128;
  gat_narrow_by_source_kernel<Index, kGroup>
      <<<row_blocks(p.a.cols), kRowThreads, shared, stream>>>(p);
  SLUICE_CUDA_LAUNCH_CHECK();
  if (p.t.long_rows.count == 0) return;
  const auto long_kernel = gat_narrow_by_source_long_kernel<Index, kGroup>;
  const std::size_t long_shared = narrow_by_source_long_shared(kGroup);
  if (long_shared > kMaxLongShared)
    SLUICE_CUDA(cudaFuncSetAttribute(long_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(long_shared)));
  long_kernel<<<long_blocks(p.t.long_rows.count), kBySourceLongThreads, long_shared, stream>>>(p);
  SLUICE_CUDA_LAUNCH_CHECK();
}

bool power_of_two_up_to_32(std::int64_t n) {
  return n > 0 && n <= 32 && (n & (n - 1)) == 0;
}

}  // namespace

template <typename Index>
void launch_gat_backward_by_source(const GatBySource<Index>& p, cudaStream_t stream) {
  SLUICE_EXPECTS(
      gat_backward_by_source(p.heads, p.width) && p.t.perm != nullptr && p.att_src != nullptr,
      "the GAT backward by source takes at most ", kGatBySourceMaxHeads,
      " heads of 256 columns in all and the transposed entry order");
  if (p.a.cols <= 0 || p.a.nnz <= 0) return;
  const std::int64_t total_cols = p.heads * p.width;
  if (p.heads == 1 && total_cols <= kNarrowMaxColumns) {
    // Groups of 4, 8 or 16 lanes per entry, 4 columns a lane.
    if (total_cols <= 4 * kNarrowColumnsPerLane) {
      launch_narrow_by_source<Index, 4>(p, stream);
    } else if (total_cols <= 8 * kNarrowColumnsPerLane) {
      launch_narrow_by_source<Index, 8>(p, stream);
    } else {
      launch_narrow_by_source<Index, 16>(p, stream);
    }
    return;
  }
  const int per_lane = columns_per_lane(total_cols);
  const bool vec4 = per_lane >= 4 && p.width % 4 == 0 && rows_aligned16(p.z, p.ldz) &&
                    rows_aligned16(p.dout, p.lddout) && rows_aligned16(p.dz, p.lddz);
  // Lanes per head within a word: the word's head is a whole aligned group of lanes.
  const std::int64_t lanes = vec4 ? p.width / 4 : p.width;
  const int group = power_of_two_up_to_32(lanes) ? static_cast<int>(lanes) : 0;
  launch_by_lanes(total_cols, vec4, [&](auto lanes, auto words) {
    launch_by_source_layout<Index, lanes.value, words.value>(p, group, stream);
  });
}

template <typename Index>
void launch_gat_destination_sums(const CsrArrays<Index>& a, const float* ds, int heads, float* d_er,
                                 cudaStream_t stream) {
  gat_detail::launch_row_share_sums(gat_detail::RowRanges<Index>{a.indptr, a.rows, a.long_rows},
                                    StoredShares{ds, heads}, heads,
                                    gat_detail::head_records({{ds, heads}}), d_er, stream);
}

void launch_gat_scores_backward(const float* dscore, std::int64_t lds, const vertex_t* row_map,
                                std::int64_t rows, int heads, std::int64_t width, const float* z,
                                std::int64_t ldz, const float* att, float* dz, std::int64_t lddz,
                                float* d_att, float* partials, cudaStream_t stream) {
  const std::int64_t total_cols = heads * width;
  if (rows <= 0 || total_cols <= 0) return;
  const dim3 grid(detail::blocks_for(total_cols, 32),
                  static_cast<unsigned>(column_sum_slices(rows)));
  gat_scores_backward_kernel<<<grid, dim3(32, kScoreRows), 0, stream>>>(
      dscore, lds, row_map, rows, width, total_cols, z, ldz, att, dz, lddz, partials);
  SLUICE_CUDA_LAUNCH_CHECK();
  launch_add_slice_sums(partials, grid.y, total_cols, d_att, stream);
}

template void launch_gat_aggregate<std::int32_t>(const CsrArrays<std::int32_t>&, const float*,
                                                 std::int64_t, const float*, std::int64_t,
                                                 const float*, std::int64_t, int, std::int64_t,
                                                 const AttentionDropout&, float*, std::int64_t,
                                                 float*, std::int64_t, cudaStream_t);
template void launch_gat_aggregate<std::int64_t>(const CsrArrays<std::int64_t>&, const float*,
                                                 std::int64_t, const float*, std::int64_t,
                                                 const float*, std::int64_t, int, std::int64_t,
                                                 const AttentionDropout&, float*, std::int64_t,
                                                 float*, std::int64_t, cudaStream_t);
#define SLUICE_GAT_INSTANTIATE(Index)                                                              \
  template void launch_gat_backward_edges<Index>(                                                  \
      const CsrArrays<Index>&, const float*, std::int64_t, const float*, std::int64_t,             \
      const float*, std::int64_t, const float*, std::int64_t, const float*, std::int64_t, int,     \
      std::int64_t, const AttentionDropout&, float*, float*, float*, float*, cudaStream_t);        \
  template void launch_gat_transpose_aggregate<Index>(                                             \
      const TransposedArrays<Index>&, std::int64_t, const float*, int, std::int64_t, const float*, \
      std::int64_t, float*, std::int64_t, cudaStream_t);                                           \
  template void launch_gat_backward_by_source<Index>(const GatBySource<Index>&, cudaStream_t);     \
  template void launch_gat_destination_sums<Index>(const CsrArrays<Index>&, const float*, int,     \
                                                   float*, cudaStream_t);
SLUICE_GAT_INSTANTIATE(std::int32_t)
SLUICE_GAT_INSTANTIATE(std::int64_t)
#undef SLUICE_GAT_INSTANTIATE

}  // namespace sluice::cuda
