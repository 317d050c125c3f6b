// Importers that turn raw graphs into a Dataset: an OGB node-property raw directory, a text
// edge list, or binary (src, dst) pairs. Each returns a complete, validated Dataset and fills
// an ImportReport; write it with write_dataset(). Errors are InputError naming file and line.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "formats/csr_builder.hpp"
#include "formats/dataset.hpp"

namespace sluice {

struct ImportOptions {
  std::string format;  // ogb | edgelist | binary | npy
  std::string input;   // OGB: the dataset directory (holding raw/ and split/); else a file
                       // (npy: one (2, E) / (E, 2) array, or "SRC.npy,DST.npy")
  std::string name;    // dataset name; empty: derived from the input path
  CsrBuildOptions graph;

  // ogb
  std::string split;  // split directory under split/; empty: the only one present

  // edgelist, binary and npy
  bool remap = false;                // compact sparse ids to 0..k-1, keep the input ids
  std::int64_t num_nodes = 0;        // 0: max id + 1 (or the number of distinct ids with remap)
  int binary_id_bytes = 4;           // 4 (int32) or 8 (int64) little-endian ids
  std::string features_path;         // text table, one row per vertex (in ascending input-id order)
  std::string labels_path;           // one label per line, nan or -1 = unlabeled
  std::int64_t random_features = 0;  // > 0: that many standard-normal features
  std::int32_t random_labels = 0;    // > 0: labels uniform in [0, K)
  std::array<double, 3> split_fractions{0.25, 0.5, 0.25};  // train, valid, test

  std::int32_t classes = 0;  // declared number of classes (0: max label + 1)
  std::uint64_t seed = 1;
};

struct ImportReport {
  std::int64_t input_edges = 0;  // edges (lines or pairs) read
  std::int64_t duplicates_removed = 0;
  std::int64_t self_loops_removed = 0;
  std::int64_t self_loops_added = 0;
  std::uint64_t input_bytes = 0;
};

Dataset import_ogb(const ImportOptions& options, ImportReport& report);
Dataset import_edgelist(const ImportOptions& options, ImportReport& report);
Dataset import_binary(const ImportOptions& options, ImportReport& report);
// OGB's NumPy raw layout (raw/data.npz, raw/node-label.npz, split/<name>/*.csv[.gz]); --format
// ogb takes it when raw/data.npz exists.
Dataset import_ogb_npz(const ImportOptions& options, ImportReport& report);
bool is_ogb_npz_layout(const std::string& dir);
// NumPy edge arrays: one .npy of shape (2, E) or (E, 2), or two 1-D .npy files "SRC,DST".
Dataset import_npy(const ImportOptions& options, ImportReport& report);
// Dispatches on options.format.
Dataset import_dataset(const ImportOptions& options, ImportReport& report);

// The options as a JSON object (stored in Dataset::options).
std::string import_options_json(const ImportOptions& options);

}  // namespace sluice
