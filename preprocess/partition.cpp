// Implementation of preprocess/partition.hpp.
#include "preprocess/partition.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <numeric>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "preprocess/metis_check.hpp"
#include "preprocess/multilevel_partition.hpp"
#include "preprocess/partition_memory.hpp"

namespace sluice {
namespace {

// Work weight of a destination: its in-edges (self-loops excluded) plus one.
std::vector<std::int64_t> edge_weights(const Dataset& d) {
  std::vector<std::int64_t> weight(d.num_nodes);
#pragma omp parallel for schedule(static) if (worth_parallel(d.num_edges() + d.num_nodes))
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    std::int64_t count = 1;
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) count += d.indices[e] != v;
    weight[v] = count;
  }
  return weight;
}

// The weights a single-constraint partitioner balances: in-edges + 1 (edges), 1 (vertices), or
// in-edges + the mean in-degree (both: edges and vertices count equally in every part's sum).
std::vector<std::int64_t> balance_weights(const Dataset& d, Balance balance) {
  if (balance == Balance::kVertices) return std::vector<std::int64_t>(d.num_nodes, 1);
  std::vector<std::int64_t> weight = edge_weights(d);
  if (balance == Balance::kBoth) {
    const std::int64_t n = std::max<std::int64_t>(d.num_nodes, 1);
    const std::int64_t mean = std::max<std::int64_t>(1, (d.num_edges() + n / 2) / n);
    for (auto& w : weight) w += mean - 1;
  }
  return weight;
}

// Logs what the plan's balance figures will say: the largest part's vertices and CSR entries
// (in-edges) against the mean.
void log_balance(const Dataset& d, const VertexPartition& partition, int parts) {
  std::vector<std::int64_t> vertices(parts, 0), entries(parts, 0);
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    ++vertices[partition.part[v]];
    entries[partition.part[v]] += d.indptr[v + 1] - d.indptr[v];
  }
  auto max_over_mean = [&](const std::vector<std::int64_t>& sizes) {
    const double total = std::accumulate(sizes.begin(), sizes.end(), 0.0);
    return total > 0 ? *std::max_element(sizes.begin(), sizes.end()) * parts / total : 1.0;
  };
  log_info("level-1 partition (", partition.method, ", P=", parts, "): ", partition.seconds,
           " s, balance max/mean vertices ", max_over_mean(vertices), ", CSR entries ",
           max_over_mean(entries),
           partition.edge_cut >= 0 ? cat(", edge cut ", partition.edge_cut) : std::string());
}

// Contiguous ranges of dataset ids with about equal total weight.
std::vector<std::int32_t> range_partition(const Dataset& d, int parts, Balance balance) {
  const auto weight = balance_weights(d, balance);
  const std::int64_t total = std::accumulate(weight.begin(), weight.end(), std::int64_t(0));
  std::vector<std::int32_t> part(d.num_nodes);
  std::int64_t prefix = 0;
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    // Partition of a vertex = which 1/P slice of the total weight its weight midpoint falls in.
    const double middle = prefix + 0.5 * weight[v];
    part[v] = std::min<std::int32_t>(parts - 1, static_cast<std::int32_t>(middle * parts / total));
    prefix += weight[v];
  }
  return part;
}

std::vector<std::int32_t> random_partition(const Dataset& d, int parts, std::uint64_t seed) {
  std::vector<std::int32_t> part(d.num_nodes);
#pragma omp parallel for schedule(static) if (worth_parallel(d.num_nodes))
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    part[v] = static_cast<std::int32_t>(key_hash(seed, 0x7061727469ULL, v) % parts);
  return part;
}

// Serial METIS on the whole symmetrized graph. Returns an empty vector (after logging why) when
// METIS cannot take this graph.
std::vector<std::int32_t> metis_direct_partition(const Dataset& d, int parts, std::uint64_t seed,
                                                 Balance balance,
                                                 const std::vector<double>& imbalance,
                                                 std::int64_t& edge_cut) {
  const std::int64_t n = d.num_nodes;
  std::string why;
  if (!fits_metis_index(n, d.num_edges(), &why)) {
    log_info("METIS: ", why, "; falling back to the range partitioner");
    return {};
  }
  require_host_memory(metis_direct_bytes(n, d.num_edges(), d.symmetrized),
                      "serial METIS on the whole graph (--partitioner metis-direct)");
  SymmetricGraph graph;
  {
    StageTimer timer("symmetrize for METIS");
    graph = symmetrize(d);
  }
  if (graph.indices.empty()) {
    log_info("METIS: the symmetrized graph has no edges; falling back to the range partitioner");
    return {};
  }
  // kBoth: two balance constraints per vertex, (in-edges + 1, 1).
  const auto weight = balance == Balance::kBoth ? edge_weights(d) : balance_weights(d, balance);
  std::vector<idx_t> xadj(graph.indptr.begin(), graph.indptr.end());
  std::vector<idx_t> adjncy(graph.indices.begin(), graph.indices.end());
  idx_t ncon = balance == Balance::kBoth ? 2 : 1;
  std::vector<idx_t> vwgt(static_cast<std::size_t>(n) * ncon);
  for (std::int64_t v = 0; v < n; ++v) {
    vwgt[std::size_t(v) * ncon] = static_cast<idx_t>(weight[std::size_t(v)]);
    if (ncon == 2) vwgt[std::size_t(v) * 2 + 1] = 1;
  }
  graph = SymmetricGraph{};
  std::vector<idx_t> result(n, 0);
  idx_t nvtxs = static_cast<idx_t>(n);
  idx_t nparts = parts;
  idx_t objval = 0;
  idx_t options[METIS_NOPTIONS];
  SLUICE_METIS(METIS_SetDefaultOptions(options));
  options[METIS_OPTION_SEED] =
      static_cast<idx_t>(seed % static_cast<std::uint64_t>(std::numeric_limits<idx_t>::max()));
  options[METIS_OPTION_NUMBERING] = 0;
  // Load-imbalance tolerance per constraint (ubvec). None given: 1.01 for both constraints of
  // kBoth, METIS's default (1.03) for one. On the products- and reddit-like benchmark graphs
  // (P = 2 and 4) 1.01 lowers the largest part's vertices, CSR entries, host-link rows and
  // merged rows, and the edge cut, against METIS's default (docs/benchmarks.md, Partition).
  std::vector<real_t> ubvec;
  if (imbalance.empty() && ncon == 2) ubvec.assign(2, real_t(1.01));
  if (!imbalance.empty()) {
    SLUICE_INPUT_CHECK(imbalance.size() == 1 || std::int64_t(imbalance.size()) == ncon,
                       imbalance.size(), " imbalance tolerances for ", ncon,
                       " balance constraints (give 1 or ", ncon, ")");
    for (idx_t k = 0; k < ncon; ++k)
      ubvec.push_back(static_cast<real_t>(imbalance[imbalance.size() == 1 ? 0 : std::size_t(k)]));
  }
  {
    StageTimer timer(cat("METIS_PartGraphKway (", parts, " parts)"));
    SLUICE_METIS(METIS_PartGraphKway(
        &nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr, nullptr, &nparts, nullptr,
        ubvec.empty() ? nullptr : ubvec.data(), options, &objval, result.data()));
  }
  edge_cut = objval;
  std::vector<std::int32_t> part(result.begin(), result.end());
  for (std::int64_t v = 0; v < n; ++v)
    SLUICE_EXPECTS(part[v] >= 0 && part[v] < parts, "METIS returned part ", part[v], " for ", v);
  return part;
}

}  // namespace

bool is_partitioner(const std::string& method) {
  return std::find(std::begin(kPartitioners), std::end(kPartitioners), method) !=
         std::end(kPartitioners);
}

std::int64_t metis_direct_bytes(std::int64_t n, std::int64_t m, bool symmetrized) {
  const std::int64_t entries = symmetrized ? m : 2 * m;
  return 110 * entries + 64 * n;
}

bool fits_metis_index(std::int64_t n, std::int64_t m, std::string* why) {
  constexpr std::int64_t kIdxMax = std::numeric_limits<idx_t>::max();
  // The symmetrized graph has at most 2m adjacency entries; vertex weights sum to m + n at most.
  const bool fits = n <= kIdxMax && m <= kIdxMax / 2 && m + n <= kIdxMax;
  if (!fits && why)
    *why = cat("graph too large for METIS's ", 8 * sizeof(idx_t), "-bit idx_t (n = ", n,
               ", 2m = ", 2 * m, ", m + n = ", m + n, ", max ", kIdxMax, ")");
  return fits;
}

SymmetricGraph symmetrize(const Dataset& d) {
  const vertex_t n = d.num_nodes;
  std::vector<edge_t> degree(std::size_t(n) + 1, 0);
  {
    std::vector<std::atomic<edge_t>> count(n);
#pragma omp parallel for schedule(dynamic, 4096) if (worth_parallel(d.num_edges() + n))
    for (vertex_t v = 0; v < n; ++v) {
      for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) {
        const vertex_t u = d.indices[e];
        if (u == v) continue;
        count[v].fetch_add(1, std::memory_order_relaxed);
        count[u].fetch_add(1, std::memory_order_relaxed);
      }
    }
    for (vertex_t v = 0; v < n; ++v) degree[v + 1] = degree[v] + count[v].load();
  }
  std::vector<vertex_t> raw(degree[n]);
  {
    std::vector<std::atomic<edge_t>> cursor(n);
    for (vertex_t v = 0; v < n; ++v) cursor[v].store(degree[v], std::memory_order_relaxed);
#pragma omp parallel for schedule(dynamic, 4096) if (worth_parallel(d.num_edges() + n))
    for (vertex_t v = 0; v < n; ++v) {
      for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) {
        const vertex_t u = d.indices[e];
        if (u == v) continue;
        raw[cursor[v].fetch_add(1, std::memory_order_relaxed)] = u;
        raw[cursor[u].fetch_add(1, std::memory_order_relaxed)] = v;
      }
    }
  }
  // Sort and deduplicate each row (the fill order above is racy; the result is not).
  std::vector<edge_t> unique_count(std::size_t(n) + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096) if (worth_parallel(d.num_edges() + n))
  for (vertex_t v = 0; v < n; ++v) {
    auto begin = raw.begin() + degree[v];
    auto end = raw.begin() + degree[v + 1];
    std::sort(begin, end);
    unique_count[v + 1] = std::unique(begin, end) - begin;
  }
  SymmetricGraph graph;
  graph.indptr.assign(std::size_t(n) + 1, 0);
  for (vertex_t v = 0; v < n; ++v) graph.indptr[v + 1] = graph.indptr[v] + unique_count[v + 1];
  graph.indices.resize(graph.indptr[n]);
#pragma omp parallel for schedule(dynamic, 4096) if (worth_parallel(d.num_edges() + n))
  for (vertex_t v = 0; v < n; ++v)
    std::copy(raw.begin() + degree[v], raw.begin() + degree[v] + unique_count[v + 1],
              graph.indices.begin() + graph.indptr[v]);
  return graph;
}

Balance parse_balance(const std::string& name) {
  if (name == "edges") return Balance::kEdges;
  if (name == "vertices") return Balance::kVertices;
  if (name == "both") return Balance::kBoth;
  throw InputError(cat("unknown --balance '", name, "' (expected edges, vertices or both)"));
}

std::string balance_name(Balance balance) {
  switch (balance) {
    case Balance::kEdges:
      return "edges";
    case Balance::kVertices:
      return "vertices";
    case Balance::kBoth:
      return "both";
  }
  return "?";
}

std::vector<double> parse_imbalance(const std::string& text, int constraints,
                                    const std::string& what) {
  std::vector<double> values;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    SLUICE_INPUT_CHECK(
        !item.empty() && end == item.c_str() + item.size() && value > 1.0 && value < 100.0, what,
        " '", text, "': each tolerance must be a number above 1 (e.g. 1.03 ",
        "lets a part hold 3 % more than its share), got '", item, "'");
    values.push_back(value);
    start = comma + 1;
  }
  SLUICE_INPUT_CHECK(values.size() == 1 || int(values.size()) == constraints, what, " '", text,
                     "': give 1 tolerance or ", constraints, " (one per balance constraint), not ",
                     values.size());
  return values;
}

VertexPartition partition_vertices(const Dataset& d, int parts, const std::string& method,
                                   std::uint64_t seed, Balance balance,
                                   const std::vector<double>& imbalance) {
  SLUICE_INPUT_CHECK(is_partitioner(method), "unknown partitioner '", method,
                     "' (expected metis, metis-direct, range or random)");
  SLUICE_INPUT_CHECK(parts >= 1, "the partition count must be at least 1 (got ", parts, ")");
  SLUICE_INPUT_CHECK(parts <= d.num_nodes, "cannot cut ", d.num_nodes, " vertices into ", parts,
                     " partitions");
  const double start = now_seconds();
  VertexPartition result;
  result.method = method;
  if (parts == 1) {
    result.part.assign(d.num_nodes, 0);
  } else if (method == "range") {
    result.part = range_partition(d, parts, balance);
  } else if (method == "random") {
    result.part = random_partition(d, parts, seed);
  } else if (method == "metis") {
    MultilevelOptions options;
    options.parts = parts;
    options.seed = seed;
    options.balance = balance;
    options.imbalance = imbalance;
    MultilevelResult multilevel = multilevel_partition(d, options);
    result.part = std::move(multilevel.part);
    result.edge_cut = multilevel.edge_cut;
  } else {
    result.part = metis_direct_partition(d, parts, seed, balance, imbalance, result.edge_cut);
    if (result.part.empty()) {
      result.method = "range";
      result.part = range_partition(d, parts, balance);
    }
  }
  result.seconds = now_seconds() - start;
  log_balance(d, result, parts);
  return result;
}

namespace {

// Renumbers by (partition, group, dataset id) where `second_group` flags the vertices of a
// partition's second group (empty: one group).
Renumbering renumber_in_groups(const std::vector<std::int32_t>& part, int parts,
                               const std::vector<std::uint8_t>& second_group) {
  const auto n = static_cast<vertex_t>(part.size());
  Renumbering r;
  r.partition_offsets.assign(std::size_t(parts) + 1, 0);
  std::vector<vertex_t> firsts(std::size_t(parts), 0);  // each partition's first group size
  for (vertex_t v = 0; v < n; ++v) {
    SLUICE_EXPECTS(part[v] >= 0 && part[v] < parts, "vertex ", v, " in partition ", part[v]);
    ++r.partition_offsets[part[v] + 1];
    if (second_group.empty() || !second_group[std::size_t(v)]) ++firsts[std::size_t(part[v])];
  }
  for (int p = 0; p < parts; ++p) r.partition_offsets[p + 1] += r.partition_offsets[p];
  std::vector<vertex_t> cursor(r.partition_offsets.begin(), r.partition_offsets.end() - 1);
  std::vector<vertex_t> second(static_cast<std::size_t>(parts), 0);
  for (int p = 0; p < parts; ++p)
    second[std::size_t(p)] = cursor[std::size_t(p)] + firsts[std::size_t(p)];
  r.new_to_old.resize(n);
  r.old_to_new.resize(n);
  for (vertex_t v = 0; v < n; ++v) {
    const bool in_second = !second_group.empty() && second_group[std::size_t(v)];
    const vertex_t id = in_second ? second[std::size_t(part[v])]++ : cursor[std::size_t(part[v])]++;
    r.new_to_old[id] = v;
    r.old_to_new[v] = id;
  }
  return r;
}

}  // namespace

Renumbering renumber_by_partition(const std::vector<std::int32_t>& part, int parts) {
  return renumber_in_groups(part, parts, {});
}

Renumbering renumber_by_partition(const Dataset& d, const std::vector<std::int32_t>& part,
                                  int parts, BoundaryVertices boundary) {
  SLUICE_EXPECTS(part.size() == std::size_t(d.num_nodes), "partition of ", part.size(),
                 " vertices for a graph of ", d.num_nodes);
  if (boundary == BoundaryVertices::kInPlace || parts == 1)
    return renumber_by_partition(part, parts);
  // Cleared by every row of another partition that reads the vertex (atomic byte writes of the
  // same value: only the final flags count).
  std::vector<std::uint8_t> interior(std::size_t(d.num_nodes), 1);
#pragma omp parallel for schedule(dynamic, 1024) if (worth_parallel(std::int64_t(d.indices.size())))
  for (vertex_t u = 0; u < d.num_nodes; ++u)
    for (edge_t e = d.indptr[std::size_t(u)]; e < d.indptr[std::size_t(u) + 1]; ++e) {
      const vertex_t v = d.indices[std::size_t(e)];
      if (part[std::size_t(v)] != part[std::size_t(u)]) {
#pragma omp atomic write
        interior[std::size_t(v)] = 0;
      }
    }
  return renumber_in_groups(part, parts, interior);
}

}  // namespace sluice
