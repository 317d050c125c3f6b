// Parsers for the text files importers read: edge lists, feature tables, label columns, index
// lists and count files. All parse in parallel (OpenMP) over large blocks, accept plain or
// gzip files, and report bad input as InputError "path:line: what" naming the first bad line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"

namespace sluice {

struct TextEdges {
  // Interleaved src, dst as written in the file: 32-bit when every id is known to fit
  // (0 < id_limit <= kMaxVertices), else 64-bit.
  std::vector<vertex_t> narrow;
  std::vector<std::int64_t> wide;
  std::int64_t max_id = -1;
  std::size_t edge_count() const { return (narrow.size() + wide.size()) / 2; }
};
// What a line may hold after "src dst": edge lists may carry weights or timestamps (ignored);
// OGB's edge.csv holds exactly two columns.
enum class ExtraColumns { kIgnore, kReject };
// Reads "src dst [more columns...]" lines (separated by whitespace and/or commas; comment
// lines start with # or %). Ids must be integers >= 0 and, when id_limit > 0, < id_limit.
TextEdges read_text_edges(const std::string& path, std::int64_t id_limit,
                          ExtraColumns extra = ExtraColumns::kIgnore);

// Reads a float table with one row per vertex; every row must have the width of the first
// one and `expected_rows` rows in all; values must be finite. Sets `width`.
std::vector<float> read_feature_table(const std::string& path, std::int64_t expected_rows,
                                      std::int64_t& width);

// Reads one label per line: an integer >= 0, a float with an integral value ("3.0"), or
// "nan" / "-1" for unlabeled (-1). When declared_classes > 0 labels must be below it.
std::vector<std::int32_t> read_label_column(const std::string& path, std::int64_t expected_rows,
                                            std::int32_t declared_classes);

// Reads one vertex id per line; ids must be in [0, n) and unique. Returns them sorted.
std::vector<vertex_t> read_index_list(const std::string& path, std::int64_t n);

// Reads one integer per line (OGB's num-node-list / num-edge-list).
std::vector<std::int64_t> read_count_list(const std::string& path);

}  // namespace sluice
