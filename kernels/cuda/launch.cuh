// Helpers shared by the .cu files only (never included by g++-compiled code): grid sizing and
// warp reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.hpp"

namespace sluice::cuda::detail {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kBlockThreads = kWarp * kWarpsPerBlock;
// Grid-stride loops cover any size; this caps the grid at a few waves of a large GPU.
constexpr std::int64_t kMaxBlocks = 65535;

inline unsigned blocks_for(std::int64_t items, std::int64_t per_block) {
  const std::int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, kMaxBlocks));
}

// Global warp index and warp count of a 1-D launch.
__device__ __forceinline__ std::int64_t global_warp() {
  return (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
}
__device__ __forceinline__ std::int64_t warp_count() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
}
__device__ __forceinline__ int lane_id() {
  return threadIdx.x & (kWarp - 1);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace sluice::cuda::detail
