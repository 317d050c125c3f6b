// Choosing the chunk count for a GPU memory budget: the smallest C whose estimated per-GPU peak
// (train/layout/memory_estimate.hpp) fits, found by the layout library's search
// (train/layout/chunk_search.hpp) over the partition profiles of a chunk sketch
// (train/layout/chunk_sketch.hpp): every candidate C is estimated from counts over the graph,
// equal to those of the plan built for it, without building that plan. Used by
// `sluice-preprocess partition --gpu-memory`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"
#include "train/layout/chunk_search.hpp"
#include "train/layout/chunk_sketch.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {

struct ChunkSearchResult : FittingChunks {
  vertex_t smallest_partition = 0;  // C cannot exceed this (chunks need vertices)
  // The sketch the search estimated from, for estimates of other layouts with the chosen C.
  std::shared_ptr<const ChunkSketch> sketch;
  // The need under the chosen rule at C/2 and 2C (those within the searched range).
  std::vector<std::pair<int, std::int64_t>> neighbors;
};

// search_fitting_chunks() over the natural (not reorganized) layout of `partition`: the
// profiles of the plans build_plan_from_partition() builds with reorganize off, which the plan
// with the chosen C may then improve on (the partition command keeps the reorganized layout
// only if the returned sketch says it fits too). C up to the smallest partition's vertex count (at
// most 65536); deterministic. The budget rules are budget_rules(shape, options, may_reload). Logs
// each candidate's estimate and its time.
ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          const PlanOptions& plan_options, std::int64_t budget,
                                          const ModelShape& shape, const LayoutOptions& options,
                                          bool may_reload);

// The level-1 assignment a plan was built from (partition of every dataset vertex).
VertexPartition partition_of_plan(const Plan& plan);

}  // namespace sluice
