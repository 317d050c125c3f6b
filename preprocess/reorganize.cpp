// Implementation of preprocess/reorganize.hpp.
#include "preprocess/reorganize.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>
#include <tuple>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace sluice {
namespace {

constexpr int kMaxPhase2Batches = 2048;
constexpr int kMaxPathStarts = 256;

// Membership of vertices in batches' transition sets: one bit per batch, `words` words per
// vertex. Bits of different batches share words, so setting them is atomic.
class BatchMasks {
 public:
  BatchMasks(vertex_t num_nodes, int batches)
      : words_((batches + 63) / 64), bits_(std::size_t(num_nodes) * words_, 0) {}
  void set(vertex_t v, int batch) {
    __atomic_fetch_or(&bits_[std::size_t(v) * words_ + batch / 64],
                      std::uint64_t(1) << (batch % 64), __ATOMIC_RELAXED);
  }
  // Calls f(batch) for each batch whose set holds v.
  template <typename F>
  void for_each(vertex_t v, F f) const {
    for (int w = 0; w < words_; ++w) {
      std::uint64_t bits = bits_[std::size_t(v) * words_ + w];
      while (bits) {
        f(w * 64 + __builtin_ctzll(bits));
        bits &= bits - 1;
      }
    }
  }

 private:
  int words_;
  std::vector<std::uint64_t> bits_;
};

// Size of the intersection of two sorted ranges.
std::int64_t intersection_size(const vertex_t* a, const vertex_t* a_end, const vertex_t* b,
                               const vertex_t* b_end) {
  std::int64_t count = 0;
  while (a != a_end && b != b_end) {
    if (*a < *b) {
      ++a;
    } else if (*b < *a) {
      ++b;
    } else {
      ++count;
      ++a;
      ++b;
    }
  }
  return count;
}

}  // namespace

std::vector<std::int32_t> natural_order(int partitions, int chunks) {
  std::vector<std::int32_t> order(std::size_t(partitions) * chunks);
  for (int c = 0; c < chunks; ++c)
    for (int p = 0; p < partitions; ++p) order[std::size_t(c) * partitions + p] = c;
  return order;
}

LayoutVolumes evaluate_layout(const NeighborSets& sets,
                              const std::vector<vertex_t>& partition_offsets,
                              const std::vector<std::int32_t>& order) {
  const int P = sets.partitions;
  const int C = sets.chunks;
  LayoutVolumes total;
  total.baseline_rows = static_cast<std::int64_t>(sets.vertices.size());
  std::vector<LayoutVolumes> per_partition(P);
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(sets.vertices.size())))
  for (int p = 0; p < P; ++p) {
    const vertex_t own_begin = partition_offsets[p];
    const vertex_t own_end = partition_offsets[p + 1];
    // stamp[v - own_begin] = last batch whose T^p held v (-2: none yet).
    std::vector<std::int32_t> stamp(std::size_t(own_end - own_begin), -2);
    std::vector<vertex_t> previous_remote, remote;
    LayoutVolumes& volumes = per_partition[p];
    for (int c = 0; c < C; ++c) {
      for (int q = 0; q < P; ++q) {
        const int r = order[std::size_t(c) * P + q];
        const vertex_t* first = std::lower_bound(sets.begin(q, r), sets.end(q, r), own_begin);
        const vertex_t* last = std::lower_bound(first, sets.end(q, r), own_end);
        for (const vertex_t* it = first; it != last; ++it) {
          std::int32_t& s = stamp[*it - own_begin];
          if (s == c) continue;
          ++volumes.transition_rows;
          if (s == c - 1)
            ++volumes.reused_rows;
          else
            ++volumes.load_rows;
          s = c;
        }
      }
      const int r = order[std::size_t(c) * P + p];
      const vertex_t* first = std::lower_bound(sets.begin(p, r), sets.end(p, r), own_begin);
      const vertex_t* last = std::lower_bound(first, sets.end(p, r), own_end);
      remote.assign(sets.begin(p, r), first);
      remote.insert(remote.end(), last, sets.end(p, r));
      volumes.pull_rows +=
          static_cast<std::int64_t>(remote.size()) -
          intersection_size(remote.data(), remote.data() + remote.size(), previous_remote.data(),
                            previous_remote.data() + previous_remote.size());
      std::swap(remote, previous_remote);
    }
  }
  for (const LayoutVolumes& v : per_partition) {
    total.transition_rows += v.transition_rows;
    total.load_rows += v.load_rows;
    total.reused_rows += v.reused_rows;
    total.pull_rows += v.pull_rows;
  }
  return total;
}

double layout_cost(const LayoutVolumes& v, const Bandwidths& b, std::int64_t feature_dim) {
  const double row_bytes = 4.0 * static_cast<double>(std::max<std::int64_t>(1, feature_dim));
  return row_bytes *
         (static_cast<double>(v.load_rows) / b.h2d + static_cast<double>(v.pull_rows) / b.p2p +
          static_cast<double>(v.reused_rows) / b.reuse);
}

std::vector<std::int32_t> group_chunks(const NeighborSets& sets, vertex_t num_nodes) {
  const int P = sets.partitions;
  const int C = sets.chunks;
  std::vector<std::int32_t> order(std::size_t(P) * C);
  BatchMasks masks(num_nodes, C);
  // Batches start as the chunks of partition 0.
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(sets.vertices.size())))
  for (int c = 0; c < C; ++c) {
    order[std::size_t(c) * P] = c;
    for (const vertex_t* v = sets.begin(0, c); v != sets.end(0, c); ++v) masks.set(*v, c);
  }
  std::vector<std::int64_t> overlap(std::size_t(C) * C);
  std::vector<std::tuple<std::int64_t, int, int>> pairs;
  for (int q = 1; q < P; ++q) {
    // overlap[r * C + c] = |N(q, r) ∩ T_c| for the transition sets grown so far.
    std::fill(overlap.begin(), overlap.end(), 0);
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(sets.vertices.size())))
    for (int r = 0; r < C; ++r) {
      std::int64_t* row = overlap.data() + std::size_t(r) * C;
      for (const vertex_t* v = sets.begin(q, r); v != sets.end(q, r); ++v)
        masks.for_each(*v, [row](int c) { ++row[c]; });
    }
    // Greedy matching: the largest remaining overlap first (ties: lower batch, lower range).
    pairs.clear();
    for (int r = 0; r < C; ++r)
      for (int c = 0; c < C; ++c) pairs.emplace_back(-overlap[std::size_t(r) * C + c], c, r);
    std::sort(pairs.begin(), pairs.end());
    std::vector<char> batch_done(C, 0), range_used(C, 0);
    for (const auto& [negative, c, r] : pairs) {
      if (batch_done[c] || range_used[r]) continue;
      batch_done[c] = range_used[r] = 1;
      order[std::size_t(c) * P + q] = r;
    }
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(sets.vertices.size())))
    for (int c = 0; c < C; ++c) {
      const int r = order[std::size_t(c) * P + q];
      for (const vertex_t* v = sets.begin(q, r); v != sets.end(q, r); ++v) masks.set(*v, c);
    }
  }
  return order;
}

std::vector<std::int32_t> order_batches(const NeighborSets& sets, vertex_t num_nodes,
                                        const std::vector<std::int32_t>& order) {
  const int P = sets.partitions;
  const int C = sets.chunks;
  if (C <= 2) return order;  // every order of two batches shares the same overlap
  if (C > kMaxPhase2Batches) {
    log_info("reorganize: phase 2 skipped for C = ", C, " > ", kMaxPhase2Batches,
             " (its C x C overlap matrix per thread would be too large)");
    return order;
  }
  BatchMasks masks(num_nodes, C);
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(sets.vertices.size())))
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < P; ++p) {
      const int r = order[std::size_t(c) * P + p];
      for (const vertex_t* v = sets.begin(p, r); v != sets.end(p, r); ++v) masks.set(*v, c);
    }
  // shared[a * C + b] = |T_a ∩ T_b|, accumulated per thread over vertex ranges.
  std::vector<std::int64_t> shared(std::size_t(C) * C, 0);
#pragma omp parallel if (worth_parallel(std::int64_t(sets.vertices.size())))
  {
    std::vector<std::int64_t> local(std::size_t(C) * C, 0);
    std::vector<int> batches;
#pragma omp for schedule(dynamic, 65536) nowait
    for (vertex_t v = 0; v < num_nodes; ++v) {
      batches.clear();
      masks.for_each(v, [&batches](int c) { batches.push_back(c); });
      for (std::size_t i = 0; i < batches.size(); ++i)
        for (std::size_t j = i + 1; j < batches.size(); ++j)
          ++local[std::size_t(batches[i]) * C + batches[j]];
    }
#pragma omp critical
    for (std::size_t i = 0; i < local.size(); ++i) shared[i] += local[i];
  }
  for (int a = 0; a < C; ++a)
    for (int b = a + 1; b < C; ++b) shared[std::size_t(b) * C + a] = shared[std::size_t(a) * C + b];
  // Greedy path from every start; keep the path sharing the most.
  std::vector<int> best_path;
  std::int64_t best_total = -1;
  std::vector<int> path;
  std::vector<char> used(C);
  const int starts = C <= kMaxPathStarts ? C : 1;  // every start costs O(C^2)
  for (int start = 0; start < starts; ++start) {
    path.assign(1, start);
    std::fill(used.begin(), used.end(), 0);
    used[start] = 1;
    std::int64_t total = 0;
    while (static_cast<int>(path.size()) < C) {
      const int current = path.back();
      int next = -1;
      for (int b = 0; b < C; ++b)
        if (!used[b] && (next < 0 || shared[std::size_t(current) * C + b] >
                                         shared[std::size_t(current) * C + next]))
          next = b;
      total += shared[std::size_t(current) * C + next];
      used[next] = 1;
      path.push_back(next);
    }
    if (total > best_total) {
      best_total = total;
      best_path = path;
    }
  }
  std::vector<std::int32_t> result(order.size());
  for (int c = 0; c < C; ++c)
    std::copy_n(order.begin() + std::size_t(best_path[c]) * P, P,
                result.begin() + std::size_t(c) * P);
  return result;
}

ReorganizeResult reorganize(const NeighborSets& sets,
                            const std::vector<vertex_t>& partition_offsets, bool enabled,
                            const Bandwidths& bandwidths, std::int64_t feature_dim) {
  const vertex_t num_nodes = partition_offsets.back();
  ReorganizeResult result;
  result.order = natural_order(sets.partitions, sets.chunks);
  result.volumes = evaluate_layout(sets, partition_offsets, result.order);
  result.cost_before = result.cost_after = layout_cost(result.volumes, bandwidths, feature_dim);
  if (!enabled || sets.chunks == 1) return result;
  auto consider = [&](const char* name, std::vector<std::int32_t> order) {
    const LayoutVolumes volumes = evaluate_layout(sets, partition_offsets, order);
    const double cost = layout_cost(volumes, bandwidths, feature_dim);
    log_debug("reorganize: ", name, " layout costs ", cost, " s per pass (natural ",
              result.cost_before, " s, best so far ", result.cost_after, " s)");
    if (cost < result.cost_after) {
      result.order = std::move(order);
      result.volumes = volumes;
      result.cost_after = cost;
    }
  };
  const auto natural = result.order;
  consider("phase-2-only", order_batches(sets, num_nodes, natural));
  if (sets.partitions > 1) {
    const auto grouped = group_chunks(sets, num_nodes);
    consider("phase-1", grouped);
    consider("phase-1+2", order_batches(sets, num_nodes, grouped));
  }
  result.reorganized = result.order != natural;
  return result;
}

}  // namespace sluice
