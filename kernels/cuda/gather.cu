// Row movement kernels (see gather.hpp). One warp moves one row; lanes stride over 16-byte
// vectors when both rows are 16-byte aligned, with a scalar tail, else over floats.
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::indexed_row;
using detail::lane_id;
using detail::move_vectors;
using detail::warp_count;

__device__ __forceinline__ bool aligned16(const void* a, const void* b) {
  return ((reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b)) & 15u) == 0;
}

__global__ void gather_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                   const vertex_t* __restrict__ src_rows, float* __restrict__ dst,
                                   std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                   std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = indexed_row(src, src_ld, src_rows, i);
    float* to = indexed_row(dst, dst_ld, dst_rows, i);
    std::int64_t done = 0;
    if (aligned16(from, to)) {
      const std::int64_t vectors = cols / 4;
      move_vectors(reinterpret_cast<const float4*>(from), reinterpret_cast<float4*>(to), vectors,
                   lane, [](float4 x) { return x; });
      done = vectors * 4;
    }
    for (std::int64_t c = done + lane; c < cols; c += 32) to[c] = from[c];
  }
}

// Unique destination rows, so a plain read, add and write (dst may be mapped host memory: the
// GPU reads the row over the link, then writes it back).
__global__ void add_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                const vertex_t* __restrict__ src_rows, float* __restrict__ dst,
                                std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = indexed_row(src, src_ld, src_rows, i);
    float* to = indexed_row(dst, dst_ld, dst_rows, i);
    std::int64_t done = 0;
    if (aligned16(from, to)) {
      const std::int64_t vectors = cols / 4;
      const auto* in = reinterpret_cast<const float4*>(from);
      auto* out = reinterpret_cast<float4*>(to);
      for (std::int64_t v = lane; v < vectors; v += 32) {
        const float4 a = out[v], b = in[v];
        out[v] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
      }
      done = vectors * 4;
    }
    for (std::int64_t c = done + lane; c < cols; c += 32) to[c] += from[c];
  }
}

template <bool kSystem>
__global__ void scatter_add_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                        const vertex_t* __restrict__ src_rows, float* dst,
                                        std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                        std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = indexed_row(src, src_ld, src_rows, i);
    float* to = indexed_row(dst, dst_ld, dst_rows, i);
    for (std::int64_t c = lane; c < cols; c += 32) {
      if constexpr (kSystem) {
        atomicAdd_system(to + c, from[c]);
      } else {
        atomicAdd(to + c, from[c]);
      }
    }
  }
}

__global__ void zero_rows_kernel(float* m, std::int64_t ld, const vertex_t* __restrict__ rows,
                                 std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    float* row = indexed_row(m, ld, rows, i);
    for (std::int64_t c = lane; c < cols; c += 32) row[c] = 0.f;
  }
}

// 2-D launch: x over columns, y over rows.
__global__ void fill_kernel(float* m, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                            float value) {
  for (std::int64_t r = blockIdx.y * static_cast<std::int64_t>(blockDim.y) + threadIdx.y; r < rows;
       r += static_cast<std::int64_t>(gridDim.y) * blockDim.y)
    for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         c < cols; c += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
      m[r * ld + c] = value;
}

unsigned warp_blocks(std::int64_t rows) {
  return detail::blocks_for(rows, detail::kWarpsPerBlock);
}

}  // namespace

void launch_gather_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                        std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                        std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  const unsigned blocks = max_blocks > 0 ? std::min(warp_blocks(n), max_blocks) : warp_blocks(n);
  gather_rows_kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(src, src_ld, src_rows, dst,
                                                                   dst_ld, dst_rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                     std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                     std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  const unsigned blocks = max_blocks > 0 ? std::min(warp_blocks(n), max_blocks) : warp_blocks(n);
  add_rows_kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(src, src_ld, src_rows, dst, dst_ld,
                                                                dst_rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_scatter_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                             float* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                             std::int64_t n, std::int64_t cols, bool system_scope,
                             cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  if (system_scope) {
    scatter_add_rows_kernel<true><<<warp_blocks(n), detail::kBlockThreads, 0, stream>>>(
        src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
  } else {
    scatter_add_rows_kernel<false><<<warp_blocks(n), detail::kBlockThreads, 0, stream>>>(
        src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_zero_rows(float* m, std::int64_t ld, const vertex_t* rows, std::int64_t n,
                      std::int64_t cols, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  zero_rows_kernel<<<warp_blocks(n), detail::kBlockThreads, 0, stream>>>(m, ld, rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_fill(float* m, std::int64_t rows, std::int64_t cols, std::int64_t ld, float value,
                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 block(32, 8);
  const dim3 grid(detail::blocks_for(cols, 32), detail::blocks_for(rows, 8 * 4));
  fill_kernel<<<grid, block, 0, stream>>>(m, rows, cols, ld, value);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace sluice::cuda
