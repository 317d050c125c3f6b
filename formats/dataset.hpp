// The Sluice dataset: one graph with features, labels and splits, stored as one HDF5 file.
// Schema (docs/formats.md):
//   /graph/indptr   int64 [n+1]   in-edge CSR (destination-major)
//   /graph/indices  int32 [m]     source vertex of each in-edge
//   /features       float32 [n,d] row-chunked
//   /labels         int32 [n]     -1 = unlabeled
//   /split/{train,valid,test} int32 index lists (sorted, unique)
//   /original_ids   int64 [n]     optional: the input's id of each vertex
//   attributes on /: format, format_version, name, source, num_nodes, num_edges, feature_dim,
//   num_classes, symmetrized, self_loops, duplicates_removed, options (JSON), fingerprint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"

namespace sluice {

inline constexpr int kDatasetFormatVersion = 1;

struct Dataset {
  std::string name;
  std::string source;   // "ogb:<dir>", "edgelist:<file>", "binary:<file>", "rmat", ...
  std::string options;  // JSON object of the import options used
  bool symmetrized = false;
  std::string self_loops = "keep";  // keep | add | remove
  std::int64_t duplicates_removed = 0;

  vertex_t num_nodes = 0;
  std::vector<edge_t> indptr;     // num_nodes + 1
  std::vector<vertex_t> indices;  // num_edges, sources of in-edges

  std::int64_t feature_dim = 0;
  std::vector<float> features;  // num_nodes * feature_dim, row-major
  // When read without its features (DatasetReadOptions::features off): the file they stay in,
  // for read_feature_rows(); otherwise empty.
  std::string features_file;

  std::int32_t num_classes = 0;
  std::vector<std::int32_t> labels;  // num_nodes, -1 = unlabeled

  std::vector<vertex_t> train, valid, test;
  std::vector<std::int64_t> original_ids;  // empty or num_nodes

  edge_t num_edges() const { return indptr.empty() ? 0 : indptr.back(); }
  const float* feature_row(vertex_t v) const {
    return features.data() + std::int64_t(v) * feature_dim;
  }
};

// What to load: skipping features saves memory for structure-only work (partitioning).
struct DatasetReadOptions {
  bool features = true;
  bool labels = true;
};

// Checks every invariant of a dataset: the CSR is well-formed (indptr of n + 1 entries from 0,
// non-decreasing, ending at the number of sources), sources in [0, n), features n x d and
// finite, labels in [-1, num_classes), splits in range, sorted, unique and pairwise disjoint.
// `loaded` says which optional parts the dataset holds (read_dataset may skip features and
// labels); those not loaded are not checked. O(n + m) work, parallel (OpenMP). Throws
// InputError naming `what` and the part at fault.
void validate_dataset(const Dataset& dataset, const std::string& what,
                      const DatasetReadOptions& loaded = {});

// Fingerprint of the dataset's contents (graph, labels, splits, features); stable across runs.
std::string compute_fingerprint(const Dataset& dataset);

// Writes atomically (temporary file + rename); validates first.
void write_dataset(const std::string& path, const Dataset& dataset);

// Reads and validates (validate_dataset) a dataset; every sluice-preprocess command and
// sluice-train read datasets through it. Before any array is read, read_dataset_info has
// checked each array's shape against the attributes. Labels are validated even when
// options.labels leaves them out; feature values only when features are loaded.
Dataset read_dataset(const std::string& path, const DatasetReadOptions& options = {});

// Metadata only (attributes and sizes), no arrays. Checks that every array the schema requires
// exists with the shape the attributes imply (features [num_nodes, feature_dim], so features
// stored transposed are refused) and throws InputError naming the file and the HDF5 path.
struct DatasetInfo {
  std::string name, source, options, self_loops, fingerprint;
  bool symmetrized = false;
  std::int64_t num_nodes = 0, num_edges = 0, feature_dim = 0, duplicates_removed = 0;
  std::int32_t num_classes = 0;
  std::int64_t train = 0, valid = 0, test = 0;
  bool has_original_ids = false;
};
DatasetInfo read_dataset_info(const std::string& path);

// Reads feature rows [begin, end) into out (row-major, (end - begin) * feature_dim floats) and
// checks them as validate_dataset() checks loaded features: a value that is not finite is an
// InputError naming the file, vertex and column.
void read_feature_rows(const std::string& path, vertex_t begin, vertex_t end, float* out);

}  // namespace sluice
