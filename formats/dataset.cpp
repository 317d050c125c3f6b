// Implementation of formats/dataset.hpp.
#include "formats/dataset.hpp"

#include <cmath>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "formats/hdf5.hpp"

namespace sluice {
namespace {

void validate_split(const std::vector<vertex_t>& split, const char* split_name, vertex_t n,
                    const std::string& what) {
  for (std::size_t i = 0; i < split.size(); ++i) {
    SLUICE_INPUT_CHECK(split[i] >= 0 && split[i] < n, what, ": ", split_name, " split index ",
                       split[i], " out of range [0, ", n, ")");
    SLUICE_INPUT_CHECK(i == 0 || split[i - 1] < split[i], what, ": ", split_name,
                       " split is not sorted and unique at index ", split[i]);
  }
}

// Index of the first i in [0, count) with failed(i), or -1; parallel (OpenMP).
template <typename Failed>
std::int64_t first_failure(std::int64_t count, Failed&& failed) {
  std::int64_t first = count;
#pragma omp parallel for schedule(static) reduction(min : first)
  for (std::int64_t i = 0; i < count; ++i)
    if (failed(i) && i < first) first = i;
  return first == count ? -1 : first;
}

}  // namespace

void validate_dataset(const Dataset& d, const std::string& what) {
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(n > 0, what, ": empty graph (no vertices)");
  SLUICE_INPUT_CHECK(d.indptr.size() == std::size_t(n) + 1, what, ": indptr has ", d.indptr.size(),
                     " entries, expected ", std::int64_t(n) + 1);
  SLUICE_INPUT_CHECK(d.indptr[0] == 0, what, ": indptr[0] is ", d.indptr[0], ", expected 0");
  // The element-wise checks run in parallel and report the first offending element.
  const std::int64_t bad_row =
      first_failure(n, [&](std::int64_t v) { return d.indptr[v] > d.indptr[v + 1]; });
  SLUICE_INPUT_CHECK(bad_row < 0, what, ": indptr decreases at vertex ", bad_row);
  SLUICE_INPUT_CHECK(d.num_edges() > 0, what, ": empty graph (no edges)");
  SLUICE_INPUT_CHECK(d.indices.size() == std::size_t(d.num_edges()), what, ": ", d.indices.size(),
                     " edge sources but indptr ends at ", d.num_edges());
  const std::int64_t bad_edge = first_failure(
      d.num_edges(), [&](std::int64_t e) { return d.indices[e] < 0 || d.indices[e] >= n; });
  SLUICE_INPUT_CHECK(bad_edge < 0, what, ": edge ", bad_edge, " has source ",
                     bad_edge < 0 ? 0 : d.indices[bad_edge], " out of range [0, ", n, ")");
  SLUICE_INPUT_CHECK(d.feature_dim >= 0, what, ": negative feature dimension");
  // Compared by division: n * feature_dim may wrap around for a corrupt feature_dim.
  const bool features_fit =
      d.feature_dim == 0 ? d.features.empty()
                         : d.features.size() % std::size_t(d.feature_dim) == 0 &&
                               d.features.size() / std::size_t(d.feature_dim) == std::size_t(n);
  SLUICE_INPUT_CHECK(features_fit, what, ": features hold ", d.features.size(),
                     " values, expected ", n, " x ", d.feature_dim);
  const std::int64_t bad_feature =
      first_failure(static_cast<std::int64_t>(d.features.size()),
                    [&](std::int64_t i) { return !std::isfinite(d.features[i]); });
  if (bad_feature >= 0)
    throw InputError(cat(what, ": feature of vertex ", bad_feature / d.feature_dim, ", column ",
                         bad_feature % d.feature_dim, " is not finite (", d.features[bad_feature],
                         ")"));
  SLUICE_INPUT_CHECK(d.labels.empty() || d.labels.size() == std::size_t(n), what, ": ",
                     d.labels.size(), " labels for ", n, " vertices");
  SLUICE_INPUT_CHECK(d.num_classes >= 0, what, ": negative class count");
  for (std::size_t v = 0; v < d.labels.size(); ++v)
    SLUICE_INPUT_CHECK(d.labels[v] >= -1 && d.labels[v] < d.num_classes, what, ": label ",
                       d.labels[v], " of vertex ", v, " is not in [0, ", d.num_classes, ")");
  validate_split(d.train, "train", n, what);
  validate_split(d.valid, "valid", n, what);
  validate_split(d.test, "test", n, what);
  SLUICE_INPUT_CHECK(d.original_ids.empty() || d.original_ids.size() == std::size_t(n), what, ": ",
                     d.original_ids.size(), " original ids for ", n, " vertices");
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
  AtomicOutput output(path);
  {
    h5::Handle file = h5::create_file(output.temporary_path());
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
    h5::write_string_attr(file, "fingerprint", compute_fingerprint(d));
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
    std::vector<std::int32_t> labels = d.labels;
    if (labels.empty()) labels.assign(d.num_nodes, -1);
    h5::write_vector(file, "labels", labels);
    {
      h5::Handle split = h5::create_group(file, "split");
      h5::write_vector(split, "train", d.train);
      h5::write_vector(split, "valid", d.valid);
      h5::write_vector(split, "test", d.test);
    }
    if (!d.original_ids.empty()) h5::write_vector(file, "original_ids", d.original_ids);
    SLUICE_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  }
  output.commit();
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
  info.train = h5::shape(file, "split/train").at(0);
  info.valid = h5::shape(file, "split/valid").at(0);
  info.test = h5::shape(file, "split/test").at(0);
  info.has_original_ids = h5::exists(file, "original_ids");
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
  SLUICE_INPUT_CHECK(info.num_nodes > 0 && info.num_nodes <= kMaxVertices, path, ": vertex count ",
                     info.num_nodes, " outside [1, ", kMaxVertices, "]");
  d.num_nodes = static_cast<vertex_t>(info.num_nodes);
  d.feature_dim = info.feature_dim;
  d.num_classes = info.num_classes;
  d.indptr = h5::read_vector<edge_t>(file, "graph/indptr");
  d.indices = h5::read_vector<vertex_t>(file, "graph/indices");
  if (options.features) d.features = h5::read_vector<float>(file, "features");
  if (options.labels) d.labels = h5::read_vector<std::int32_t>(file, "labels");
  d.train = h5::read_vector<vertex_t>(file, "split/train");
  d.valid = h5::read_vector<vertex_t>(file, "split/valid");
  d.test = h5::read_vector<vertex_t>(file, "split/test");
  if (info.has_original_ids) d.original_ids = h5::read_vector<std::int64_t>(file, "original_ids");
  if (options.features && options.labels) validate_dataset(d, path);
  return d;
}

void read_feature_rows(const std::string& path, vertex_t begin, vertex_t end, float* out) {
  h5::Handle file = h5::open_file(path);
  h5::read_rows(file, "features", H5T_NATIVE_FLOAT, begin, end, out);
}

}  // namespace sluice
