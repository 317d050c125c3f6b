// Implementation of preprocess/plan_builder.hpp: level 1 (partition.cpp), level 2
// (chunking.cpp), reorganization (reorganize.cpp), then the per-chunk indices of docs/design.md
// "Preprocessing" steps 6-7 and the statistics.
#include "preprocess/plan_builder.hpp"

#include <omp.h>

#include <algorithm>
#include <functional>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "preprocess/chunking.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "preprocess/reorganize.hpp"

namespace sluice {
namespace {

// Free slots of one buffer; hands out the smallest free slot first (deterministic, compact).
// A bitmap of free slots with a cursor at the lowest word that may hold one: a batch's release
// sets bits in any order, and its takes scan forward from the lowest word released, so a batch
// costs its own releases and takes plus one pass over the words, not a merge of the free list.
class SlotPool {
 public:
  explicit SlotPool(vertex_t rows)
      : free_(std::size_t((std::int64_t(rows) + 63) / 64), ~std::uint64_t(0)) {
    if (rows % 64 != 0) free_.back() = (std::uint64_t(1) << (rows % 64)) - 1;
  }
  void release(std::vector<vertex_t>& slots) {
    for (const vertex_t slot : slots) {
      std::uint64_t& word = free_[std::size_t(slot) / 64];
      const std::uint64_t bit = std::uint64_t(1) << (slot % 64);
      SLUICE_EXPECTS(!(word & bit), "slot ", slot, " released twice");
      word |= bit;
      first_ = std::min(first_, std::size_t(slot) / 64);
    }
    slots.clear();
  }
  vertex_t take() {
    while (first_ < free_.size() && free_[first_] == 0) ++first_;
    SLUICE_EXPECTS(first_ < free_.size(), "slot pool exhausted");
    std::uint64_t& word = free_[first_];
    const int bit = __builtin_ctzll(word);
    word &= word - 1;
    return static_cast<vertex_t>(first_ * 64 + std::size_t(bit));
  }

 private:
  std::vector<std::uint64_t> free_;  // bit s % 64 of word s / 64: slot s is free
  std::size_t first_ = 0;            // no free slot below word first_
};

// Everything the index passes share.
struct BuildState {
  const ChunkGraph& graph;
  const NeighborSets& sets;
  const std::vector<std::int32_t>& order;
  std::vector<std::vector<vertex_t>> transition;  // T_c^p sorted, index c * P + p
  std::vector<std::vector<vertex_t>> slots;       // transition slot of each vertex of T_c^p
};

// T_c^p = the vertices owned by p in the union of the batch's neighbor sets (sorted pieces
// concatenated, then sorted and deduplicated: memory proportional to the output only).
void build_transition_sets(const Plan& plan, BuildState& state) {
  const int P = plan.partitions;
  const std::size_t count = plan.chunk_plans.size();
  state.transition.assign(count, {});
  state.slots.assign(count, {});
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(state.sets.vertices.size())))
  for (std::size_t k = 0; k < count; ++k) {
    const int c = static_cast<int>(k / P);
    const int p = static_cast<int>(k % P);
    const vertex_t own_begin = plan.partition_offsets[p];
    const vertex_t own_end = plan.partition_offsets[p + 1];
    std::vector<vertex_t>& set = state.transition[k];
    for (int q = 0; q < P; ++q) {
      const int r = state.order[std::size_t(c) * P + q];
      const vertex_t* first =
          std::lower_bound(state.sets.begin(q, r), state.sets.end(q, r), own_begin);
      const vertex_t* last = std::lower_bound(first, state.sets.end(q, r), own_end);
      set.insert(set.end(), first, last);
    }
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    set.shrink_to_fit();
  }
}

// In-place slot assignment, load lists, reuse counts and leave lists (sequential over batches,
// parallel over partitions).
void assign_transition_slots(Plan& plan, BuildState& state) {
  const int P = plan.partitions;
  const int C = plan.chunks;
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(state.sets.vertices.size())))
  for (int p = 0; p < P; ++p) {
    SlotPool pool(plan.transition_rows[p]);
    std::vector<vertex_t> freed;
    std::vector<std::size_t> loads;
    for (int c = 0; c < C; ++c) {
      const std::size_t k = std::size_t(c) * P + p;
      const std::vector<vertex_t>& current = state.transition[k];
      std::vector<vertex_t>& current_slots = state.slots[k];
      current_slots.assign(current.size(), -1);
      ChunkPlan& chunk = plan.chunk_plans[k];
      loads.clear();
      vertex_t reused = 0;
      if (c > 0) {
        const std::vector<vertex_t>& previous = state.transition[k - P];
        const std::vector<vertex_t>& previous_slots = state.slots[k - P];
        ChunkPlan& before = plan.chunk_plans[k - P];
        std::size_t i = 0, j = 0;
        while (i < previous.size() || j < current.size()) {
          if (j == current.size() || (i < previous.size() && previous[i] < current[j])) {
            before.leave_vertices.push_back(previous[i]);
            before.leave_slots.push_back(previous_slots[i]);
            freed.push_back(previous_slots[i]);
            ++i;
          } else if (i == previous.size() || current[j] < previous[i]) {
            loads.push_back(j++);
          } else {
            current_slots[j++] = previous_slots[i++];
            ++reused;
          }
        }
      } else {
        for (std::size_t j = 0; j < current.size(); ++j) loads.push_back(j);
      }
      pool.release(freed);
      chunk.reuse_count = reused;
      chunk.load_vertices.reserve(loads.size());
      chunk.load_slots.reserve(loads.size());
      for (std::size_t j : loads) {
        current_slots[j] = pool.take();
        chunk.load_vertices.push_back(current[j]);
        chunk.load_slots.push_back(current_slots[j]);
      }
    }
    // Everything still resident leaves after the last batch.
    const std::size_t last = std::size_t(C - 1) * P + p;
    plan.chunk_plans[last].leave_vertices = state.transition[last];
    plan.chunk_plans[last].leave_slots = state.slots[last];
  }
}

// Slot of vertex v in partition q's transition buffer during batch c.
vertex_t owner_slot(const BuildState& state, int P, int c, int q, vertex_t v) {
  const std::size_t k = std::size_t(c) * P + q;
  const auto& set = state.transition[k];
  const auto it = std::lower_bound(set.begin(), set.end(), v);
  SLUICE_EXPECTS(it != set.end() && *it == v, "vertex ", v, " missing from T_", c, "^", q);
  return state.slots[k][it - set.begin()];
}

// Remote sets, remote slots with reuse between consecutive batches, owner slots.
void assign_remote_slots(Plan& plan, const BuildState& state) {
  const int P = plan.partitions;
  const int C = plan.chunks;
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(state.sets.vertices.size())))
  for (int p = 0; p < P; ++p) {
    const vertex_t own_begin = plan.partition_offsets[p];
    const vertex_t own_end = plan.partition_offsets[p + 1];
    SlotPool pool(plan.remote_rows[p]);
    std::vector<vertex_t> freed;
    std::vector<std::size_t> fresh;
    for (int c = 0; c < C; ++c) {
      ChunkPlan& chunk = plan.chunk(c, p);
      const int r = chunk.range;
      const vertex_t* first =
          std::lower_bound(state.sets.begin(p, r), state.sets.end(p, r), own_begin);
      const vertex_t* last = std::lower_bound(first, state.sets.end(p, r), own_end);
      auto& remote = chunk.remote_vertices;
      remote.assign(state.sets.begin(p, r), first);
      remote.insert(remote.end(), last, state.sets.end(p, r));
      chunk.remote_slots.assign(remote.size(), -1);
      chunk.remote_pull.assign(remote.size(), 1);
      chunk.remote_owner.resize(remote.size());
      chunk.remote_owner_slots.resize(remote.size());
      fresh.clear();
      if (c > 0) {
        const ChunkPlan& before = plan.chunk(c - 1, p);
        const auto& previous = before.remote_vertices;
        std::size_t i = 0, j = 0;
        while (i < previous.size() || j < remote.size()) {
          if (j == remote.size() || (i < previous.size() && previous[i] < remote[j])) {
            freed.push_back(before.remote_slots[i++]);
          } else if (i == previous.size() || remote[j] < previous[i]) {
            fresh.push_back(j++);
          } else {
            chunk.remote_slots[j] = before.remote_slots[i++];
            chunk.remote_pull[j++] = 0;
          }
        }
      } else {
        for (std::size_t j = 0; j < remote.size(); ++j) fresh.push_back(j);
      }
      pool.release(freed);
      for (std::size_t j : fresh) chunk.remote_slots[j] = pool.take();
      for (std::size_t j = 0; j < remote.size(); ++j) {
        const int q = plan.owner(remote[j]);
        chunk.remote_owner[j] = q;
        chunk.remote_owner_slots[j] = owner_slot(state, P, c, q, remote[j]);
      }
    }
  }
}

// Chunk CSR with columns rewritten to merged-buffer positions. Chunks go one after another,
// each in parallel, through one dense vertex -> position table (memory: one int per vertex).
void build_chunk_csr(Plan& plan, const BuildState& state) {
  const int P = plan.partitions;
  const std::size_t count = plan.chunk_plans.size();
  Progress progress("chunk indices", count);
  std::vector<vertex_t> position(plan.num_nodes, -1);
  // Every chunk's arrays allocated and zeroed at once, one chunk per thread.
#pragma omp parallel for schedule(dynamic, \
                                  1) if (count > 1 && worth_parallel(state.graph.indptr.back()))
  for (std::size_t k = 0; k < count; ++k) {
    ChunkPlan& chunk = plan.chunk_plans[k];
    chunk.indptr.resize(std::size_t(chunk.num_dst()) + 1);
    chunk.columns.resize(
        std::size_t(state.graph.indptr[chunk.dst_end] - state.graph.indptr[chunk.dst_begin]));
  }
  for (std::size_t k = 0; k < count; ++k) {
    ChunkPlan& chunk = plan.chunk_plans[k];
    const int p = static_cast<int>(k % P);
    const auto& set = state.transition[k];
    const auto& slots = state.slots[k];
    const auto& remote = chunk.remote_vertices;
    const vertex_t remote_base = plan.transition_rows[p];
    const edge_t base = state.graph.indptr[chunk.dst_begin];
    const edge_t end = state.graph.indptr[chunk.dst_end];
    const bool parallel = worth_parallel(end - base);
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static)
      for (std::size_t i = 0; i < set.size(); ++i) position[set[i]] = slots[i];
#pragma omp for schedule(static)
      for (std::size_t i = 0; i < remote.size(); ++i)
        position[remote[i]] = remote_base + chunk.remote_slots[i];
    }
#pragma omp parallel if (parallel)
    {
#pragma omp for schedule(static) nowait
      for (vertex_t i = 0; i <= chunk.num_dst(); ++i)
        chunk.indptr[i] = state.graph.indptr[chunk.dst_begin + i] - base;
#pragma omp for schedule(static)
      for (edge_t e = base; e < end; ++e)
        chunk.columns[e - base] = position[state.graph.indices[e]];
    }
    progress.add(1);
  }
  progress.finish();
}

void check_options(const Dataset& d, const PlanOptions& o) {
  SLUICE_INPUT_CHECK(o.partitions >= 1, "--partitions must be at least 1 (got ", o.partitions, ")");
  SLUICE_INPUT_CHECK(o.chunks >= 1, "--chunks must be at least 1 (got ", o.chunks, ")");
  SLUICE_INPUT_CHECK(o.partitions <= d.num_nodes, "cannot cut ", d.num_nodes, " vertices into ",
                     o.partitions, " partitions");
  SLUICE_INPUT_CHECK(std::int64_t(o.partitions) * o.chunks <= (std::int64_t(1) << 24),
                     "P x C = ", std::int64_t(o.partitions) * o.chunks, " chunks is too many");
  SLUICE_INPUT_CHECK(o.bandwidths.h2d > 0 && o.bandwidths.p2p > 0 && o.bandwidths.reuse > 0,
                     "bandwidths must be positive");
}

}  // namespace

void check_graph(const Dataset& d) {
  const std::string what = d.name.empty() ? std::string("dataset") : "dataset " + d.name;
  SLUICE_INPUT_CHECK(d.num_nodes > 0, what, ": empty graph (no vertices)");
  SLUICE_INPUT_CHECK(d.indptr.size() == std::size_t(d.num_nodes) + 1, what, ": indptr has ",
                     d.indptr.size(), " entries, expected ", std::int64_t(d.num_nodes) + 1);
  SLUICE_INPUT_CHECK(d.indptr[0] == 0, what, ": indptr[0] is not 0");
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    SLUICE_INPUT_CHECK(d.indptr[v] <= d.indptr[v + 1], what, ": indptr decreases at vertex ", v);
  SLUICE_INPUT_CHECK(d.indices.size() == std::size_t(d.num_edges()), what, ": ", d.indices.size(),
                     " edge sources but indptr ends at ", d.num_edges());
  bool in_range = true;
#pragma omp parallel for schedule(static) reduction(&& : in_range) if (worth_parallel(std::int64_t(d.indices.size())))
  for (std::size_t e = 0; e < d.indices.size(); ++e)
    in_range = in_range && d.indices[e] >= 0 && d.indices[e] < d.num_nodes;
  SLUICE_INPUT_CHECK(in_range, what, ": an edge source is out of range [0, ", d.num_nodes, ")");
}

Plan build_plan_from_partition(const Dataset& d, const VertexPartition& partition,
                               const PlanOptions& options, const std::string& fingerprint) {
  check_options(d, options);
  SLUICE_EXPECTS(partition.part.size() == std::size_t(d.num_nodes), "partition has ",
                 partition.part.size(), " entries for ", d.num_nodes, " vertices");
  const double start = now_seconds();
  const int P = options.partitions;
  const int C = options.chunks;
  Plan plan;
  plan.partitions = P;
  plan.chunks = C;
  plan.num_nodes = d.num_nodes;
  plan.num_dataset_edges = d.num_edges();
  plan.dataset_fingerprint = fingerprint;
  plan.partitioner = partition.method;
  plan.seed = options.seed;
  plan.bandwidths = options.bandwidths;

  Renumbering renumbering;
  {
    StageTimer timer("renumber");
    // One chunk a partition: the rows its peers read first, one run (BoundaryVertices::kFirst).
    renumbering = renumber_by_partition(
        d, partition.part, P, C == 1 ? BoundaryVertices::kFirst : BoundaryVertices::kInPlace);
  }
  ChunkGraph graph;
  std::vector<vertex_t> bounds;
  NeighborSets sets;
  {
    StageTimer timer("chunks and neighbor sets");
    graph = build_chunk_graph(d, renumbering);
    bounds = chunk_bounds(graph, renumbering.partition_offsets, C);
    sets = build_neighbor_sets(graph, bounds, P, C);
  }
  plan.new_to_old = std::move(renumbering.new_to_old);
  plan.old_to_new = std::move(renumbering.old_to_new);
  plan.partition_offsets = std::move(renumbering.partition_offsets);

  const std::int64_t feature_dim =
      options.cost_feature_dim > 0 ? options.cost_feature_dim : d.feature_dim;
  ReorganizeResult layout;
  {
    StageTimer timer("reorganize");
    layout = reorganize(sets, plan.partition_offsets, options.reorganize, options.bandwidths,
                        feature_dim);
    if (layout.reorganized && options.layout_fits && !options.layout_fits(layout.order))
      layout = reorganize(sets, plan.partition_offsets, false, options.bandwidths, feature_dim);
  }
  plan.reorganized = layout.reorganized;

  StageTimer timer("indices");
  plan.chunk_plans.resize(std::size_t(P) * C);
  for (int c = 0; c < C; ++c) {
    for (int p = 0; p < P; ++p) {
      ChunkPlan& chunk = plan.chunk(c, p);
      chunk.partition = p;
      chunk.batch = c;
      chunk.range = layout.order[std::size_t(c) * P + p];
      chunk.dst_begin = bounds[std::size_t(p) * (C + 1) + chunk.range];
      chunk.dst_end = bounds[std::size_t(p) * (C + 1) + chunk.range + 1];
    }
  }
  BuildState state{graph, sets, layout.order, {}, {}};
  build_transition_sets(plan, state);
  plan.transition_rows.assign(P, 0);
  plan.remote_rows.assign(P, 0);
  for (int c = 0; c < C; ++c) {
    for (int p = 0; p < P; ++p) {
      const std::size_t k = std::size_t(c) * P + p;
      plan.transition_rows[p] = std::max<vertex_t>(
          plan.transition_rows[p], static_cast<vertex_t>(state.transition[k].size()));
      const int r = layout.order[k];
      const vertex_t* first =
          std::lower_bound(sets.begin(p, r), sets.end(p, r), plan.partition_offsets[p]);
      const vertex_t* last = std::lower_bound(first, sets.end(p, r), plan.partition_offsets[p + 1]);
      const edge_t remote = sets.size(p, r) - (last - first);
      plan.remote_rows[p] = std::max<vertex_t>(plan.remote_rows[p], static_cast<vertex_t>(remote));
    }
  }
  assign_transition_slots(plan, state);
  assign_remote_slots(plan, state);
  build_chunk_csr(plan, state);
  timer.finish();

  PlanStats& stats = plan.stats;
  stats.volume_baseline_rows = layout.volumes.baseline_rows;
  stats.replication_factor = static_cast<double>(stats.volume_baseline_rows) / d.num_nodes;
  stats.volume_p2p_rows = 0;
  stats.volume_reuse_rows = 0;
  stats.reused_rows = 0;
  stats.p2p_rows = 0;
  for (const ChunkPlan& chunk : plan.chunk_plans) {
    stats.volume_p2p_rows +=
        chunk.reuse_count + static_cast<std::int64_t>(chunk.load_vertices.size());
    stats.volume_reuse_rows += static_cast<std::int64_t>(chunk.load_vertices.size());
    stats.reused_rows += chunk.reuse_count;
    for (std::uint8_t pull : chunk.remote_pull) stats.p2p_rows += pull;
  }
  SLUICE_EXPECTS(stats.volume_p2p_rows == layout.volumes.transition_rows &&
                     stats.volume_reuse_rows == layout.volumes.load_rows &&
                     stats.reused_rows == layout.volumes.reused_rows &&
                     stats.p2p_rows == layout.volumes.pull_rows,
                 "index volumes disagree with the cost model's");
  stats.cost_before = layout.cost_before;
  stats.cost_after = layout.cost_after;
  stats.cost_feature_dim = feature_dim;
  stats.partition_seconds = partition.seconds;
  stats.build_seconds = now_seconds() - start;
  return plan;
}

Plan build_plan(const Dataset& dataset, const PlanOptions& options,
                const std::string& fingerprint) {
  check_graph(dataset);
  check_options(dataset, options);
  VertexPartition partition;
  {
    StageTimer timer(
        cat("level-1 partition (", options.partitioner, ", P=", options.partitions, ")"));
    partition = partition_vertices(dataset, options.partitions, options.partitioner, options.seed,
                                   parse_balance(options.balance), options.imbalance);
  }
  return build_plan_from_partition(dataset, partition, options, fingerprint);
}

}  // namespace sluice
