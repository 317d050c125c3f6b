// Dense elementwise kernels (see elementwise.hpp). 2-D launches put threads.x on columns and
// threads.y on rows so that no index division is needed and accesses stay coalesced.
#include <algorithm>
#include <cstdint>

#include "common/hash.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda {
namespace {

using detail::global_warp;
using detail::lane_id;
using detail::warp_count;

#define SLUICE_FOR_ROWS(r, rows)                                                          \
  for (std::int64_t r = blockIdx.y * static_cast<std::int64_t>(blockDim.y) + threadIdx.y; \
       r < (rows); r += static_cast<std::int64_t>(gridDim.y) * blockDim.y)
#define SLUICE_FOR_COLS(c, cols)                                                          \
  for (std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       c < (cols); c += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
#define SLUICE_FOR_N(i, n)                                                                         \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

struct Grid2D {
  dim3 grid, block;
};
Grid2D grid_2d(std::int64_t rows, std::int64_t cols) {
  return {dim3(detail::blocks_for(cols, 32), detail::blocks_for(rows, 8 * 4)), dim3(32, 8)};
}
unsigned grid_1d(std::int64_t n) {
  return detail::blocks_for(n, 256 * 4);
}

__device__ __forceinline__ float activate(float x, ActivationCode act) {
  switch (act) {
    case ActivationCode::kRelu:
      return x > 0.f ? x : 0.f;
    case ActivationCode::kElu:
      return x > 0.f ? x : expm1f(x);
    default:
      return x;
  }
}
__device__ __forceinline__ float activation_slope(float x, ActivationCode act) {
  switch (act) {
    case ActivationCode::kRelu:
      return x > 0.f ? 1.f : 0.f;
    case ActivationCode::kElu:
      return x > 0.f ? 1.f : expf(x);
    default:
      return 1.f;
  }
}

// The warp-per-row kernels below read kColumnBatch of a lane's columns (c, c + 32, ...) before
// they write any: a streaming row needs several loads in flight per warp to approach the memory
// bandwidth (kernels/cuda/NOTES.md). A lane still takes its columns in increasing order, so every
// result is the same.
constexpr int kColumnBatch = 4;

// The lane's columns c = lane, lane + 32, ... below cols of a row whose dropout mask has key
// prefix `prefix` (drop false: no dropout), kColumnBatch at a time: load(c) for the batch, then
// apply(c, loaded, keep) in column order, keep = whether the mask keeps column c. Load returns
// the column's values (any copyable type); a column past cols is neither loaded nor applied.
template <typename Load, typename Apply>
__device__ __forceinline__ void for_lane_columns(std::int64_t cols, int lane, bool drop,
                                                 std::uint64_t prefix, float rate, Load load,
                                                 Apply apply) {
  using Value = decltype(load(std::int64_t{0}));
  for (std::int64_t base = lane; base < cols; base += 32 * kColumnBatch) {
    Value v[kColumnBatch];
#pragma unroll
    for (int k = 0; k < kColumnBatch; ++k)
      if (base + 32 * k < cols) v[k] = load(base + 32 * k);
#pragma unroll
    for (int k = 0; k < kColumnBatch; ++k) {
      const std::int64_t c = base + 32 * k;
      if (c >= cols) break;
      const bool keep =
          !drop || hash_to_unit(key_hash_finish(prefix, static_cast<std::uint64_t>(c))) >= rate;
      apply(c, v[k], keep);
    }
  }
}

// The dropout mask's key prefix of the row keyed `key`.
__device__ __forceinline__ std::uint64_t dropout_prefix(vertex_t key, std::uint64_t seed,
                                                        std::uint64_t salt) {
  return key_hash_prefix(seed, 1, salt, static_cast<std::uint64_t>(static_cast<std::int64_t>(key)));
}

// out[c] = in[c] * scale where the dropout mask of row key `key` keeps column c, else 0, the
// warp's lanes over the columns (in may be out).
__device__ __forceinline__ void warp_dropout_row(const float* in, float* out, std::int64_t cols,
                                                 vertex_t key, std::uint64_t seed,
                                                 std::uint64_t salt, float rate, float scale,
                                                 int lane) {
  for_lane_columns(
      cols, lane, true, dropout_prefix(key, seed, salt), rate,
      [&](std::int64_t c) { return in[c]; },
      [&](std::int64_t c, float v, bool keep) { out[c] = keep ? v * scale : 0.f; });
}

__global__ void dropout_rows_kernel(float* m, std::int64_t ld, std::int64_t cols,
                                    const vertex_t* __restrict__ rows,
                                    const vertex_t* __restrict__ keys, std::int64_t n,
                                    std::uint64_t seed, std::uint64_t salt, float rate,
                                    float scale) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    float* row = detail::indexed_row(m, ld, rows, i);
    warp_dropout_row(row, row, cols, keys[i], seed, salt, rate, scale, lane);
  }
}

__global__ void bias_activation_kernel(const float* z, std::int64_t ldz,
                                       const float* __restrict__ bias, ActivationCode act,
                                       float* out, std::int64_t ldo, std::int64_t rows,
                                       std::int64_t cols) {
  SLUICE_FOR_ROWS(r, rows) {
    SLUICE_FOR_COLS(c, cols) {
      const float x = z[r * ldz + c] + (bias ? bias[c] : 0.f);
      out[r * ldo + c] = activate(x, act);
    }
  }
}

// bias_activation_kernel over rows of 16-byte words (rows aligned to 16 bytes, lds in words):
// the same arithmetic per element, a quarter of the memory instructions. A row's last word may
// hold fewer than 4 of its `cols` columns: it is read whole (the row's stride covers it) and
// only its columns are written.
__global__ void bias_activation4_kernel(const float4* z, std::int64_t ldz4,
                                        const float* __restrict__ bias, ActivationCode act,
                                        float4* out, std::int64_t ldo4, std::int64_t rows,
                                        std::int64_t cols) {
  const std::int64_t words = (cols + 3) / 4;
  SLUICE_FOR_ROWS(r, rows) {
    SLUICE_FOR_COLS(c, words) {
      const float4 x = z[r * ldz4 + c];
      float b[4] = {0.f, 0.f, 0.f, 0.f};
      const int valid = 4 * c + 4 <= cols ? 4 : static_cast<int>(cols - 4 * c);
      if (bias)
        for (int k = 0; k < valid; ++k) b[k] = bias[4 * c + k];
      const float4 y = make_float4(activate(x.x + b[0], act), activate(x.y + b[1], act),
                                   activate(x.z + b[2], act), activate(x.w + b[3], act));
      if (valid == 4) {
        out[r * ldo4 + c] = y;
      } else {
        float* o = reinterpret_cast<float*>(out + r * ldo4 + c);
        const float v[4] = {y.x, y.y, y.z, y.w};
        for (int k = 0; k < valid; ++k) o[k] = v[k];
      }
    }
  }
}

// bias_activation_kernel, then dropout_rows_kernel's mask on row r (keyed keys[r]): a warp per
// row, the row's key prefix once.
__global__ void bias_activation_dropout_kernel(const float* z, std::int64_t ldz,
                                               const float* __restrict__ bias, ActivationCode act,
                                               float* out, std::int64_t ldo, std::int64_t rows,
                                               std::int64_t cols, const vertex_t* __restrict__ keys,
                                               std::uint64_t seed, std::uint64_t salt, float rate,
                                               float scale) {
  const int lane = lane_id();
  for (std::int64_t r = global_warp(); r < rows; r += warp_count()) {
    const float* in = z + r * ldz;
    float* row = out + r * ldo;
    for_lane_columns(
        cols, lane, true, dropout_prefix(keys[r], seed, salt), rate,
        [&](std::int64_t c) { return in[c]; },
        [&](std::int64_t c, float v, bool keep) {
          const float h = activate(v + (bias ? bias[c] : 0.f), act);
          row[c] = keep ? h * scale : 0.f;
        });
  }
}

// dst[dst_rows[i]] = src[src_rows[i]] (src_rows null: row i) with dropout_rows_kernel's mask
// (keyed keys[i]): a warp per row.
__global__ void scatter_dropout_rows_kernel(const float* __restrict__ src, std::int64_t lds,
                                            const vertex_t* __restrict__ src_rows,
                                            const vertex_t* __restrict__ dst_rows, float* dst,
                                            std::int64_t ldd, std::int64_t n, std::int64_t cols,
                                            const vertex_t* __restrict__ keys, std::uint64_t seed,
                                            std::uint64_t salt, float rate, float scale) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    warp_dropout_row(detail::indexed_row(src, lds, src_rows, i),
                     dst + static_cast<std::int64_t>(dst_rows[i]) * ldd, cols, keys[i], seed, salt,
                     rate, scale, lane);
  }
}

// scatter_dropout_rows_kernel's rows (src_rows null) and zeros in the same rows of `gradient`.
template <bool kDropout>
__global__ void scatter_arrivals_kernel(const float* __restrict__ src, std::int64_t lds,
                                        const vertex_t* __restrict__ rows, float* dst,
                                        std::int64_t ldd, std::int64_t n, std::int64_t cols,
                                        const vertex_t* __restrict__ keys, std::uint64_t seed,
                                        std::uint64_t salt, float rate, float scale,
                                        float* gradient, std::int64_t ldg,
                                        std::int64_t gradient_cols) {
  const int lane = lane_id();
  for (std::int64_t i = global_warp(); i < n; i += warp_count()) {
    const std::int64_t r = static_cast<std::int64_t>(rows[i]);
    const float* in = src + i * lds;
    float* o = dst + r * ldd;
    if constexpr (kDropout) {
      warp_dropout_row(in, o, cols, keys[i], seed, salt, rate, scale, lane);
    } else {
      for (std::int64_t c = lane; c < cols; c += 32) o[c] = in[c];
    }
    float* g = gradient + r * ldg;
    for (std::int64_t c = lane; c < gradient_cols; c += 32) g[c] = 0.f;
  }
}

__global__ void activation_backward_kernel(const float* dout, std::int64_t ldd, const float* value,
                                           std::int64_t ldv, ActivationCode act, float* dz,
                                           std::int64_t ldz, std::int64_t rows, std::int64_t cols) {
  SLUICE_FOR_ROWS(r, rows) {
    SLUICE_FOR_COLS(c, cols) {
      const float slope =
          act == ActivationCode::kNone ? 1.f : activation_slope(value[r * ldv + c], act);
      dz[r * ldz + c] = dout[r * ldd + c] * slope;
    }
  }
}

// What the backward of H = dropout(act(Z)) reads of the forward's rows: Z (then it also turns Z
// into H), for ReLU the output H itself (h > 0 exactly where the mask keeps a positive z), or
// Z as in + bias (then H goes to out and `in` stays).
enum class BackwardFrom { kPreactivation, kReluOutput, kBiasedInput };

// A warp per row. Rows of `in` (ldin): Z, H or the biased input by kFrom; `out` (ldout): where H
// goes (kPreactivation: `in` itself; kReluOutput: none); bias: kBiasedInput's. With head dots
// (kBiasedInput; heads of whole multiples of 32 columns, so that every lane walks the same
// column groups): row i's dots dh^h . in^h, each lane's products in column order, then summed
// over the warp, as launch_gat_row_sums sums them.
template <BackwardFrom kFrom>
__global__ void dropout_activation_backward_kernel(float* dh, std::int64_t ldd, const float* in,
                                                   std::int64_t ldin, const float* bias, float* out,
                                                   std::int64_t ldout, std::int64_t rows,
                                                   std::int64_t cols, ActivationCode act,
                                                   const vertex_t* __restrict__ keys,
                                                   std::uint64_t seed, std::uint64_t salt,
                                                   float rate, float scale, HeadDots dots) {
  const int lane = lane_id();
  const bool drop = rate > 0.f;
  // Column groups (32 columns each) per head; 0: no dots.
  const std::int64_t groups = dots.dots != nullptr ? cols / dots.heads / 32 : 0;
  for (std::int64_t i = global_warp(); i < rows; i += warp_count()) {
    float* g = dh + i * ldd;
    const float* x = in + i * ldin;
    const std::uint64_t prefix = drop ? dropout_prefix(keys[i], seed, salt) : 0;
    float dot = 0.f;
    std::int64_t groups_left = groups;  // in the current head
    float* row_dots = groups > 0 ? dots.dots + i * dots.ld : nullptr;
    for_lane_columns(
        cols, lane, drop, prefix, rate, [&](std::int64_t j) { return make_float2(g[j], x[j]); },
        [&](std::int64_t j, float2 v, bool keep) {
          const float gradient = drop ? (keep ? v.x * scale : 0.f) : v.x;
          if constexpr (kFrom == BackwardFrom::kReluOutput) {
            g[j] = gradient * (v.y > 0.f ? 1.f : 0.f);
          } else {
            const float input = v.y;
            const float value = kFrom == BackwardFrom::kBiasedInput ? input + bias[j] : input;
            const float result =
                gradient * (act == ActivationCode::kNone ? 1.f : activation_slope(value, act));
            g[j] = result;
            const float h = activate(value + 0.f, act);
            out[i * ldout + j] = drop ? (keep ? h * scale : 0.f) : h;
            if (groups > 0) {
              dot = __fmaf_rn(result, input, dot);
              if (--groups_left == 0) {
                dot = detail::warp_sum(dot);
                if (lane == 0) *row_dots = dot;
                ++row_dots;
                dot = 0.f;
                groups_left = groups;
              }
            }
          }
        });
  }
}

// Block (32, 8): each thread sums a strided set of rows of one column; the block reduces over
// threadIdx.y and writes its slice's partial sum per column (slice blockIdx.y).
__global__ void column_sums_kernel(const float* __restrict__ m, std::int64_t ld, std::int64_t rows,
                                   std::int64_t cols, float* __restrict__ partials) {
  __shared__ float partial[8][33];
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  float sum = 0.f;
  if (c < cols) {
    SLUICE_FOR_ROWS(r, rows) sum += m[r * ld + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.f;
#pragma unroll
    for (int y = 0; y < 8; ++y) total += partial[y][threadIdx.x];
    partials[blockIdx.y * cols + c] = total;
  }
}

__global__ void add_slice_sums_kernel(const float* __restrict__ partials, std::int64_t slices,
                                      std::int64_t cols, float* __restrict__ out) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  float total = 0.f;
  for (std::int64_t y = 0; y < slices; ++y) total += partials[y * cols + c];
  out[c] += total;
}

__global__ void axpy_kernel(std::int64_t n, float alpha, const float* __restrict__ x, float* y) {
  SLUICE_FOR_N(i, n) y[i] += alpha * x[i];
}

struct SumInputs {
  const float* in[kMaxSumInputs];
  int count;
};

__global__ void sum_inputs_kernel(SumInputs inputs, std::int64_t n, float* out) {
  SLUICE_FOR_N(i, n) {
    float sum = 0.f;
    for (int k = 0; k < inputs.count; ++k) sum += inputs.in[k][i];
    out[i] = sum;
  }
}

__global__ void head_mean_kernel(const float* __restrict__ in, std::int64_t ldi, std::int64_t rows,
                                 int heads, std::int64_t width, float* __restrict__ out,
                                 std::int64_t ldo) {
  const float inv = 1.f / static_cast<float>(heads);
  SLUICE_FOR_ROWS(r, rows) {
    SLUICE_FOR_COLS(f, width) {
      float sum = 0.f;
      for (int h = 0; h < heads; ++h) sum += in[r * ldi + h * width + f];
      out[r * ldo + f] = sum * inv;
    }
  }
}

__global__ void head_mean_backward_kernel(const float* __restrict__ dout, std::int64_t ldd,
                                          std::int64_t rows, int heads, std::int64_t width,
                                          float* __restrict__ din, std::int64_t ldi) {
  const float inv = 1.f / static_cast<float>(heads);
  SLUICE_FOR_ROWS(r, rows) {
    SLUICE_FOR_COLS(f, width) {
      const float g = dout[r * ldd + f] * inv;
      for (int h = 0; h < heads; ++h) din[r * ldi + h * width + f] = g;
    }
  }
}

__global__ void sgd_kernel(std::int64_t n, float lr, float weight_decay, float* w, float* g) {
  SLUICE_FOR_N(i, n) {
    const float grad = g[i] + weight_decay * w[i];
    g[i] = grad;
    w[i] -= lr * grad;
  }
}

__global__ void adam_kernel(std::int64_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, float bias_correction1, float bias_correction2,
                            float* w, float* g, float* m, float* v) {
  SLUICE_FOR_N(i, n) {
    const float grad = g[i] + weight_decay * w[i];
    g[i] = grad;
    const float m_new = beta1 * m[i] + (1.f - beta1) * grad;
    const float v_new = beta2 * v[i] + (1.f - beta2) * grad * grad;
    m[i] = m_new;
    v[i] = v_new;
    w[i] -= lr * (m_new / bias_correction1) / (sqrtf(v_new / bias_correction2) + eps);
  }
}

}  // namespace

void launch_dropout_rows(float* m, std::int64_t ld, std::int64_t cols, const vertex_t* rows,
                         const vertex_t* keys, std::int64_t n, std::uint64_t seed,
                         std::uint64_t salt, float rate, cudaStream_t stream) {
  if (n <= 0 || cols <= 0 || rate <= 0.f) return;
  const float scale = 1.f / (1.f - rate);
  dropout_rows_kernel<<<detail::blocks_for(n, detail::kWarpsPerBlock), detail::kBlockThreads, 0,
                        stream>>>(m, ld, cols, rows, keys, n, seed, salt, rate, scale);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_dropout_activation_backward(float* dh, std::int64_t ldd, float* z, std::int64_t ldz,
                                        std::int64_t rows, std::int64_t cols, ActivationCode act,
                                        const vertex_t* keys, std::uint64_t seed,
                                        std::uint64_t salt, float rate, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const float scale = rate > 0.f ? 1.f / (1.f - rate) : 1.f;
  dropout_activation_backward_kernel<BackwardFrom::kPreactivation>
      <<<detail::blocks_for(rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
          dh, ldd, z, ldz, nullptr, z, ldz, rows, cols, act, keys, seed, salt, rate, scale,
          HeadDots{});
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_dropout_bias_activation_backward(float* dh, std::int64_t ldd, const float* in,
                                             std::int64_t ldin, const float* bias, float* out,
                                             std::int64_t ldout, std::int64_t rows,
                                             std::int64_t cols, ActivationCode act,
                                             const vertex_t* keys, std::uint64_t seed,
                                             std::uint64_t salt, float rate, const HeadDots& dots,
                                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  SLUICE_EXPECTS(dots.dots == nullptr || fused_head_dots_fit(cols, dots.heads),
                 "activation backward: no head dots of ", cols, " columns in ", dots.heads,
                 " heads");
  const float scale = rate > 0.f ? 1.f / (1.f - rate) : 1.f;
  dropout_activation_backward_kernel<BackwardFrom::kBiasedInput>
      <<<detail::blocks_for(rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
          dh, ldd, in, ldin, bias, out, ldout, rows, cols, act, keys, seed, salt, rate, scale,
          dots);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_dropout_relu_backward_from_output(float* dh, std::int64_t ldd, const float* h,
                                              std::int64_t ldh, std::int64_t rows,
                                              std::int64_t cols, const vertex_t* keys,
                                              std::uint64_t seed, std::uint64_t salt, float rate,
                                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const float scale = rate > 0.f ? 1.f / (1.f - rate) : 1.f;
  dropout_activation_backward_kernel<BackwardFrom::kReluOutput>
      <<<detail::blocks_for(rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
          dh, ldd, h, ldh, nullptr, nullptr, 0, rows, cols, ActivationCode::kRelu, keys, seed, salt,
          rate, scale, HeadDots{});
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_bias_activation(const float* z, std::int64_t ldz, const float* bias, ActivationCode act,
                            float* out, std::int64_t ldo, std::int64_t rows, std::int64_t cols,
                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (detail::rows_aligned16(z, ldz) && detail::rows_aligned16(out, ldo)) {
    // Rows of at most 16 words (narrow layers, logits) in blocks of 16 x 16 threads, so that few
    // threads of a block idle past a row's end.
    const std::int64_t words = (cols + 3) / 4;
    const Grid2D g = words <= 16 ? Grid2D{dim3(1, detail::blocks_for(rows, 16 * 4)), dim3(16, 16)}
                                 : grid_2d(rows, words);
    bias_activation4_kernel<<<g.grid, g.block, 0, stream>>>(
        reinterpret_cast<const float4*>(z), ldz / 4, bias, act, reinterpret_cast<float4*>(out),
        ldo / 4, rows, cols);
  } else {
    const Grid2D g = grid_2d(rows, cols);
    bias_activation_kernel<<<g.grid, g.block, 0, stream>>>(z, ldz, bias, act, out, ldo, rows, cols);
  }
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_bias_activation_dropout(const float* z, std::int64_t ldz, const float* bias,
                                    ActivationCode act, float* out, std::int64_t ldo,
                                    std::int64_t rows, std::int64_t cols, const vertex_t* keys,
                                    std::uint64_t seed, std::uint64_t salt, float rate,
                                    cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (rate <= 0.f) {
    launch_bias_activation(z, ldz, bias, act, out, ldo, rows, cols, stream);
    return;
  }
  bias_activation_dropout_kernel<<<detail::blocks_for(rows, detail::kWarpsPerBlock),
                                   detail::kBlockThreads, 0, stream>>>(
      z, ldz, bias, act, out, ldo, rows, cols, keys, seed, salt, rate, 1.f / (1.f - rate));
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_scatter_arrivals(const float* src, std::int64_t lds, const vertex_t* rows, float* dst,
                             std::int64_t ldd, std::int64_t n, std::int64_t cols,
                             const vertex_t* keys, std::uint64_t seed, std::uint64_t salt,
                             float rate, float* gradient, std::int64_t ldg,
                             std::int64_t gradient_cols, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned blocks = detail::blocks_for(n, detail::kWarpsPerBlock);
  if (rate > 0.f)
    scatter_arrivals_kernel<true><<<blocks, detail::kBlockThreads, 0, stream>>>(
        src, lds, rows, dst, ldd, n, cols, keys, seed, salt, rate, 1.f / (1.f - rate), gradient,
        ldg, gradient_cols);
  else
    scatter_arrivals_kernel<false><<<blocks, detail::kBlockThreads, 0, stream>>>(
        src, lds, rows, dst, ldd, n, cols, keys, seed, salt, rate, 1.f, gradient, ldg,
        gradient_cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_scatter_dropout_rows(const float* src, std::int64_t lds, const vertex_t* src_rows,
                                 const vertex_t* dst_rows, float* dst, std::int64_t ldd,
                                 std::int64_t n, std::int64_t cols, const vertex_t* keys,
                                 std::uint64_t seed, std::uint64_t salt, float rate,
                                 cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  scatter_dropout_rows_kernel<<<detail::blocks_for(n, detail::kWarpsPerBlock),
                                detail::kBlockThreads, 0, stream>>>(
      src, lds, src_rows, dst_rows, dst, ldd, n, cols, keys, seed, salt, rate,
      rate > 0.f ? 1.f / (1.f - rate) : 1.f);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_activation_backward(const float* dout, std::int64_t ldd, const float* value,
                                std::int64_t ldv, ActivationCode act, float* dz, std::int64_t ldz,
                                std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const Grid2D g = grid_2d(rows, cols);
  activation_backward_kernel<<<g.grid, g.block, 0, stream>>>(dout, ldd, value, ldv, act, dz, ldz,
                                                             rows, cols);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_add_slice_sums(const float* partials, std::int64_t slices, std::int64_t cols,
                           float* out, cudaStream_t stream) {
  if (slices <= 0 || cols <= 0) return;
  add_slice_sums_kernel<<<detail::blocks_for(cols, 256), 256, 0, stream>>>(partials, slices, cols,
                                                                           out);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_add_column_sums(const float* m, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                            float* out, float* partials, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 grid(detail::blocks_for(cols, 32), static_cast<unsigned>(column_sum_slices(rows)));
  column_sums_kernel<<<grid, dim3(32, 8), 0, stream>>>(m, ld, rows, cols, partials);
  SLUICE_CUDA_LAUNCH_CHECK();
  launch_add_slice_sums(partials, grid.y, cols, out, stream);
}

void launch_axpy(std::int64_t n, float alpha, const float* x, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  axpy_kernel<<<grid_1d(n), 256, 0, stream>>>(n, alpha, x, y);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_sum_inputs(const std::vector<const float*>& inputs, std::int64_t n, float* out,
                       cudaStream_t stream) {
  SLUICE_EXPECTS(!inputs.empty() && inputs.size() <= std::size_t(kMaxSumInputs),
                 "sum_inputs: ", inputs.size(), " inputs (1 to ", kMaxSumInputs, ")");
  if (n <= 0) return;
  SumInputs list{};
  list.count = static_cast<int>(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) list.in[k] = inputs[k];
  sum_inputs_kernel<<<grid_1d(n), 256, 0, stream>>>(list, n, out);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_head_mean(const float* in, std::int64_t ldi, std::int64_t rows, int heads,
                      std::int64_t width, float* out, std::int64_t ldo, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  const Grid2D g = grid_2d(rows, width);
  head_mean_kernel<<<g.grid, g.block, 0, stream>>>(in, ldi, rows, heads, width, out, ldo);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_head_mean_backward(const float* dout, std::int64_t ldd, std::int64_t rows, int heads,
                               std::int64_t width, float* din, std::int64_t ldi,
                               cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  const Grid2D g = grid_2d(rows, width);
  head_mean_backward_kernel<<<g.grid, g.block, 0, stream>>>(dout, ldd, rows, heads, width, din,
                                                            ldi);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g,
                     cudaStream_t stream) {
  if (n <= 0) return;
  sgd_kernel<<<grid_1d(n), 256, 0, stream>>>(n, lr, weight_decay, w, g);
  SLUICE_CUDA_LAUNCH_CHECK();
}

void launch_adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float bias_correction1, float bias_correction2, float* w,
                      float* g, float* m, float* v, cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<<<grid_1d(n), 256, 0, stream>>>(n, lr, beta1, beta2, eps, weight_decay,
                                              bias_correction1, bias_correction2, w, g, m, v);
  SLUICE_CUDA_LAUNCH_CHECK();
}

}  // namespace sluice::cuda
