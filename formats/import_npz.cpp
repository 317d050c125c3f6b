// NumPy importers: the OGB node-property raw layout as OGB ships its large datasets
// (ogbn-papers100M: <dir>/raw/data.npz and raw/node-label.npz, splits as csv.gz), and .npy edge
// arrays. Plain .npy files are streamed to the CSR builder block by block straight from their
// data (formats/block_read.hpp), like binary pairs; arrays that can only be read front to back
// (.npz entries, gzip, pipes) are read once into int32 pairs (validated while converting), then
// built into the CSR like every other import.
#include <sys/stat.h>

#include <limits>
#include <optional>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "formats/block_read.hpp"
#include "formats/import_common.hpp"
#include "formats/importers.hpp"
#include "formats/npy.hpp"
#include "formats/text_tables.hpp"

namespace sluice {
namespace {

bool is_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// Checks that an edge array has shape (2, E) (row 0 sources, row 1 destinations) or (E, 2);
// returns E.
std::int64_t edge_array_edges(const NpyArray& array) {
  const auto& shape = array.shape();
  SLUICE_INPUT_CHECK(shape.size() == 2 && (shape[0] == 2 || shape[1] == 2), array.what(),
                     ": shape ", array.shape_text(), ", expected (2, E) or (E, 2) edges");
  return shape[0] == 2 ? shape[1] : shape[0];
}

// Sizes `pairs` for the `edges` pairs that `array` (a header checked against the data's length
// where it is known) declares, or throws InputError when they would not fit in host memory.
void size_edge_pairs(const NpyArray& array, std::int64_t edges, std::vector<vertex_t>& pairs) {
  require_memory({saturating_bytes({2, edges, std::int64_t(sizeof(vertex_t))}),
                  cat("reading its ", edges, " edges"),
                  cat(array.what(), ": shape ", array.shape_text())});
  pairs.resize(static_cast<std::size_t>(2 * edges));
}

// Reads an edge array of shape (2, E) or (E, 2) into interleaved int32 pairs; ids must lie
// below `limit`. Returns the largest id.
std::int64_t read_edge_array(NpyArray& array, std::int64_t limit, std::vector<vertex_t>& pairs) {
  const auto& shape = array.shape();
  edge_array_edges(array);
  const bool rows = shape[0] == 2;
  const std::int64_t edges = rows ? shape[1] : shape[0];
  size_edge_pairs(array, edges, pairs);
  if (!rows) return array.read_ids(2 * edges, pairs.data(), 1, limit);
  const std::int64_t src_max = array.read_ids(edges, pairs.data(), 2, limit);
  return std::max(src_max, array.read_ids(edges, pairs.data() + 1, 2, limit));
}

// Checks that two arrays are 1-D of equal length (sources, destinations); returns the length.
std::int64_t edge_column_edges(const NpyArray& src, const NpyArray& dst) {
  for (const NpyArray* array : {&src, &dst})
    SLUICE_INPUT_CHECK(array->shape().size() == 1, array->what(), ": shape ", array->shape_text(),
                       ", expected a 1-D array of vertex ids");
  SLUICE_INPUT_CHECK(src.shape()[0] == dst.shape()[0], src.what(), " holds ", src.shape()[0],
                     " ids but ", dst.what(), " holds ", dst.shape()[0]);
  return src.shape()[0];
}

// Reads two 1-D arrays of equal length (sources, destinations) into interleaved pairs.
std::int64_t read_edge_columns(NpyArray& src, NpyArray& dst, std::int64_t limit,
                               std::vector<vertex_t>& pairs) {
  const std::int64_t edges = edge_column_edges(src, dst);
  size_edge_pairs(src, edges, pairs);
  const std::int64_t src_max = src.read_ids(edges, pairs.data(), 2, limit);
  return std::max(src_max, dst.read_ids(edges, pairs.data() + 1, 2, limit));
}

IdType id_type(const NpyArray& array) {
  switch (array.type()) {
    case NpyType::kInt32:
      return IdType::kInt32;
    case NpyType::kInt64:
      return IdType::kInt64;
    case NpyType::kUint32:
      return IdType::kUint32;
    case NpyType::kUint64:
      return IdType::kUint64;
    default:
      break;
  }
  throw InputError(cat(array.what(), ": dtype ", to_string(array.type()),
                       " holds no vertex ids (expected <i4, <i8, <u4 or <u8)"));
}

// A reader streaming the edges of plain .npy files from their data, or nothing when some array
// can only be read front to back. `dst` is null for one (2, E) / (E, 2) array.
std::optional<EdgeBlockReader> stream_edges(NpyArray& array, NpyArray* dst, std::int64_t edges) {
  InputFile* file = array.positional_file();
  InputFile* dst_file = dst ? dst->positional_file() : file;
  if (!file || !dst_file) return std::nullopt;
  const IdType type = id_type(array);
  const auto bytes = static_cast<std::uint64_t>(id_bytes(type));
  const std::uint64_t offset = array.data_offset();
  const std::string path = array.what();
  if (dst) {
    const IdType dst_type = id_type(*dst);
    const std::string dst_path = dst->what();
    return EdgeBlockReader(
        {file, offset, bytes, type},
        {dst_file, dst->data_offset(), static_cast<std::uint64_t>(id_bytes(dst_type)), dst_type},
        edges, [path, dst_path](std::int64_t edge, int end) {
          return cat(end == 0 ? path : dst_path, ": element ", edge, ": ");
        });
  }
  if (array.shape()[0] == 2)  // (2, E): two rows
    return EdgeBlockReader({file, offset, bytes, type},
                           {file, offset + std::uint64_t(edges) * bytes, bytes, type}, edges,
                           [path, edges](std::int64_t edge, int end) {
                             return cat(path, ": element ", end * edges + edge, ": ");
                           });
  return EdgeBlockReader(
      {file, offset, 2 * bytes, type}, {file, offset + bytes, 2 * bytes, type}, edges,
      [path](std::int64_t edge, int end) { return cat(path, ": element ", 2 * edge + end, ": "); });
}

// A count array of OGB's raw layout (num_nodes_list, num_edges_list): one graph, one count.
std::int64_t single_count(const NpzArchive& archive, const std::string& name) {
  auto array = archive.open(name);
  SLUICE_INPUT_CHECK(array->elements() == 1, array->what(), ": shape ", array->shape_text(),
                     ", expected one count (only single-graph datasets are supported)");
  std::int64_t value = 0;
  array->read_integers(1, &value);
  SLUICE_INPUT_CHECK(value >= 0, array->what(), ": negative count ", value);
  return value;
}

// Checks that a per-vertex array has shape (n,) or (n, 1).
void expect_column(const NpyArray& array, std::int64_t n) {
  const auto& shape = array.shape();
  SLUICE_INPUT_CHECK((shape.size() == 1 || (shape.size() == 2 && shape[1] == 1)) && shape[0] == n,
                     array.what(), ": shape ", array.shape_text(), ", expected (", n, ", 1) or (",
                     n, ",)");
}

}  // namespace

bool is_ogb_npz_layout(const std::string& dir) {
  return is_file(dir + "/raw/data.npz");
}

Dataset import_ogb_npz(const ImportOptions& options, ImportReport& report) {
  std::string dir = options.input;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  SLUICE_INPUT_CHECK(options.features_path.empty() && options.labels_path.empty() &&
                         options.random_features == 0 && options.random_labels == 0 &&
                         !options.remap,
                     "--features, --labels, --random-*, --remap apply to edgelist, binary and "
                     "npy input, not to --format ogb");
  const std::string data_path = dir + "/raw/data.npz";
  NpzArchive data(data_path);
  Dataset d;
  d.name = options.name.empty() ? detail::base_name(dir) : options.name;
  d.source = "ogb:" + dir;

  const std::int64_t n = single_count(data, "num_nodes_list");
  SLUICE_INPUT_CHECK(n > 0, data_path, ":num_nodes_list: empty graph (0 vertices)");
  SLUICE_INPUT_CHECK(n < kMaxVertices, data_path, ":num_nodes_list: ", n,
                     " vertices exceed the limit of ", kMaxVertices);
  d.num_nodes = static_cast<vertex_t>(n);
  const std::int64_t declared_edges = single_count(data, "num_edges_list");
  {
    std::vector<vertex_t> pairs;
    {
      StageTimer timer("read edges " + data_path + ":edge_index");
      auto edges = data.open("edge_index");
      SLUICE_INPUT_CHECK(edges->shape().size() == 2 && edges->shape()[0] == 2, edges->what(),
                         ": shape ", edges->shape_text(), ", expected (2, E)");
      SLUICE_INPUT_CHECK(edges->shape()[1] == declared_edges, edges->what(), ": ",
                         edges->shape()[1], " edges, but num_edges_list declares ", declared_edges);
      SLUICE_INPUT_CHECK(declared_edges > 0, edges->what(), ": empty graph (no edges)");
      report.input_bytes = static_cast<std::uint64_t>(edges->elements()) * edges->item_bytes();
      read_edge_array(*edges, n, pairs);
    }
    detail::build_graph_from_pairs(std::move(pairs), options, d, report);
  }

  if (data.has("node_feat")) {
    StageTimer timer("read features " + data_path + ":node_feat");
    auto features = data.open("node_feat");
    SLUICE_INPUT_CHECK(features->shape().size() == 2 && features->shape()[0] == n, features->what(),
                       ": shape ", features->shape_text(), ", expected (", n, ", D)");
    d.feature_dim = features->shape()[1];
    require_memory({saturating_bytes({n, d.feature_dim, std::int64_t(sizeof(float))}),
                    "reading the features as float32",
                    cat(features->what(), ": shape ", features->shape_text())});
    d.features.resize(static_cast<std::size_t>(n * d.feature_dim));
    features->read_floats(n * d.feature_dim, d.features.data());
  } else {
    log_info(data_path, " holds no node_feat: the dataset holds no features");
  }
  for (const auto& name : data.names())
    if (name.rfind("node_", 0) == 0 && name != "node_feat")
      log_info(data_path, ": array ", name, " is not imported (the dataset has no slot for it)");

  const std::string label_path = dir + "/raw/node-label.npz";
  d.labels.assign(static_cast<std::size_t>(n), -1);
  if (is_file(label_path)) {
    NpzArchive label_archive(label_path);
    auto labels = label_archive.open("node_label");
    expect_column(*labels, n);
    labels->read_labels(n, d.labels.data(), options.classes);
  } else {
    log_info(label_path, " absent: every vertex is unlabeled");
  }
  d.num_classes = detail::count_classes(d.labels, options.classes);

  const std::string split_dir = detail::ogb_split_dir(dir, options.split);
  ImportOptions recorded = options;
  recorded.split = split_dir.substr(split_dir.find_last_of('/') + 1);
  d.options = import_options_json(recorded);
  d.train = read_index_list(detail::ogb_table(split_dir + "/train"), n);
  d.valid = read_index_list(detail::ogb_table(split_dir + "/valid"), n);
  d.test = read_index_list(detail::ogb_table(split_dir + "/test"), n);
  return d;
}

Dataset import_npy(const ImportOptions& options, ImportReport& report) {
  SLUICE_INPUT_CHECK(!options.remap,
                     "--remap is not supported for --format npy; save the edges as int64 pairs "
                     "(edges.T.tofile) and use --format binary --id-bytes 8 --remap");
  Dataset d;
  const auto comma = options.input.find(',');
  const std::string first = options.input.substr(0, comma);
  d.name = options.name.empty() ? detail::base_name(first) : options.name;
  d.source = "npy:" + options.input;
  d.options = import_options_json(options);
  const auto array = open_npy(first);
  const auto dst = comma == std::string::npos ? nullptr : open_npy(options.input.substr(comma + 1));
  const std::int64_t edges = dst ? edge_column_edges(*array, *dst) : edge_array_edges(*array);
  for (const NpyArray* a : {array.get(), dst.get()})
    if (a) {
      id_type(*a);
      report.input_bytes += static_cast<std::uint64_t>(a->elements()) * a->item_bytes();
    }
  SLUICE_INPUT_CHECK(edges > 0, options.input, ": empty graph (no edges)");
  if (std::optional<EdgeBlockReader> reader = stream_edges(*array, dst.get(), edges)) {
    detail::import_edge_blocks(*reader, options, d, report);
  } else {
    const std::int64_t limit = options.num_nodes > 0 ? options.num_nodes : kMaxVertices;
    std::vector<vertex_t> pairs;
    std::int64_t max_id = -1;
    {
      StageTimer timer("read edges " + options.input);
      max_id = dst ? read_edge_columns(*array, *dst, limit, pairs)
                   : read_edge_array(*array, limit, pairs);
    }
    d.num_nodes = options.num_nodes > 0 ? static_cast<vertex_t>(options.num_nodes)
                                        : detail::vertex_count(max_id, options.input);
    detail::build_graph_from_pairs(std::move(pairs), options, d, report);
  }
  detail::attach_vertex_data(options, d);
  return d;
}

}  // namespace sluice
