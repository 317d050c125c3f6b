// Implementation of preprocess/multilevel_refine.hpp.
#include "preprocess/multilevel_refine.hpp"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "common/log.hpp"
#include "common/parallel.hpp"

namespace sluice::multilevel {
namespace {

// Refinement stops once a pass moves fewer than this share of the vertices it visits.
constexpr double kConvergedShare = 0.001;
// Rebalancing passes (each recomputes every candidate's best target) before giving up.
constexpr int kRebalancePasses = 6;

// How full part p is: its fullest enforced constraint, as a share of the limit.
double fill_ratio(const std::array<std::int64_t, kConstraints>& load, const Limits& limits) {
  double ratio = 0;
  for (int k = 0; k < kConstraints; ++k)
    if (limits[k] < std::numeric_limits<std::int64_t>::max())
      ratio = std::max(ratio, static_cast<double>(load[k]) / static_cast<double>(limits[k]));
  return ratio;
}

std::array<std::int64_t, kConstraints> load_of(const Loads& loads, int p) {
  std::array<std::int64_t, kConstraints> load{};
  for (int k = 0; k < kConstraints; ++k)
    load[k] = loads[p].weight[k].load(std::memory_order_relaxed);
  return load;
}

}  // namespace

std::array<std::vector<std::int64_t>, kConstraints> part_weights(const LevelGraph& graph,
                                                                 const PartAssignment& part,
                                                                 int parts) {
  std::array<std::vector<std::int64_t>, kConstraints> sums;
  for (auto& s : sums) s.assign(parts, 0);
  const vertex_t n = graph.num_vertices();
#pragma omp parallel if (worth_parallel(n))
  {
    std::array<std::vector<std::int64_t>, kConstraints> local;
    for (auto& s : local) s.assign(parts, 0);
#pragma omp for schedule(static)
    for (vertex_t v = 0; v < n; ++v)
      for (int k = 0; k < kConstraints; ++k) local[k][part[v]] += graph.weight(k, v);
#pragma omp critical
    for (int k = 0; k < kConstraints; ++k)
      for (int p = 0; p < parts; ++p) sums[k][p] += local[k][p];
  }
  return sums;
}

std::int64_t refine_partition(const LevelGraph& graph, PartAssignment& part,
                              const RefinementOptions& options, const std::string& progress_name) {
  const vertex_t n = graph.num_vertices();
  const int parts = options.parts;
  const std::int64_t average_degree = 1 + graph.num_entries() / std::max<vertex_t>(1, n);
  const Limits& limits = options.max_part_weight;
  std::vector<vertex_t> active;
  for (vertex_t v = 0; v < n; ++v)
    if (graph.has_neighbors(v)) active.push_back(v);
  const VisitOrder order = make_visit_order(active, options.sub_rounds, options.seed, options.salt);
  Loads loads = make_loads(parts);
  Loads incoming = make_loads(parts);
  {
    const auto sums = part_weights(graph, part, parts);
    for (int k = 0; k < kConstraints; ++k)
      for (int p = 0; p < parts; ++p)
        loads[p].weight[k].store(sums[k][p], std::memory_order_relaxed);
  }
  std::vector<MoveRequest> requests;
  std::vector<double> fill(parts);
  std::int64_t total_moves = 0;
  const auto choose_part = [&](vertex_t v, const RatingMap& map) {
    const std::int32_t own = part[v];
    const std::int64_t own_connection = map.get(own);
    // The positive-gain target with room; ties go to the emptier part (fill as of the
    // sub-round's start), then the lower id.
    std::int32_t best = -1;
    std::int64_t best_gain = 0;
    map.for_each([&](vertex_t p, std::int64_t connection) {
      const std::int64_t gain = connection - own_connection;
      if (p == own || gain <= 0 || gain < best_gain) return;
      if (gain == best_gain && best >= 0 &&
          (fill[p] > fill[best] || (fill[p] == fill[best] && p > best)))
        return;
      if (!fits_under_limits(graph, v, loads, p, limits)) return;
      best = p;
      best_gain = gain;
    });
    return MoveRequest{v, best, best_gain};
  };
  Progress progress(progress_name, std::uint64_t(options.rounds) * active.size());
  for (int round = 0; round < options.rounds; ++round) {
    std::int64_t moved = 0;
    for (int s = 0; s < options.sub_rounds; ++s) {
      const std::int64_t begin = order.group_offsets[s];
      const std::int64_t size = order.group_offsets[s + 1] - begin;
      for (int p = 0; p < parts; ++p) fill[p] = fill_ratio(load_of(loads, p), limits);
      // A team per sub-round only when the sub-round reads enough of the graph.
      const bool parallel = worth_parallel(size * average_degree);
      request_moves(graph, order.vertices.data() + begin, size, part, parts, parallel, choose_part,
                    requests);
      approve_moves(requests, graph.weights(), loads, limits, incoming);
      // Per-thread load changes, summed once: every move touches the same few part counters.
      std::int64_t accepted = 0;
#pragma omp parallel if (parallel) reduction(+ : accepted)
      {
        std::array<std::vector<std::int64_t>, kConstraints> delta;
        for (auto& d : delta) d.assign(parts, 0);
#pragma omp for schedule(static)
        for (std::int64_t i = 0; i < size; ++i) {
          const MoveRequest& r = requests[i];
          if (r.target < 0) continue;
          for (int k = 0; k < kConstraints; ++k) {
            delta[k][part[r.vertex]] -= graph.weight(k, r.vertex);
            delta[k][r.target] += graph.weight(k, r.vertex);
          }
          part[r.vertex] = r.target;
          ++accepted;
        }
        for (int k = 0; k < kConstraints; ++k)
          for (int p = 0; p < parts; ++p)
            if (delta[k][p]) loads[p].weight[k].fetch_add(delta[k][p], std::memory_order_relaxed);
      }
      moved += accepted;
      progress.add(static_cast<std::uint64_t>(size));
    }
    total_moves += moved;
    if (moved < kConvergedShare * static_cast<double>(active.size())) break;
  }
  progress.finish();
  return total_moves;
}

namespace {

using PartLoads = std::array<std::vector<std::int64_t>, kConstraints>;

// How far part p is over its limits (each excess as a share of its limit, summed) after adding
// the weights of `added` times `sign` (0: as is, 1: gains it, -1: loses it).
double overload(const LevelGraph& graph, const PartLoads& load, const Limits& limits,
                std::int32_t p, std::int64_t sign, vertex_t added) {
  double sum = 0;
  for (int k = 0; k < kConstraints; ++k) {
    const std::int64_t after = load[k][p] + sign * graph.weight(k, added);
    if (after > limits[k])
      sum += static_cast<double>(after - limits[k]) / static_cast<double>(limits[k]);
  }
  return sum;
}

void move_vertex(const LevelGraph& graph, PartLoads& load, PartAssignment& part, vertex_t v,
                 std::int32_t target) {
  for (int k = 0; k < kConstraints; ++k) {
    load[k][part[v]] -= graph.weight(k, v);
    load[k][target] += graph.weight(k, v);
  }
  part[v] = target;
}

// Single moves out of parts over a limit, each lowering the total overload, cheapest cut
// increase per unit of overload removed first. Returns the number of moves.
std::int64_t single_move_pass(const LevelGraph& graph, PartAssignment& part, PartLoads& load,
                              const Limits& limits, int parts) {
  const vertex_t n = graph.num_vertices();
  struct Candidate {
    double priority;  // cut increase per unit of overload removed; lower goes first
    vertex_t vertex;
    std::int32_t target;
  };
  auto change = [&](vertex_t v, std::int32_t t) {
    const std::int32_t from = part[v];
    return overload(graph, load, limits, from, -1, v) - overload(graph, load, limits, from, 0, v) +
           overload(graph, load, limits, t, 1, v) - overload(graph, load, limits, t, 0, v);
  };
  std::vector<std::uint8_t> over(parts, 0);
  for (int p = 0; p < parts; ++p) over[p] = overload(graph, load, limits, p, 0, 0) > 0;
  // Besides the parts a vertex is connected to, the emptiest part of each constraint.
  std::array<std::int32_t, kConstraints> emptiest{};
  for (int k = 0; k < kConstraints; ++k)
    for (int p = 1; p < parts; ++p)
      if (load[k][p] < load[k][emptiest[k]]) emptiest[k] = p;
  std::vector<Candidate> candidates;
#pragma omp parallel if (worth_parallel(graph.num_entries() + n))
  {
    RatingMap map;
    std::vector<Candidate> local;
#pragma omp for schedule(dynamic, 1024) nowait
    for (vertex_t v = 0; v < n; ++v) {
      const std::int32_t own = part[v];
      if (!over[own]) continue;
      map.reset(static_cast<std::size_t>(std::min<edge_t>(graph.degree_bound(v), parts)));
      graph.for_each_neighbor(v, [&](vertex_t u, std::int64_t w) { map.add(part[u], w); });
      const std::int64_t own_connection = map.get(own);
      std::int32_t best = -1;
      double best_priority = 0;
      auto consider = [&](std::int32_t t, std::int64_t connection) {
        if (t == own) return;
        const double relief = -change(v, t);
        if (relief <= 0) return;
        const double priority = static_cast<double>(own_connection - connection) / relief;
        if (best < 0 || priority < best_priority || (priority == best_priority && t < best)) {
          best = t;
          best_priority = priority;
        }
      };
      map.for_each([&](vertex_t t, std::int64_t connection) { consider(t, connection); });
      for (std::int32_t t : emptiest) consider(t, map.get(t));
      if (best >= 0) local.push_back(Candidate{best_priority, v, best});
    }
#pragma omp critical
    candidates.insert(candidates.end(), local.begin(), local.end());
  }
  sort_total_order(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.priority != b.priority) return a.priority < b.priority;
                     return a.vertex < b.vertex;
                   });
  std::int64_t moves = 0;
  for (const Candidate& c : candidates) {
    if (overload(graph, load, limits, part[c.vertex], 0, 0) <= 0) continue;
    if (change(c.vertex, c.target) >= 0) continue;
    move_vertex(graph, load, part, c.vertex, c.target);
    ++moves;
  }
  return moves;
}

// Exchanges for when no single move helps because every part is full in some constraint (part A
// over in work, B at its vertex limit): a vertex heavy in A's excess constraint goes to B, and
// one of B's lightest vertices in that constraint comes back, so B's other weights barely
// change. Returns the number of exchanges.
std::int64_t exchange_pass(const LevelGraph& graph, PartAssignment& part, PartLoads& load,
                           const Limits& limits, int parts) {
  const vertex_t n = graph.num_vertices();
  const bool parallel = worth_parallel(graph.num_entries() + n);
  auto total_overload = [&](std::int32_t a, std::int32_t b) {
    return overload(graph, load, limits, a, 0, 0) + overload(graph, load, limits, b, 0, 0);
  };
  std::int64_t exchanges = 0;
  for (std::int32_t a = 0; a < parts; ++a) {
    if (overload(graph, load, limits, a, 0, 0) <= 0) continue;
    int k = 0;  // the constraint A exceeds most
    for (int c = 1; c < kConstraints; ++c)
      if (double(load[c][a] - limits[c]) / double(limits[c]) >
          double(load[k][a] - limits[k]) / double(limits[k]))
        k = c;
    std::vector<std::uint8_t> partner(parts, 0);
    for (int p = 0; p < parts; ++p) partner[p] = p != a && load[k][p] < limits[k];
    // A's vertices with the partner they are best sent to: least cut increase per unit of k.
    struct Sent {
      double priority;
      vertex_t vertex;
      std::int32_t target;
    };
    std::vector<Sent> sent;
#pragma omp parallel if (parallel)
    {
      RatingMap map;
      std::vector<Sent> local;
#pragma omp for schedule(dynamic, 1024) nowait
      for (vertex_t v = 0; v < n; ++v) {
        if (part[v] != a) continue;
        map.reset(static_cast<std::size_t>(std::min<edge_t>(graph.degree_bound(v), parts)));
        graph.for_each_neighbor(v, [&](vertex_t u, std::int64_t w) { map.add(part[u], w); });
        std::int32_t best = -1;
        std::int64_t best_connection = 0;
        for (std::int32_t p = 0; p < parts; ++p) {
          if (!partner[p]) continue;
          const std::int64_t connection = map.get(p);
          if (best < 0 || connection > best_connection) best = p, best_connection = connection;
        }
        if (best < 0) continue;
        const double loss = static_cast<double>(map.get(a) - best_connection);
        local.push_back(Sent{loss / static_cast<double>(graph.weight(k, v)), v, best});
      }
#pragma omp critical
      sent.insert(sent.end(), local.begin(), local.end());
    }
    sort_total_order(sent.begin(), sent.end(), [](const Sent& x, const Sent& y) {
      if (x.priority != y.priority) return x.priority < y.priority;
      return x.vertex < y.vertex;
    });
    // Each partner's vertices, lightest in k first.
    std::vector<std::vector<vertex_t>> returned(parts);
    for (vertex_t v = 0; v < n; ++v)
      if (partner[part[v]]) returned[part[v]].push_back(v);
    for (auto& list : returned)
      sort_total_order(list.begin(), list.end(), [&](vertex_t x, vertex_t y) {
        const std::int64_t wx = graph.weight(k, x), wy = graph.weight(k, y);
        return wx != wy ? wx < wy : x < y;
      });
    std::vector<std::size_t> next(parts, 0);
    for (const Sent& s : sent) {
      if (overload(graph, load, limits, a, 0, 0) <= 0) break;
      const std::int32_t b = s.target;
      auto& list = returned[b];
      while (next[b] < list.size() && part[list[next[b]]] != b) ++next[b];
      if (next[b] == list.size()) continue;
      const vertex_t back = list[next[b]];
      if (graph.weight(k, back) >= graph.weight(k, s.vertex)) continue;
      const double before = total_overload(a, b);
      move_vertex(graph, load, part, s.vertex, b);
      move_vertex(graph, load, part, back, a);
      if (total_overload(a, b) < before) {
        ++next[b];
        ++exchanges;
      } else {  // undo
        move_vertex(graph, load, part, back, b);
        move_vertex(graph, load, part, s.vertex, a);
      }
    }
  }
  return exchanges;
}

}  // namespace

bool rebalance_partition(const LevelGraph& graph, PartAssignment& part,
                         const RefinementOptions& options) {
  const int parts = options.parts;
  const Limits& limits = options.max_part_weight;
  PartLoads load = part_weights(graph, part, parts);
  auto balanced = [&] {
    for (int p = 0; p < parts; ++p)
      if (overload(graph, load, limits, p, 0, 0) > 0) return false;
    return true;
  };
  for (int pass = 0; pass < kRebalancePasses && !balanced(); ++pass) {
    std::int64_t changes = single_move_pass(graph, part, load, limits, parts);
    if (!balanced()) changes += exchange_pass(graph, part, load, limits, parts);
    if (changes == 0) break;
  }
  return balanced();
}

std::int64_t simple_edge_cut(const LevelGraph& graph, const PartAssignment& part) {
  const vertex_t n = graph.num_vertices();
  std::int64_t twice_cut = 0;
#pragma omp parallel if (worth_parallel(graph.num_entries() + n)) reduction(+ : twice_cut)
  {
    std::vector<vertex_t> crossing;
#pragma omp for schedule(dynamic, 1024)
    for (vertex_t v = 0; v < n; ++v) {
      crossing.clear();
      graph.for_each_neighbor(v, [&](vertex_t u, std::int64_t) {
        if (part[u] != part[v]) crossing.push_back(u);
      });
      std::sort(crossing.begin(), crossing.end());
      twice_cut += std::unique(crossing.begin(), crossing.end()) - crossing.begin();
    }
  }
  return twice_cut / 2;  // each cut pair is seen from both ends
}

}  // namespace sluice::multilevel
