// The entry weights of the derived CsrWeights kinds (kernels/ops.hpp), one definition for the
// CPU backend and the CUDA kernels so that both compute the same bits: double arithmetic
// (IEEE, correctly rounded on both) rounded once to float.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define SLUICE_HOST_DEVICE __host__ __device__
#else
#define SLUICE_HOST_DEVICE
#endif

namespace sluice {

// CsrWeights::kSymmetricNorm: entry (r, c) from the degree of row r's self column and of c.
SLUICE_HOST_DEVICE inline float symmetric_norm(std::int32_t row_degree,
                                               std::int32_t column_degree) {
  return static_cast<float>(1.0 / std::sqrt(double(row_degree) * double(column_degree)));
}

// CsrWeights::kNeighborMean: a non-self entry of a row with `entries` entries (self included).
SLUICE_HOST_DEVICE inline float neighbor_mean(std::int64_t entries) {
  return static_cast<float>(1.0 / double(entries - 1));
}

}  // namespace sluice
