// H^0 from the dataset's features (train/host_features.hpp).
#include "train/host_features.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/log.hpp"
#include "common/parallel.hpp"
#include "kernels/bfloat16.hpp"

namespace sluice {

void fill_features(const Dataset& dataset, const std::vector<vertex_t>& new_to_old,
                   const std::vector<vertex_t>& old_to_new, FeatureScaling scaling,
                   const HostMat& features, std::int64_t slab_bytes) {
  const std::int64_t n = features.rows, dim = dataset.feature_dim;
  const bool on_file = dataset.features.empty() && !dataset.features_file.empty() && n * dim > 0;
  SLUICE_EXPECTS(features.cols == dim && std::int64_t(new_to_old.size()) == n &&
                     std::int64_t(old_to_new.size()) == n &&
                     (on_file || std::int64_t(dataset.features.size()) == n * dim),
                 "features: a ", features.rows, " x ", features.cols, " host matrix for ",
                 new_to_old.size(), " renumbered rows and ", dataset.features.size(),
                 " feature values of width ", dim);
  for (const vertex_t old : new_to_old)
    SLUICE_EXPECTS(old >= 0 && old < n, "features: renumbered row of vertex ", old, " outside [0, ",
                   n, ")");
  const bool bf16 = features.precision == HostPrecision::kBf16;
  float* const fp32_rows = bf16 ? nullptr : features.fp32();
  bf16_t* const bf16_rows = bf16 ? features.bf16() : nullptr;
  // Row v of H^0 from a dataset row, through `scratch` (dim floats) where it needs one.
  const auto put_row = [&](std::int64_t v, const float* source, float* scratch) {
    float* row = bf16 ? scratch : fp32_rows + v * features.ld;
    std::memcpy(row, source, std::size_t(dim) * sizeof(float));
    if (scaling == FeatureScaling::kRowL1) {
      double norm = 0;
      for (std::int64_t j = 0; j < dim; ++j) norm += std::abs(double(row[j]));
      const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.f;
      for (std::int64_t j = 0; j < dim; ++j) row[j] *= scale;
    }
    if (!bf16) return;
    bf16_t* out = bf16_rows + v * features.ld;
    for (std::int64_t j = 0; j < dim; ++j) out[j] = bf16_from_float(row[j]);
  };
  if (!on_file) {
#pragma omp parallel if (worth_parallel(n * dim))
    {
      std::vector<float> scratch(static_cast<std::size_t>(dim));
#pragma omp for schedule(static)
      for (std::int64_t v = 0; v < n; ++v)
        put_row(v, dataset.feature_row(new_to_old[std::size_t(v)]), scratch.data());
    }
    return;
  }
  // Features left in the file: read in slabs of dataset rows (parallel reads of large slabs),
  // each row scattered to its renumbered place.
  const std::int64_t slab_rows = std::max<std::int64_t>(1, slab_bytes / (dim * 4));
  std::vector<float> slab(static_cast<std::size_t>(std::min(slab_rows, n) * dim));
  Progress progress("features", std::uint64_t(n));
  for (std::int64_t begin = 0; begin < n; begin += slab_rows) {
    const std::int64_t end = std::min(n, begin + slab_rows);
    read_feature_rows(dataset.features_file, vertex_t(begin), vertex_t(end), slab.data());
#pragma omp parallel if (worth_parallel((end - begin) * dim))
    {
      std::vector<float> scratch(static_cast<std::size_t>(dim));
#pragma omp for schedule(static)
      for (std::int64_t old = begin; old < end; ++old)
        put_row(old_to_new[std::size_t(old)], slab.data() + (old - begin) * dim, scratch.data());
    }
    progress.add(std::uint64_t(end - begin));
  }
  progress.finish();
}

}  // namespace sluice
