// Building a training plan from a dataset (docs/design.md, "Cutting the graph in two levels"):
// level-1 partitioning, renumbering, level-2 edge-balanced chunks, 2-phase reorganization,
// transition/reuse/remote/leave indices and slot assignment, statistics.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"

namespace sluice {

struct PlanOptions {
  int partitions = 1;                 // P
  int chunks = 1;                     // C, chunks per partition
  std::string partitioner = "metis";  // metis | range | random (P = 1 needs none)
  std::uint64_t seed = 0;
  std::string balance = "both";   // what level-1 parts balance: edges | vertices | both
  std::vector<double> imbalance;  // METIS tolerances per constraint (partition_vertices)
  bool reorganize = true;         // run the 2-phase reorganization (kept only if cheaper)
  // When set, a reorganized layout (order[c * P + p] = the range of partition p in batch c) is
  // kept only if this returns true for it; the partition command's --gpu-memory check.
  std::function<bool(const std::vector<std::int32_t>& order)> layout_fits;
  Bandwidths bandwidths;
  std::int64_t cost_feature_dim = 0;  // feature width for byte statistics (0: dataset's)
};

// Builds the whole plan in memory. Only the graph (indptr/indices) and num_nodes of `dataset`
// are used; features may be absent. `fingerprint` is stored in the plan (the dataset file's
// "fingerprint" attribute, or compute_fingerprint(dataset)). Deterministic for fixed options.
Plan build_plan(const Dataset& dataset, const PlanOptions& options, const std::string& fingerprint);

}  // namespace sluice
