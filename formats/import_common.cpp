// Implementation of formats/import_common.hpp.
#include "formats/import_common.hpp"

#include <parallel/algorithm>

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "formats/block_read.hpp"
#include "formats/synthetic.hpp"
#include "formats/text_tables.hpp"

namespace sluice::detail {

std::vector<vertex_t> remap_pairs(const std::vector<std::int64_t>& pairs,
                                  std::vector<std::int64_t>& original_ids,
                                  const std::string& what) {
  StageTimer timer("remap ids");
  original_ids = pairs;
  __gnu_parallel::sort(original_ids.begin(), original_ids.end());
  original_ids.erase(std::unique(original_ids.begin(), original_ids.end()), original_ids.end());
  original_ids.shrink_to_fit();
  SLUICE_INPUT_CHECK(original_ids.size() < std::size_t(kMaxVertices), what, ": ",
                     original_ids.size(), " distinct vertex ids exceed the limit of ",
                     kMaxVertices);
  std::vector<vertex_t> narrow(pairs.size());
  const auto count = static_cast<std::int64_t>(pairs.size());
#pragma omp parallel for schedule(static) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i)
    narrow[i] =
        static_cast<vertex_t>(std::lower_bound(original_ids.begin(), original_ids.end(), pairs[i]) -
                              original_ids.begin());
  log_info("remapped ", original_ids.size(), " distinct ids (input ids ", original_ids.front(),
           " .. ", original_ids.back(), ")");
  return narrow;
}

namespace {
// The vertex count comes from the input (its largest id, --num-nodes or the distinct ids): one
// stray id must not make the build ask for more memory than the machine has. `held`: bytes of
// input pairs the build holds beside the CSR.
void require_graph_memory(vertex_t n, std::int64_t expected_edges, std::int64_t held,
                          const ImportOptions& options) {
  const std::string cause = options.num_nodes > 0 ? cat("--num-nodes ", options.num_nodes)
                            : options.remap
                                ? cat(options.input, ": ", n, " distinct vertex ids")
                                : cat(options.input, ": largest vertex id ", std::int64_t(n) - 1);
  // The CSR, then 8 bytes a vertex for its labels and split lists.
  require_memory({saturating_add(saturating_add(csr_build_bytes(n, expected_edges, options.graph),
                                                saturating_bytes({n, 8})),
                                 held),
                  cat("the in-edge CSR of ", n, " vertices and ", expected_edges, " edges"),
                  cause});
}

void record_graph(CsrBuildResult&& csr, const ImportOptions& options, Dataset& dataset,
                  ImportReport& report) {
  dataset.indptr = std::move(csr.indptr);
  dataset.indices = std::move(csr.indices);
  dataset.symmetrized = options.graph.symmetrize;
  dataset.self_loops = to_string(options.graph.self_loops);
  dataset.duplicates_removed = csr.duplicates_removed;
  report.input_edges = csr.input_edges;
  report.duplicates_removed = csr.duplicates_removed;
  report.self_loops_removed = csr.self_loops_removed;
  report.self_loops_added = csr.self_loops_added;
  log_info("graph: ", dataset.num_nodes, " vertices, ", dataset.num_edges(),
           " directed edges from ", csr.input_edges, " input edges (", csr.duplicates_removed,
           " duplicates removed, ", csr.self_loops_removed, " self-loops removed, ",
           csr.self_loops_added, " self-loops added)");
}
}  // namespace

void build_graph(const EdgeSource& source, std::int64_t expected_edges,
                 const ImportOptions& options, Dataset& dataset, ImportReport& report) {
  require_graph_memory(dataset.num_nodes, expected_edges, 0, options);
  record_graph(build_in_csr(dataset.num_nodes, source, options.graph, expected_edges), options,
               dataset, report);
}

void import_edge_blocks(EdgeBlockReader& reader, const ImportOptions& options, Dataset& d,
                        ImportReport& report) {
  std::int64_t count = 0;
  if (options.num_nodes > 0) {
    // The vertex count is known: ids are checked while the first CSR pass reads them.
    d.num_nodes = static_cast<vertex_t>(options.num_nodes);
    std::int64_t passes = 0;
    build_graph(
        [&](const EdgeBlockVisitor& visit) {
          if (passes++ == 0)
            reader.deliver(visit, options.num_nodes, &count);
          else
            reader.deliver(visit);
        },
        reader.expected_edges(), options, d, report);
    SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
    return;
  }
  std::int64_t max_id = -1;
  {
    StageTimer timer("scan edges " + options.input);
    max_id = reader.scan(kMaxVertices, count);
  }
  SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
  d.num_nodes = vertex_count(max_id, options.input);
  build_graph([&](const EdgeBlockVisitor& visit) { reader.deliver(visit); }, count, options, d,
              report);
}

void build_graph_from_pairs(std::vector<vertex_t>&& pairs, const ImportOptions& options,
                            Dataset& dataset, ImportReport& report) {
  // The pairs stay until the CSR exists.
  std::vector<vertex_t> held = std::move(pairs);
  const std::int64_t edges = std::int64_t(held.size() / 2);
  require_graph_memory(dataset.num_nodes, edges, saturating_bytes({edges, 2, sizeof(vertex_t)}),
                       options);
  CsrBuildResult csr =
      build_in_csr(dataset.num_nodes, memory_edge_source(held), options.graph, edges);
  std::vector<vertex_t>().swap(held);
  record_graph(std::move(csr), options, dataset, report);
}

std::int32_t count_classes(const std::vector<std::int32_t>& labels, std::int32_t declared) {
  if (declared > 0) return declared;
  std::int32_t max_label = -1;
  for (const auto label : labels) max_label = std::max(max_label, label);
  return max_label + 1;
}

void attach_vertex_data(const ImportOptions& options, Dataset& d) {
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(options.features_path.empty() || options.random_features == 0,
                     "give either --features FILE or --random-features D, not both");
  SLUICE_INPUT_CHECK(options.labels_path.empty() || options.random_labels == 0,
                     "give either --labels FILE or --random-labels K, not both");
  {
    StageTimer timer("features");
    if (!options.features_path.empty()) {
      d.features = read_feature_table(options.features_path, n, d.feature_dim);
    } else if (options.random_features > 0) {
      require_memory({saturating_bytes({n, options.random_features, sizeof(float)}),
                      cat("the feature matrix of ", n, " vertices"),
                      cat("--random-features ", options.random_features)});
      d.feature_dim = options.random_features;
      d.features = random_features(n, d.feature_dim, options.seed);
    } else {
      log_info("no features given: the dataset holds structure only (feature_dim 0)");
    }
  }
  if (!options.labels_path.empty()) {
    d.labels = read_label_column(options.labels_path, n, options.classes);
  } else if (options.random_labels > 0) {
    SLUICE_INPUT_CHECK(options.classes <= 0 || options.random_labels <= options.classes,
                       "--random-labels ", options.random_labels, " exceeds --classes ",
                       options.classes);
    d.labels = random_labels(n, options.random_labels, options.seed);
  } else {
    d.labels.assign(n, -1);
  }
  d.num_classes = count_classes(d.labels, options.random_labels > 0 && options.classes <= 0
                                              ? options.random_labels
                                              : options.classes);
  Split split = random_split(d.labels, options.split_fractions, options.seed);
  d.train = std::move(split.train);
  d.valid = std::move(split.valid);
  d.test = std::move(split.test);
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.find_last_of('/');
  if (slash != std::string::npos) path = path.substr(slash + 1);
  for (const char* suffix : {".gz", ".txt", ".csv", ".tsv", ".el", ".edges", ".bin"}) {
    const std::string s = suffix;
    if (path.size() > s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0)
      path.erase(path.size() - s.size());
  }
  return path;
}

vertex_t vertex_count(std::int64_t max_id, const std::string& what) {
  SLUICE_INPUT_CHECK(max_id < std::int64_t(kMaxVertices), what, ": vertex id ", max_id,
                     " exceeds the 32-bit limit (use --remap to compact sparse ids)");
  return static_cast<vertex_t>(max_id + 1);
}

}  // namespace sluice::detail
