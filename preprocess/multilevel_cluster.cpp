// Implementation of preprocess/multilevel_cluster.hpp.
#include "preprocess/multilevel_cluster.hpp"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace sluice::multilevel {
namespace {

// A label propagation pass stops the clustering once it moves fewer than this share of the
// vertices it visits.
constexpr double kConvergedShare = 0.005;

// Groups the vertices still alone in their cluster by the cluster they would have joined without
// the weight limits (`favoured`) and packs each group, in increasing id, into clusters under the
// limits: a hub's leaves end up together instead of each staying a coarse vertex.
void group_two_hop(const LevelGraph& graph, const std::vector<vertex_t>& favoured,
                   const std::vector<std::atomic<vertex_t>>& cluster_size, const Limits& limits,
                   std::vector<vertex_t>& label) {
  const vertex_t n = graph.num_vertices();
  std::vector<std::pair<vertex_t, vertex_t>> alone;  // (favoured cluster, vertex)
  for (vertex_t v = 0; v < n; ++v)
    if (favoured[v] >= 0 && cluster_size[label[v]].load(std::memory_order_relaxed) == 1)
      alone.emplace_back(favoured[v], v);
  sort_total_order(alone.begin(), alone.end(), std::less<>());
  std::size_t i = 0;
  while (i < alone.size()) {
    const vertex_t group = alone[i].first;
    Limits sum{};
    vertex_t pack_label = -1;
    for (; i < alone.size() && alone[i].first == group; ++i) {
      const vertex_t v = alone[i].second;
      bool fits = pack_label >= 0;
      for (int k = 0; k < kConstraints; ++k)
        fits = fits && sum[k] + graph.weight(k, v) <= limits[k];
      if (!fits) {  // start a new pack named by its first vertex's (single-member) cluster
        pack_label = label[v];
        sum = {};
      }
      for (int k = 0; k < kConstraints; ++k) sum[k] += graph.weight(k, v);
      label[v] = pack_label;
    }
  }
}

}  // namespace

std::vector<vertex_t> cluster_vertices(const LevelGraph& graph, const ClusteringOptions& options,
                                       const std::string& progress_name) {
  const vertex_t n = graph.num_vertices();
  const bool parallel = worth_parallel(graph.num_entries() + n);
  const std::int64_t average_degree = 1 + graph.num_entries() / std::max<vertex_t>(1, n);
  std::vector<vertex_t> label(n);
  std::vector<vertex_t> active;
  for (vertex_t v = 0; v < n; ++v) {
    label[v] = v;
    if (graph.has_neighbors(v)) active.push_back(v);
  }
  Loads loads = make_loads(n);
  Loads incoming = make_loads(n);
  std::vector<std::atomic<vertex_t>> cluster_size(n);
#pragma omp parallel for schedule(static) if (parallel)
  for (vertex_t v = 0; v < n; ++v) {
    for (int k = 0; k < kConstraints; ++k)
      loads[v].weight[k].store(graph.weight(k, v), std::memory_order_relaxed);
    cluster_size[v].store(1, std::memory_order_relaxed);
  }
  std::vector<vertex_t> favoured(n, -1);
  const VisitOrder order = make_visit_order(active, options.sub_rounds, options.seed, options.salt);
  const Limits& limits = options.max_cluster_weight;
  std::vector<MoveRequest> requests;
  const auto choose_cluster = [&](vertex_t v, const RatingMap& map) {
    const vertex_t own = label[v];
    // Best cluster under the limits, and best regardless of them (two-hop grouping);
    // ties go to the cluster with the smaller hash, so the choice is order-free.
    vertex_t best = -1, best_free = -1;
    std::int64_t best_rating = 0, best_free_rating = 0;
    auto beats = [&](vertex_t c, std::int64_t rating, vertex_t other, std::int64_t other_rating) {
      if (other < 0 || rating != other_rating) return other < 0 || rating > other_rating;
      return mix64(options.seed ^ std::uint64_t(c)) < mix64(options.seed ^ std::uint64_t(other));
    };
    map.for_each([&](vertex_t c, std::int64_t rating) {
      if (c == own) return;
      if (beats(c, rating, best_free, best_free_rating)) {
        best_free = c;
        best_free_rating = rating;
      }
      if (!beats(c, rating, best, best_rating)) return;
      if (!fits_under_limits(graph, v, loads, c, limits)) return;
      best = c;
      best_rating = rating;
    });
    favoured[v] = best_free;
    const std::int64_t own_rating = map.get(own);
    if (best >= 0 && best_rating > own_rating)
      return MoveRequest{v, best, best_rating - own_rating};
    return MoveRequest{v, -1, 0};
  };
  Progress progress(progress_name, std::uint64_t(options.rounds) * active.size());
  for (int round = 0; round < options.rounds; ++round) {
    std::int64_t moved = 0;
    for (int s = 0; s < options.sub_rounds; ++s) {
      const std::int64_t begin = order.group_offsets[s];
      const std::int64_t size = order.group_offsets[s + 1] - begin;
      // A team per sub-round only when the sub-round reads enough of the graph.
      const bool parallel_step = worth_parallel(size * average_degree);
      request_moves(graph, order.vertices.data() + begin, size, label, n, parallel_step,
                    choose_cluster, requests);
      approve_moves(requests, graph.weights(), loads, limits, incoming);
      std::int64_t accepted = 0;
#pragma omp parallel for schedule(static) reduction(+ : accepted) if (parallel_step)
      for (std::int64_t i = 0; i < size; ++i) {
        const MoveRequest& r = requests[i];
        if (r.target < 0) continue;
        const vertex_t from = label[r.vertex];
        for (int k = 0; k < kConstraints; ++k) {
          loads[from].weight[k].fetch_sub(graph.weight(k, r.vertex), std::memory_order_relaxed);
          loads[r.target].weight[k].fetch_add(graph.weight(k, r.vertex), std::memory_order_relaxed);
        }
        cluster_size[from].fetch_sub(1, std::memory_order_relaxed);
        cluster_size[r.target].fetch_add(1, std::memory_order_relaxed);
        label[r.vertex] = r.target;
        ++accepted;
      }
      moved += accepted;
      progress.add(static_cast<std::uint64_t>(size));
    }
    log_debug("multilevel: clustering pass ", round, ": ", moved, " of ", active.size(),
              " vertices moved");
    if (moved < kConvergedShare * static_cast<double>(active.size())) break;
  }
  progress.finish();
  group_two_hop(graph, favoured, cluster_size, limits, label);
  return label;
}

void pack_isolated(const LevelGraph& graph, vertex_t pack_size, std::vector<vertex_t>& label) {
  vertex_t in_pack = 0, pack_label = -1;
  for (vertex_t v = 0; v < graph.num_vertices(); ++v) {
    if (graph.has_neighbors(v)) continue;
    if (in_pack == 0) pack_label = label[v];
    label[v] = pack_label;
    if (++in_pack == pack_size) in_pack = 0;
  }
}

}  // namespace sluice::multilevel
