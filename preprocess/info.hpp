// `sluice-preprocess info`: counts and degree statistics of a dataset file, as text or JSON.
#pragma once

#include <cstdint>
#include <string>

#include "formats/dataset.hpp"

namespace sluice {

struct DatasetStats {
  DatasetInfo info;
  std::int64_t labeled = 0;
  std::int64_t min_in_degree = 0, max_in_degree = 0;
  double mean_in_degree = 0;
  std::int64_t max_out_degree = 0;
  std::int64_t zero_in_degree = 0;  // vertices without in-edges
  std::int64_t isolated = 0;        // vertices without in- or out-edges
  std::int64_t self_loops = 0;
};

// Reads the graph and labels of `path` (not the features) and computes the statistics.
DatasetStats dataset_stats(const std::string& path);
DatasetStats dataset_stats(const Dataset& dataset, const DatasetInfo& info);

std::string stats_text(const DatasetStats& stats);
// One JSON object: nodes, edges, feature_dim, classes, train, valid, test, and more.
std::string stats_json(const DatasetStats& stats);

}  // namespace sluice
