// The default level-1 partitioner (`--partitioner metis`): a multithreaded multilevel front end
// around METIS. Coarsens the dataset graph by size-constrained label propagation clustering
// (read straight from the dataset's CSR, no symmetrized copy) down to a graph METIS partitions in
// seconds, partitions that with METIS k-way under the same balance constraints as the whole-graph
// partitioner (`metis-direct`), then projects the parts back level by level with balance-aware
// label propagation refinement. Vertices without neighbors stay out of the hierarchy and fill
// the lightest parts last. Deterministic for a seed at any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "common/types.hpp"
#include "formats/dataset.hpp"
#include "preprocess/partition.hpp"

namespace sluice {

struct MultilevelOptions {
  int parts = 2;
  std::uint64_t seed = 0;
  Balance balance = Balance::kBoth;
  // Load-imbalance tolerances as partition_vertices takes them (empty: its defaults).
  std::vector<double> imbalance;
  // Coarsening stops once a level has at most this many vertices (METIS partitions the last).
  vertex_t coarsest_vertices = 1 << 16;
  // A cluster weighs at most this share of a part's mean weight, per constraint.
  double max_cluster_share = 0.05;
  int clustering_rounds = 3;  // label propagation passes per coarsening level (at most)
  int refinement_rounds = 6;  // refinement passes per level (at most)
};

struct MultilevelResult {
  std::vector<std::int32_t> part;  // partition of each dataset vertex
  std::int64_t edge_cut = 0;       // cut edges of the symmetrized simple graph
  int levels = 0;                  // graphs in the hierarchy, the dataset's included
  vertex_t coarsest_vertices = 0;  // what METIS partitioned
  edge_t coarsest_entries = 0;
};

MultilevelResult multilevel_partition(const Dataset& dataset, const MultilevelOptions& options);

// Host memory the multilevel partitioner needs beside the loaded dataset graph, not counting the
// coarse graphs (checked when their sizes are known).
std::int64_t multilevel_base_bytes(std::int64_t num_nodes, std::int64_t num_edges,
                                   bool symmetrized);

}  // namespace sluice
