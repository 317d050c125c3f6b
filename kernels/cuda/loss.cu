// Masked softmax cross-entropy (see loss.hpp): one warp per row; the loss is reduced per block
// in double and added with one atomic per block.
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/loss.hpp"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::lane_id;
using detail::warp_count;

// labeled[0..2], then correct[0..2] (kernels/ops.hpp, SplitCounts).
constexpr int kSplitCounters = 6;

__global__ void softmax_cross_entropy_kernel(const float* __restrict__ logits, std::int64_t ld,
                                             std::int64_t rows, std::int64_t classes,
                                             const std::int32_t* __restrict__ labels,
                                             const std::int32_t* __restrict__ mask, float scale,
                                             float* __restrict__ grad, std::int64_t ldg,
                                             double* loss, std::int32_t* __restrict__ predictions,
                                             unsigned long long* split_counts) {
  __shared__ double block_loss[detail::kWarpsPerBlock];
  __shared__ unsigned long long block_counts[kSplitCounters][detail::kWarpsPerBlock];
  const int lane = lane_id();
  double warp_loss = 0.0;
  unsigned long long warp_counts[kSplitCounters] = {0, 0, 0, 0, 0, 0};
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
      if (split_counts && labeled) {
        const unsigned right = best_index == label ? 1u : 0u;
#pragma unroll
        for (int k = 0; k < 3; ++k) {
          const unsigned in = (static_cast<unsigned>(splits) >> k) & 1u;
          warp_counts[k] += in;
          warp_counts[3 + k] += in & right;
        }
      }
    }
    if (grad) {
      float* g = grad + i * ldg;
      for (std::int64_t j = lane; j < classes; j += 32) {
        g[j] = counted ? scale * (expf(x[j] - best - log_sum) - (j == label ? 1.f : 0.f)) : 0.f;
      }
    }
  }
  if (lane == 0) {
    block_loss[threadIdx.x / 32] = warp_loss;
#pragma unroll
    for (int k = 0; k < kSplitCounters; ++k) block_counts[k][threadIdx.x / 32] = warp_counts[k];
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
  const unsigned blocks = std::min(detail::blocks_for(rows, detail::kWarpsPerBlock), kMaxBlocks);
  softmax_cross_entropy_kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(
      logits, ld, rows, classes, labels, mask, scale, grad, ldg, loss, predictions, split_counts);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace sluice::cuda
