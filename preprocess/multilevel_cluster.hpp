// Coarsening step of the multilevel partitioner: size-constrained label propagation clustering
// (every vertex joins the neighboring cluster it is most strongly connected to, as long as the
// cluster stays under the weight limits), then "two-hop" grouping of the vertices left alone
// (leaves of a full hub cluster are grouped with each other). Deterministic for a seed at any
// thread count (preprocess/multilevel_moves.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preprocess/multilevel_graph.hpp"
#include "preprocess/multilevel_moves.hpp"

namespace sluice::multilevel {

struct ClusteringOptions {
  Limits max_cluster_weight{};  // per constraint
  int rounds = 5;               // label propagation passes over all vertices (at most)
  int sub_rounds = 16;          // groups of the visiting order per pass
  std::uint64_t seed = 0;
  std::uint64_t salt = 0;  // varies the visiting order per level
};

// label[v] = the cluster of v, named by one of its members' ids. Vertices without neighbors stay
// alone. Shows a progress line named `progress_name` (on a terminal).
std::vector<vertex_t> cluster_vertices(const LevelGraph& graph, const ClusteringOptions& options,
                                       const std::string& progress_name);

// Groups the vertices without neighbors (still alone in their clusters), in increasing id, into
// clusters of `pack_size`: they carry balance weight only, and the partitioner places them as
// a few hundred coarse vertices instead of one each.
void pack_isolated(const LevelGraph& graph, vertex_t pack_size, std::vector<vertex_t>& label);

}  // namespace sluice::multilevel
