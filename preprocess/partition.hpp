// Level-1 partitioning (docs/design.md, "Cutting the graph in two levels"): assign every dataset
// vertex to one of P partitions (the multilevel front end around METIS, whole-graph METIS k-way on
// the symmetrized graph, or the range/random baselines), then renumber vertices so that each
// partition is one contiguous id range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"
#include "formats/dataset.hpp"

namespace sluice {

struct VertexPartition {
  std::vector<std::int32_t> part;  // num_nodes: partition of each dataset vertex
  std::string method;              // the partitioner actually used (metis may fall back to range)
  double seconds = 0;              // wall time
  // Edges of the symmetrized simple graph cut (METIS's objective), -1 if not measured (range,
  // random).
  std::int64_t edge_cut = -1;
};

// What the parts balance. kEdges: work per destination, in-degree + 1 (docs/design.md). kVertices:
// vertex counts. kBoth (default): both at once (METIS: two constraints, (in-degree + 1, 1);
// range: weight in-degree + mean in-degree). Out-of-core epochs move every vertex's rows over
// the host link several times (loads, stores, gradient flushes), so a part with many
// low-degree vertices takes longer than its edge count says (docs/benchmarks.md, GPU training).
enum class Balance { kEdges, kVertices, kBoth };
Balance parse_balance(const std::string& name);  // edges | vertices | both; InputError otherwise
std::string balance_name(Balance balance);

// method: metis (preprocess/multilevel_partition.hpp: multithreaded coarsening, METIS k-way on
// the coarsest graph, parallel refinement) | metis-direct (serial METIS k-way on the whole
// symmetrized graph) | range | random (random ignores balance). P = 1 puts everything in
// partition 0 (method kept as given). Both METIS methods use METIS_OPTION_SEED = seed and, when
// `imbalance` is given, those load-imbalance tolerances (METIS's ubvec: one value for every
// balance constraint, or one per constraint — 2 for Balance::kBoth, edges then vertices; each
// > 1, e.g. 1.03 = a part may hold 3 % more than its share); empty: 1.01 for both constraints of
// kBoth, METIS's default (1.03) for one. metis-direct checks first that the machine has the
// memory (InputError if not), and falls back to range (logging why) when the graph exceeds
// METIS's index width (idx_t).
inline const char* const kPartitioners[] = {"metis", "metis-direct", "range", "random"};
bool is_partitioner(const std::string& method);
VertexPartition partition_vertices(const Dataset& dataset, int parts, const std::string& method,
                                   std::uint64_t seed, Balance balance = Balance::kBoth,
                                   const std::vector<double>& imbalance = {});
// "1.03" or "1.03,1.01": imbalance tolerances for partition_vertices; InputError naming `what`
// unless every value is a number > 1 and there are 1 or `constraints` of them.
std::vector<double> parse_imbalance(const std::string& text, int constraints,
                                    const std::string& what);

// Host memory serial whole-graph METIS (metis-direct) needs beside the loaded dataset graph: the
// symmetrized copy and METIS's own hierarchy, about 110 bytes per symmetrized adjacency entry as
// measured on RMAT graphs.
std::int64_t metis_direct_bytes(std::int64_t n, std::int64_t m, bool symmetrized);

// Whether METIS's idx_t can index a graph of n vertices and m (directed) edges: n, the 2m
// adjacency entries of the symmetrized graph and the total vertex weight m + n must all fit.
// When not, `why` says which bound fails.
bool fits_metis_index(std::int64_t n, std::int64_t m, std::string* why = nullptr);

// The symmetrized simple graph (union of in- and out-edges, no self-loops, no duplicates) as a
// CSR with sorted rows; what METIS partitions.
struct SymmetricGraph {
  std::vector<edge_t> indptr;
  std::vector<vertex_t> indices;
};
SymmetricGraph symmetrize(const Dataset& dataset);

struct Renumbering {
  std::vector<vertex_t> new_to_old;
  std::vector<vertex_t> old_to_new;
  std::vector<vertex_t> partition_offsets;  // parts + 1
};
// Where each partition's boundary vertices (those that a row of another partition reads, as a
// source of one of its in-edges) go in its numbering.
enum class BoundaryVertices {
  kInPlace,  // every vertex in dataset order
  // Before the partition's other vertices, each group in dataset order: the rows a one-chunk
  // partition's peers read are its first rows, one consecutive run (docs/design.md, "Two GPUs").
  kFirst,
};

// Renumbers by (partition, dataset id): the locality order inside each partition is kept.
Renumbering renumber_by_partition(const std::vector<std::int32_t>& part, int parts);
// The same with `boundary` placing the boundary vertices of `d`'s edges under `part`.
Renumbering renumber_by_partition(const Dataset& d, const std::vector<std::int32_t>& part,
                                  int parts, BoundaryVertices boundary);

}  // namespace sluice
