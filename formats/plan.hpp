// The Sluice training plan: a two-level partition of one dataset (P partitions x C chunks), the
// batch schedule, and every index the trainer needs to stream chunks with deduplicated
// transfers (docs/design.md, "Cutting the graph in two levels"). Built by
// preprocess/plan_builder.hpp, stored in plan.h5 (schema in docs/formats.md), consumed by
// sluice-train.
//
// Vertex ids in a plan are RENUMBERED ids: partition p owns the contiguous range
// [partition_offsets[p], partition_offsets[p+1]). new_to_old maps them back to dataset ids.
//
// GPU p's device memory holds one "merged buffer" of transition_rows[p] + remote_rows[p] rows:
// rows [0, transition_rows[p]) are transition slots (vertices of T_c^p that p owns),
// rows [transition_rows[p], ...) are remote slots (neighbors owned by another partition).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"

namespace sluice {

inline constexpr int kPlanFormatVersion = 1;

// Everything about chunk (p, c): partition p's chunk that runs in batch position c.
struct ChunkPlan {
  std::int32_t partition = 0;
  std::int32_t batch = 0;  // position in the execution order, 0..C-1
  std::int32_t range = 0;  // index of this chunk's range inside its partition (before reordering)
  vertex_t dst_begin = 0;  // destination vertices: renumbered ids [dst_begin, dst_end)
  vertex_t dst_end = 0;

  // Chunk CSR, one row per destination. Row i lists the destination ITSELF first (every row has
  // exactly one self entry, whatever the dataset holds), then the dataset's in-edges of that
  // vertex in dataset order with self-loops skipped. Columns are merged-buffer positions.
  std::vector<edge_t> indptr;     // dst_end - dst_begin + 1
  std::vector<vertex_t> columns;  // indptr.back()

  // Transition update of partition p for this batch (T_c^p = reused + loaded).
  std::vector<vertex_t> load_vertices;  // L_c^p, renumbered ids, strictly ascending
  std::vector<vertex_t> load_slots;     // transition slot of each loaded vertex
  vertex_t reuse_count = 0;             // |R_c^p|: rows kept in place from batch c-1

  // Remote neighbors of this chunk (owned by q != p), each in one remote slot.
  std::vector<vertex_t> remote_vertices;     // renumbered ids
  std::vector<std::int32_t> remote_owner;    // owning partition q
  std::vector<vertex_t> remote_owner_slots;  // slot in q's transition buffer during this batch
  std::vector<vertex_t> remote_slots;        // slot in p's remote region (0-based in the region)
  std::vector<std::uint8_t> remote_pull;     // 1 = pulled this batch, 0 = same vertex in the
                                             // same remote slot in batch c-1 (kept in place)

  // Leave list: rows of T_c^p that are not in T_{c+1}^p (all of T_c^p for the last batch).
  // Their gradients are flushed to host after this batch in the backward pass.
  std::vector<vertex_t> leave_vertices;  // renumbered ids, ascending
  std::vector<vertex_t> leave_slots;

  vertex_t num_dst() const { return dst_end - dst_begin; }
  edge_t num_entries() const { return indptr.empty() ? 0 : indptr.back(); }
};

// Bandwidths used by the cost model, bytes per second.
struct Bandwidths {
  double h2d = 50e9;      // host -> GPU (zero-copy sorted gather)
  double p2p = 350e9;     // GPU <- GPU peer gather
  double reuse = 3.9e12;  // in-place (HBM)
};

struct PlanStats {
  double replication_factor = 0;          // sum_{p,c} |N(p,c)| / |V|
  std::int64_t volume_baseline_rows = 0;  // sum_{p,c} |N(p,c)|
  std::int64_t volume_p2p_rows = 0;       // sum_c |T_c|
  std::int64_t volume_reuse_rows = 0;     // sum_{c,p} |L_c^p|
  std::int64_t p2p_rows = 0;              // rows pulled between GPUs (remote_pull == 1)
  std::int64_t reused_rows = 0;           // sum_{c,p} |R_c^p|
  double cost_before = 0;                 // cost model, per feature float, without reorganization
  double cost_after = 0;                  // with the layout kept
  std::int64_t cost_feature_dim = 0;      // width used for the byte figures below (0 if none)
  double partition_seconds = 0;           // wall time of level-1 partitioning (METIS or baseline)
  double build_seconds = 0;               // wall time of everything else in build_plan
};

struct Plan {
  std::int32_t partitions = 1;  // P
  std::int32_t chunks = 1;      // C (chunks per partition = batches)
  vertex_t num_nodes = 0;
  edge_t num_dataset_edges = 0;
  std::string dataset_fingerprint;
  std::string partitioner;  // metis | range | random
  std::uint64_t seed = 0;
  bool reorganized = false;  // the reorganized layout was kept
  Bandwidths bandwidths;

  std::vector<vertex_t> new_to_old;         // num_nodes: renumbered id -> dataset id
  std::vector<vertex_t> old_to_new;         // num_nodes: dataset id -> renumbered id
  std::vector<vertex_t> partition_offsets;  // P + 1
  std::vector<vertex_t> transition_rows;    // P: max_c |T_c^p|
  std::vector<vertex_t> remote_rows;        // P: remote region size

  std::vector<ChunkPlan> chunk_plans;  // C * P, index batch * P + partition
  PlanStats stats;

  const ChunkPlan& chunk(int batch, int partition) const {
    return chunk_plans[std::size_t(batch) * partitions + partition];
  }
  ChunkPlan& chunk(int batch, int partition) {
    return chunk_plans[std::size_t(batch) * partitions + partition];
  }
  int owner(vertex_t renumbered) const;  // partition owning a renumbered vertex
};

// plan.h5 I/O (formats/plan.cpp). write_plan is atomic; read_plan validates shapes and
// throws InputError naming the file on any inconsistency.
void write_plan(const std::string& path, const Plan& plan);
Plan read_plan(const std::string& path);

}  // namespace sluice
