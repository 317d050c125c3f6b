// H^0, the features in host memory: the dataset's rows in the plan's renumbered order, optionally
// divided by their L1 norm, stored in the host matrix's precision (bf16 rows are rounded once
// here, by kernels/bfloat16.hpp, from the fp32 rows the dataset holds).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/dataset.hpp"
#include "kernels/ops.hpp"

namespace sluice {

enum class FeatureScaling { kNone, kRowL1 };

// features row v = scaled dataset row new_to_old[v] (old_to_new its inverse), for
// v < features.rows. Rows of L1 norm 0 stay 0 under kRowL1. The scaling runs in fp32 (double for
// the norm) before any rounding. A dataset read without its features (Dataset::features_file)
// is read from its file in slabs of rows, each checked (read_feature_rows()), so the features
// are never held twice.
// `slab_bytes`: how many bytes of rows are read at a time from the file.
inline constexpr std::int64_t kFeatureSlabBytes = std::int64_t(256) << 20;
void fill_features(const Dataset& dataset, const std::vector<vertex_t>& new_to_old,
                   const std::vector<vertex_t>& old_to_new, FeatureScaling scaling,
                   const HostMat& features, std::int64_t slab_bytes = kFeatureSlabBytes);

}  // namespace sluice
