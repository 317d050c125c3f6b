// Implementation of preprocess/multilevel_moves.hpp.
#include "preprocess/multilevel_moves.hpp"

#include <omp.h>

#include <algorithm>

#include "common/hash.hpp"
#include "common/parallel.hpp"

namespace sluice::multilevel {
namespace {

// Up to this many targets, the incoming weights are summed per thread first.
constexpr std::size_t kFewTargets = 4096;

}  // namespace

Loads make_loads(std::size_t targets) {
  Loads loads(targets);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(targets)))
  for (std::size_t t = 0; t < targets; ++t)
    for (auto& value : loads[t].weight) value.store(0, std::memory_order_relaxed);
  return loads;
}

VisitOrder make_visit_order(const std::vector<vertex_t>& active, int sub_rounds, std::uint64_t seed,
                            std::uint64_t salt) {
  VisitOrder order;
  order.group_offsets.assign(std::size_t(sub_rounds) + 1, 0);
  std::vector<std::uint16_t> group(active.size());
  const std::uint64_t prefix = key_hash_prefix(seed, 0x6c6576656cULL, salt, 0);
  for (std::size_t i = 0; i < active.size(); ++i) {
    group[i] = static_cast<std::uint16_t>(key_hash_finish(prefix, std::uint64_t(active[i])) %
                                          std::uint64_t(sub_rounds));
    ++order.group_offsets[group[i] + 1];
  }
  for (int s = 0; s < sub_rounds; ++s) order.group_offsets[s + 1] += order.group_offsets[s];
  std::vector<std::int64_t> cursor(order.group_offsets.begin(), order.group_offsets.end() - 1);
  order.vertices.resize(active.size());
  for (std::size_t i = 0; i < active.size(); ++i) order.vertices[cursor[group[i]]++] = active[i];
  return order;
}

void approve_moves(std::vector<MoveRequest>& requests, const VertexWeights& weights,
                   const Loads& loads, const Limits& limits, Loads& incoming) {
  const auto count = static_cast<std::int64_t>(requests.size());
  const bool parallel = worth_parallel(count);
  const std::size_t targets = incoming.size();
  if (targets <= kFewTargets) {
    // Few targets (parts): per-thread sums, added once per thread, spare the shared counters.
#pragma omp parallel if (parallel)
    {
      std::array<std::vector<std::int64_t>, kConstraints> local;
      for (auto& l : local) l.assign(targets, 0);
#pragma omp for schedule(static)
      for (std::int64_t i = 0; i < count; ++i) {
        const MoveRequest& r = requests[i];
        if (r.target < 0) continue;
        for (int k = 0; k < kConstraints; ++k) local[k][r.target] += weights[k][r.vertex];
      }
      for (int k = 0; k < kConstraints; ++k)
        for (std::size_t t = 0; t < targets; ++t)
          if (local[k][t]) incoming[t].weight[k].fetch_add(local[k][t], std::memory_order_relaxed);
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t i = 0; i < count; ++i) {
      const MoveRequest& r = requests[i];
      if (r.target < 0) continue;
      for (int k = 0; k < kConstraints; ++k)
        incoming[r.target].weight[k].fetch_add(weights[k][r.vertex], std::memory_order_relaxed);
    }
  }
  // Requests into targets that cannot take all of theirs, decided below one target at a time.
  std::vector<std::uint8_t> contended(requests.size(), 0);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t i = 0; i < count; ++i) {
    const vertex_t t = requests[i].target;
    if (t < 0) continue;
    bool fits = true;
    for (int k = 0; k < kConstraints; ++k)
      fits = fits && loads[t].weight[k].load(std::memory_order_relaxed) +
                             incoming[t].weight[k].load(std::memory_order_relaxed) <=
                         limits[k];
    contended[i] = !fits;
  }
  if (targets <= kFewTargets) {
    for (auto& in : incoming)
      for (auto& value : in.weight) value.store(0, std::memory_order_relaxed);
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t i = 0; i < count; ++i) {
      const vertex_t t = requests[i].target;
      if (t < 0) continue;
      for (int k = 0; k < kConstraints; ++k)
        incoming[t].weight[k].store(0, std::memory_order_relaxed);
    }
  }
  std::vector<std::int64_t> queue;
  for (std::int64_t i = 0; i < count; ++i)
    if (contended[i]) queue.push_back(i);
  if (queue.empty()) return;
  sort_total_order(queue.begin(), queue.end(), [&](std::int64_t a, std::int64_t b) {
    const MoveRequest& x = requests[a];
    const MoveRequest& y = requests[b];
    if (x.target != y.target) return x.target < y.target;
    if (x.gain != y.gain) return x.gain > y.gain;
    return x.vertex < y.vertex;
  });
  std::size_t i = 0;
  while (i < queue.size()) {
    const vertex_t t = requests[queue[i]].target;
    Limits room;
    for (int k = 0; k < kConstraints; ++k)
      room[k] = limits[k] - loads[t].weight[k].load(std::memory_order_relaxed);
    for (; i < queue.size() && requests[queue[i]].target == t; ++i) {
      MoveRequest& r = requests[queue[i]];
      bool fits = true;
      for (int k = 0; k < kConstraints; ++k) fits = fits && weights[k][r.vertex] <= room[k];
      if (!fits) {
        r.target = -1;
        continue;
      }
      for (int k = 0; k < kConstraints; ++k) room[k] -= weights[k][r.vertex];
    }
  }
}

}  // namespace sluice::multilevel
