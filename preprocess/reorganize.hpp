// Batch layout, its cost model, and the 2-phase reorganization (docs/design.md, "What a batch
// needs"). A layout is `order[c * P + p]` = the range of partition p that runs in
// batch c.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/plan.hpp"
#include "preprocess/chunking.hpp"

namespace sluice {

// Transfer volumes (rows per layer pass) of one layout.
struct LayoutVolumes {
  std::int64_t baseline_rows = 0;    // sum_{p,c} |N(p,c)|
  std::int64_t transition_rows = 0;  // sum_c |T_c|
  std::int64_t load_rows = 0;        // sum_{c,p} |L_c^p| (host -> GPU)
  std::int64_t reused_rows = 0;      // sum_{c,p} |R_c^p|
  std::int64_t pull_rows = 0;        // remote rows pulled from peers
};

std::vector<std::int32_t> natural_order(int partitions, int chunks);

LayoutVolumes evaluate_layout(const NeighborSets& sets,
                              const std::vector<vertex_t>& partition_offsets,
                              const std::vector<std::int32_t>& order);

// Seconds per layer pass for rows of `feature_dim` floats (feature_dim <= 0 counts 1 float).
double layout_cost(const LayoutVolumes& volumes, const Bandwidths& bandwidths,
                   std::int64_t feature_dim);

// Phase 1: group chunks of different partitions into batches by neighbor overlap.
std::vector<std::int32_t> group_chunks(const NeighborSets& sets, vertex_t num_nodes);
// Phase 2: order the batches of `order` so consecutive batches share most transition vertices.
std::vector<std::int32_t> order_batches(const NeighborSets& sets, vertex_t num_nodes,
                                        const std::vector<std::int32_t>& order);

struct ReorganizeResult {
  std::vector<std::int32_t> order;
  bool reorganized = false;  // order differs from the natural one
  LayoutVolumes volumes;     // of the kept layout
  double cost_before = 0;    // natural layout
  double cost_after = 0;     // kept layout (<= cost_before)
};
// Evaluates the natural layout and (if `enabled`) the phase-1, phase-2 and phase-1+2 layouts;
// keeps the cheapest (the natural one on ties).
ReorganizeResult reorganize(const NeighborSets& sets,
                            const std::vector<vertex_t>& partition_offsets, bool enabled,
                            const Bandwidths& bandwidths, std::int64_t feature_dim);

}  // namespace sluice
