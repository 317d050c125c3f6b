// Deterministic parallel moves for the multilevel partitioner's label propagation (clustering and
// refinement): vertices are visited in sub-rounds of a fixed hashed order; inside a sub-round
// every vertex decides from the state left by the previous one, then the requested moves are
// approved so that no target exceeds its weight limits, independently of the thread count.
#pragma once

#include <parallel/algorithm>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "common/types.hpp"
#include "preprocess/multilevel_graph.hpp"

namespace sluice::multilevel {

// Sorts by `less`, which must be a strict total order (then the result does not depend on the
// thread count); in parallel when the range is long.
template <typename Iterator, typename Less>
void sort_total_order(Iterator begin, Iterator end, Less less) {
  if (end - begin >= (std::int64_t(1) << 16))
    __gnu_parallel::sort(begin, end, less);
  else
    std::sort(begin, end, less);
}

// Weight per constraint of one target (cluster or part), updated by concurrent moves; the
// constraints of a target share a cache line.
struct AtomicLoad {
  std::array<std::atomic<std::int64_t>, kConstraints> weight;
};
using Loads = std::vector<AtomicLoad>;
using Limits = std::array<std::int64_t, kConstraints>;  // the same for every target

Loads make_loads(std::size_t targets);

// The visiting order: the vertices of `active` (ids) split into `sub_rounds` groups by a hash of
// (seed, salt, vertex), increasing id inside a group. group_offsets has sub_rounds + 1 entries.
struct VisitOrder {
  std::vector<vertex_t> vertices;
  std::vector<std::int64_t> group_offsets;
};
VisitOrder make_visit_order(const std::vector<vertex_t>& active, int sub_rounds, std::uint64_t seed,
                            std::uint64_t salt);

// A move request: `vertex` wants to go to `target` (-1: no request) for `gain`.
struct MoveRequest {
  vertex_t vertex = 0;
  vertex_t target = -1;
  std::int64_t gain = 0;
};

// Whether v's weights fit into `target` on top of its current load.
inline bool fits_under_limits(const LevelGraph& graph, vertex_t v, const Loads& loads,
                              vertex_t target, const Limits& limits) {
  for (int k = 0; k < kConstraints; ++k)
    if (loads[target].weight[k].load(std::memory_order_relaxed) + graph.weight(k, v) > limits[k])
      return false;
  return true;
}

// The requests of one sub-round: for every vertex v = vertices[i], i in [0, size), sums the
// edge weights of v's neighbours u by target_of[u] in a RatingMap (room for at most
// `max_targets` distinct targets) and stores decide(v, map), a MoveRequest, as requests[i].
// Each vertex decides from state no other one of the sub-round changes, so the requests do
// not depend on the thread count; `parallel` says whether a team is worth it.
template <typename TargetOf, typename Decide>
void request_moves(const LevelGraph& graph, const vertex_t* vertices, std::int64_t size,
                   const TargetOf& target_of, edge_t max_targets, bool parallel, Decide&& decide,
                   std::vector<MoveRequest>& requests) {
  requests.assign(size, MoveRequest{});
#pragma omp parallel if (parallel)
  {
    RatingMap map;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t i = 0; i < size; ++i) {
      const vertex_t v = vertices[i];
      map.reset(static_cast<std::size_t>(std::min<edge_t>(graph.degree_bound(v), max_targets)));
      graph.for_each_neighbor(v, [&](vertex_t u, std::int64_t w) { map.add(target_of[u], w); });
      requests[i] = decide(v, static_cast<const RatingMap&>(map));
    }
  }
}

// Keeps the requests that fit: where all requests into a target fit under the limits on top of
// its current load, all are kept; elsewhere the ones with the highest gain (then lowest vertex
// id) that fit, in that order. Rejected requests get target -1. Moves out of a target are not
// counted as freeing room, so the limits hold whatever order the moves are applied in.
// `incoming` is scratch (one entry per target, zero on entry and on return).
void approve_moves(std::vector<MoveRequest>& requests, const VertexWeights& weights,
                   const Loads& loads, const Limits& limits, Loads& incoming);

}  // namespace sluice::multilevel
