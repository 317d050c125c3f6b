// Uncoarsening steps of the multilevel partitioner: balance-aware label propagation refinement
// (boundary vertices move to the part they are most connected to when that lowers the cut and
// the part stays under its weight limits), rebalancing of parts over a limit at the least cut
// cost per unit of excess weight, and the exact cut. All deterministic for a seed at any thread
// count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "preprocess/multilevel_graph.hpp"
#include "preprocess/multilevel_moves.hpp"

namespace sluice::multilevel {

// A partition of one level: part[v] in [0, parts).
using PartAssignment = std::vector<std::int32_t>;

struct RefinementOptions {
  int parts = 2;
  Limits max_part_weight{};  // per constraint, the same for every part
  int rounds = 6;            // passes over the vertices (at most)
  int sub_rounds = 8;
  std::uint64_t seed = 0;
  std::uint64_t salt = 0;  // varies the visiting order per level
};

// Weight of each part per constraint.
std::array<std::vector<std::int64_t>, kConstraints> part_weights(const LevelGraph& graph,
                                                                 const PartAssignment& part,
                                                                 int parts);

// Label propagation refinement; returns the number of moves made.
std::int64_t refine_partition(const LevelGraph& graph, PartAssignment& part,
                              const RefinementOptions& options, const std::string& progress_name);

// Moves vertices out of parts over a limit until none is, where the other parts have room:
// cheapest cut increase per unit of the excess first. Returns false when some part stays over.
bool rebalance_partition(const LevelGraph& graph, PartAssignment& part,
                         const RefinementOptions& options);

// Edges of the symmetrized simple graph (no self-loops, no duplicates) whose ends lie in
// different parts: METIS's edge-cut objective on the level-0 graph.
std::int64_t simple_edge_cut(const LevelGraph& graph, const PartAssignment& part);

}  // namespace sluice::multilevel
