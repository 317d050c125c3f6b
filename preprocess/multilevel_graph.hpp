// The graphs of the multilevel partitioner (preprocess/multilevel_partition.hpp): level 0 reads
// the dataset's in-edge CSR in place (plus its transpose when the dataset is directed), coarser
// levels are weighted symmetric CSRs built by contracting clusters. Also the per-thread rating
// map both label propagation and contraction accumulate neighbor weights in.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"
#include "formats/dataset.hpp"

namespace sluice::multilevel {

// The two balance constraints every vertex carries: its work (in-edges without self-loops, plus
// one) and its count (1). Coarse vertices carry the sums over their members.
inline constexpr int kConstraints = 2;
inline constexpr int kWork = 0;
inline constexpr int kCount = 1;
using VertexWeights = std::array<std::vector<std::int64_t>, kConstraints>;

// One level of the hierarchy: the symmetric neighborhood of every vertex with edge weights, and
// the vertices' balance weights. Level 0 (from_dataset) is the dataset graph: v's neighbors are
// its in-edge sources and, for a directed dataset, its out-edge destinations, each entry weight 1
// (self-loops skipped), so a pair joined both ways weighs 2. Coarse levels own their CSR.
class LevelGraph {
 public:
  static LevelGraph from_dataset(const Dataset& dataset);
  static LevelGraph from_csr(std::vector<edge_t> indptr, std::vector<vertex_t> adjacency,
                             std::vector<std::int64_t> edge_weight, VertexWeights weights);

  vertex_t num_vertices() const { return num_vertices_; }
  // Adjacency entries a full pass over every neighborhood reads.
  edge_t num_entries() const;
  // Upper bound of v's distinct neighbors (entries of its rows).
  edge_t degree_bound(vertex_t v) const;
  bool is_dataset_level() const { return dataset_ != nullptr; }
  const VertexWeights& weights() const { return weights_; }
  std::int64_t weight(int constraint, vertex_t v) const { return weights_[constraint][v]; }
  // Whether v has any neighbor other than itself.
  bool has_neighbors(vertex_t v) const;

  // f(u, weight) for every neighbor entry of v (u != v; a neighbor may repeat at level 0).
  template <typename F>
  void for_each_neighbor(vertex_t v, F&& f) const {
    if (dataset_) {
      const vertex_t* in = dataset_->indices.data();
      for (edge_t e = dataset_->indptr[v]; e < dataset_->indptr[v + 1]; ++e)
        if (in[e] != v) f(in[e], std::int64_t(1));
      for (edge_t e = out_indptr_.empty() ? 0 : out_indptr_[v];
           e < (out_indptr_.empty() ? 0 : out_indptr_[v + 1]); ++e)
        if (out_indices_[e] != v) f(out_indices_[e], std::int64_t(1));
      return;
    }
    for (edge_t e = indptr_[v]; e < indptr_[v + 1]; ++e) f(adjacency_[e], edge_weight_[e]);
  }

  // The coarse CSR (empty at level 0).
  const std::vector<edge_t>& indptr() const { return indptr_; }
  const std::vector<vertex_t>& adjacency() const { return adjacency_; }
  const std::vector<std::int64_t>& edge_weights() const { return edge_weight_; }
  std::int64_t memory_bytes() const;

 private:
  const Dataset* dataset_ = nullptr;
  std::vector<edge_t> out_indptr_;  // level 0 of a directed dataset: the out-edge CSR
  std::vector<vertex_t> out_indices_;
  std::vector<edge_t> indptr_;
  std::vector<vertex_t> adjacency_;
  std::vector<std::int64_t> edge_weight_;
  VertexWeights weights_;
  vertex_t num_vertices_ = 0;
};

// Sums of neighbor weights keyed by vertex id (a cluster, coarse vertex or part): open
// addressing sized per use, cleared in time proportional to the keys touched. One per thread.
class RatingMap {
 public:
  // Empties the map and makes room for `max_keys` distinct keys.
  void reset(std::size_t max_keys);
  void add(vertex_t key, std::int64_t value) {
    std::size_t slot = (static_cast<std::uint32_t>(key) * 0x9E3779B1u) & mask_;
    while (keys_[slot] != key) {
      if (keys_[slot] < 0) {
        keys_[slot] = key;
        values_[slot] = 0;
        used_.push_back(static_cast<std::uint32_t>(slot));
        break;
      }
      slot = (slot + 1) & mask_;
    }
    values_[slot] += value;
  }
  std::int64_t get(vertex_t key) const {
    std::size_t slot = (static_cast<std::uint32_t>(key) * 0x9E3779B1u) & mask_;
    while (keys_[slot] >= 0) {
      if (keys_[slot] == key) return values_[slot];
      slot = (slot + 1) & mask_;
    }
    return 0;
  }
  std::size_t size() const { return used_.size(); }
  // f(key, value) over the keys in insertion order.
  template <typename F>
  void for_each(F&& f) const {
    for (std::uint32_t slot : used_) f(keys_[slot], values_[slot]);
  }

 private:
  std::vector<vertex_t> keys_;  // -1 = empty
  std::vector<std::int64_t> values_;
  std::vector<std::uint32_t> used_;
  std::size_t mask_ = 0;
};

// Contracts `level` by cluster labels (label[v] = a representative vertex id). Coarse ids number
// the clusters in increasing label; each coarse row is sorted by neighbor, edge weights summed.
// Shows a progress line named `progress_name` (on a terminal). Throws InputError when the
// machine lacks the memory for the coarse graph.
struct Contraction {
  LevelGraph coarse;
  std::vector<vertex_t> coarse_of;  // fine vertex -> coarse vertex
};
Contraction contract(const LevelGraph& level, const std::vector<vertex_t>& label,
                     const std::string& progress_name);

}  // namespace sluice::multilevel
