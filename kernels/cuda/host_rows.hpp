// Launchers for row movement between fp32 device matrices and bf16 host matrices
// (HostPrecision::kBf16): gathers that widen bf16 rows read from mapped host memory into fp32
// device rows, gathers that round fp32 device rows to bf16 (kernels/bfloat16.hpp) and write them
// into mapped host memory or pinned staging, and rounding of device rows in place. Asynchronous
// on `stream`; index arrays are device-visible (nullptr = identity: row i). Warp per row, like
// launch_gather_rows; max_blocks > 0 caps the grid (host-link kernels, see gather.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/types.hpp"
#include "kernels/bfloat16.hpp"

namespace sluice::cuda {

// dst[dst_rows[i]] = widen(src[src_rows[i]]) for i < n, `cols` elements per row; lds in elements.
void launch_widen_rows(const bf16_t* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                       std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                       std::int64_t cols, cudaStream_t stream, unsigned max_blocks = 0);

// dst[dst_rows[i]] = bf16_from_float(src[src_rows[i]]) for i < n.
void launch_narrow_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                        bf16_t* dst, std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                        std::int64_t cols, cudaStream_t stream, unsigned max_blocks = 0);

// dst[dst_rows[i]] = bf16_from_float(widen(dst[dst_rows[i]]) + widen(bf16_from_float(
// src[src_rows[i]]))) for i < n, dst_rows unique: a rounded row added into a bf16 matrix in device
// memory or in mapped host memory (read over the link and written back), as the CPU backend adds
// a flushed row into a bf16 host matrix.
void launch_add_narrowed_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                              bf16_t* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                              std::int64_t n, std::int64_t cols, cudaStream_t stream,
                              unsigned max_blocks = 0);

// m[rows[i], :] = round_to_bf16(m[rows[i], :]) for i < n.
void launch_round_rows(float* m, std::int64_t ld, const vertex_t* rows, std::int64_t n,
                       std::int64_t cols, cudaStream_t stream);

}  // namespace sluice::cuda
