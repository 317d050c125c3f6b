// Device helpers the GAT kernel files share (gat.cu, gat_inputs.cu; never included by
// g++-compiled code): LeakyReLU, the attention-dropout scale of an entry and head, an entry's
// attention coefficients, the online softmax statistics of a row, the long rows' blocks, and
// the per-row sums of the entries' score-gradient shares.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "common/hash.hpp"
#include "kernels/cuda/gat.hpp"
#include "kernels/cuda/launch.cuh"

namespace sluice::cuda::gat_detail {

constexpr float kLeakySlope = 0.2f;

__device__ __forceinline__ float leaky_relu(float x) {
  return x > 0.f ? x : kLeakySlope * x;
}

// Rows of a row-major float matrix, ld floats apart (ld < 2^30): row(base, u) is base + u ld, for
// a 32-bit index type one 32 x 32-bit multiply-add on byte addresses, else 64-bit arithmetic. base
// may carry a column (a lane's word).
struct RowStride {
  std::int64_t ld;
  std::uint32_t bytes;
  __host__ __device__ explicit RowStride(std::int64_t ld_floats)
      : ld(ld_floats), bytes(static_cast<std::uint32_t>(4 * ld_floats)) {}
  static constexpr std::int64_t kMaxLd = std::int64_t{1} << 30;
  template <typename Index>
  __device__ __forceinline__ const float* row(const float* base, Index u) const {
    if constexpr (sizeof(Index) <= 4)
      return reinterpret_cast<const float*>(
          reinterpret_cast<const char*>(base) +
          static_cast<std::uint64_t>(static_cast<std::uint32_t>(u)) * bytes);
    else
      return base + static_cast<std::int64_t>(u) * ld;
  }
};

// Attention dropout of row i's entries: the row's hash prefix (computed once per row) and the
// keep scale of its k-th entry, head h: key_hash(seed, 2, salt, key_i, k * 256 + h), split as
// key_hash_prefix / key_hash_finish so that each entry costs one mixing step.
__device__ __forceinline__ std::uint64_t attention_prefix(const AttentionDropout& d,
                                                          std::int64_t row) {
  if (d.rate <= 0.f) return 0;
  const std::uint64_t key = static_cast<std::uint64_t>(static_cast<std::int64_t>(d.row_keys[row]));
  return key_hash_prefix(d.seed, 2, d.salt, key);
}
__device__ __forceinline__ float attention_scale(const AttentionDropout& d, std::uint64_t prefix,
                                                 std::int64_t k, int h) {
  if (d.rate <= 0.f) return 1.f;
  const std::uint64_t element =
      static_cast<std::uint64_t>(k) * 256u + static_cast<std::uint64_t>(h);
  return hash_to_unit(key_hash_finish(prefix, element)) >= d.rate ? 1.f / (1.f - d.rate) : 0.f;
}

// An entry's attention coefficient before dropout: the softmax over its row of
// LeakyReLU(el_u + er_i), from the row's statistics (max, 1 / sum). Every GAT kernel computes it
// here, so their alphas agree bit for bit.
__device__ __forceinline__ float attention_coefficient(float el_u, float er_i, float row_max,
                                                       float row_inv) {
  return expf(leaky_relu(el_u + er_i) - row_max) * row_inv;
}

// v[h] = p[h] for h < kHeads in 16-byte words (a head record: p 16-byte aligned, kHeads a
// multiple of 4), read through the read-only path.
template <int kHeads>
__device__ __forceinline__ void load_head_words(float (&v)[kHeads], const float* p) {
  static_assert(kHeads % 4 == 0, "head records are whole 16-byte words");
#pragma unroll
  for (int h = 0; h < kHeads; h += 4) {
    const float4 w = __ldg(reinterpret_cast<const float4*>(p + h));
    v[h] = w.x;
    v[h + 1] = w.y;
    v[h + 2] = w.z;
    v[h + 3] = w.w;
  }
}

// p[h] = v[h] for h < kHeads in 16-byte words (p 16-byte aligned).
template <int kHeads>
__device__ __forceinline__ void store_head_words(float* p, const float (&v)[kHeads]) {
  static_assert(kHeads % 4 == 0, "head records are whole 16-byte words");
#pragma unroll
  for (int h = 0; h < kHeads; h += 4)
    *reinterpret_cast<float4*>(p + h) = make_float4(v[h], v[h + 1], v[h + 2], v[h + 3]);
}

// The lane's entry k < degree of row i (CSR position begin + k) in an aggregation's chunk: returns
// its column u and, per head h, computes its coefficient (attention_coefficient with the row's
// head_max / head_inv) into alpha[(begin + k) * ldalpha + h] when store_alpha, and with kScaled
// that coefficient times the entry's attention-dropout scale into coef[h] (the lane's slot of the
// chunk's coefficients). kWordHeads > 0: heads == kWordHeads and the rows of el, er and alpha are
// head records (HeadRecords::kAligned), read and written as 16-byte words.
template <bool kScaled, int kWordHeads = 0, typename Index>
__device__ __forceinline__ std::int64_t stage_entry_coefficients(
    const CsrArrays<Index>& a, std::int64_t i, std::int64_t begin, std::int64_t k, const float* el,
    std::int64_t ldel, const float* er, std::int64_t lder, int heads,
    const AttentionDropout& dropout, std::uint64_t prefix, const float* head_max,
    const float* head_inv, bool store_alpha, float* alpha, std::int64_t ldalpha, float* coef) {
  const std::int64_t u = a.columns[begin + k];
  if constexpr (kWordHeads > 0) {
    float el_u[kWordHeads], er_i[kWordHeads], c[kWordHeads];
    load_head_words<kWordHeads>(el_u, el + u * ldel);
    load_head_words<kWordHeads>(er_i, er + i * lder);
#pragma unroll
    for (int h = 0; h < kWordHeads; ++h)
      c[h] = attention_coefficient(el_u[h], er_i[h], head_max[h], head_inv[h]);
    if (store_alpha) store_head_words<kWordHeads>(alpha + (begin + k) * ldalpha, c);
    if constexpr (kScaled) {
#pragma unroll
      for (int h = 0; h < kWordHeads; ++h) coef[h] = c[h] * attention_scale(dropout, prefix, k, h);
    }
  } else {
    for (int h = 0; h < heads; ++h) {
      const float coefficient =
          attention_coefficient(el[u * ldel + h], er[i * lder + h], head_max[h], head_inv[h]);
      if (store_alpha) alpha[(begin + k) * ldalpha + h] = coefficient;
      if constexpr (kScaled) coef[h] = coefficient * attention_scale(dropout, prefix, k, h);
    }
  }
  return u;
}

// Combines online-softmax statistics (m, s) with (m_other, s_other).
__device__ __forceinline__ void merge_softmax_stats(float& m, float& s, float m_other,
                                                    float s_other) {
  const float m_new = fmaxf(m, m_other);
  s = (s == 0.f ? 0.f : s * expf(m - m_new)) +
      (s_other == 0.f ? 0.f : s_other * expf(m_other - m_new));
  m = m_new;
}

// Adds score e to a lane's online softmax statistics (m, s).
__device__ __forceinline__ void add_to_softmax_stats(float e, float& m, float& s) {
  if (e > m) {
    s = s * expf(m - e) + 1.f;
    m = e;
  } else {
    s += expf(e - m);
  }
}

// The lanes' statistics (m, s) reduced over the warp, on every lane: the maximum first, then
// every lane's sum rescaled to it and summed (one exponential a lane instead of two at every
// step of a pairwise merge).
__device__ __forceinline__ void warp_softmax_stats(float& m, float& s) {
  float row_max = m;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
  s = s == 0.f ? 0.f : s * expf(m - row_max);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  m = row_max;
}

// Online softmax statistics of head h over row entries first + lane, first + lane + step, ...
// (the warp's share of the row), reduced over the warp into (m, s).
template <typename Index>
__device__ __forceinline__ void softmax_stats_entries(const Index* columns, std::int64_t begin,
                                                      std::int64_t degree, std::int64_t first,
                                                      std::int64_t step,
                                                      const float* __restrict__ el,
                                                      std::int64_t ldel, int h, float er_ih,
                                                      float& m, float& s) {
  m = -FLT_MAX;
  s = 0.f;
  for (std::int64_t k = first + detail::lane_id(); k < degree; k += step) {
    const std::int64_t u = columns[begin + k];
    add_to_softmax_stats(leaky_relu(el[u * ldel + h] + er_ih), m, s);
  }
  warp_softmax_stats(m, s);
}

// softmax_stats_entries() of every head at once, in one pass over the entries (each column and
// el record read once), for head records (HeadRecords::kAligned): the same operations per head
// in the same order, so the same bits.
template <int kHeads, typename Index>
__device__ __forceinline__ void softmax_stats_entries_all_heads(
    const Index* columns, std::int64_t begin, std::int64_t degree, std::int64_t first,
    std::int64_t step, const float* __restrict__ el, std::int64_t ldel, const float (&er_i)[kHeads],
    float (&m)[kHeads], float (&s)[kHeads]) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    m[h] = -FLT_MAX;
    s[h] = 0.f;
  }
  for (std::int64_t k = first + detail::lane_id(); k < degree; k += step) {
    const std::int64_t u = columns[begin + k];
    float el_u[kHeads];
    load_head_words<kHeads>(el_u, el + u * ldel);
#pragma unroll
    for (int h = 0; h < kHeads; ++h)
      add_to_softmax_stats(leaky_relu(el_u[h] + er_i[h]), m[h], s[h]);
  }
#pragma unroll
  for (int h = 0; h < kHeads; ++h) warp_softmax_stats(m[h], s[h]);
}

// Row i's softmax statistics per head over the whole row on one warp: lane 0 writes the max into
// head_max[h] and 1 / sum into head_inv[h] (0 for an empty row). The caller syncs the warp.
// kWordHeads > 0: heads == kWordHeads, el and er rows head records, one pass for all heads.
template <int kWordHeads = 0, typename Index>
__device__ __forceinline__ void row_softmax_stats(const Index* columns, std::int64_t i,
                                                  std::int64_t begin, std::int64_t degree,
                                                  const float* __restrict__ el, std::int64_t ldel,
                                                  const float* __restrict__ er, std::int64_t lder,
                                                  int heads, float* head_max, float* head_inv) {
  if constexpr (kWordHeads > 0) {
    float er_i[kWordHeads], m[kWordHeads], s[kWordHeads];
    load_head_words<kWordHeads>(er_i, er + i * lder);
    softmax_stats_entries_all_heads<kWordHeads>(columns, begin, degree, 0, 32, el, ldel, er_i, m,
                                                s);
    if (detail::lane_id() == 0) {
#pragma unroll
      for (int h = 0; h < kWordHeads; ++h) {
        head_max[h] = m[h];
        head_inv[h] = s[h] > 0.f ? 1.f / s[h] : 0.f;
      }
    }
  } else {
    for (int h = 0; h < heads; ++h) {
      float m, s;
      softmax_stats_entries(columns, begin, degree, 0, 32, el, ldel, h, er[i * lder + h], m, s);
      if (detail::lane_id() == 0) {
        head_max[h] = m;
        head_inv[h] = s > 0.f ? 1.f / s : 0.f;
      }
    }
  }
}

// ---- Long rows: one block of kLongWarps warps per row (rows listed in LongRows). Each warp
// takes the row's 32-entry chunks warp, warp + kLongWarps, ...; per-warp partial results are
// combined through shared memory in warp order (deterministic).
constexpr int kLongWarps = 16;
constexpr int kLongThreads = 32 * kLongWarps;

// Blocks for the long-row kernels: one per row, capped (the kernels stride over the rest).
inline unsigned long_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::min<std::int64_t>(rows, 65535));
}

// sum over the block's warps w (in order) of part[w * stride].
__device__ __forceinline__ float sum_over_warps(const float* part, int stride) {
  float total = 0.f;
  for (int w = 0; w < kLongWarps; ++w) total += part[w * stride];
  return total;
}

// The rows a per-row sum walks: a CSR's rows or its transpose's (then pos indexes the transposed
// entries).
template <typename Index>
struct RowRanges {
  const Index* indptr = nullptr;
  std::int64_t rows = 0;
  LongRows long_rows;
};

// sums[r * K + h] = sum over row r's entries (positions pos) of their shares: per lane in entry
// order, then over the lanes (a warp per row; long rows a block, over its warps in order):
// deterministic. Share: a device functor with add<kHeads, kAllHeads>(pos, row, acc), which adds
// the entry's share of every head h < K to acc[h]. K <= kHeads <= 8; kAllHeads: K == kHeads (no
// test per head) and the head records aligned (with_head_instance()).
template <typename Index, int kHeads, bool kAllHeads, typename Share>
__global__ void row_share_sums_kernel(RowRanges<Index> a, Share share, int heads,
                                      float* __restrict__ sums) {
  const int lane = detail::lane_id();
  for (std::int64_t r = detail::global_warp(); r < a.rows; r += detail::warp_count()) {
    const std::int64_t begin = a.indptr[r];
    const std::int64_t degree = a.indptr[r + 1] - begin;
    if (degree > a.long_rows.degree) continue;
    float acc[kHeads] = {};
    // Unrolled, so that a lane's loads of several entries are in flight at once (the adds keep
    // their order).
#pragma unroll 4
    for (std::int64_t k = lane; k < degree; k += 32)
      share.template add<kHeads, kAllHeads>(begin + k, r, acc);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (kAllHeads || h < heads) {
        const float s = detail::warp_sum(acc[h]);
        if (lane == 0) sums[r * heads + h] = s;
      }
    }
  }
}

template <typename Index, int kHeads, bool kAllHeads, typename Share>
__global__ void __launch_bounds__(kLongThreads)
    row_share_sums_long_kernel(RowRanges<Index> a, Share share, int heads,
                               float* __restrict__ sums) {
  __shared__ float part[kLongWarps * kHeads];
  const int lane = detail::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  for (std::int64_t i = blockIdx.x; i < a.long_rows.count; i += gridDim.x) {
    const std::int64_t r = a.long_rows.rows[i];
    const std::int64_t begin = a.indptr[r];
    const std::int64_t degree = a.indptr[r + 1] - begin;
    float acc[kHeads] = {};
    for (std::int64_t k = threadIdx.x; k < degree; k += kLongThreads)
      share.template add<kHeads, kAllHeads>(begin + k, r, acc);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      const float s = detail::warp_sum(acc[h]);
      if (lane == 0) part[warp * kHeads + h] = s;
    }
    __syncthreads();
    if (threadIdx.x < static_cast<unsigned>(heads))
      sums[r * heads + threadIdx.x] = sum_over_warps(part + threadIdx.x, kHeads);
    __syncthreads();
  }
}

// Whether a kernel may read a row's K per-head values (scores, coefficients, their gradients:
// a head record) as 16-byte words: kAligned when every record it reads starts 16-byte aligned
// (ld a multiple of 4; head_records() tells).
enum class HeadRecords { kAligned, kUnaligned };

inline HeadRecords head_records(std::initializer_list<std::pair<const float*, std::int64_t>> rows) {
  for (const auto& [data, ld] : rows)
    if (!detail::rows_aligned16(data, ld)) return HeadRecords::kUnaligned;
  return HeadRecords::kAligned;
}

// Calls f(std::integral_constant<int, kHeads>, std::bool_constant<kAllHeads>) with the kernel
// instance for `heads` (1 to 8): kHeads = 4 or 8 heads at most, kAllHeads where heads == kHeads
// and the records are aligned, so that a layer whose heads fill the instance runs without a test
// per head and reads its head records as 16-byte words.
template <typename F>
void with_head_instance(int heads, HeadRecords records, F&& f) {
  const bool words = records == HeadRecords::kAligned;
  if (heads == 4 && words)
    f(std::integral_constant<int, 4>{}, std::true_type{});
  else if (heads <= 4)
    f(std::integral_constant<int, 4>{}, std::false_type{});
  else if (heads == 8 && words)
    f(std::integral_constant<int, 8>{}, std::true_type{});
  else
    f(std::integral_constant<int, 8>{}, std::false_type{});
}

template <typename Index, typename Share>
void launch_row_share_sums(const RowRanges<Index>& a, const Share& share, int heads,
                           HeadRecords records, float* sums, cudaStream_t stream) {
  if (a.rows <= 0 || heads <= 0) return;
  SLUICE_EXPECTS(heads <= 8, "GAT score-gradient sums: ", heads, " heads (at most 8)");
  with_head_instance(heads, records, [&](auto heads_max, auto all_heads) {
    constexpr int kHeads = decltype(heads_max)::value;
    constexpr bool kAllHeads = decltype(all_heads)::value;
    row_share_sums_kernel<Index, kHeads, kAllHeads, Share>
        <<<detail::blocks_for(a.rows, detail::kWarpsPerBlock), detail::kBlockThreads, 0, stream>>>(
            a, share, heads, sums);
    SLUICE_CUDA_LAUNCH_CHECK();
    if (a.long_rows.count == 0) return;
    row_share_sums_long_kernel<Index, kHeads, kAllHeads, Share>
        <<<long_blocks(a.long_rows.count), kLongThreads, 0, stream>>>(a, share, heads, sums);
    SLUICE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace sluice::cuda::gat_detail
