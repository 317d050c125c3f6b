// H^0 from the dataset's features (train/host_features.hpp).
#include "train/host_features.hpp"

#include <cmath>
#include <cstring>

#include "common/parallel.hpp"
#include "kernels/bfloat16.hpp"

namespace sluice {

void fill_features(const Dataset& dataset, const std::vector<vertex_t>& new_to_old,
                   FeatureScaling scaling, const HostMat& features) {
  const std::int64_t n = features.rows, dim = dataset.feature_dim;
  SLUICE_EXPECTS(features.cols == dim && std::int64_t(new_to_old.size()) == n &&
                     std::int64_t(dataset.features.size()) == n * dim,
                 "features: a ", features.rows, " x ", features.cols, " host matrix for ",
                 new_to_old.size(), " renumbered rows and ", dataset.features.size(),
                 " feature values of width ", dim);
  for (const vertex_t old : new_to_old)
    SLUICE_EXPECTS(old >= 0 && old < n, "features: renumbered row of vertex ", old, " outside [0, ",
                   n, ")");
  const bool bf16 = features.precision == HostPrecision::kBf16;
  float* const fp32_rows = bf16 ? nullptr : features.fp32();
  bf16_t* const bf16_rows = bf16 ? features.bf16() : nullptr;
#pragma omp parallel if (worth_parallel(n * dim))
  {
    std::vector<float> scaled(static_cast<std::size_t>(dim));
#pragma omp for schedule(static)
    for (std::int64_t v = 0; v < n; ++v) {
      const float* source = dataset.feature_row(new_to_old[std::size_t(v)]);
      float* row = bf16 ? scaled.data() : fp32_rows + v * features.ld;
      std::memcpy(row, source, std::size_t(dim) * sizeof(float));
      if (scaling == FeatureScaling::kRowL1) {
        double norm = 0;
        for (std::int64_t j = 0; j < dim; ++j) norm += std::abs(double(row[j]));
        const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.f;
        for (std::int64_t j = 0; j < dim; ++j) row[j] *= scale;
      }
      if (!bf16) continue;
      bf16_t* out = bf16_rows + v * features.ld;
      for (std::int64_t j = 0; j < dim; ++j) out[j] = bf16_from_float(row[j]);
    }
  }
}

}  // namespace sluice
