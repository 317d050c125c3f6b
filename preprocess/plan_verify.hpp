// Independent check of a plan against its dataset (sluice-preprocess verify): re-derives every
// neighbor set, transition set and edge from the dataset with code separate from the builder,
// replays the slot state batch by batch, and reports the first violation.
#pragma once

#include <string>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"

namespace sluice {

// Empty when the plan is consistent with the dataset; otherwise the first violation found,
// naming the chunk (batch, partition), the vertex or slot, and what was expected.
std::string find_plan_violation(const Dataset& dataset, const Plan& plan);

// Throws InputError when the plan was not built from a dataset with this fingerprint.
void require_plan_matches(const Plan& plan, const std::string& dataset_fingerprint,
                          const std::string& plan_path, const std::string& dataset_path);

}  // namespace sluice
