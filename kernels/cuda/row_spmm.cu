// The row SpMM (row_spmm.hpp). A warp per row on a row-local grid; the row's entries 32 at a
// time: lane j loads entry j's column and weight, then the warp's lane groups take the entries
// several at a time each (a group of 32 / G lanes covers a column pass, G groups take G entries
// side by side), the groups' sums added in a fixed tree at the end. Rows longer than
// LongRows::degree get a block of warps, combined in warp order.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/error.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_spmm.hpp"
#include "kernels/entry_weights.hpp"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::kRowThreads;
using detail::lane_id;
using detail::row_blocks;

constexpr int kLongWarps = 16;
constexpr int kLongThreads = 32 * kLongWarps;

// A column pass: kFloats columns per lane, lanes in groups of kGroupLanes; a group covers kSpan
// columns. kVec4: lane l of a group holds the 16-byte words 4 (l + kGroupLanes t) .. + 3 (rows
// 16-byte aligned); else the columns l + kGroupLanes s, one float at a time.
template <int kFloats, int kGroupLanes, bool kVec4>
struct Pass {
  static_assert(!kVec4 || kFloats % 4 == 0, "16-byte words of 4 floats");
  static constexpr int kGroups = 32 / kGroupLanes;
  static constexpr int kSpan = kFloats * kGroupLanes;
  // Entries each group loads before adding them (in entry order): more for narrow passes, whose
  // registers allow it, to keep more loads in flight.
  static constexpr int kInFlight = kFloats <= 8 ? 4 : 2;
  // The column (from the pass's first) of the lane's slot s.
  __device__ static int column(int group_lane, int s) {
    return kVec4 ? 4 * (group_lane + kGroupLanes * (s / 4)) + s % 4 : group_lane + kGroupLanes * s;
  }
};

// The weight of entry e (column `column`) of row `row` of the walked structure, whose entries
// are [begin, end); row_degree: row_degree_of().
template <typename Index>
__device__ __forceinline__ float entry_weight(const RowSpmmMatrix<Index>& a, std::int64_t row,
                                              std::int64_t e, std::int64_t begin, std::int64_t end,
                                              std::int64_t column, std::int32_t row_degree) {
  if (a.weights == CsrWeights::kPerCall)
    return a.values[a.perm ? static_cast<std::int64_t>(a.perm[e]) : e];
  if (a.over == RowSpmmOver::kMatrix) {
    if (a.weights == CsrWeights::kSymmetricNorm)
      return symmetric_norm(row_degree, a.degrees[column]);
    return e == begin ? 0.f : neighbor_mean(end - begin);
  }
  // Transposed: `column` is the CSR's row r, `row` its column c.
  if (a.weights == CsrWeights::kSymmetricNorm)
    return symmetric_norm(a.self_degrees[column], row_degree);
  return a.self[column] == row
             ? 0.f
             : neighbor_mean(a.matrix_indptr[column + 1] - a.matrix_indptr[column]);
}

// The symmetric norm's per-row degree: of the row's first (self) entry's column, or, walking the
// transpose, of the row's own column.
template <typename Index>
__device__ __forceinline__ std::int32_t row_degree_of(const RowSpmmMatrix<Index>& a,
                                                      std::int64_t row, std::int64_t begin,
                                                      std::int64_t end) {
  if (a.weights != CsrWeights::kSymmetricNorm || begin == end) return 0;
  return a
      .degrees[a.over == RowSpmmOver::kMatrix ? static_cast<std::int64_t>(a.columns[begin]) : row];
}

template <int kFloats, int kGroupLanes, bool kVec4>
__device__ __forceinline__ void load_slots(float (&v)[kFloats], const float* row, int column_base,
                                           int group_lane, int cols) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  if constexpr (kVec4) {
#pragma unroll
    for (int t = 0; t < kFloats / 4; ++t) {
      const int c = column_base + P::column(group_lane, 4 * t);
      // A row's last word may reach past cols, never past ld (a multiple of 4).
      const float4 w =
          c < cols ? *reinterpret_cast<const float4*>(row + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      v[4 * t] = w.x;
      v[4 * t + 1] = w.y;
      v[4 * t + 2] = w.z;
      v[4 * t + 3] = w.w;
    }
  } else {
#pragma unroll
    for (int t = 0; t < kFloats; ++t) {
      const int c = column_base + P::column(group_lane, t);
      v[t] = c < cols ? row[c] : 0.f;
    }
  }
}

// The warp's share of row [begin, end): its 32-entry chunks from begin + first, stepping by
// step, accumulated into each group's acc (group g takes entries g, g + G, g + 2G, ... of a
// chunk, in order, kInFlight of them loaded at a time).
template <typename Index, int kFloats, int kGroupLanes, bool kVec4>
__device__ __forceinline__ void accumulate_chunks(
    const RowSpmmMatrix<Index>& a, const float* __restrict__ x, std::int64_t ldx, std::int64_t row,
    std::int64_t begin, std::int64_t end, std::int64_t first, std::int64_t step,
    std::int32_t row_degree, int column_base, int cols, float (&acc)[kFloats]) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  constexpr int G = P::kGroups;
  constexpr int kIn = P::kInFlight;
  const int lane = lane_id();
  const int group = lane / kGroupLanes, group_lane = lane % kGroupLanes;
  for (std::int64_t chunk = begin + first; chunk < end; chunk += step) {
    std::int64_t column_mine = 0;
    float weight_mine = 0.f;
    if (chunk + lane < end) {
      column_mine = a.columns[chunk + lane];
      weight_mine = entry_weight(a, row, chunk + lane, begin, end, column_mine, row_degree);
    }
    const int count = static_cast<int>(end - chunk < 32 ? end - chunk : 32);
    for (int j = 0; j < count; j += kIn * G) {
      std::int64_t c[kIn];
      float w[kIn];
#pragma unroll
      for (int k = 0; k < kIn; ++k) {
        const int source = (j + k * G + group) & 31;
        c[k] = __shfl_sync(0xffffffffu, column_mine, source);
        w[k] = __shfl_sync(0xffffffffu, weight_mine, source);
      }
      float v[kIn][kFloats];
#pragma unroll
      for (int k = 0; k < kIn; ++k)
        if (j + k * G + group < count)
          load_slots<kFloats, kGroupLanes, kVec4>(v[k], x + c[k] * ldx, column_base, group_lane,
                                                  cols);
#pragma unroll
      for (int k = 0; k < kIn; ++k)
        if (j + k * G + group < count) {
#pragma unroll
          for (int t = 0; t < kFloats; ++t) acc[t] = fmaf(w[k], v[k][t], acc[t]);
        }
    }
  }
  // The groups' sums, in a fixed tree (every lane ends with the warp's sum of its columns).
#pragma unroll
  for (int offset = kGroupLanes; offset < 32; offset *= 2) {
#pragma unroll
    for (int t = 0; t < kFloats; ++t) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
  }
}

template <RowSpmmWrite kWrite>
__device__ __forceinline__ void write_value(float* target, float v) {
  if constexpr (kWrite == RowSpmmWrite::kAdd) {
    *target += v;
  } else {
    *target = v;
  }
}

// Writes (or adds) one lane's slots of a pass (the lanes of group 0 write; columns < cols only).
template <int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
__device__ __forceinline__ void write_slots(const float (&acc)[kFloats], float* row,
                                            int column_base, int group_lane, int cols) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  if constexpr (kVec4) {
#pragma unroll
    for (int t = 0; t < kFloats / 4; ++t) {
      const int c = column_base + P::column(group_lane, 4 * t);
      if (c >= cols) continue;
      if (c + 4 <= cols) {
        float4* target = reinterpret_cast<float4*>(row + c);
        float4 y = make_float4(acc[4 * t], acc[4 * t + 1], acc[4 * t + 2], acc[4 * t + 3]);
        if constexpr (kWrite == RowSpmmWrite::kAdd) {
          const float4 old = *target;
          y.x += old.x;
          y.y += old.y;
          y.z += old.z;
          y.w += old.w;
        }
        *target = y;
      } else {
        for (int k = 0; k < cols - c; ++k) write_value<kWrite>(row + c + k, acc[4 * t + k]);
      }
    }
  } else {
#pragma unroll
    for (int t = 0; t < kFloats; ++t) {
      const int c = column_base + P::column(group_lane, t);
      if (c < cols) write_value<kWrite>(row + c, acc[t]);
    }
  }
}

// A warp per row, rows up to a.long_rows.degree entries.
template <typename Index, int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
__global__ void __launch_bounds__(kRowThreads)
    row_spmm_kernel(RowSpmmMatrix<Index> a, const float* __restrict__ x, std::int64_t ldx,
                    float* __restrict__ y, std::int64_t ldy, int cols) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  const std::int64_t r = global_warp();
  if (r >= a.rows) return;
  const std::int64_t begin = a.indptr[r], end = a.indptr[r + 1];
  if (end - begin > a.long_rows.degree) return;  // the long-row kernel's
  if (kWrite == RowSpmmWrite::kAdd && begin == end) return;
  const std::int32_t row_degree = row_degree_of(a, r, begin, end);
  const int lane = lane_id();
  for (int column_base = 0; column_base < cols; column_base += P::kSpan) {
    float acc[kFloats] = {};
    accumulate_chunks<Index, kFloats, kGroupLanes, kVec4>(a, x, ldx, r, begin, end, 0, 32,
                                                          row_degree, column_base, cols, acc);
    if (lane < kGroupLanes)
      write_slots<kFloats, kGroupLanes, kVec4, kWrite>(acc, y + r * ldy, column_base, lane, cols);
  }
}

// A block of kLongWarps warps per listed long row: warp w takes chunks w, w + kLongWarps, ...;
// the warps' sums are added in warp order through shared memory.
template <typename Index, int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
__global__ void __launch_bounds__(kLongThreads)
    row_spmm_long_kernel(RowSpmmMatrix<Index> a, const float* __restrict__ x, std::int64_t ldx,
                         float* __restrict__ y, std::int64_t ldy, int cols) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  __shared__ float partial[kLongWarps][P::kSpan];
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  for (std::int64_t k = blockIdx.x; k < a.long_rows.count; k += gridDim.x) {
    const std::int64_t r = a.long_rows.rows[k];
    const std::int64_t begin = a.indptr[r], end = a.indptr[r + 1];
    const std::int32_t row_degree = row_degree_of(a, r, begin, end);
    for (int column_base = 0; column_base < cols; column_base += P::kSpan) {
      float acc[kFloats] = {};
      accumulate_chunks<Index, kFloats, kGroupLanes, kVec4>(
          a, x, ldx, r, begin, end, 32 * warp, 32 * kLongWarps, row_degree, column_base, cols, acc);
      if (lane < kGroupLanes) {
#pragma unroll
        for (int t = 0; t < kFloats; ++t) partial[warp][P::column(lane, t)] = acc[t];
      }
      __syncthreads();
      for (int c = static_cast<int>(threadIdx.x); c < P::kSpan; c += kLongThreads) {
        if (column_base + c >= cols) continue;
        float sum = 0.f;
        for (int w = 0; w < kLongWarps; ++w) sum += partial[w][c];
        write_value<kWrite>(y + r * ldy + column_base + c, sum);
      }
      __syncthreads();
    }
  }
}

template <typename Index, int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
void launch_layout(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                   std::int64_t ldy, int cols, cudaStream_t stream) {
  row_spmm_kernel<Index, kFloats, kGroupLanes, kVec4, kWrite>
      <<<row_blocks(a.rows), kRowThreads, 0, stream>>>(a, x, ldx, y, ldy, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
  if (a.long_rows.count == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(a.long_rows.count, 65535));
  row_spmm_long_kernel<Index, kFloats, kGroupLanes, kVec4, kWrite>
      <<<blocks, kLongThreads, 0, stream>>>(a, x, ldx, y, ldy, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

// The pass layout by width: narrow products put several entries side by side; wide ones take
// up to 640 columns a pass (20 a lane), so that 602-wide rows need one pass.
template <typename Index, bool kVec4, RowSpmmWrite kWrite>
void launch_width(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                  std::int64_t ldy, int cols, cudaStream_t stream) {
  if (cols <= 32) {
    launch_layout<Index, 4, 8, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else if (cols <= 64) {
    launch_layout<Index, 4, 16, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else if (cols <= 128) {
    launch_layout<Index, 4, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else if (cols <= 256) {
    launch_layout<Index, 8, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else if (cols <= 384) {
    launch_layout<Index, 12, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else if (cols <= 512) {
    launch_layout<Index, 16, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  } else {
    launch_layout<Index, 20, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, stream);
  }
}

template <typename Index, bool kVec4>
void launch_rows(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                 std::int64_t ldy, int cols, RowSpmmWrite write, cudaStream_t stream) {
  if (write == RowSpmmWrite::kAdd) {
    launch_width<Index, kVec4, RowSpmmWrite::kAdd>(a, x, ldx, y, ldy, cols, stream);
  } else {
    launch_width<Index, kVec4, RowSpmmWrite::kStore>(a, x, ldx, y, ldy, cols, stream);
  }
}

// Whether x and y have 16-byte aligned rows, which the vector loads need.
bool row_spmm_aligned(const float* x, std::int64_t ldx, const float* y, std::int64_t ldy) {
  const auto aligned = [](const float* p, std::int64_t ld) {
    return ld % 4 == 0 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  };
  return aligned(x, ldx) && aligned(y, ldy);
}

}  // namespace

template <typename Index>
void launch_row_spmm(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                     std::int64_t ldy, std::int64_t cols, RowSpmmWrite write, cudaStream_t stream) {
  SLUICE_EXPECTS(cols <= INT32_MAX, "row SpMM: ", cols, " columns");
  if (a.rows <= 0 || cols <= 0) return;
  const int c = static_cast<int>(cols);
  if (row_spmm_aligned(x, ldx, y, ldy)) {
    launch_rows<Index, true>(a, x, ldx, y, ldy, c, write, stream);
  } else {
    launch_rows<Index, false>(a, x, ldx, y, ldy, c, write, stream);
  }
}

template void launch_row_spmm<std::int32_t>(const RowSpmmMatrix<std::int32_t>&, const float*,
                                            std::int64_t, float*, std::int64_t, std::int64_t,
                                            RowSpmmWrite, cudaStream_t);
template void launch_row_spmm<std::int64_t>(const RowSpmmMatrix<std::int64_t>&, const float*,
                                            std::int64_t, float*, std::int64_t, std::int64_t,
                                            RowSpmmWrite, cudaStream_t);

}  // namespace sluice::cuda
