// Helpers shared by the .cu files only (never included by g++-compiled code): grid sizing, warp
// reductions and the row arithmetic of the warp-per-row kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/types.hpp"
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

// Row-local grids: blocks of 2 warps and a warp for every row (no grid-stride loop), so that the
// rows in flight at once are neighbors, whose sources share the L2 cache; a block's slot on the
// multiprocessor frees only when its slowest warp is done, and row lengths vary by orders of
// magnitude, hence the small blocks.
constexpr int kRowWarps = 2;
constexpr int kRowThreads = kWarp * kRowWarps;
inline unsigned row_blocks(std::int64_t rows) {
  const std::int64_t blocks = (rows + kRowWarps - 1) / kRowWarps;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, INT32_MAX));
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

// p on a 16-byte boundary: a float4 (16-byte word) may be read or written there.
inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}
// Every row of a row-major matrix (base p, leading dimension ld floats) starts on a 16-byte
// boundary: what kernels reading or writing rows in 16-byte words need.
inline bool rows_aligned16(const void* p, std::int64_t ld) {
  return ld % 4 == 0 && aligned16(p);
}

// Row i of a row-major matrix with leading dimension ld: row rows[i], or row i when rows is null.
template <typename T>
__device__ __forceinline__ T* indexed_row(T* m, std::int64_t ld, const vertex_t* rows,
                                          std::int64_t i) {
  return m + static_cast<std::int64_t>(rows ? rows[i] : i) * ld;
}

// A warp lane's share of to[v] = convert(from[v]) for v in [0, vectors): lanes stride by 32,
// with two loads in flight per lane before the stores.
template <typename In, typename Out, typename Convert>
__device__ __forceinline__ void move_vectors(const In* __restrict__ from, Out* __restrict__ to,
                                             std::int64_t vectors, int lane, Convert convert) {
  std::int64_t v = lane;
  for (; v + kWarp < vectors; v += 2 * kWarp) {
    const In a = from[v];
    const In b = from[v + kWarp];
    to[v] = convert(a);
    to[v + kWarp] = convert(b);
  }
  for (; v < vectors; v += kWarp) to[v] = convert(from[v]);
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
