// Named test graphs: small ones a reader can check by eye (drawn in the comments), and
// deterministic random ones with the shapes the preprocessing and training tests need. The graph
// builders return a Dataset holding the structure only (name, num_nodes, indptr, indices); the
// attribute helpers add features and labels. Datasets store in-edges: CSR row v lists the
// sources of the edges into v. The random training dataset, random_dataset(), comes with this
// header from random_graph.hpp.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "formats/dataset.hpp"
#include "tests/support/random_graph.hpp"

namespace sluice::test {

// ---- structure from lists

struct Edge {
  vertex_t source;
  vertex_t destination;
};

// n vertices and these edges; each CSR row lists its sources in the order the edges are given
// (duplicates and self loops kept). Name "edges".
Dataset graph_from_edges(vertex_t n, const std::vector<Edge>& edges);

// Row v lists in_neighbors[v] as given (duplicates and self loops kept). Name "hand".
Dataset graph_from_in_neighbors(const std::vector<std::vector<vertex_t>>& in_neighbors);

// ---- small named graphs

// 0 - 1 - 2 - ... - (n-1), each link in both directions: rows {1}, {0, 2}, ..., {n-2}.
Dataset path_graph(vertex_t n);

// Vertex 0 linked in both directions to each of 1..leaves: row 0 = {1, ..., leaves}, row v = {0}.
Dataset star_graph(vertex_t leaves);

// Six vertices with a self loop (1 -> 1), a vertex without in-edges (2) and mutual edges:
//
//   2 -----> 0 <----> 1    (and 1 -> 1)
//   |        |        ^
//   v        v        |
//   5 -----> 3 -------+
//   ^        ^
//   |        v
//   +------- 4
//
// In-edge rows: 0 <- 1, 2   1 <- 0, 1, 3   2 <- (none)   3 <- 4, 5, 0   4 <- 3   5 <- 2, 4.
Dataset drawn_graph();

// ---- random graphs (deterministic in the seed)

// Each vertex v draws draws_per_vertex partners u = key_hash(seed, 1, v, k) % n; every drawn
// pair with u != v links both ways. Duplicates merge, rows are sorted; no self loops.
Dataset random_symmetric_graph(vertex_t n, int draws_per_vertex, std::uint64_t seed);

// m directed edges into uniformly drawn destinations from skewed sources (low ids are hubs):
// a multigraph with self loops, duplicate edges and isolated vertices. Name "random".
Dataset skewed_multigraph(vertex_t n, edge_t m, std::uint64_t seed);

// m directed edges, three in four from a source at most 8 ids above the destination (cyclic),
// the rest from anywhere, so that partitions and chunks have structure. Name "small".
Dataset local_multigraph(vertex_t n, edge_t m, std::uint64_t seed);

// Low ids are hubs: vertex v has 200 / (v + 1) + 1 in-edges from uniformly drawn sources
// (std::mt19937 seeded with `seed`). Name "hubs".
Dataset hub_graph(vertex_t n, std::uint32_t seed);

// ---- attributes

// feature_dim features per vertex: element i (row-major) = lo + (hi - lo) *
// hash_to_unit(key_hash(seed, 2, i)).
void add_hashed_features(Dataset& dataset, std::int64_t feature_dim, std::uint64_t seed, float lo,
                         float hi);

// Every vertex labeled: label of v = key_hash(seed, 3, v) % classes.
void add_hashed_labels(Dataset& dataset, std::int32_t classes, std::uint64_t seed);

// ---- complete small datasets

// Two clusters of 12 vertices (0-11 class 0, 12-23 class 1); vertex i of a cluster has in-edges
// from i + 1, i + 11 and i + 5 (mod 12) of its own cluster. Four features: 1 at the class's
// index plus Gaussian noise (sd 0.3, std::mt19937 seed 3). Test split: i % 3 == 0, the rest
// train; valid {1, 13}.
Dataset two_clusters_dataset();

// ---- chunk CSRs for operator tests

// A chunk's sparse block: rows over a merged buffer of cols rows.
struct ChunkCsr {
  std::vector<edge_t> indptr;
  std::vector<vertex_t> columns;
  std::int64_t rows = 0, cols = 0;
};

enum class EmptyRows { kNone, kSome };

// Row r starts with its self entry (column r % cols), then up to max_degree distinct columns
// drawn uniformly from [0, cols) by `rng` (degree uniform in [0, max_degree]). With
// EmptyRows::kSome the rows r % 17 == 5 are empty. Draws from `rng`, so the caller's stream
// continues after it.
ChunkCsr random_chunk_csr(std::int64_t rows, std::int64_t cols, int max_degree,
                          EmptyRows empty_rows, std::mt19937& rng);

// ---- row lists for operator tests

// `count` ids first, first + step, first + 2 step, ...: row positions (0, 1) or the dataset ids
// of the rows' vertices that key their dropout.
std::vector<vertex_t> id_sequence(std::int64_t count, vertex_t first, vertex_t step);

}  // namespace sluice::test
