// The row SpMM (row_spmm.hpp). A warp per row on a row-local grid; the row's entries 32 at a
// time: lane j loads entry j's column and weight, then the warp's lane groups take the entries
// several at a time each (a group of 32 / G lanes covers a column pass, G groups take G entries
// side by side), the groups' sums added in a fixed tree at the end. Products of at most 32
// columns, and of at most 128 over a transpose of short rows, give their short rows a lane group
// each instead (grouped_row_spmm_kernel). Rows longer
// than LongRows::degree get a block of warps, combined in warp order; the longest of them
// (LongRows::split) a block per segment, whose sums a second kernel adds in segment order.
#include <cub/block/block_scan.cuh>

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
static_assert(kMaxSplitRows == kLongThreads, "a thread per split row counts its segments");

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

// The warp's share of entries [from, to) of row [begin, end): its 32-entry chunks from `from`,
// stepping by step, accumulated into each group's acc (group g takes entries g, g + G, g + 2G,
// ... of a chunk, in order, kInFlight of them loaded at a time).
template <typename Index, int kFloats, int kGroupLanes, bool kVec4>
__device__ __forceinline__ void accumulate_chunks(
    const RowSpmmMatrix<Index>& a, const float* __restrict__ x, std::int64_t ldx, std::int64_t row,
    std::int64_t begin, std::int64_t end, std::int64_t from, std::int64_t to, std::int64_t step,
    std::int32_t row_degree, int column_base, int cols, float (&acc)[kFloats]) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  constexpr int G = P::kGroups;
  constexpr int kIn = P::kInFlight;
  const int lane = lane_id();
  const int group = lane / kGroupLanes, group_lane = lane % kGroupLanes;
  for (std::int64_t chunk = from; chunk < to; chunk += step) {
    std::int64_t column_mine = 0;
    float weight_mine = 0.f;
    if (chunk + lane < to) {
      column_mine = a.columns[chunk + lane];
      weight_mine = entry_weight(a, row, chunk + lane, begin, end, column_mine, row_degree);
    }
    const int count = static_cast<int>(to - chunk < 32 ? to - chunk : 32);
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
  const std::int64_t r = a.first_row + global_warp();
  if (r >= a.end_row) return;
  const std::int64_t begin = a.indptr[r], end = a.indptr[r + 1];
  if (end - begin > a.long_rows.degree) return;  // the long-row kernel's
  if (kWrite == RowSpmmWrite::kAdd && begin == end) return;
  const std::int32_t row_degree = row_degree_of(a, r, begin, end);
  const int lane = lane_id();
  for (int column_base = 0; column_base < cols; column_base += P::kSpan) {
    float acc[kFloats] = {};
    accumulate_chunks<Index, kFloats, kGroupLanes, kVec4>(a, x, ldx, r, begin, end, begin, end, 32,
                                                          row_degree, column_base, cols, acc);
    if (lane < kGroupLanes)
      write_slots<kFloats, kGroupLanes, kVec4, kWrite>(acc, y + r * ldy, column_base, lane, cols);
  }
}

// One pass of kGroupLanes lanes covering the product's columns (narrow products, or short rows:
// grid_for()): a group of lanes per row for the rows of at most kShortRow entries, kGroups rows
// a warp at once, each group walking its row's entries in order: a round of kGroupLanes entries
// (at least kShortInFlight) at a time, lane j of the group reading entry j's column and weight
// (a weight takes double arithmetic: once per entry, not once per lane), then kShortInFlight of
// them loaded at a time from the lanes that read them. Then the warp's rows of more entries (up to
// the long-row degree), one at a time with every group on them, as row_spmm_kernel does. Most rows
// of a power-law graph are short: a warp each kept one row's few loads in flight.
constexpr int kShortRow = 32;
constexpr int kShortInFlight = 4;
// Blocks of the grouped kernel resident on an SM at least: at most 64 registers a thread.
constexpr int kGroupedRowBlocks = 16;

// The lanes of group `group` of kGroupLanes lanes, as a shuffle mask.
template <int kGroupLanes>
__device__ __forceinline__ unsigned group_mask(int group) {
  if constexpr (kGroupLanes == 32) {
    return 0xffffffffu;
  } else {
    return ((1u << kGroupLanes) - 1u) << (kGroupLanes * group);
  }
}

template <typename Index, int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
__global__ void __launch_bounds__(kRowThreads, kGroupedRowBlocks)
    grouped_row_spmm_kernel(RowSpmmMatrix<Index> a, const float* __restrict__ x, std::int64_t ldx,
                            float* __restrict__ y, std::int64_t ldy, int cols) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  constexpr int G = P::kGroups;
  // A round: kRound entries whose columns and weights the group's lanes read, kPerLane each (a
  // lane of a 2-lane group reads two, so that a round holds kShortInFlight entries).
  constexpr int kPerLane = kGroupLanes < kShortInFlight ? kShortInFlight / kGroupLanes : 1;
  constexpr int kRound = kGroupLanes * kPerLane;
  static_assert(kPerLane == 1 || kRound == kShortInFlight, "a round of several slots is one step");
  const int lane = lane_id(), group = lane / kGroupLanes, group_lane = lane % kGroupLanes;
  const std::int64_t r = a.first_row + global_warp() * G + group;
  const bool live = r < a.end_row;
  std::int64_t begin = 0, end = 0;
  if (live) {
    begin = a.indptr[r];
    end = a.indptr[r + 1];
  }
  const std::int64_t short_limit = kShortRow < a.long_rows.degree ? kShortRow : a.long_rows.degree;
  if (live && end - begin <= short_limit && !(kWrite == RowSpmmWrite::kAdd && begin == end)) {
    const std::int32_t row_degree = row_degree_of(a, r, begin, end);
    const unsigned mask = group_mask<kGroupLanes>(group);
    float acc[kFloats] = {};
    for (std::int64_t base = begin; base < end; base += kRound) {
      // Every lane of the group takes the same branches: count is the group's.
      const int count = static_cast<int>(end - base < kRound ? end - base : kRound);
      std::int64_t column_mine[kPerLane];
      float weight_mine[kPerLane];
#pragma unroll
      for (int p = 0; p < kPerLane; ++p) {
        const int i = group_lane + kGroupLanes * p;
        column_mine[p] = i < count ? static_cast<std::int64_t>(a.columns[base + i]) : 0;
        weight_mine[p] =
            i < count ? entry_weight(a, r, base + i, begin, end, column_mine[p], row_degree) : 0.f;
      }
      for (int j = 0; j < count; j += kShortInFlight) {
        float w[kShortInFlight];
        float v[kShortInFlight][kFloats];
#pragma unroll
        for (int k = 0; k < kShortInFlight; ++k)
          if (j + k < count) {
            // Entry j + k of the round sits in slot (j + k) / kGroupLanes of lane (j + k) %
            // kGroupLanes; with several slots a lane, a round is one step (j = 0).
            const int slot = kPerLane == 1 ? 0 : k / kGroupLanes;
            const int from = (j + k) % kGroupLanes;
            const std::int64_t c = __shfl_sync(mask, column_mine[slot], from, kGroupLanes);
            w[k] = __shfl_sync(mask, weight_mine[slot], from, kGroupLanes);
            load_slots<kFloats, kGroupLanes, kVec4>(v[k], x + c * ldx, 0, group_lane, cols);
          }
#pragma unroll
        for (int k = 0; k < kShortInFlight; ++k)
          if (j + k < count) {
#pragma unroll
            for (int t = 0; t < kFloats; ++t) acc[t] = fmaf(w[k], v[k][t], acc[t]);
          }
      }
    }
    write_slots<kFloats, kGroupLanes, kVec4, kWrite>(acc, y + r * ldy, 0, group_lane, cols);
  }
  // The warp's rows of more than short_limit entries, up to the long-row degree.
  const bool medium =
      live && group_lane == 0 && end - begin > short_limit && end - begin <= a.long_rows.degree;
  for (unsigned rows = __ballot_sync(0xffffffffu, medium); rows != 0; rows &= rows - 1) {
    const int leader = __ffs(static_cast<int>(rows)) - 1;
    const std::int64_t rg = __shfl_sync(0xffffffffu, r, leader);
    const std::int64_t bg = __shfl_sync(0xffffffffu, begin, leader);
    const std::int64_t eg = __shfl_sync(0xffffffffu, end, leader);
    const std::int32_t row_degree = row_degree_of(a, rg, bg, eg);
    float acc[kFloats] = {};
    accumulate_chunks<Index, kFloats, kGroupLanes, kVec4>(a, x, ldx, rg, bg, eg, bg, eg, 32,
                                                          row_degree, 0, cols, acc);
    if (lane < kGroupLanes)
      write_slots<kFloats, kGroupLanes, kVec4, kWrite>(acc, y + rg * ldy, 0, lane, cols);
  }
}

// segment_end[k]: the segments of split rows 0..k (LongRows::split), counted by the block's
// kLongThreads threads, a thread per row.
template <typename Index>
__device__ void split_segment_ends(const RowSpmmMatrix<Index>& a, std::int32_t* segment_end) {
  using Scan = cub::BlockScan<std::int32_t, kLongThreads>;
  __shared__ typename Scan::TempStorage scan;
  const LongSplit& split = a.long_rows.split;
  const int t = static_cast<int>(threadIdx.x);
  std::int32_t segments = 0;  // fewer than kMaxLongSegments in all
  if (t < split.rows) {
    const std::int64_t r = a.long_rows.rows[t];
    segments = static_cast<std::int32_t>(
        (a.indptr[r + 1] - a.indptr[r] + split.segment_entries - 1) / split.segment_entries);
  }
  std::int32_t end = 0;
  Scan(scan).InclusiveSum(segments, end);
  segment_end[t] = end;
  __syncthreads();
}

// The split row whose segments include segment `item`: the first k with segment_end[k] > item.
__device__ __forceinline__ std::int64_t split_row_of(const std::int32_t* segment_end,
                                                     std::int64_t rows, std::int64_t item) {
  std::int64_t low = 0, high = rows - 1;
  while (low < high) {
    const std::int64_t mid = (low + high) / 2;
    if (segment_end[mid] > item)
      high = mid;
    else
      low = mid + 1;
  }
  return low;
}

// A block of kLongWarps warps per work item: a segment of a split row (the first
// split.segments items), whose sums go to row `item` of segment_sums (cols wide), or a whole
// other long row. Warp w takes chunks w, w + kLongWarps, ... of the item's entries; the warps'
// sums are added in warp order through shared memory.
template <typename Index, int kFloats, int kGroupLanes, bool kVec4, RowSpmmWrite kWrite>
__global__ void __launch_bounds__(kLongThreads)
    row_spmm_long_kernel(RowSpmmMatrix<Index> a, const float* __restrict__ x, std::int64_t ldx,
                         float* __restrict__ y, std::int64_t ldy, int cols,
                         float* __restrict__ segment_sums) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  __shared__ float partial[kLongWarps][P::kSpan];
  __shared__ std::int32_t segment_end[kMaxSplitRows];
  const int lane = lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const LongSplit& split = a.long_rows.split;
  const std::int64_t items = split.segments + a.long_rows.count - split.rows;
  // Items only grow along the grid-stride loop: a block starting past the segments takes none.
  if (blockIdx.x < split.segments) split_segment_ends(a, segment_end);
  for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const bool segment = item < split.segments;
    std::int64_t r, from, to;
    float* target;
    if (segment) {
      const std::int64_t k = split_row_of(segment_end, split.rows, item);
      const std::int64_t s = item - (k > 0 ? segment_end[k - 1] : 0);
      r = a.long_rows.rows[k];
      from = a.indptr[r] + s * split.segment_entries;
      to = min(from + split.segment_entries, static_cast<std::int64_t>(a.indptr[r + 1]));
      target = segment_sums + item * cols;
    } else {
      r = a.long_rows.rows[split.rows + item - split.segments];
      from = a.indptr[r];
      to = a.indptr[r + 1];
      target = y + r * ldy;
    }
    if (r < a.first_row || r >= a.end_row) continue;  // the whole block skips the item
    const std::int64_t begin = a.indptr[r], end = a.indptr[r + 1];
    const std::int32_t row_degree = row_degree_of(a, r, begin, end);
    for (int column_base = 0; column_base < cols; column_base += P::kSpan) {
      float acc[kFloats] = {};
      accumulate_chunks<Index, kFloats, kGroupLanes, kVec4>(a, x, ldx, r, begin, end,
                                                            from + 32 * warp, to, 32 * kLongWarps,
                                                            row_degree, column_base, cols, acc);
      if (lane < kGroupLanes) {
#pragma unroll
        for (int t = 0; t < kFloats; ++t) partial[warp][P::column(lane, t)] = acc[t];
      }
      __syncthreads();
      for (int c = static_cast<int>(threadIdx.x); c < P::kSpan; c += kLongThreads) {
        if (column_base + c >= cols) continue;
        float sum = 0.f;
        for (int w = 0; w < kLongWarps; ++w) sum += partial[w][c];
        if (segment)
          target[column_base + c] = sum;
        else
          write_value<kWrite>(target + column_base + c, sum);
      }
      __syncthreads();
    }
  }
}

// A block per split row: its segments' sums added in segment order into (or stored in) y.
template <typename Index, RowSpmmWrite kWrite>
__global__ void __launch_bounds__(kLongThreads)
    row_spmm_segments_kernel(RowSpmmMatrix<Index> a, const float* __restrict__ segment_sums,
                             float* __restrict__ y, std::int64_t ldy, int cols) {
  __shared__ std::int32_t segment_end[kMaxSplitRows];
  split_segment_ends(a, segment_end);
  const LongSplit& split = a.long_rows.split;
  for (std::int64_t k = blockIdx.x; k < split.rows; k += gridDim.x) {
    const std::int64_t first = k > 0 ? segment_end[k - 1] : 0, last = segment_end[k];
    const std::int64_t r = a.long_rows.rows[k];
    if (r < a.first_row || r >= a.end_row) continue;
    float* row = y + r * ldy;
    for (int c = static_cast<int>(threadIdx.x); c < cols; c += kLongThreads) {
      float sum = 0.f;
      for (std::int64_t s = first; s < last; ++s) sum += segment_sums[s * cols + c];
      write_value<kWrite>(row + c, sum);
    }
  }
}

// How a launch lays rows on warps: a warp per row, or a lane group per row of at most kShortRow
// entries (grouped_row_spmm_kernel; one column pass).
enum class RowGrid { kWarpPerRow, kGroupPerShortRow };

// Transposed structures of at most kRowSpmmShortMean entries a row on average (row_spmm.hpp)
// take a lane group per short row at up to 128 columns.
template <typename Index>
RowGrid grid_for(const RowSpmmMatrix<Index>& a) {
  return a.over == RowSpmmOver::kTransposed && a.nnz <= kRowSpmmShortMean * a.rows
             ? RowGrid::kGroupPerShortRow
             : RowGrid::kWarpPerRow;
}

template <RowGrid kGrid, typename Index, int kFloats, int kGroupLanes, bool kVec4,
          RowSpmmWrite kWrite>
void launch_layout(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                   std::int64_t ldy, int cols, float* segment_sums, cudaStream_t stream) {
  using P = Pass<kFloats, kGroupLanes, kVec4>;
  const std::int64_t rows = a.end_row - a.first_row;
  if constexpr (kGrid == RowGrid::kGroupPerShortRow) {
    SLUICE_EXPECTS(cols <= P::kSpan, "row SpMM: a lane group per row covers ", P::kSpan,
                   " columns, not ", cols);
    grouped_row_spmm_kernel<Index, kFloats, kGroupLanes, kVec4, kWrite>
        <<<row_blocks((rows + P::kGroups - 1) / P::kGroups), kRowThreads, 0, stream>>>(a, x, ldx, y,
                                                                                       ldy, cols);
  } else {
    row_spmm_kernel<Index, kFloats, kGroupLanes, kVec4, kWrite>
        <<<row_blocks(rows), kRowThreads, 0, stream>>>(a, x, ldx, y, ldy, cols);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
  if (a.long_rows.count == 0) return;
  const LongSplit& split = a.long_rows.split;
  const std::int64_t items = split.segments + a.long_rows.count - split.rows;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(items, 65535));
  row_spmm_long_kernel<Index, kFloats, kGroupLanes, kVec4, kWrite>
      <<<blocks, kLongThreads, 0, stream>>>(a, x, ldx, y, ldy, cols, segment_sums);
  SLUICE_CUDA_LAUNCH_CHECK();
  if (split.rows == 0) return;
  row_spmm_segments_kernel<Index, kWrite>
      <<<static_cast<unsigned>(split.rows), kLongThreads, 0, stream>>>(a, segment_sums, y, ldy,
                                                                       cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

// The pass layout by width: narrow products put several entries side by side (at most 32 columns
// a group per short row); wide ones take up to 640 columns a pass (20 a lane), so that 602-wide
// rows need one pass. Over a transpose of short rows (grid_for()) up to 128 columns take a group
// per short row, of 8 or 16 lanes with 8 floats each.
template <typename Index, bool kVec4, RowSpmmWrite kWrite>
void launch_width(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                  std::int64_t ldy, int cols, float* segment_sums, cudaStream_t stream) {
  constexpr RowGrid kGroup = RowGrid::kGroupPerShortRow, kWarp = RowGrid::kWarpPerRow;
  const bool short_rows = grid_for(a) == kGroup;
  if (cols <= 8) {
    launch_layout<kGroup, Index, 4, 2, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 16) {
    launch_layout<kGroup, Index, 4, 4, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 32) {
    launch_layout<kGroup, Index, 4, 8, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 64 && short_rows) {
    launch_layout<kGroup, Index, 8, 8, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 64) {
    launch_layout<kWarp, Index, 4, 16, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 128 && short_rows) {
    launch_layout<kGroup, Index, 8, 16, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                       stream);
  } else if (cols <= 128) {
    launch_layout<kWarp, Index, 4, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 256) {
    launch_layout<kWarp, Index, 8, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                      stream);
  } else if (cols <= 384) {
    launch_layout<kWarp, Index, 12, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                       stream);
  } else if (cols <= 512) {
    launch_layout<kWarp, Index, 16, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                       stream);
  } else {
    launch_layout<kWarp, Index, 20, 32, kVec4, kWrite>(a, x, ldx, y, ldy, cols, segment_sums,
                                                       stream);
  }
}

template <typename Index, bool kVec4>
void launch_rows(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                 std::int64_t ldy, int cols, RowSpmmWrite write, float* segment_sums,
                 cudaStream_t stream) {
  if (write == RowSpmmWrite::kAdd) {
    launch_width<Index, kVec4, RowSpmmWrite::kAdd>(a, x, ldx, y, ldy, cols, segment_sums, stream);
  } else {
    launch_width<Index, kVec4, RowSpmmWrite::kStore>(a, x, ldx, y, ldy, cols, segment_sums, stream);
  }
}

// Whether x and y have 16-byte aligned rows, which the vector loads need.
bool row_spmm_aligned(const float* x, std::int64_t ldx, const float* y, std::int64_t ldy) {
  return detail::rows_aligned16(x, ldx) && detail::rows_aligned16(y, ldy);
}

}  // namespace

template <typename Index>
void launch_row_spmm(const RowSpmmMatrix<Index>& a, const float* x, std::int64_t ldx, float* y,
                     std::int64_t ldy, std::int64_t cols, RowSpmmWrite write, float* segment_sums,
                     cudaStream_t stream) {
  SLUICE_EXPECTS(cols <= INT32_MAX, "row SpMM: ", cols, " columns");
  SLUICE_EXPECTS(a.long_rows.split.segments == 0 || segment_sums != nullptr,
                 "row SpMM: split long rows without scratch for their segments");
  RowSpmmMatrix<Index> m = a;
  if (m.end_row < 0) m.end_row = m.rows;
  SLUICE_EXPECTS(m.first_row >= 0 && m.first_row <= m.end_row && m.end_row <= m.rows,
                 "row SpMM: rows [", m.first_row, ", ", m.end_row, ") of ", m.rows);
  if (m.first_row == m.end_row || cols <= 0) return;
  const int c = static_cast<int>(cols);
  if (row_spmm_aligned(x, ldx, y, ldy)) {
    launch_rows<Index, true>(m, x, ldx, y, ldy, c, write, segment_sums, stream);
  } else {
    launch_rows<Index, false>(m, x, ldx, y, ldy, c, write, segment_sums, stream);
  }
}

template void launch_row_spmm<std::int32_t>(const RowSpmmMatrix<std::int32_t>&, const float*,
                                            std::int64_t, float*, std::int64_t, std::int64_t,
                                            RowSpmmWrite, float*, cudaStream_t);
template void launch_row_spmm<std::int64_t>(const RowSpmmMatrix<std::int64_t>&, const float*,
                                            std::int64_t, float*, std::int64_t, std::int64_t,
                                            RowSpmmWrite, float*, cudaStream_t);

}  // namespace sluice::cuda
