// Choosing the chunk count for a GPU memory budget: the smallest C whose estimated per-GPU peak
// (train/layout/memory_estimate.hpp) fits, found by the layout library's search
// (train/layout/chunk_search.hpp) over plans built for each candidate C. Used by
// `sluice-preprocess partition --gpu-memory`.
#pragma once

#include <cstdint>
#include <string>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"
#include "train/layout/chunk_search.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {

struct ChunkSearchResult : FittingChunks {
  vertex_t smallest_partition = 0;  // C cannot exceed this (chunks need vertices)
};

// search_fitting_chunks() over plans with the natural (not reorganized) layout of `partition`,
// C up to the smallest partition's vertex count (at most 65536); deterministic. The budget rules
// are budget_rules(shape, options, may_reload). Logs each candidate's estimate.
ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          PlanOptions plan_options, const std::string& fingerprint,
                                          std::int64_t budget, const ModelShape& shape,
                                          const LayoutOptions& options, bool may_reload);

// The level-1 assignment a plan was built from (partition of every dataset vertex).
VertexPartition partition_of_plan(const Plan& plan);

}  // namespace sluice
