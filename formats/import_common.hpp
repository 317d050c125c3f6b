// Pieces shared by the importers (formats/import_*.cpp): remapping ids, building
// the CSR into a Dataset, and attaching features, labels and splits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/importers.hpp"

namespace sluice {
class EdgeBlockReader;
}

namespace sluice::detail {

// Compacts the ids of `pairs` to 0..k-1 in ascending order of the input id; returns the
// int32 pairs and sets original_ids (size k) to the input id of each new id.
std::vector<vertex_t> remap_pairs(const std::vector<std::int64_t>& pairs,
                                  std::vector<std::int64_t>& original_ids, const std::string& what);

// Builds the CSR of dataset.num_nodes vertices from `source` and records the counts.
// expected_edges: the pairs `source` delivers (0 if unknown), see build_in_csr().
void build_graph(const EdgeSource& source, std::int64_t expected_edges,
                 const ImportOptions& options, Dataset& dataset, ImportReport& report);

// Builds the CSR from edges streamed by `reader` (formats/block_read.hpp), read twice. The vertex
// count: --num-nodes (ids checked while the first CSR pass reads them), else the largest id + 1,
// found by a scan that checks every id before the build.
void import_edge_blocks(EdgeBlockReader& reader, const ImportOptions& options, Dataset& dataset,
                        ImportReport& report);

// The same from pairs held in memory (consumed, freed once the CSR exists).
void build_graph_from_pairs(std::vector<vertex_t>&& pairs, const ImportOptions& options,
                            Dataset& dataset, ImportReport& report);

// Features, labels and splits of an edge-list or binary import (files or random).
void attach_vertex_data(const ImportOptions& options, Dataset& dataset);

// Number of classes: the declared count, else max label + 1.
std::int32_t count_classes(const std::vector<std::int32_t>& labels, std::int32_t declared);

// Last path component without a trailing slash or the given suffixes.
std::string base_name(std::string path);

// OGB raw layout helpers (formats/import_ogb.cpp): the split directory chosen under
// <dir>/split (the requested one, else the only one present), and "<stem>.csv.gz" or
// "<stem>.csv" (InputError when neither exists).
std::string ogb_split_dir(const std::string& dir, const std::string& requested);
std::string ogb_table(const std::string& stem);

// Vertex count from the largest id, checked against the 32-bit limit.
vertex_t vertex_count(std::int64_t max_id, const std::string& what);

}  // namespace sluice::detail
