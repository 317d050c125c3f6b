// Choosing the chunk count for a GPU memory budget: the smallest C whose estimated per-GPU peak
// (preprocess/memory_estimate.hpp) fits. Used by `sluice-preprocess partition --gpu-memory` and
// by sluice-train to name a chunk count that fits when a plan exceeds --gpu-memory.
#pragma once

#include <cstdint>
#include <string>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "preprocess/memory_estimate.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"

namespace sluice {

struct ChunkSearchResult {
  bool fits = false;                // some C <= the largest tried fits the budget
  int chunks = 0;                   // the smallest fitting C (fits), else the largest C tried
  std::int64_t bytes = 0;           // its estimated per-GPU need under the rule that fits
  vertex_t smallest_partition = 0;  // C cannot exceed this (chunks need vertices)
  // The budget rule it fits under: reloaded input rows (--input-rows) or kept ones, every
  // overlap buffer or only the required ones.
  BudgetRule rule;
};

// Doubling then bisection over C with the natural (not reorganized) layout; deterministic.
// The budget rules (budget_rules(shape, may_reload), preprocess/memory_estimate.hpp) are tried
// in order of preference, each over every C, and the first under which some C fits wins.
ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          PlanOptions options, const std::string& fingerprint,
                                          std::int64_t budget, const ModelShape& shape,
                                          bool may_reload);

// The level-1 assignment a plan was built from (partition of every dataset vertex).
VertexPartition partition_of_plan(const Plan& plan);

}  // namespace sluice
