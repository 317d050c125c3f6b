// The search for the smallest chunk count C whose per-GPU need fits a memory budget, written
// against an estimator (C -> bytes under each budget rule) so that it needs no plan builder,
// and that search over the profiles of a chunk sketch (chunk_sketch.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "train/layout/chunk_sketch.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {

// The per-GPU bytes of a plan with `chunks` chunks per partition under each budget rule, in the
// order of the rules given to the search.
using ChunkEstimator = std::function<std::vector<std::int64_t>(int chunks)>;

struct FittingChunks {
  bool fits = false;       // some C <= max_chunks fits the budget
  int chunks = 0;          // the smallest fitting C (fits), else max_chunks
  std::int64_t bytes = 0;  // its per-GPU need under the rule that fits (else the last rule)
  BudgetRule rule;         // the rule it fits under
};

// Doubling from C = 1 then bisection, rule by rule in order of preference: the first rule under
// which some C fits wins. Assumes the need falls as C grows (it may stay flat); estimates each
// C once. Logs the rule when it is not the first.
FittingChunks search_fitting_chunks(int max_chunks, std::int64_t budget,
                                    const std::vector<BudgetRule>& rules,
                                    const ChunkEstimator& estimate);

// The largest C the search tries for a sketch: its smallest partition's vertex count (chunks
// need vertices), at most 65536.
int max_search_chunks(const ChunkSketch& sketch);

// Called with each candidate's profiles and its need under each rule (for logs).
using SketchEstimateObserver = std::function<void(
    int chunks, const std::vector<PartitionProfile>& profiles, const std::vector<std::int64_t>&)>;

// search_fitting_chunks() up to max_search_chunks() over the sketch's profiles under
// options.comm: the need of each candidate C is rules_bytes() of the natural-layout plan with
// C chunks, without building it. What `sluice-preprocess partition --gpu-memory` and the
// trainer's over-budget message report.
FittingChunks sketch_fitting_chunks(const ChunkSketch& sketch, std::int64_t budget,
                                    const ModelShape& shape, const LayoutOptions& options,
                                    const std::vector<BudgetRule>& rules,
                                    const SketchEstimateObserver& observe = {});

}  // namespace sluice
