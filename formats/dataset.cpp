// Implementation of formats/dataset.hpp.
#include "formats/dataset.hpp"

#include <cmath>
#include <future>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "formats/hdf5.hpp"

namespace sluice {
namespace {

// Index of the first i in [0, count) with failed(i), or -1; parallel (OpenMP).
template <typename Failed>
std::int64_t first_failure(std::int64_t count, Failed&& failed) {
  std::int64_t first = count;
#pragma omp parallel for schedule(static) reduction(min : first) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i)
    if (failed(i) && i < first) first = i;
  return first == count ? -1 : first;
}

void validate_graph(const Dataset& d, const std::string& what) {
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(n > 0, what, ": empty graph (no vertices)");
  SLUICE_INPUT_CHECK(d.indptr.size() == std::size_t(n) + 1, what, ": /graph/indptr has ",
                     d.indptr.size(), " entries, expected num_nodes + 1 = ", std::int64_t(n) + 1);
  SLUICE_INPUT_CHECK(d.indptr[0] == 0, what, ": /graph/indptr[0] is ", d.indptr[0], ", expected 0");
  // The element-wise checks run in parallel and report the first offending element.
  const std::int64_t bad_row =
      first_failure(n, [&](std::int64_t v) { return d.indptr[v] > d.indptr[v + 1]; });
  SLUICE_INPUT_CHECK(bad_row < 0, what, ": /graph/indptr decreases at vertex ", bad_row, " (",
                     bad_row < 0 ? 0 : d.indptr[bad_row], " then ",
                     bad_row < 0 ? 0 : d.indptr[bad_row + 1], ")");
  SLUICE_INPUT_CHECK(d.num_edges() > 0, what, ": empty graph (no edges)");
  SLUICE_INPUT_CHECK(d.indices.size() == std::size_t(d.num_edges()), what, ": /graph/indices has ",
                     d.indices.size(), " entries but /graph/indptr ends at ", d.num_edges());
  const std::int64_t bad_edge = first_failure(
      d.num_edges(), [&](std::int64_t e) { return d.indices[e] < 0 || d.indices[e] >= n; });
  SLUICE_INPUT_CHECK(bad_edge < 0, what, ": /graph/indices[", bad_edge, "] is ",
                     bad_edge < 0 ? 0 : d.indices[bad_edge], ", out of range [0, ", n, ")");
}

void validate_features(const Dataset& d, const std::string& what) {
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(d.feature_dim >= 0, what, ": negative feature dimension ", d.feature_dim);
  // Compared by division: n * feature_dim may wrap around for a corrupt feature_dim.
  const bool features_fit =
      d.feature_dim == 0 ? d.features.empty()
                         : d.features.size() % std::size_t(d.feature_dim) == 0 &&
                               d.features.size() / std::size_t(d.feature_dim) == std::size_t(n);
  SLUICE_INPUT_CHECK(features_fit, what, ": /features hold ", d.features.size(),
                     " values, expected ", n, " x ", d.feature_dim);
  const std::int64_t bad_feature =
      first_failure(static_cast<std::int64_t>(d.features.size()),
                    [&](std::int64_t i) { return !std::isfinite(d.features[i]); });
  if (bad_feature >= 0)
    throw InputError(cat(what, ": /features of vertex ", bad_feature / d.feature_dim, ", column ",
                         bad_feature % d.feature_dim, " is not finite (", d.features[bad_feature],
                         ")"));
}

void validate_labels(const Dataset& d, const std::string& what) {
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(d.labels.empty() || d.labels.size() == std::size_t(n), what, ": /labels has ",
                     d.labels.size(), " entries for ", n, " vertices");
  const std::int64_t bad = first_failure(static_cast<std::int64_t>(d.labels.size()), [&](auto v) {
    return d.labels[v] < -1 || d.labels[v] >= d.num_classes;
  });
  SLUICE_INPUT_CHECK(bad < 0, what, ": /labels[", bad, "] is ", bad < 0 ? 0 : d.labels[bad],
                     ", not in [-1, num_classes = ", d.num_classes, ") (-1 = unlabeled)");
}

struct NamedSplit {
  const std::vector<vertex_t>* ids;
  const char* name;
};

void validate_splits(const Dataset& d, const std::string& what) {
  const vertex_t n = d.num_nodes;
  const NamedSplit splits[3] = {{&d.train, "train"}, {&d.valid, "valid"}, {&d.test, "test"}};
  // owner[v]: 1 + the index of the split holding v (0: none); each split is unique once the
  // first two checks pass, so the marking loop of one split has no write conflicts.
  std::vector<std::uint8_t> owner(static_cast<std::size_t>(n), 0);
  for (int s = 0; s < 3; ++s) {
    const std::vector<vertex_t>& ids = *splits[s].ids;
    const auto count = static_cast<std::int64_t>(ids.size());
    const std::int64_t out_of_range =
        first_failure(count, [&](std::int64_t i) { return ids[i] < 0 || ids[i] >= n; });
    SLUICE_INPUT_CHECK(out_of_range < 0, what, ": /split/", splits[s].name, "[", out_of_range,
                       "] is ", out_of_range < 0 ? 0 : ids[out_of_range], ", out of range [0, ", n,
                       ")");
    const std::int64_t unsorted =
        first_failure(count, [&](std::int64_t i) { return i > 0 && ids[i - 1] >= ids[i]; });
    SLUICE_INPUT_CHECK(unsorted < 0, what, ": /split/", splits[s].name,
                       " is not sorted and unique at index ", unsorted, " (vertex ",
                       unsorted < 0 ? 0 : ids[unsorted], ")");
    const std::int64_t shared =
        first_failure(count, [&](std::int64_t i) { return owner[ids[i]] != 0; });
    SLUICE_INPUT_CHECK(shared < 0, what, ": /split/", splits[s].name, " and /split/",
                       shared < 0 ? "" : splits[owner[ids[shared]] - 1].name, " overlap (vertex ",
                       shared < 0 ? 0 : ids[shared], " is in both); the splits must be disjoint");
#pragma omp parallel for schedule(static) if (worth_parallel(count))
    for (std::int64_t i = 0; i < count; ++i) owner[ids[i]] = static_cast<std::uint8_t>(s + 1);
  }
}

}  // namespace

void validate_dataset(const Dataset& d, const std::string& what, const DatasetReadOptions& loaded) {
  validate_graph(d, what);
  if (loaded.features) validate_features(d, what);
  SLUICE_INPUT_CHECK(d.num_classes >= 0, what, ": negative class count ", d.num_classes);
  if (loaded.labels) validate_labels(d, what);
  validate_splits(d, what);
  SLUICE_INPUT_CHECK(d.original_ids.empty() || d.original_ids.size() == std::size_t(d.num_nodes),
                     what, ": /original_ids has ", d.original_ids.size(), " entries for ",
                     d.num_nodes, " vertices");
}

std::string compute_fingerprint(const Dataset& d) {
  Fingerprint fp;
  fp.add_u64(static_cast<std::uint64_t>(d.num_nodes));
  fp.add_u64(static_cast<std::uint64_t>(d.feature_dim));
  fp.add_u64(static_cast<std::uint64_t>(d.num_classes));
  fp.add(d.indptr.data(), d.indptr.size() * sizeof(edge_t));
  fp.add(d.indices.data(), d.indices.size() * sizeof(vertex_t));
  fp.add(d.labels.data(), d.labels.size() * sizeof(std::int32_t));
  for (const auto* split : {&d.train, &d.valid, &d.test}) {
    fp.add_u64(split->size());
    fp.add(split->data(), split->size() * sizeof(vertex_t));
  }
  fp.add(d.features.data(), d.features.size() * sizeof(float));
  return fp.hex();
}

void write_dataset(const std::string& path, const Dataset& d) {
  StageTimer timer("write dataset " + path);
  validate_dataset(d, path);
  // The fingerprint, one serial pass over every array, is computed beside the HDF5 writes,
  // also serial; its attribute is written last.
  std::future<std::string> fingerprint =
      std::async(std::launch::async, [&d] { return compute_fingerprint(d); });
  h5::write_file(path, "dataset", [&](hid_t file) {
    h5::write_string_attr(file, "format", "sluice-dataset");
    h5::write_attr<std::int32_t>(file, "format_version", kDatasetFormatVersion);
    h5::write_string_attr(file, "name", d.name);
    h5::write_string_attr(file, "source", d.source);
    h5::write_string_attr(file, "options", d.options.empty() ? "{}" : d.options);
    h5::write_string_attr(file, "self_loops", d.self_loops);
    h5::write_attr<std::uint8_t>(file, "symmetrized", d.symmetrized ? 1 : 0);
    h5::write_attr<std::int64_t>(file, "duplicates_removed", d.duplicates_removed);
    h5::write_attr<std::int64_t>(file, "num_nodes", d.num_nodes);
    h5::write_attr<std::int64_t>(file, "num_edges", d.num_edges());
    h5::write_attr<std::int64_t>(file, "feature_dim", d.feature_dim);
    h5::write_attr<std::int32_t>(file, "num_classes", d.num_classes);
    {
      h5::Handle graph = h5::create_group(file, "graph");
      h5::write_vector(graph, "indptr", d.indptr);
      h5::write_vector(graph, "indices", d.indices);
    }
    if (d.feature_dim > 0) {
      h5::write_matrix(file, "features", d.features.data(), d.num_nodes, d.feature_dim);
    } else {
      // A structure-only dataset: features of shape [n, 0] (write_array would make it 1-D).
      const hsize_t dims[2] = {static_cast<hsize_t>(d.num_nodes), 0};
      h5::Handle space(SLUICE_H5(H5Screate_simple(2, dims, nullptr)));
      h5::Handle features(SLUICE_H5(H5Dcreate2(file, "features", H5T_NATIVE_FLOAT, space,
                                               H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    }
    if (d.labels.empty())
      h5::write_vector(file, "labels", std::vector<std::int32_t>(d.num_nodes, -1));
    else
      h5::write_vector(file, "labels", d.labels);
    {
      h5::Handle split = h5::create_group(file, "split");
      h5::write_vector(split, "train", d.train);
      h5::write_vector(split, "valid", d.valid);
      h5::write_vector(split, "test", d.test);
    }
    if (!d.original_ids.empty()) h5::write_vector(file, "original_ids", d.original_ids);
    h5::write_string_attr(file, "fingerprint", fingerprint.get());
  });
}

namespace {
void require_dataset_file(hid_t file, const std::string& path) {
  SLUICE_INPUT_CHECK(
      h5::has_attr(file, "format") && h5::read_string_attr(file, "format") == "sluice-dataset",
      path, ": not a Sluice dataset (missing format attribute)");
  const auto version = h5::read_attr<std::int32_t>(file, "format_version");
  SLUICE_INPUT_CHECK(version == kDatasetFormatVersion, path, ": dataset format version ", version,
                     " is not supported (expected ", kDatasetFormatVersion, ")");
}

// The dimensions of the array at `name` (any rank); InputError naming the file when absent.
std::vector<std::uint64_t> array_dims(hid_t file, const std::string& name,
                                      const std::string& path) {
  SLUICE_INPUT_CHECK(h5::exists(file, name), path, ": dataset lacks the array /", name);
  h5::Handle array(SLUICE_H5(H5Dopen2(file, name.c_str(), H5P_DEFAULT)));
  h5::Handle space(SLUICE_H5(H5Dget_space(array)));
  const int rank = SLUICE_H5(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) SLUICE_H5(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return std::vector<std::uint64_t>(dims.begin(), dims.end());
}

std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

// Checks that /name has exactly the shape `expected`; `why` says where the expectation comes
// from ("num_nodes + 1").
void require_shape(hid_t file, const std::string& name, const std::vector<std::uint64_t>& expected,
                   const std::string& why, const std::string& path) {
  const auto dims = array_dims(file, name, path);
  SLUICE_INPUT_CHECK(dims == expected, path, ": /", name, " has shape ", shape_text(dims),
                     ", expected ", shape_text(expected), " (", why, ")");
}

// Every array's shape against the attributes, before any array is read.
void check_array_shapes(hid_t file, const DatasetInfo& info, const std::string& path) {
  SLUICE_INPUT_CHECK(info.num_nodes > 0 && info.num_nodes <= kMaxVertices, path,
                     ": num_nodes attribute ", info.num_nodes, " outside [1, ", kMaxVertices, "]");
  SLUICE_INPUT_CHECK(info.num_edges >= 0, path, ": negative num_edges attribute ", info.num_edges);
  SLUICE_INPUT_CHECK(info.feature_dim >= 0, path, ": negative feature_dim attribute ",
                     info.feature_dim);
  SLUICE_INPUT_CHECK(info.num_classes >= 0, path, ": negative num_classes attribute ",
                     info.num_classes);
  const auto n = static_cast<std::uint64_t>(info.num_nodes);
  require_shape(file, "graph/indptr", {n + 1}, cat("num_nodes ", n, " + 1"), path);
  require_shape(file, "graph/indices", {static_cast<std::uint64_t>(info.num_edges)},
                cat("num_edges ", info.num_edges), path);
  const auto d = static_cast<std::uint64_t>(info.feature_dim);
  const auto features = array_dims(file, "features", path);
  SLUICE_INPUT_CHECK(!(features == std::vector<std::uint64_t>{d, n} && d != n), path,
                     ": /features has shape ", shape_text(features), ", expected [", n, ", ", d,
                     "] (num_nodes x feature_dim): the features are stored transposed");
  require_shape(file, "features", {n, d}, "num_nodes x feature_dim", path);
  require_shape(file, "labels", {n}, cat("num_nodes ", n), path);
  for (const char* split : {"split/train", "split/valid", "split/test"}) {
    const auto dims = array_dims(file, split, path);
    SLUICE_INPUT_CHECK(dims.size() == 1 && dims[0] <= n, path, ": /", split, " has shape ",
                       shape_text(dims), ", expected one dimension of at most num_nodes ", n,
                       " vertex ids");
  }
  if (info.has_original_ids) require_shape(file, "original_ids", {n}, cat("num_nodes ", n), path);
}

}  // namespace

DatasetInfo read_dataset_info(const std::string& path) {
  h5::Handle file = h5::open_file(path);
  require_dataset_file(file, path);
  DatasetInfo info;
  info.name = h5::read_string_attr(file, "name");
  info.source = h5::read_string_attr(file, "source");
  info.options = h5::read_string_attr(file, "options");
  info.self_loops = h5::read_string_attr(file, "self_loops");
  info.fingerprint = h5::read_string_attr(file, "fingerprint");
  info.symmetrized = h5::read_attr<std::uint8_t>(file, "symmetrized") != 0;
  info.duplicates_removed = h5::read_attr<std::int64_t>(file, "duplicates_removed");
  info.num_nodes = h5::read_attr<std::int64_t>(file, "num_nodes");
  info.num_edges = h5::read_attr<std::int64_t>(file, "num_edges");
  info.feature_dim = h5::read_attr<std::int64_t>(file, "feature_dim");
  info.num_classes = h5::read_attr<std::int32_t>(file, "num_classes");
  info.has_original_ids = h5::exists(file, "original_ids");
  check_array_shapes(file, info, path);
  info.train = static_cast<std::int64_t>(array_dims(file, "split/train", path).at(0));
  info.valid = static_cast<std::int64_t>(array_dims(file, "split/valid", path).at(0));
  info.test = static_cast<std::int64_t>(array_dims(file, "split/test", path).at(0));
  return info;
}

Dataset read_dataset(const std::string& path, const DatasetReadOptions& options) {
  StageTimer timer("read dataset " + path);
  const DatasetInfo info = read_dataset_info(path);
  h5::Handle file = h5::open_file(path);
  Dataset d;
  d.name = info.name;
  d.source = info.source;
  d.options = info.options;
  d.self_loops = info.self_loops;
  d.symmetrized = info.symmetrized;
  d.duplicates_removed = info.duplicates_removed;
  d.num_nodes = static_cast<vertex_t>(info.num_nodes);
  d.feature_dim = info.feature_dim;
  d.num_classes = info.num_classes;
  d.indptr = h5::read_vector<edge_t>(file, "graph/indptr");
  d.indices = h5::read_vector<vertex_t>(file, "graph/indices");
  if (options.features)
    d.features = h5::read_vector<float>(file, "features");
  else
    d.features_file = path;
  // Labels are checked even when not kept (4 bytes a vertex, next to the graph's 4 an edge).
  d.labels = h5::read_vector<std::int32_t>(file, "labels");
  d.train = h5::read_vector<vertex_t>(file, "split/train");
  d.valid = h5::read_vector<vertex_t>(file, "split/valid");
  d.test = h5::read_vector<vertex_t>(file, "split/test");
  if (info.has_original_ids) d.original_ids = h5::read_vector<std::int64_t>(file, "original_ids");
  DatasetReadOptions loaded = options;
  loaded.labels = true;
  validate_dataset(d, path, loaded);
  if (!options.labels) std::vector<std::int32_t>().swap(d.labels);
  return d;
}

void read_feature_rows(const std::string& path, vertex_t begin, vertex_t end, float* out) {
  h5::Handle file = h5::open_file(path);
  const auto dims = array_dims(file, "features", path);
  SLUICE_INPUT_CHECK(
      dims.size() == 2 && begin >= 0 && begin <= end && std::uint64_t(end) <= dims[0], path,
      ": /features has shape ", shape_text(dims), ", cannot read rows [", begin, ", ", end, ")");
  h5::read_rows(file, "features", H5T_NATIVE_FLOAT, begin, end, out);
  const std::int64_t dim = std::int64_t(dims[1]);
  const std::int64_t bad = first_failure(std::int64_t(end - begin) * dim,
                                         [&](std::int64_t i) { return !std::isfinite(out[i]); });
  if (bad >= 0)
    throw InputError(cat(path, ": /features of vertex ", begin + bad / dim, ", column ", bad % dim,
                         " is not finite (", out[bad], ")"));
}

}  // namespace sluice
