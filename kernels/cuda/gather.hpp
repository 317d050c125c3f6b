// Launchers for row movement kernels: gathers (from pinned host memory by zero-copy, from local
// or peer device memory), atomic scatter-adds (device or system scope), zeroing, fills and value
// permutations. All are asynchronous on `stream`; index arrays are device-resident (nullptr =
// identity: row i).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/types.hpp"

namespace sluice::cuda {

// dst[dst_rows[i]] = src[src_rows[i]] for i < n, `cols` floats per row. src may be a mapped
// host pointer (zero-copy) or a peer pointer. Warp per row, 16-byte accesses when aligned.
// max_blocks > 0 caps the grid (a grid-stride loop covers the rest): zero-copy transfers wait on
// the host link, and a grid of one block per 8 rows would hold the SMs that concurrent compute
// kernels need.
void launch_gather_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                        std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                        std::int64_t cols, cudaStream_t stream, unsigned max_blocks = 0);

// As launch_gather_rows from a mapped host matrix, max_blocks (> 0) its grid cap: a warp takes
// tiles of up to 32 positions, reads their row ids in one access per index list (the lists may
// be in host memory too) and moves several rows at once, up to 8 for rows of at most 32
// floats (kernels/cuda/NOTES.md, "Transfers").
void launch_load_host_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                           float* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                           std::int64_t n, std::int64_t cols, cudaStream_t stream,
                           unsigned max_blocks);

// dst[dst_rows[i]] += src[src_rows[i]] for i < n, dst_rows unique (no atomics). dst may be
// mapped host memory: each row is read over the link and written back. max_blocks as above.
void launch_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                     std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                     std::int64_t cols, cudaStream_t stream, unsigned max_blocks = 0);

// dst[dst_rows[i]] += src[src_rows[i]] atomically (rows may repeat; dst on this GPU).
void launch_scatter_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                             float* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                             std::int64_t n, std::int64_t cols, cudaStream_t stream);

// m[rows[i], :] = 0.
void launch_zero_rows(float* m, std::int64_t ld, const vertex_t* rows, std::int64_t n,
                      std::int64_t cols, cudaStream_t stream);

// m[r, c] = value for every r < rows, c < cols.
void launch_fill(float* m, std::int64_t rows, std::int64_t cols, std::int64_t ld, float value,
                 cudaStream_t stream);

}  // namespace sluice::cuda
