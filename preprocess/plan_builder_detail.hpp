// Pieces of build_plan exposed for the partition command (which reuses one level-1 partition
// for several chunk counts when --gpu-memory searches C) and for tests.
#pragma once

#include <string>

#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"

namespace sluice {

// build_plan after level 1: renumbering, chunks, reorganization, indices, statistics.
// options.partitions must equal the partition count of `partition`.
Plan build_plan_from_partition(const Dataset& dataset, const VertexPartition& partition,
                               const PlanOptions& options, const std::string& fingerprint);

// Checks the graph part of a dataset (CSR shape, ids in range); throws InputError.
void check_graph(const Dataset& dataset);

}  // namespace sluice
