// Masked softmax cross-entropy (see loss.hpp). Up to kGroupRowClasses classes a group of
// kGroupLanes lanes takes a row and holds it in registers (kSlots values a lane): the row is read
// once, each exponential computed once, the group's reductions take log2(kGroupLanes) shuffles,
// and a warp works on 32 / kGroupLanes rows at a time. Wider rows take a warp each and are read
// three times. The loss is reduced per block in double and added with one atomic per block.
#include <algorithm>
#include <cfloat>
#include <climits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/loss.hpp"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::lane_id;
using detail::warp_count;

// labeled[0..2], then correct[0..2] (kernels/ops.hpp, SplitCounts).
constexpr int kSplitCounters = 6;
// Values of a row each lane of a group holds; rows up to 32 * kSlots classes take a group.
constexpr int kSlots = 8;
constexpr std::int64_t kGroupRowClasses = 32 * kSlots;

// A labeled row's split counts: per split bit k of `splits`, one more labeled row (counter k),
// and one more right prediction (3 + k) when `right`.
__device__ __forceinline__ void count_splits(std::int32_t splits, bool right,
                                             unsigned (&counts)[kSplitCounters]) {
#pragma unroll
  for (int k = 0; k < 3; ++k) {
    const unsigned in = (static_cast<unsigned>(splits) >> k) & 1u;
    counts[k] += in;
    counts[3 + k] += in & (right ? 1u : 0u);
  }
}

// Adds the block's loss and split counts (one value per lane) to the device totals: warps in
// shuffles, the block in shared memory, then one atomic per total.
__device__ __forceinline__ void add_block_totals(double lane_loss,
                                                 const unsigned (&lane_counts)[kSplitCounters],
                                                 double* loss, unsigned long long* split_counts) {
  __shared__ double block_loss[detail::kWarpsPerBlock];
  __shared__ unsigned block_counts[kSplitCounters][detail::kWarpsPerBlock];
  const int lane = lane_id(), warp = static_cast<int>(threadIdx.x / 32);
  const double warp_loss = detail::warp_sum(lane_loss);
  unsigned warp_counts[kSplitCounters];
#pragma unroll
  for (int k = 0; k < kSplitCounters; ++k)
    warp_counts[k] = __reduce_add_sync(0xffffffffu, lane_counts[k]);
  if (lane == 0) {
    block_loss[warp] = warp_loss;
#pragma unroll
    for (int k = 0; k < kSplitCounters; ++k) block_counts[k][warp] = warp_counts[k];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < detail::kWarpsPerBlock; ++w) total += block_loss[w];
    if (loss && total != 0.0) atomicAdd(loss, total);
  }
  if (split_counts && threadIdx.x < kSplitCounters) {
    unsigned long long count = 0;
    for (int w = 0; w < detail::kWarpsPerBlock; ++w) count += block_counts[threadIdx.x][w];
    if (count != 0) atomicAdd(split_counts + threadIdx.x, count);
  }
}

// Rows of up to kGroupLanes * kSlots classes, a group of kGroupLanes lanes each (loss.hpp's
// contract). Lane l of a group holds the row's columns l, l + kGroupLanes, ...
template <int kGroupLanes>
__global__ void __launch_bounds__(detail::kBlockThreads)
    softmax_cross_entropy_rows_kernel(const float* __restrict__ logits, std::int64_t ld,
                                      std::int64_t rows, int classes,
                                      const std::int32_t* __restrict__ labels,
                                      const std::int32_t* __restrict__ mask, float scale,
                                      float* __restrict__ grad, std::int64_t ldg, double* loss,
                                      std::int32_t* __restrict__ predictions,
                                      unsigned long long* split_counts) {
  constexpr int kGroups = 32 / kGroupLanes;
  const int lane = lane_id();
  const int group = lane / kGroupLanes, group_lane = lane % kGroupLanes;
  double lane_loss = 0.0;
  unsigned lane_counts[kSplitCounters] = {0, 0, 0, 0, 0, 0};
  // Every lane runs every iteration (the shuffles need the whole warp); rows past the end hold
  // no values and write nothing.
  for (std::int64_t first = global_warp() * kGroups; first < rows;
       first += warp_count() * kGroups) {
    const std::int64_t i = first + group;
    const bool in_range = i < rows;
    const std::int32_t label = in_range && labels ? labels[i] : -1;
    const std::int32_t splits = !in_range ? 0 : mask ? mask[i] : 1;
    const float* x = logits + (in_range ? i : 0) * ld;
    float v[kSlots];
    // Max and argmax (ties: lowest column; a lane's columns ascend, so strict > keeps its lowest,
    // and the merge prefers the lower column on equal values). kNone: no column yet.
    constexpr int kNone = INT_MAX;
    float best = -FLT_MAX;
    int best_column = kNone;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = group_lane + kGroupLanes * k;
      v[k] = in_range && j < classes ? x[j] : 0.f;
      if (in_range && j < classes && (v[k] > best || best_column == kNone)) {
        best = v[k];
        best_column = j;
      }
    }
#pragma unroll
    for (int offset = kGroupLanes / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_column = __shfl_xor_sync(0xffffffffu, best_column, offset);
      if (other > best || (other == best && other_column < best_column) || best_column == kNone) {
        if (other_column != kNone) {
          best = other;
          best_column = other_column;
        }
      }
    }
    const bool labeled = label >= 0 && label < classes;
    const bool counted = labeled && (splits & 1) != 0;
    float sum = 0.f, picked = 0.f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = group_lane + kGroupLanes * k;
      if (j == label) picked = v[k] - best;
      v[k] = in_range && j < classes ? expf(v[k] - best) : 0.f;
      sum += v[k];
    }
#pragma unroll
    for (int offset = kGroupLanes / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float log_sum = logf(sum);
    // The label's lane adds the row's loss.
    if (counted && label % kGroupLanes == group_lane)
      lane_loss += static_cast<double>(log_sum) - picked;
    if (in_range && group_lane == 0) {
      if (predictions) predictions[i] = best_column;
      if (labeled) count_splits(splits, best_column == label, lane_counts);
    }
    if (grad && in_range) {
      float* g = grad + i * ldg;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int j = group_lane + kGroupLanes * k;
        if (j < classes) g[j] = counted ? scale * (v[k] / sum - (j == label ? 1.f : 0.f)) : 0.f;
      }
    }
  }
  add_block_totals(lane_loss, lane_counts, loss, split_counts);
}

// Rows of more than kGroupRowClasses classes, a warp each, read in three passes.
__global__ void __launch_bounds__(detail::kBlockThreads) softmax_cross_entropy_wide_kernel(
    const float* __restrict__ logits, std::int64_t ld, std::int64_t rows, std::int64_t classes,
    const std::int32_t* __restrict__ labels, const std::int32_t* __restrict__ mask, float scale,
    float* __restrict__ grad, std::int64_t ldg, double* loss,
    std::int32_t* __restrict__ predictions, unsigned long long* split_counts) {
  const int lane = lane_id();
  double warp_loss = 0.0;  // lane 0's
  unsigned warp_counts[kSplitCounters] = {0, 0, 0, 0, 0, 0};
  for (std::int64_t i = global_warp(); i < rows; i += warp_count()) {
    const float* x = logits + i * ld;
    // Max and argmax (ties: lowest index; each lane scans ascending, so strict > keeps its
    // lowest index, and the merge prefers the lower index on equal values).
    float best = -FLT_MAX;
    std::int64_t best_index = classes;
    for (std::int64_t j = lane; j < classes; j += 32) {
      const float v = x[j];
      if (v > best || best_index == classes) {
        best = v;
        best_index = j;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const std::int64_t other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
      if (other > best || (other == best && other_index < best_index)) {
        best = other;
        best_index = other_index;
      }
    }
    float sum = 0.f;
    for (std::int64_t j = lane; j < classes; j += 32) sum += expf(x[j] - best);
    sum = detail::warp_sum(sum);
    const float log_sum = logf(sum);
    const std::int32_t label = labels ? labels[i] : -1;
    const bool labeled = label >= 0 && label < classes;
    const std::int32_t splits = mask ? mask[i] : 1;
    const bool counted = labeled && (splits & 1) != 0;
    if (lane == 0) {
      if (predictions) predictions[i] = static_cast<std::int32_t>(best_index);
      if (counted) warp_loss += static_cast<double>(log_sum) - (x[label] - best);
      if (labeled) count_splits(splits, best_index == label, warp_counts);
    }
    if (grad) {
      float* g = grad + i * ldg;
      for (std::int64_t j = lane; j < classes; j += 32) {
        g[j] = counted ? scale * (expf(x[j] - best - log_sum) - (j == label ? 1.f : 0.f)) : 0.f;
      }
    }
  }
  add_block_totals(warp_loss, warp_counts, loss, split_counts);
}

}  // namespace

void launch_softmax_cross_entropy(const float* logits, std::int64_t ld, std::int64_t rows,
                                  std::int64_t classes, const std::int32_t* labels,
                                  const std::int32_t* mask, float scale, float* grad,
                                  std::int64_t ldg, double* loss, std::int32_t* predictions,
                                  unsigned long long* split_counts, cudaStream_t stream) {
  if (rows <= 0 || classes <= 0) return;
  // The warps stride over the rows: a grid of one block per 8 rows would add millions of
  // double-precision atomics into one address (milliseconds on two million rows).
  constexpr unsigned kMaxBlocks = 2048;
  const auto launch_groups = [&](auto kernel, int group_lanes) {
    const std::int64_t rows_per_block = std::int64_t(detail::kWarpsPerBlock) * (32 / group_lanes);
    const unsigned blocks = std::min(detail::blocks_for(rows, rows_per_block), kMaxBlocks);
    kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(
        logits, ld, rows, static_cast<int>(classes), labels, mask, scale, grad, ldg, loss,
        predictions, split_counts);
  };
  if (classes <= 4 * kSlots) {
    launch_groups(softmax_cross_entropy_rows_kernel<4>, 4);
  } else if (classes <= 8 * kSlots) {
    launch_groups(softmax_cross_entropy_rows_kernel<8>, 8);
  } else if (classes <= 16 * kSlots) {
    launch_groups(softmax_cross_entropy_rows_kernel<16>, 16);
  } else if (classes <= kGroupRowClasses) {
    launch_groups(softmax_cross_entropy_rows_kernel<32>, 32);
  } else {
    const unsigned blocks = std::min(detail::blocks_for(rows, detail::kWarpsPerBlock), kMaxBlocks);
    softmax_cross_entropy_wide_kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(
        logits, ld, rows, classes, labels, mask, scale, grad, ldg, loss, predictions, split_counts);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace sluice::cuda
