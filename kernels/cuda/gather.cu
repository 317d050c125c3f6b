// Row movement kernels (see gather.hpp). A warp moves a row (a group of lanes a narrow one), or in
// gathers from host memory (launch_load_host_rows) tiles of rows. Lanes stride over 16-byte words
// when both matrices have 16-byte aligned rows, with a scalar tail, else over floats.
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::kWarp;
using detail::lane_id;
using detail::warp_count;

constexpr unsigned kFullMask = 0xffffffffu;

// What a row walk writes into a destination element: the source's, or the sum of both (a
// flush's rows are distinct, so the read, add and write need no atomics).
struct CopyRow {
  static constexpr bool kReadsDestination = false;
  __device__ static float4 apply(float4 from, float4) { return from; }
  __device__ static float apply(float from, float) { return from; }
};
struct AddRow {
  static constexpr bool kReadsDestination = true;
  __device__ static float4 apply(float4 from, float4 to) {
    return make_float4(to.x + from.x, to.y + from.y, to.z + from.z, to.w + from.w);
  }
  __device__ static float apply(float from, float to) { return to + from; }
};

// The 16-byte words of a row both matrices can move that way (0: rows not 16-byte aligned).
std::int64_t row_words(const float* src, std::int64_t src_ld, const float* dst, std::int64_t dst_ld,
                       std::int64_t cols) {
  return detail::rows_aligned16(src, src_ld) && detail::rows_aligned16(dst, dst_ld) ? cols / 4 : 0;
}

// The lanes a row's move can keep busy, one word or float each: its 16-byte words (row_words())
// or its scalar tail, whichever is longer; every float where the rows are not aligned.
std::int64_t row_lane_words(std::int64_t vectors, std::int64_t cols) {
  return vectors > 0 ? std::max(vectors, cols - 4 * vectors) : cols;
}

// `kSteps` rows (from[s] -> to[s], where live[s]) copied by the kGroup lanes of one group, this
// lane being `member`: every live row's words are loaded before any is stored, so a lane keeps a
// load per row in flight.
template <int kGroup, int kSteps>
__device__ __forceinline__ void copy_group_rows(const float* const (&from)[kSteps],
                                                float* const (&to)[kSteps],
                                                const bool (&live)[kSteps], std::int64_t vectors,
                                                std::int64_t cols, int member) {
  for (std::int64_t v = member; v < vectors; v += kGroup) {
    float4 a[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (live[s]) a[s] = reinterpret_cast<const float4*>(from[s])[v];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (live[s]) reinterpret_cast<float4*>(to[s])[v] = a[s];
  }
  for (std::int64_t c = vectors * 4 + member; c < cols; c += kGroup) {
    float a[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (live[s]) a[s] = from[s][c];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      if (live[s]) to[s][c] = a[s];
  }
}

// A warp per row (grid-stride), two words of the row in flight a lane.
template <typename Op>
__global__ void row_walk_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                const vertex_t* __restrict__ src_rows, float* __restrict__ dst,
                                std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                std::int64_t n, std::int64_t cols, std::int64_t vectors) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = detail::indexed_row(src, src_ld, src_rows, i);
    float* to = detail::indexed_row(dst, dst_ld, dst_rows, i);
    const auto* in = reinterpret_cast<const float4*>(from);
    auto* out = reinterpret_cast<float4*>(to);
    std::int64_t v = lane;
    for (; v + kWarp < vectors; v += 2 * kWarp) {
      const float4 a = in[v], b = in[v + kWarp];
      float4 x{}, y{};
      if (Op::kReadsDestination) x = out[v], y = out[v + kWarp];
      out[v] = Op::apply(a, x);
      out[v + kWarp] = Op::apply(b, y);
    }
    for (; v < vectors; v += kWarp)
      out[v] = Op::apply(in[v], Op::kReadsDestination ? out[v] : float4{});
    for (std::int64_t c = vectors * 4 + lane; c < cols; c += kWarp)
      to[c] = Op::apply(from[c], Op::kReadsDestination ? to[c] : 0.f);
  }
}

// Narrow rows (at most 16 words): a group of kGroup lanes per row, kWarp / kGroup rows a warp at a
// time (grid-stride), where a warp per row would leave most of its lanes idle and take one row's
// latency per round.
template <typename Op, int kGroup>
__global__ void grouped_row_walk_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                        const vertex_t* __restrict__ src_rows,
                                        float* __restrict__ dst, std::int64_t dst_ld,
                                        const vertex_t* __restrict__ dst_rows, std::int64_t n,
                                        std::int64_t cols, std::int64_t vectors) {
  constexpr int kGroups = kWarp / kGroup;
  const int member = lane_id() % kGroup;
  const std::int64_t groups = warp_count() * kGroups;
  for (std::int64_t i = global_warp() * kGroups + lane_id() / kGroup; i < n; i += groups) {
    const float* from = detail::indexed_row(src, src_ld, src_rows, i);
    float* to = detail::indexed_row(dst, dst_ld, dst_rows, i);
    const auto* in = reinterpret_cast<const float4*>(from);
    auto* out = reinterpret_cast<float4*>(to);
    for (std::int64_t v = member; v < vectors; v += kGroup)
      out[v] = Op::apply(in[v], Op::kReadsDestination ? out[v] : float4{});
    for (std::int64_t c = vectors * 4 + member; c < cols; c += kGroup)
      to[c] = Op::apply(from[c], Op::kReadsDestination ? to[c] : 0.f);
  }
}

// Gather from mapped host memory. A warp takes `tile` consecutive positions at a time (a power of
// two, at most 32, launch_load_host_rows() says which): lane j < tile reads position j's row ids,
// one coalesced read per index list where a warp per row waits a round trip of the link for each id
// it reads from host memory. Groups of kGroup lanes then move a row each, kLinkSteps rows a group
// in flight: a 48-float row (12 words) keeps 4 rows in flight a warp, where a warp per row keeps
// one.
constexpr int kLinkSteps = 2;
constexpr int kMaxTile = kWarp;

template <int kGroup>
__global__ void host_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                 const vertex_t* __restrict__ src_rows, float* __restrict__ dst,
                                 std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                 std::int64_t n, std::int64_t cols, std::int64_t vectors,
                                 int tile) {
  constexpr int kGroups = kWarp / kGroup;
  const int lane = lane_id(), group = lane / kGroup, member = lane % kGroup;
  for (std::int64_t first = global_warp() * tile; first < n; first += warp_count() * tile) {
    const int count = n - first < tile ? static_cast<int>(n - first) : tile;
    const std::int64_t at = first + lane;
    vertex_t my_src = 0, my_dst = 0;
    if (lane < count) {
      my_src = src_rows ? src_rows[at] : static_cast<vertex_t>(at);
      my_dst = dst_rows ? dst_rows[at] : static_cast<vertex_t>(at);
    }
    for (int k = 0; k < count; k += kGroups * kLinkSteps) {
      const float* from[kLinkSteps];
      float* to[kLinkSteps];
      bool live[kLinkSteps];
#pragma unroll
      for (int s = 0; s < kLinkSteps; ++s) {
        const int r = (k + s * kGroups + group) & (kWarp - 1);
        const vertex_t s_row = __shfl_sync(kFullMask, my_src, r);
        const vertex_t d_row = __shfl_sync(kFullMask, my_dst, r);
        live[s] = k + s * kGroups + group < count;
        from[s] = src + static_cast<std::int64_t>(s_row) * src_ld;
        to[s] = dst + static_cast<std::int64_t>(d_row) * dst_ld;
      }
      copy_group_rows<kGroup, kLinkSteps>(from, to, live, vectors, cols, member);
    }
  }
}

__global__ void scatter_add_rows_kernel(const float* __restrict__ src, std::int64_t src_ld,
                                        const vertex_t* __restrict__ src_rows, float* dst,
                                        std::int64_t dst_ld, const vertex_t* __restrict__ dst_rows,
                                        std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const float* from = detail::indexed_row(src, src_ld, src_rows, i);
    float* to = detail::indexed_row(dst, dst_ld, dst_rows, i);
    for (std::int64_t c = lane; c < cols; c += 32) atomicAdd(to + c, from[c]);
  }
}

__global__ void zero_rows_kernel(float* m, std::int64_t ld, const vertex_t* __restrict__ rows,
                                 std::int64_t n, std::int64_t cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    float* row = detail::indexed_row(m, ld, rows, i);
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

// Rows of `cols` floats moved by Op: a warp per row, or a group of lanes per narrow row (a lane a
// word: 2, 4, 8 or 16 lanes); max_blocks > 0 caps the grid.
template <typename Op>
void launch_row_walk(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                     std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                     std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  const std::int64_t vectors = row_words(src, src_ld, dst, dst_ld, cols);
  const std::int64_t words = row_lane_words(vectors, cols);
  const int group = words <= 2 ? 2 : words <= 4 ? 4 : words <= 8 ? 8 : words <= 16 ? 16 : kWarp;
  const std::int64_t warps = (n + kWarp / group - 1) / (kWarp / group);
  const unsigned blocks =
      max_blocks > 0 ? std::min(warp_blocks(warps), max_blocks) : warp_blocks(warps);
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(src, src_ld, src_rows, dst, dst_ld,
                                                         dst_rows, n, cols, vectors);
  };
  if (group == 2)
    launch(grouped_row_walk_kernel<Op, 2>);
  else if (group == 4)
    launch(grouped_row_walk_kernel<Op, 4>);
  else if (group == 8)
    launch(grouped_row_walk_kernel<Op, 8>);
  else if (group == 16)
    launch(grouped_row_walk_kernel<Op, 16>);
  else
    launch(row_walk_kernel<Op>);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_gather_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                        std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                        std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  launch_row_walk<CopyRow>(src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols, stream,
                           max_blocks);
}

void launch_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows, float* dst,
                     std::int64_t dst_ld, const vertex_t* dst_rows, std::int64_t n,
                     std::int64_t cols, cudaStream_t stream, unsigned max_blocks) {
  launch_row_walk<AddRow>(src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols, stream,
                          max_blocks);
}

void launch_load_host_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                           float* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                           std::int64_t n, std::int64_t cols, cudaStream_t stream,
                           unsigned max_blocks) {
  if (n <= 0 || cols <= 0) return;
  SLUICE_EXPECTS(max_blocks > 0, "launch_load_host_rows: a host-link grid cap is required");
  const std::int64_t vectors = row_words(src, src_ld, dst, dst_ld, cols);
  // A group's lanes cover a row in one word each where they can: 8, 16 or 32 lanes a row.
  const std::int64_t words = row_lane_words(vectors, cols);
  const int group = words <= 8 ? 8 : words <= 16 ? 16 : kWarp;
  const int min_tile = (kWarp / group) * kLinkSteps;
  // The smallest tile with which the capped grid's warps take every row in one round (at most
  // 32 positions): a short transfer spreads over every warp, a long one reads 32 ids at a time.
  const std::int64_t warps = static_cast<std::int64_t>(max_blocks) * detail::kWarpsPerBlock;
  int tile = min_tile;
  while (tile < kMaxTile && static_cast<std::int64_t>(tile) * warps < n) tile *= 2;
  const unsigned blocks = std::min(max_blocks, warp_blocks((n + tile - 1) / tile));
  const auto launch = [&](auto kernel) {
    kernel<<<blocks, detail::kBlockThreads, 0, stream>>>(src, src_ld, src_rows, dst, dst_ld,
                                                         dst_rows, n, cols, vectors, tile);
  };
  if (group == 8)
    launch(host_rows_kernel<8>);
  else if (group == 16)
    launch(host_rows_kernel<16>);
  else
    launch(host_rows_kernel<kWarp>);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_scatter_add_rows(const float* src, std::int64_t src_ld, const vertex_t* src_rows,
                             float* dst, std::int64_t dst_ld, const vertex_t* dst_rows,
                             std::int64_t n, std::int64_t cols, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  scatter_add_rows_kernel<<<warp_blocks(n), detail::kBlockThreads, 0, stream>>>(
      src, src_ld, src_rows, dst, dst_ld, dst_rows, n, cols);
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
