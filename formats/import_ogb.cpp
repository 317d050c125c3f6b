// The OGB node-property importer: <dir>/raw/{edge,node-feat,node-label,num-node-list,
// num-edge-list}.csv[.gz] and <dir>/split/<name>/{train,valid,test}.csv[.gz].
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "formats/import_common.hpp"
#include "formats/importers.hpp"
#include "formats/text_tables.hpp"

namespace sluice {
namespace {

bool is_directory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}
bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

enum class Table { kRequired, kOptional };

// "<stem>.csv.gz" or "<stem>.csv"; empty when neither exists (an error for a required table).
std::string find_table(const std::string& stem, Table table) {
  for (const char* suffix : {".csv.gz", ".csv"})
    if (is_file(stem + suffix)) return stem + suffix;
  SLUICE_INPUT_CHECK(table == Table::kOptional, stem,
                     ".csv.gz: missing (neither .csv.gz nor .csv exists)");
  return {};
}

std::int64_t single_count(const std::string& path) {
  const auto counts = read_count_list(path);
  SLUICE_INPUT_CHECK(!counts.empty(), path, ": empty, expected one count");
  SLUICE_INPUT_CHECK(counts.size() == 1, path, ": holds ", counts.size(),
                     " graphs; only single-graph (node property) datasets are supported");
  return counts[0];
}

std::string choose_split(const std::string& dir, const std::string& requested) {
  const std::string split_root = dir + "/split";
  SLUICE_INPUT_CHECK(is_directory(split_root), split_root, ": missing split directory");
  if (!requested.empty()) {
    SLUICE_INPUT_CHECK(is_directory(split_root + "/" + requested), split_root, "/", requested,
                       ": no such split (--split)");
    return split_root + "/" + requested;
  }
  std::vector<std::string> names;
  if (DIR* listing = opendir(split_root.c_str())) {
    while (dirent* entry = readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != ".." && is_directory(split_root + "/" + name))
        names.push_back(name);
    }
    closedir(listing);
  }
  std::sort(names.begin(), names.end());
  SLUICE_INPUT_CHECK(!names.empty(), split_root, ": no split directory inside");
  if (names.size() > 1) {
    std::string list;
    for (const auto& name : names) list += (list.empty() ? "" : ", ") + name;
    throw InputError(cat(split_root, ": several splits (", list, "); choose one with --split"));
  }
  return split_root + "/" + names[0];
}

// The split files must not share a vertex (one vertex both trained and tested on); the lists
// are sorted, so each pair is compared by one merge.
void require_disjoint_splits(const std::vector<vertex_t>* const (&splits)[3],
                             const std::string (&files)[3]) {
  for (int a = 0; a < 3; ++a)
    for (int b = a + 1; b < 3; ++b) {
      const std::vector<vertex_t>& x = *splits[a];
      const std::vector<vertex_t>& y = *splits[b];
      std::size_t i = 0, j = 0;
      while (i < x.size() && j < y.size()) {
        if (x[i] < y[j]) {
          ++i;
        } else if (y[j] < x[i]) {
          ++j;
        } else {
          throw InputError(cat(files[a], " and ", files[b], " overlap: vertex ", x[i],
                               " is in both (the train, valid and test splits must be disjoint)"));
        }
      }
    }
}

}  // namespace

Dataset import_ogb(const ImportOptions& options, ImportReport& report) {
  std::string dir = options.input;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  SLUICE_INPUT_CHECK(is_directory(dir), dir,
                     ": not a directory (--format ogb expects the dataset directory holding "
                     "raw/ and split/)");
  SLUICE_INPUT_CHECK(is_directory(dir + "/raw"), dir, "/raw: missing (not an OGB raw layout)");
  SLUICE_INPUT_CHECK(options.features_path.empty() && options.labels_path.empty() &&
                         options.random_features == 0 && options.random_labels == 0 &&
                         !options.remap,
                     "--features, --labels, --random-*, --remap apply to edgelist and binary "
                     "input, not to --format ogb");
  const std::string raw = dir + "/raw/";
  Dataset d;
  d.name = options.name.empty() ? detail::base_name(dir) : options.name;
  d.source = "ogb:" + dir;
  d.options = import_options_json(options);

  const std::string node_list = find_table(raw + "num-node-list", Table::kRequired);
  const std::string edge_list = find_table(raw + "num-edge-list", Table::kRequired);
  const std::int64_t n = single_count(node_list);
  const std::int64_t declared_edges = single_count(edge_list);
  SLUICE_INPUT_CHECK(n > 0, node_list, ": empty graph (0 vertices)");
  SLUICE_INPUT_CHECK(n < kMaxVertices, node_list, ": ", n, " vertices exceed the limit of ",
                     kMaxVertices);
  d.num_nodes = static_cast<vertex_t>(n);

  const std::string edge_file = find_table(raw + "edge", Table::kRequired);
  {
    std::vector<vertex_t> pairs;
    {
      StageTimer timer("read edges " + edge_file);
      TextEdges edges = read_text_edges(edge_file, n, ExtraColumns::kReject);
      const auto count = static_cast<std::int64_t>(edges.edge_count());
      SLUICE_INPUT_CHECK(count > 0, edge_file, ": empty graph (no edges)");
      SLUICE_INPUT_CHECK(count == declared_edges, edge_file, ": ", count, " edges, but ", edge_list,
                         " declares ", declared_edges);
      pairs = std::move(edges.narrow);
    }
    detail::build_graph(memory_edge_source(pairs), std::int64_t(pairs.size() / 2), options, d,
                        report);
  }

  const std::string feature_file = find_table(raw + "node-feat", Table::kOptional);
  if (!feature_file.empty()) {
    StageTimer timer("read features " + feature_file);
    d.features = read_feature_table(feature_file, n, d.feature_dim);
  } else {
    log_info(raw, "node-feat.csv[.gz] absent: the dataset holds no features");
  }
  const std::string label_file = find_table(raw + "node-label", Table::kOptional);
  if (!label_file.empty()) {
    d.labels = read_label_column(label_file, n, options.classes);
  } else {
    log_info(raw, "node-label.csv[.gz] absent: every vertex is unlabeled");
    d.labels.assign(d.num_nodes, -1);
  }
  d.num_classes = detail::count_classes(d.labels, options.classes);

  const std::string split_dir = choose_split(dir, options.split);
  ImportOptions recorded = options;
  recorded.split = split_dir.substr(split_dir.find_last_of('/') + 1);
  d.options = import_options_json(recorded);
  const std::string split_files[3] = {find_table(split_dir + "/train", Table::kRequired),
                                      find_table(split_dir + "/valid", Table::kRequired),
                                      find_table(split_dir + "/test", Table::kRequired)};
  d.train = read_index_list(split_files[0], n);
  d.valid = read_index_list(split_files[1], n);
  d.test = read_index_list(split_files[2], n);
  const std::vector<vertex_t>* const splits[3] = {&d.train, &d.valid, &d.test};
  require_disjoint_splits(splits, split_files);
  return d;
}

namespace detail {
std::string ogb_split_dir(const std::string& dir, const std::string& requested) {
  return choose_split(dir, requested);
}
std::string ogb_table(const std::string& stem) {
  return find_table(stem, Table::kRequired);
}
}  // namespace detail

}  // namespace sluice
