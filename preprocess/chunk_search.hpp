// Choosing the chunk count for a GPU memory budget: the smallest C whose estimated per-GPU peak
// (train/layout/memory_estimate.hpp) fits, found by the layout library's search
// (train/layout/chunk_search.hpp) over the partition profiles of a chunk sketch
// (train/layout/chunk_sketch.hpp): every candidate C is estimated from counts over the graph,
// equal to those of the plan built for it, without building that plan. Then, among that C and
// larger ones, whose smaller buffers leave room for vertex data on the GPU, the one with the
// shortest forecast epoch (train/layout/vertex_data.hpp). Used by
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
#include "train/layout/vertex_data.hpp"

namespace sluice {

// How `partition --gpu-memory` picks C among the counts that fit (--chunk-choice).
enum class ChunkChoice {
  // The smallest C that fits: the largest chunks, whose buffers may leave no room for vertex data.
  kSmallest,
  // The fitting C with the shortest forecast epoch (forecast_link()): the smallest, or a larger
  // one whose smaller buffers leave room for vertex matrices that then stay off the host link.
  kShortestForecast,
};
struct ChunkChoiceOptions {
  ChunkChoice choice = ChunkChoice::kShortestForecast;
  HostDataOptions host;  // sluice-train's --intermediates and --host-precision
  IntermediatesChoice intermediates = IntermediatesChoice::kRecomputeWhereEverythingFits;
  LinkModel link;
};

struct ChunkSearchResult : FittingChunks {
  vertex_t smallest_partition = 0;  // C cannot exceed this (chunks need vertices)
  int smallest_fitting = 0;         // the smallest C that fits
  // The forecast of every count compared (ChunkChoice::kShortestForecast), ascending C; the
  // chosen one is that of `chunks`.
  std::vector<LinkForecast> forecasts;
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
// each candidate's estimate and its time. With ChunkChoice::kShortestForecast it then compares
// the smallest fitting C0 with larger counts, ceil(1.5 x) the one before up to 8 C0 (and the
// search's range), each under the first rule it fits: a larger count wins where its forecast is
// shorter and it holds more vertex data than C0 (fewer spilled constants alone do not count).
// The largest count is forecast first: where it holds no more vertex data than C0, the counts
// between are not tried (`forecasts` then holds C0 and it); a count whose forecast holds every
// vertex matrix, cached intermediates included, ends the comparison (a C0 holding every matrix
// only by recomputing them still compares larger counts that could cache them).
ChunkSearchResult choose_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                        const PlanOptions& plan_options, std::int64_t budget,
                                        const ModelShape& shape, const LayoutOptions& options,
                                        bool may_reload, const ChunkChoiceOptions& choice);

// The level-1 assignment a plan was built from (partition of every dataset vertex).
VertexPartition partition_of_plan(const Plan& plan);

}  // namespace sluice
