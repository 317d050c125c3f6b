// Implementation of preprocess/multilevel_partition.hpp.
#include "preprocess/multilevel_partition.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "preprocess/metis_check.hpp"
#include "preprocess/multilevel_cluster.hpp"
#include "preprocess/multilevel_graph.hpp"
#include "preprocess/multilevel_refine.hpp"
#include "preprocess/partition_memory.hpp"

namespace sluice {
namespace {

using multilevel::kConstraints;
using multilevel::kCount;
using multilevel::kWork;
using multilevel::LevelGraph;
using multilevel::Limits;
using multilevel::PartAssignment;

constexpr std::int64_t kUnlimited = std::numeric_limits<std::int64_t>::max();
// A level that keeps more than this share of its vertices ends the coarsening.
constexpr double kStalledShare = 0.85;
// METIS sums weights in idx_t: the coarsest graph's vertex and edge weights are scaled down so
// that each total stays under this.
constexpr std::int64_t kMetisWeightTotal = std::int64_t(1) << 29;

bool enforced(Balance balance, int constraint) {
  if (balance == Balance::kBoth) return true;
  return (balance == Balance::kEdges) == (constraint == kWork);
}

// The tolerance of each constraint (ub): given ones, else 1.01 for both constraints of kBoth and
// METIS's 1.03 for a single one, as the whole-graph partitioner uses.
std::array<double, kConstraints> tolerances(const MultilevelOptions& options) {
  std::array<double, kConstraints> ub{};
  const int constraints = options.balance == Balance::kBoth ? 2 : 1;
  int index = 0;
  for (int k = 0; k < kConstraints; ++k) {
    if (!enforced(options.balance, k)) continue;
    if (options.imbalance.empty())
      ub[k] = constraints == 2 ? 1.01 : 1.03;
    else
      ub[k] = options.imbalance[options.imbalance.size() == 1 ? 0 : std::size_t(index)];
    ++index;
  }
  return ub;
}

// Divides weights so that their total stays under kMetisWeightTotal (each at least 1).
std::vector<idx_t> scaled_for_metis(const std::vector<std::int64_t>& weights) {
  const std::int64_t total = std::accumulate(weights.begin(), weights.end(), std::int64_t(0));
  const std::int64_t divisor =
      std::max<std::int64_t>(1, (total + kMetisWeightTotal - 1) / kMetisWeightTotal);
  std::vector<idx_t> scaled(weights.size());
  for (std::size_t i = 0; i < weights.size(); ++i)
    scaled[i] = static_cast<idx_t>(std::max<std::int64_t>(1, (weights[i] + divisor / 2) / divisor));
  return scaled;
}

// METIS k-way on the coarsest graph under the enforced constraints and tolerances.
PartAssignment initial_partition(const LevelGraph& graph, const MultilevelOptions& options,
                                 const std::array<double, kConstraints>& tolerance) {
  const vertex_t n = graph.num_vertices();
  const int parts = options.parts;
  PartAssignment part(n, 0);
  if (n == 0) return part;
  std::vector<int> constraints;
  for (int k = 0; k < kConstraints; ++k)
    if (enforced(options.balance, k)) constraints.push_back(k);
  if (n <= parts || graph.adjacency().empty()) {
    // Nothing for METIS to cut: heaviest vertex first into the lightest part.
    std::vector<vertex_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const int k = constraints.front();
    std::stable_sort(order.begin(), order.end(), [&](vertex_t a, vertex_t b) {
      return graph.weight(k, a) > graph.weight(k, b);
    });
    std::vector<std::int64_t> load(parts, 0);
    for (vertex_t v : order) {
      const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
      part[v] = static_cast<std::int32_t>(lightest);
      load[lightest] += graph.weight(k, v);
    }
    return part;
  }
  SLUICE_EXPECTS(graph.num_entries() <= std::numeric_limits<idx_t>::max(),
                 "the coarsest graph has ", graph.num_entries(),
                 " entries, more than METIS's idx_t indexes: coarsening stalled");
  std::vector<idx_t> xadj(graph.indptr().begin(), graph.indptr().end());
  std::vector<idx_t> adjncy(graph.adjacency().begin(), graph.adjacency().end());
  std::vector<idx_t> adjwgt = scaled_for_metis(graph.edge_weights());
  idx_t ncon = static_cast<idx_t>(constraints.size());
  std::vector<idx_t> vwgt(std::size_t(n) * ncon);
  std::vector<real_t> ubvec;
  for (idx_t c = 0; c < ncon; ++c) {
    const int k = constraints[c];
    const std::vector<idx_t> scaled = scaled_for_metis(graph.weights()[k]);
    for (vertex_t v = 0; v < n; ++v) vwgt[std::size_t(v) * ncon + c] = scaled[v];
    ubvec.push_back(static_cast<real_t>(tolerance[k]));
  }
  idx_t nvtxs = n;
  idx_t nparts = parts;
  idx_t objval = 0;
  idx_t options_metis[METIS_NOPTIONS];
  SLUICE_METIS(METIS_SetDefaultOptions(options_metis));
  options_metis[METIS_OPTION_SEED] = static_cast<idx_t>(
      options.seed % static_cast<std::uint64_t>(std::numeric_limits<idx_t>::max()));
  options_metis[METIS_OPTION_NUMBERING] = 0;
  std::vector<idx_t> result(n, 0);
  SLUICE_METIS(METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                                   adjwgt.data(), &nparts, nullptr, ubvec.data(), options_metis,
                                   &objval, result.data()));
  log_debug("multilevel: METIS cut ", objval, " (edge weights scaled), tolerances ", ubvec[0],
            ncon > 1 ? cat(", ", ubvec[1]) : std::string());
  for (vertex_t v = 0; v < n; ++v) {
    SLUICE_EXPECTS(result[v] >= 0 && result[v] < parts, "METIS returned part ", result[v]);
    part[v] = static_cast<std::int32_t>(result[v]);
  }
  return part;
}

vertex_t count_with_neighbors(const LevelGraph& graph) {
  const vertex_t n = graph.num_vertices();
  std::int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count) if (worth_parallel(n))
  for (vertex_t v = 0; v < n; ++v) count += graph.has_neighbors(v);
  return static_cast<vertex_t>(count);
}

// "work: heaviest part W, limit L; count: ..." for logs.
std::string heaviest_parts(const LevelGraph& graph, const PartAssignment& part, int parts,
                           const Limits& limits) {
  const auto load = multilevel::part_weights(graph, part, parts);
  std::string text;
  for (int k = 0; k < kConstraints; ++k)
    text += cat(k ? "; " : "", k == kWork ? "work" : "count", ": heaviest part ",
                *std::max_element(load[k].begin(), load[k].end()), ", limit ",
                limits[k] == kUnlimited ? std::string("none") : cat(limits[k]));
  return text;
}

}  // namespace

std::int64_t multilevel_base_bytes(std::int64_t n, std::int64_t m, bool symmetrized) {
  // Level 0: two weights per vertex, and the out-edge CSR of a directed dataset.
  std::int64_t bytes = 16 * n;
  if (!symmetrized) bytes += 8 * n + 4 * m;
  // Clustering: labels, loads and incoming sums (both constraints), cluster sizes, favoured
  // clusters, the visiting order (ids and groups), move requests, two-hop pairs; contraction:
  // coarse ids, label ids, members.
  bytes += n * (4 + 16 + 16 + 4 + 4 + 4 + 6 + 1 + 8 + 12);
  return bytes;
}

MultilevelResult multilevel_partition(const Dataset& dataset, const MultilevelOptions& options) {
  const int parts = options.parts;
  SLUICE_EXPECTS(parts >= 2, "multilevel partitioning needs 2 or more parts, got ", parts);
  ResidentPeakSampler sampler;
  require_host_memory(
      multilevel_base_bytes(dataset.num_nodes, dataset.num_edges(), dataset.symmetrized),
      "multilevel partitioning");
  std::vector<LevelGraph> graphs;
  std::vector<std::vector<vertex_t>> coarse_of;  // per level below the coarsest
  {
    PartitionStage stage("multilevel: level-0 graph view", sampler);
    graphs.push_back(LevelGraph::from_dataset(dataset));
  }
  const auto ub = tolerances(options);
  Limits part_limits{}, cluster_limits{};
  for (int k = 0; k < kConstraints; ++k) {
    const auto& w = graphs[0].weights()[k];
    const std::int64_t total = std::accumulate(w.begin(), w.end(), std::int64_t(0));
    const std::int64_t share = (total + parts - 1) / parts;
    part_limits[k] = enforced(options.balance, k)
                         ? std::max(share, static_cast<std::int64_t>(ub[k] * total / parts))
                         : kUnlimited;
    cluster_limits[k] = std::max<std::int64_t>(
        1,
        static_cast<std::int64_t>(options.max_cluster_share * static_cast<double>(total) / parts));
  }

  // Coarsening. The vertices without neighbors go into a few hundred packs at level 0.
  vertex_t active = count_with_neighbors(graphs[0]);
  const vertex_t pack_size = std::max<vertex_t>(
      1, std::min<vertex_t>(
             (dataset.num_nodes - active) / (64 * parts),
             static_cast<vertex_t>(std::min(cluster_limits[kWork], cluster_limits[kCount]))));
  for (int level = 0;; ++level) {
    const LevelGraph& graph = graphs.back();
    const bool coarse_enough = active <= options.coarsest_vertices;
    if (coarse_enough && level > 0) break;
    PartitionStage stage(cat("multilevel: coarsen level ", level, " (", active, " vertices, ",
                             graph.num_entries(), " entries)"),
                         sampler);
    std::vector<vertex_t> label(graph.num_vertices());
    if (coarse_enough) {
      std::iota(label.begin(), label.end(), 0);  // small graph: level 0 as METIS's input as is
    } else {
      multilevel::ClusteringOptions clustering;
      clustering.max_cluster_weight = cluster_limits;
      clustering.rounds = options.clustering_rounds;
      clustering.seed = options.seed;
      clustering.salt = std::uint64_t(level);
      label = multilevel::cluster_vertices(graph, clustering, cat("cluster level ", level));
    }
    if (level == 0) multilevel::pack_isolated(graph, pack_size, label);
    multilevel::Contraction contraction =
        multilevel::contract(graph, label, cat("contract level ", level));
    const vertex_t coarse_n = contraction.coarse.num_vertices();
    log_debug("multilevel: level ", level + 1, ": ", coarse_n, " vertices, ",
              contraction.coarse.num_entries(), " entries");
    graphs.push_back(std::move(contraction.coarse));
    coarse_of.push_back(std::move(contraction.coarse_of));
    const bool stalled = coarse_n > kStalledShare * active;
    active = coarse_n;
    if (coarse_enough || stalled) break;
  }

  MultilevelResult result;
  result.levels = static_cast<int>(graphs.size());
  result.coarsest_vertices = graphs.back().num_vertices();
  result.coarsest_entries = graphs.back().num_entries();
  multilevel::RefinementOptions refinement;
  refinement.parts = parts;
  refinement.max_part_weight = part_limits;
  refinement.rounds = options.refinement_rounds;
  refinement.seed = options.seed;
  PartAssignment part;
  {
    PartitionStage stage(cat("multilevel: METIS on the coarsest graph (", result.coarsest_vertices,
                             " vertices, ", result.coarsest_entries, " entries)"),
                         sampler);
    part = initial_partition(graphs.back(), options, ub);
  }
  // Uncoarsening: refine each level, then project to the next finer one.
  for (int level = static_cast<int>(graphs.size()) - 1; level >= 0; --level) {
    const LevelGraph& graph = graphs[level];
    PartitionStage stage(cat("multilevel: refine level ", level), sampler);
    refinement.salt = 1000 + std::uint64_t(level);
    multilevel::rebalance_partition(graph, part, refinement);
    const std::int64_t moves =
        multilevel::refine_partition(graph, part, refinement, cat("refine level ", level));
    const bool balanced = multilevel::rebalance_partition(graph, part, refinement);
    log_debug("multilevel: level ", level, ": ", moves, " refinement moves, ",
              heaviest_parts(graph, part, parts, part_limits));
    if (level == 0) {
      if (!balanced)
        log_info("multilevel: no single moves bring every part under its limit (",
                 heaviest_parts(graph, part, parts, part_limits), ")");
      break;
    }
    PartAssignment finer(graphs[level - 1].num_vertices());
    const auto& map = coarse_of[level - 1];
#pragma omp parallel for schedule(static) if (worth_parallel(map.size()))
    for (std::size_t v = 0; v < map.size(); ++v) finer[v] = part[map[v]];
    part.swap(finer);
    graphs.pop_back();
    coarse_of.pop_back();
  }
  {
    PartitionStage stage("multilevel: edge cut", sampler);
    result.edge_cut = multilevel::simple_edge_cut(graphs[0], part);
  }
  result.part = std::move(part);
  return result;
}

}  // namespace sluice
