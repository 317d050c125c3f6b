// Row-copy helpers and small utilities shared by the CPU backend's source files. Index checks run
// before the parallel loops (an exception must never leave an OpenMP region).
#pragma once

#include <cstdint>
#include <string>

#include "common/hash.hpp"
#include "kernels/ops.hpp"

namespace sluice::cpu {

// Loops smaller than this many scalar operations stay on one thread.
inline constexpr std::int64_t kParallelThreshold = 1 << 15;

// Throws when a non-empty index array has no storage (a null pointer would otherwise read as
// "identity" in the row helpers below).
inline void expect_index(const Idx& index, const char* what) {
  SLUICE_EXPECTS(index.size == 0 || index.data != nullptr, what, ": index array of ", index.size,
                 " entries has no data");
}

// Throws unless every index[i] (i < n) lies in [0, limit).
void check_indices(const vertex_t* index, std::int64_t n, std::int64_t limit, const char* what);

// dst[dst_rows ? dst_rows[i] : i] = src[src_rows ? src_rows[i] : i] for i < n (checked).
void copy_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                       std::int64_t n);
// dst[dst_rows ? dst_rows[i] : i] += src[src_rows ? src_rows[i] : i] for i < n (checked);
// destination rows may repeat: additions to one row happen on one thread in order of i, so the
// result is race-free and deterministic.
void add_indexed_rows(Mat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                      std::int64_t n);

// Rows between device matrices and host matrices of either precision (cpu_host_rows.cpp), with
// the rounding of kernels/bfloat16.hpp; null index arrays mean rows 0..n-1, as above.
// dst[dst_rows[i]] = widen(src[src_rows[i]]).
void load_host_rows(HostMat src, const vertex_t* src_rows, Mat dst, const vertex_t* dst_rows,
                    std::int64_t n);
// dst[dst_rows[i]] = round(src[src_rows[i]]).
void store_host_rows(Mat src, const vertex_t* src_rows, HostMat dst, const vertex_t* dst_rows,
                     std::int64_t n);
// dst[dst_rows[i]] = round(widen(dst[dst_rows[i]]) + widen(round(src[src_rows[i]]))); fp32:
// dst += src (add_indexed_rows). Destination rows unique in bf16.
void add_host_rows(Mat src, const vertex_t* src_rows, HostMat dst, const vertex_t* dst_rows,
                   std::int64_t n);
// m[rows[i], :] = round(m[rows[i], :]) for kBf16 (rows null: every row of m).
void round_rows(Mat m, const vertex_t* rows, std::int64_t n, HostPrecision precision);
// The fp32 matrix of a kFp32 host matrix.
inline Mat fp32_view(const HostMat& m) {
  return Mat{m.fp32(), m.rows, m.cols, m.ld};
}

// The counter-based dropout decision of docs/model-math.md: kind 1 = features, 2 = attention.
inline bool keep(const DropoutKey& key, std::uint64_t kind, std::int64_t vertex,
                 std::int64_t element) {
  const float u =
      hash_to_unit(key_hash(key.seed, kind, key.salt(), static_cast<std::uint64_t>(vertex),
                            static_cast<std::uint64_t>(element)));
  return u >= key.rate;
}

}  // namespace sluice::cpu
