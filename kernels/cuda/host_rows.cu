// bf16 host-row kernels (see host_rows.hpp). One warp moves one row; where both rows are aligned
// each lane moves four elements at a time (8 bytes of bf16, 16 bytes of fp32), with a scalar
// tail; otherwise single elements. The conversions are kernels/bfloat16.hpp's, shared with the
// CPU backend.
#include "kernels/bfloat16.hpp"
#include "kernels/cuda/host_rows.hpp"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::indexed_row;
using detail::lane_id;
using detail::move_vectors;
using detail::warp_count;

// Whether a bf16 row may be read or written 8 bytes at a time and an fp32 row 16 bytes.
__device__ __forceinline__ bool vector_aligned(const void* half_row, const void* float_row) {
  return (reinterpret_cast<std::uintptr_t>(half_row) & 7u) == 0 &&
         (reinterpret_cast<std::uintptr_t>(float_row) & 15u) == 0;
}

__device__ __forceinline__ float4 widen4(uint2 v) {
  return make_float4(float_from_bf16(static_cast<bf16_t>(v.x & 0xffffu)),
                     float_from_bf16(static_cast<bf16_t>(v.x >> 16)),
                     float_from_bf16(static_cast<bf16_t>(v.y & 0xffffu)),
                     float_from_bf16(static_cast<bf16_t>(v.y >> 16)));
}

__device__ __forceinline__ uint2 narrow4(float4 v) {
  return make_uint2(static_cast<unsigned>(bf16_from_float(v.x)) |
                        (static_cast<unsigned>(bf16_from_float(v.y)) << 16),
                    static_cast<unsigned>(bf16_from_float(v.z)) |
                        (static_cast<unsigned>(bf16_from_float(v.w)) << 16));
}

__global__ void widen_rows_kernel(const bf16_t* __restrict__ src, std::int64_t src_ld,
                                  const vertex_t* __restrict__ src_rows, float* __restrict__ dst,
                                  std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                  std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const bf16_t* from = indexed_row(src, src_ld, src_rows, i);
    float* to = indexed_row(dst, dst_ld, dst_rows, i);
    std::int64_t done = 0;
    if (vector_aligned(from, to)) {
      const std::int64_t vectors = cols / 4;
      move_vectors(reinterpret_cast<const uint2*>(from), reinterpret_cast<float4*>(to), vectors,
                   lane, [](uint2 x) { return widen4(x); });
      done = vectors * 4;
    }
    for (std::int64_t c = done + lane; c < cols; c += 32) to[c] = float_from_bf16(from[c]);
  }
}

__global__ void narrow_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                   const vertex_t* __restrict__ src_rows, bf16_t* __restrict__ dst,
                                   std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                   std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = indexed_row(src, src_ld, src_rows, i);
    bf16_t* to = indexed_row(dst, dst_ld, dst_rows, i);
    std::int64_t done = 0;
    if (vector_aligned(to, from)) {
      const std::int64_t vectors = cols / 4;
      const float4* from4 = reinterpret_cast<const float4*>(from);
      uint2* to4 = reinterpret_cast<uint2*>(to);
      for (std::int64_t v = lane; v < vectors; v += 32) to4[v] = narrow4(from4[v]);
      done = vectors * 4;
    }
    for (std::int64_t c = done + lane; c < cols; c += 32) to[c] = bf16_from_float(from[c]);
  }
}

__global__ void add_narrowed_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                         const vertex_t* __restrict__ src_rows,
                                         bf16_t* __restrict__ dst, std::int64_t dst_ld,
                                         const vertex_t* __restrict__ dst_rows, std::int64_t n,
                                         std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = indexed_row(src, src_ld, src_rows, i);
    bf16_t* to = indexed_row(dst, dst_ld, dst_rows, i);
    for (std::int64_t c = lane; c < cols; c += 32)
      to[c] = bf16_from_float(float_from_bf16(to[c]) + float_from_bf16(bf16_from_float(from[c])));
  }
}

__global__ void round_rows_kernel(float* m, std::int64_t ld, const vertex_t* __restrict__ rows,
                                  std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    float* row = indexed_row(m, ld, rows, i);
    for (std::int64_t c = lane; c < cols; c += 32) row[c] = round_to_bf16(row[c]);
  }
}

unsigned row_blocks(std::int64_t rows, unsigned max_blocks) {
  const unsigned blocks = detail::blocks_for(rows, detail::kWarpsPerBlock);
  return max_blocks > 0 ? std::min(blocks, max_blocks) : blocks;
}

}  // namespace

void launch_widen_rows(const bf16_t* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                       std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                       std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  widen_rows_kernel<<<row_blocks(n, max_blocks), detail::kBlockThreads, 0, stream>>>(
      src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_narrow_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                        bf16_t* dst, std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                        std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  narrow_rows_kernel<<<row_blocks(n, max_blocks), detail::kBlockThreads, 0, stream>>>(
      src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_add_narrowed_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                              bf16_t* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                              std::int64_t n, std::int64_t cols, cudaStream_t stream,
                              unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  add_narrowed_rows_kernel<<<row_blocks(n, max_blocks), detail::kBlockThreads, 0, stream>>>(
      src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_round_rows(float* m, std::int64_t ld, const vertex_t* rows, std::int64_t n,
                       std::int64_t cols, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  round_rows_kernel<<<row_blocks(n, 0), detail::kBlockThreads, 0, stream>>>(m, ld, rows, n, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace sluice::cuda
