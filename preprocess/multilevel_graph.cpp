// Implementation of preprocess/multilevel_graph.hpp.
#include "preprocess/multilevel_graph.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "preprocess/partition_memory.hpp"

namespace sluice::multilevel {
namespace {

// Vertices per scheduling block of the per-vertex loops whose cost varies with the degree.
constexpr vertex_t kBlock = 512;

}  // namespace

LevelGraph LevelGraph::from_dataset(const Dataset& d) {
  LevelGraph g;
  g.dataset_ = &d;
  const vertex_t n = d.num_nodes;
  g.num_vertices_ = n;
  const bool parallel = worth_parallel(d.num_edges() + n);
  g.weights_[kWork].resize(n);
  g.weights_[kCount].assign(n, 1);
#pragma omp parallel for schedule(dynamic, kBlock) if (parallel)
  for (vertex_t v = 0; v < n; ++v) {
    std::int64_t work = 1;
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) work += d.indices[e] != v;
    g.weights_[kWork][v] = work;
  }
  if (d.symmetrized) return g;  // every in-edge u -> v has its out-edge twin v -> u
  // A directed dataset: v's out-edges are the in-edges it is the source of.
  std::vector<std::atomic<edge_t>> count(n);
#pragma omp parallel for schedule(dynamic, kBlock) if (parallel)
  for (vertex_t v = 0; v < n; ++v)
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      count[d.indices[e]].fetch_add(1, std::memory_order_relaxed);
  g.out_indptr_.assign(std::size_t(n) + 1, 0);
  for (vertex_t v = 0; v < n; ++v) {
    g.out_indptr_[v + 1] = g.out_indptr_[v] + count[v].load(std::memory_order_relaxed);
    count[v].store(g.out_indptr_[v], std::memory_order_relaxed);
  }
  // The order inside a row depends on the thread schedule; nothing reads it in order (ratings
  // are sums, choices break ties by id, coarse rows are sorted).
  g.out_indices_.resize(d.num_edges());
#pragma omp parallel for schedule(dynamic, kBlock) if (parallel)
  for (vertex_t v = 0; v < n; ++v)
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      g.out_indices_[count[d.indices[e]].fetch_add(1, std::memory_order_relaxed)] = v;
  return g;
}

LevelGraph LevelGraph::from_csr(std::vector<edge_t> indptr, std::vector<vertex_t> adjacency,
                                std::vector<std::int64_t> edge_weight, VertexWeights weights) {
  LevelGraph g;
  g.num_vertices_ = static_cast<vertex_t>(indptr.size() - 1);
  g.indptr_ = std::move(indptr);
  g.adjacency_ = std::move(adjacency);
  g.edge_weight_ = std::move(edge_weight);
  g.weights_ = std::move(weights);
  return g;
}

edge_t LevelGraph::num_entries() const {
  if (dataset_) return dataset_->num_edges() + static_cast<edge_t>(out_indices_.size());
  return static_cast<edge_t>(adjacency_.size());
}

edge_t LevelGraph::degree_bound(vertex_t v) const {
  if (!dataset_) return indptr_[v + 1] - indptr_[v];
  edge_t bound = dataset_->indptr[v + 1] - dataset_->indptr[v];
  if (!out_indptr_.empty()) bound += out_indptr_[v + 1] - out_indptr_[v];
  return bound;
}

bool LevelGraph::has_neighbors(vertex_t v) const {
  bool found = false;
  if (dataset_) {
    for (edge_t e = dataset_->indptr[v]; e < dataset_->indptr[v + 1] && !found; ++e)
      found = dataset_->indices[e] != v;
    if (!out_indptr_.empty())
      for (edge_t e = out_indptr_[v]; e < out_indptr_[v + 1] && !found; ++e)
        found = out_indices_[e] != v;
    return found;
  }
  return indptr_[v + 1] > indptr_[v];
}

std::int64_t LevelGraph::memory_bytes() const {
  std::int64_t bytes = 0;
  bytes += static_cast<std::int64_t>(out_indptr_.capacity() * sizeof(edge_t));
  bytes += static_cast<std::int64_t>(out_indices_.capacity() * sizeof(vertex_t));
  bytes += static_cast<std::int64_t>(indptr_.capacity() * sizeof(edge_t));
  bytes += static_cast<std::int64_t>(adjacency_.capacity() * sizeof(vertex_t));
  bytes += static_cast<std::int64_t>(edge_weight_.capacity() * sizeof(std::int64_t));
  for (const auto& w : weights_) bytes += static_cast<std::int64_t>(w.capacity() * 8);
  return bytes;
}

void RatingMap::reset(std::size_t max_keys) {
  for (std::uint32_t slot : used_) keys_[slot] = -1;
  used_.clear();
  std::size_t capacity = 16;
  while (capacity < 2 * max_keys) capacity *= 2;
  if (capacity > keys_.size()) {
    keys_.assign(capacity, -1);
    values_.resize(capacity);
  }
  // A smaller table than allocated keeps the probed slots close together.
  mask_ = capacity - 1;
}

Contraction contract(const LevelGraph& level, const std::vector<vertex_t>& label,
                     const std::string& progress_name) {
  const vertex_t n = level.num_vertices();
  const bool parallel = worth_parallel(level.num_entries() + n);
  Contraction result;
  result.coarse_of.resize(n);
  // Coarse ids: the used labels in increasing order.
  std::vector<vertex_t> id_of_label(n, -1);
  for (vertex_t v = 0; v < n; ++v) id_of_label[label[v]] = 0;
  vertex_t coarse_n = 0;
  for (vertex_t c = 0; c < n; ++c)
    if (id_of_label[c] == 0) id_of_label[c] = coarse_n++;
#pragma omp parallel for schedule(static) if (parallel)
  for (vertex_t v = 0; v < n; ++v) result.coarse_of[v] = id_of_label[label[v]];
  id_of_label = {};

  // Members of each coarse vertex, in increasing id.
  std::vector<vertex_t> member_offsets(std::size_t(coarse_n) + 1, 0);
  for (vertex_t v = 0; v < n; ++v) ++member_offsets[result.coarse_of[v] + 1];
  for (vertex_t c = 0; c < coarse_n; ++c) member_offsets[c + 1] += member_offsets[c];
  std::vector<vertex_t> members(member_offsets[coarse_n]);
  {
    std::vector<vertex_t> cursor(member_offsets.begin(), member_offsets.end() - 1);
    for (vertex_t v = 0; v < n; ++v) members[cursor[result.coarse_of[v]]++] = v;
  }

  VertexWeights weights;
  for (auto& w : weights) w.assign(coarse_n, 0);
  std::vector<edge_t> indptr(std::size_t(coarse_n) + 1, 0);
  const auto& coarse_of = result.coarse_of;
  // Accumulates coarse vertex c's neighbor weights into map.
  auto gather = [&](vertex_t c, RatingMap& map) {
    edge_t bound = 0;
    for (vertex_t i = member_offsets[c]; i < member_offsets[c + 1]; ++i)
      bound += level.degree_bound(members[i]);
    map.reset(static_cast<std::size_t>(std::min<edge_t>(bound, coarse_n)));
    for (vertex_t i = member_offsets[c]; i < member_offsets[c + 1]; ++i)
      level.for_each_neighbor(members[i], [&](vertex_t u, std::int64_t w) {
        const vertex_t cu = coarse_of[u];
        if (cu != c) map.add(cu, w);
      });
  };
  // One pass: each thread appends the sorted rows of the coarse vertices it takes to its own
  // buffers, then every row is copied to its place.
  const int threads = parallel ? omp_get_max_threads() : 1;
  std::vector<std::vector<vertex_t>> thread_adjacency(threads);
  std::vector<std::vector<std::int64_t>> thread_weight(threads);
  std::vector<std::int32_t> row_thread(coarse_n);
  std::vector<edge_t> row_start(coarse_n);
  Progress progress(progress_name, static_cast<std::uint64_t>(coarse_n));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int t = omp_get_thread_num();
    RatingMap map;
    std::vector<std::pair<vertex_t, std::int64_t>> row;
    std::uint64_t unreported = 0;
#pragma omp for schedule(dynamic, 64)
    for (vertex_t c = 0; c < coarse_n; ++c) {
      if (++unreported == 4096) progress.add(std::exchange(unreported, 0));
      gather(c, map);
      row.clear();
      map.for_each([&](vertex_t key, std::int64_t value) { row.emplace_back(key, value); });
      std::sort(row.begin(), row.end());
      row_thread[c] = t;
      row_start[c] = static_cast<edge_t>(thread_adjacency[t].size());
      indptr[c + 1] = static_cast<edge_t>(row.size());
      for (const auto& [key, value] : row) {
        thread_adjacency[t].push_back(key);
        thread_weight[t].push_back(value);
      }
      for (int k = 0; k < kConstraints; ++k) {
        std::int64_t sum = 0;
        for (vertex_t i = member_offsets[c]; i < member_offsets[c + 1]; ++i)
          sum += level.weight(k, members[i]);
        weights[k][c] = sum;
      }
    }
    progress.add(unreported);
  }
  progress.finish();
  for (vertex_t c = 0; c < coarse_n; ++c) indptr[c + 1] += indptr[c];
  require_host_memory(
      indptr[coarse_n] * static_cast<std::int64_t>(sizeof(vertex_t) + sizeof(std::int64_t)),
      cat("the coarse graph of ", coarse_n, " vertices and ", indptr[coarse_n], " entries"));
  std::vector<vertex_t> adjacency(indptr[coarse_n]);
  std::vector<std::int64_t> edge_weight(indptr[coarse_n]);
#pragma omp parallel for schedule(dynamic, 1024) if (parallel)
  for (vertex_t c = 0; c < coarse_n; ++c) {
    const auto t = row_thread[c];
    const edge_t length = indptr[c + 1] - indptr[c];
    std::copy_n(thread_adjacency[t].begin() + row_start[c], length, adjacency.begin() + indptr[c]);
    std::copy_n(thread_weight[t].begin() + row_start[c], length, edge_weight.begin() + indptr[c]);
  }
  result.coarse = LevelGraph::from_csr(std::move(indptr), std::move(adjacency),
                                       std::move(edge_weight), std::move(weights));
  return result;
}

}  // namespace sluice::multilevel
