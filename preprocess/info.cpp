// Implementation of preprocess/info.hpp.
#include "preprocess/info.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace sluice {

DatasetStats dataset_stats(const std::string& path) {
  const DatasetInfo info = read_dataset_info(path);
  DatasetReadOptions options;
  options.features = false;
  const Dataset d = read_dataset(path, options);
  return dataset_stats(d, info);
}

DatasetStats dataset_stats(const Dataset& d, const DatasetInfo& info) {
  DatasetStats s;
  s.info = info;
  const vertex_t n = d.num_nodes;
  std::vector<std::int32_t> out_degree(n, 0);
  std::int64_t min_in = n > 0 ? std::numeric_limits<std::int64_t>::max() : 0, max_in = 0;
  std::int64_t zero_in = 0, loops = 0;
#pragma omp parallel for schedule(dynamic, 4096) \
    reduction(min : min_in) reduction(max : max_in) reduction(+ : zero_in, loops) if (worth_parallel(std::int64_t(n)))
  for (vertex_t v = 0; v < n; ++v) {
    const std::int64_t degree = d.indptr[v + 1] - d.indptr[v];
    min_in = std::min(min_in, degree);
    max_in = std::max(max_in, degree);
    if (degree == 0) ++zero_in;
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) {
      const vertex_t u = d.indices[e];
      if (u == v) ++loops;
#pragma omp atomic
      ++out_degree[u];
    }
  }
  std::int64_t isolated = 0, max_out = 0, labeled = 0;
#pragma omp parallel for reduction(+ : isolated, labeled) reduction(max : max_out) if (worth_parallel(std::int64_t(n)))
  for (vertex_t v = 0; v < n; ++v) {
    if (out_degree[v] == 0 && d.indptr[v + 1] == d.indptr[v]) ++isolated;
    max_out = std::max<std::int64_t>(max_out, out_degree[v]);
    if (!d.labels.empty() && d.labels[v] >= 0) ++labeled;
  }
  s.min_in_degree = min_in;
  s.max_in_degree = max_in;
  s.mean_in_degree = n > 0 ? static_cast<double>(d.num_edges()) / n : 0.0;
  s.max_out_degree = max_out;
  s.zero_in_degree = zero_in;
  s.isolated = isolated;
  s.self_loops = loops;
  s.labeled = labeled;
  return s;
}

std::string stats_text(const DatasetStats& s) {
  const DatasetInfo& i = s.info;
  return cat("name:            ", i.name, "\n",                             //
             "source:          ", i.source, "\n",                           //
             "nodes:           ", i.num_nodes, "\n",                        //
             "edges:           ", i.num_edges, " (directed, as stored)\n",  //
             "symmetrized:     ", i.symmetrized ? "yes" : "no", "\n",       //
             "self-loops:      ", s.self_loops, " (import option: ", i.self_loops, ")\n",
             "duplicates removed at import: ", i.duplicates_removed, "\n",  //
             "in-degree:       min ", s.min_in_degree, ", mean ", s.mean_in_degree, ", max ",
             s.max_in_degree, "\n",                                 //
             "out-degree max:  ", s.max_out_degree, "\n",           //
             "no in-edges:     ", s.zero_in_degree, " vertices\n",  //
             "isolated:        ", s.isolated, " vertices\n",        //
             "feature dim:     ", i.feature_dim, "\n",              //
             "classes:         ", i.num_classes, " (", s.labeled, " labeled vertices)\n",
             "split:           train ", i.train, ", valid ", i.valid, ", test ", i.test, "\n",
             "original ids:    ", i.has_original_ids ? "yes" : "no", "\n",  //
             "fingerprint:     ", i.fingerprint, "\n",                      //
             "options:         ", i.options, "\n");
}

std::string stats_json(const DatasetStats& s) {
  const DatasetInfo& i = s.info;
  nlohmann::json options = nlohmann::json::object();
  try {
    options = nlohmann::json::parse(i.options);
  } catch (const nlohmann::json::exception&) {
    options = i.options;  // not JSON: keep the text
  }
  const nlohmann::json json = {{"name", i.name},
                               {"source", i.source},
                               {"nodes", i.num_nodes},
                               {"edges", i.num_edges},
                               {"feature_dim", i.feature_dim},
                               {"classes", i.num_classes},
                               {"labeled", s.labeled},
                               {"train", i.train},
                               {"valid", i.valid},
                               {"test", i.test},
                               {"symmetrized", i.symmetrized},
                               {"self_loops", s.self_loops},
                               {"self_loops_option", i.self_loops},
                               {"duplicates_removed", i.duplicates_removed},
                               {"min_in_degree", s.min_in_degree},
                               {"mean_in_degree", s.mean_in_degree},
                               {"max_in_degree", s.max_in_degree},
                               {"max_out_degree", s.max_out_degree},
                               {"zero_in_degree", s.zero_in_degree},
                               {"isolated", s.isolated},
                               {"has_original_ids", i.has_original_ids},
                               {"fingerprint", i.fingerprint},
                               {"options", options}};
  return json.dump();
}

}  // namespace sluice
