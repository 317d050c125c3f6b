// The search for the smallest chunk count C whose per-GPU need fits a memory budget, written
// against an estimator (C -> bytes under each budget rule) so that it needs no plan builder:
// preprocess/chunk_search.hpp builds a plan per candidate and estimates it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

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

}  // namespace sluice
