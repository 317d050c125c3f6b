// Launchers for dense elementwise kernels: dropout, fused bias + activation and its backward,
// column sums, axpy, head averaging and the optimizer steps. Asynchronous on `stream`; all
// pointers are device memory; matrices are row-major with a leading dimension.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/types.hpp"
#include "kernels/cuda_memory_rules.hpp"

namespace sluice::cuda {

// Activation codes (match sluice::Activation: kNone, kRelu, kElu).
enum class ActivationCode : int { kNone = 0, kRelu = 1, kElu = 2 };

// m[rows[i], j] *= keep / (1 - rate), keep = u(seed, 1, salt, keys[i], j) >= rate
// (salt = epoch * 1024 + layer; docs/model-math.md).
void launch_dropout_rows(float* m, std::int64_t ld, std::int64_t cols, const vertex_t* rows,
                         const vertex_t* keys, std::int64_t n, std::uint64_t seed,
                         std::uint64_t salt, float rate, cudaStream_t stream);

// out = act(z + bias) (bias may be null; out may alias z).
void launch_bias_activation(const float* z, std::int64_t ldz, const float* bias, ActivationCode act,
                            float* out, std::int64_t ldo, std::int64_t rows, std::int64_t cols,
                            cudaStream_t stream);

// dz = dout * act'(value) (dz may alias dout).
void launch_activation_backward(const float* dout, std::int64_t ldd, const float* value,
                                std::int64_t ldv, ActivationCode act, float* dz, std::int64_t ldz,
                                std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// For rows i < rows (keys[i] as launch_dropout_rows keys them; rate 0: no dropout):
// dh = act'(z) * dropout(dh), then z = dropout(act(z)), one mask for both.
void launch_dropout_activation_backward(float* dh, std::int64_t ldd, float* z, std::int64_t ldz,
                                        std::int64_t rows, std::int64_t cols, ActivationCode act,
                                        const vertex_t* keys, std::uint64_t seed,
                                        std::uint64_t salt, float rate, cudaStream_t stream);
// Per-row head dots an activation backward from in + bias takes of the dh it writes:
// dots[i * ld + h] = dh_i^h . in_i^h over the head's cols / heads columns, each head's lanes
// summing their products in launch_gat_row_sums' order (the same bits); dots null: none.
struct HeadDots {
  float* dots = nullptr;
  std::int64_t ld = 0;
  int heads = 0;
};
// Whether rows of `cols` columns in `heads` heads give their head dots on the backward's way:
// heads of whole multiples of 32 columns (then every lane walks the same column groups).
constexpr bool fused_head_dots_fit(std::int64_t cols, std::int64_t heads) {
  return heads > 0 && cols % heads == 0 && (cols / heads) % 32 == 0;
}
// The same with z = in + bias (per column), H written to out and `in` left as it is; and the
// head dots where dots.dots is not null (fused_head_dots_fit()).
void launch_dropout_bias_activation_backward(float* dh, std::int64_t ldd, const float* in,
                                             std::int64_t ldin, const float* bias, float* out,
                                             std::int64_t ldout, std::int64_t rows,
                                             std::int64_t cols, ActivationCode act,
                                             const vertex_t* keys, std::uint64_t seed,
                                             std::uint64_t salt, float rate, const HeadDots& dots,
                                             cudaStream_t stream);
// out = dropout(act(z + bias)), row r keyed keys[r] (rate 0: launch_bias_activation).
void launch_bias_activation_dropout(const float* z, std::int64_t ldz, const float* bias,
                                    ActivationCode act, float* out, std::int64_t ldo,
                                    std::int64_t rows, std::int64_t cols, const vertex_t* keys,
                                    std::uint64_t seed, std::uint64_t salt, float rate,
                                    cudaStream_t stream);
// dst[dst_rows[i]] = dropout(src[src_rows[i]]), keyed keys[i] (src_rows null: row i).
void launch_scatter_dropout_rows(const float* src, std::int64_t lds, const vertex_t* src_rows,
                                 const vertex_t* dst_rows, float* dst, std::int64_t ldd,
                                 std::int64_t n, std::int64_t cols, const vertex_t* keys,
                                 std::uint64_t seed, std::uint64_t salt, float rate,
                                 cudaStream_t stream);
// dst[rows[i]] = dropout(src[i]) (rate 0: a copy), keyed keys[i], and gradient[rows[i]] = 0
// (`gradient_cols` wide): a warp per row reads rows[i] once.
void launch_scatter_arrivals(const float* src, std::int64_t lds, const vertex_t* rows, float* dst,
                             std::int64_t ldd, std::int64_t n, std::int64_t cols,
                             const vertex_t* keys, std::uint64_t seed, std::uint64_t salt,
                             float rate, float* gradient, std::int64_t ldg,
                             std::int64_t gradient_cols, cudaStream_t stream);
// The same dh for act = relu from h = dropout(relu(z)) instead of z: relu'(z) read as h > 0.
void launch_dropout_relu_backward_from_output(float* dh, std::int64_t ldd, const float* h,
                                              std::int64_t ldh, std::int64_t rows,
                                              std::int64_t cols, const vertex_t* keys,
                                              std::uint64_t seed, std::uint64_t salt, float rate,
                                              cudaStream_t stream);

// Column sums in two deterministic steps: column_sum_slices(rows) slices of rows
// (cuda_memory_rules.hpp) each write one partial sum per column into `partials`
// (column_sum_partials(rows, cols) floats of device scratch), then one thread per column adds
// the slices in order. No atomics: the same inputs give the same bits on every run.
// out[j] += sum over slices s < slices of partials[s * cols + j], in slice order.
void launch_add_slice_sums(const float* partials, std::int64_t slices, std::int64_t cols,
                           float* out, cudaStream_t stream);

// out[j] += sum_i m[i, j] (deterministic; partials: column_sum_partials(rows, cols) floats).
void launch_add_column_sums(const float* m, std::int64_t ld, std::int64_t rows, std::int64_t cols,
                            float* out, float* partials, cudaStream_t stream);

// y += alpha * x over n floats.
void launch_axpy(std::int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);

// out[i] = ((0 + inputs[0][i]) + inputs[1][i]) + ..., i < n: the inputs added in list order (as
// the CPU backend's all-reduce adds its devices), at most kMaxSumInputs of them, any of them on
// a peer GPU this one may read. out may be one of the inputs.
inline constexpr int kMaxSumInputs = 16;
void launch_sum_inputs(const std::vector<const float*>& inputs, std::int64_t n, float* out,
                       cudaStream_t stream);

// out[r, f] = mean_h in[r, h * width + f].
void launch_head_mean(const float* in, std::int64_t ldi, std::int64_t rows, int heads,
                      std::int64_t width, float* out, std::int64_t ldo, cudaStream_t stream);
// din[r, h * width + f] = dout[r, f] / heads.
void launch_head_mean_backward(const float* dout, std::int64_t ldd, std::int64_t rows, int heads,
                               std::int64_t width, float* din, std::int64_t ldi,
                               cudaStream_t stream);

// g += wd * w; w -= lr * g.
void launch_sgd_step(std::int64_t n, float lr, float weight_decay, float* w, float* g,
                     cudaStream_t stream);
// g += wd * w; Adam with bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
void launch_adam_step(std::int64_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float bias_correction1, float bias_correction2, float* w,
                      float* g, float* m, float* v, cudaStream_t stream);

}  // namespace sluice::cuda
