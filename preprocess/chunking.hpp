// Level 2 (docs/design.md, "Cutting the graph in two levels"): the renumbered chunk graph,
// edge-balanced chunk ranges inside each partition, and the neighbor set N(p, r) of every chunk
// range.
#pragma once

#include <cstdint>
#include <vector>

#include "common/types.hpp"
#include "formats/dataset.hpp"
#include "preprocess/partition.hpp"

namespace sluice {

// The graph in renumbered ids, one row per destination: the destination itself first, then the
// dataset's in-edges of that vertex in dataset CSR order with self-loops skipped. Exactly the
// rows of the chunk CSRs before their columns are rewritten to buffer positions.
struct ChunkGraph {
  std::vector<edge_t> indptr;     // num_nodes + 1
  std::vector<vertex_t> indices;  // renumbered source ids
};
ChunkGraph build_chunk_graph(const Dataset& dataset, const Renumbering& renumbering);

// Chunk ranges: bounds[p * (C + 1) + r] .. bounds[p * (C + 1) + r + 1] is range r of partition
// p, by the layout library's edge_balanced_bounds() (train/layout/chunk_sketch.hpp), which the
// chunk-count search cuts candidate chunk counts by.
std::vector<vertex_t> chunk_bounds(const ChunkGraph& graph,
                                   const std::vector<vertex_t>& partition_offsets, int chunks);

// N(p, r) for every partition p and range r: sorted, unique renumbered ids, including the
// range's own destinations (every row has a self entry).
struct NeighborSets {
  int partitions = 0;
  int chunks = 0;
  std::vector<edge_t> offsets;     // P * C + 1, set (p, r) at index p * C + r
  std::vector<vertex_t> vertices;  // concatenated sets

  const vertex_t* begin(int p, int r) const { return vertices.data() + offsets[index(p, r)]; }
  const vertex_t* end(int p, int r) const { return vertices.data() + offsets[index(p, r) + 1]; }
  edge_t size(int p, int r) const { return offsets[index(p, r) + 1] - offsets[index(p, r)]; }
  std::size_t index(int p, int r) const { return std::size_t(p) * chunks + r; }
};
NeighborSets build_neighbor_sets(const ChunkGraph& graph, const std::vector<vertex_t>& bounds,
                                 int partitions, int chunks);

}  // namespace sluice
