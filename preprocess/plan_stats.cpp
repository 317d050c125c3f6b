// Implementation of preprocess/plan_stats.hpp.
#include "preprocess/plan_stats.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "preprocess/chunking.hpp"
#include "preprocess/partition.hpp"

namespace sluice {
namespace {

// Destinations of partition p, and their chunk CSR entries (in-edges + self entries: the
// partition's share of the aggregation work).
std::int64_t partition_vertex_count(const Plan& plan, int p) {
  return std::int64_t(plan.partition_offsets[std::size_t(p) + 1]) -
         plan.partition_offsets[std::size_t(p)];
}
std::int64_t partition_entry_count(const Plan& plan, int p) {
  std::int64_t entries = 0;
  for (int c = 0; c < plan.chunks; ++c) entries += plan.chunk(c, p).num_entries();
  return entries;
}
// Rows partition p loads from host memory per layer pass (its L_c^p over all batches).
std::int64_t partition_load_count(const Plan& plan, int p) {
  std::int64_t loads = 0;
  for (int c = 0; c < plan.chunks; ++c)
    loads += std::int64_t(plan.chunk(c, p).load_vertices.size());
  return loads;
}

}  // namespace

namespace {

std::int64_t resolve_dim(const Plan& plan, std::int64_t feature_dim) {
  if (feature_dim > 0) return feature_dim;
  return plan.stats.cost_feature_dim > 0 ? plan.stats.cost_feature_dim : 1;
}

double reduction(std::int64_t value, std::int64_t baseline) {
  return baseline > 0 ? 1.0 - static_cast<double>(value) / static_cast<double>(baseline) : 0.0;
}

std::string line(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return std::string(buffer) + "\n";
}

std::string percent(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", value);
  return buffer;
}

}  // namespace

std::string plan_stats_table(const Plan& plan, std::int64_t feature_dim) {
  const std::int64_t dim = resolve_dim(plan, feature_dim);
  const double row_bytes = 4.0 * dim;
  const PlanStats& s = plan.stats;
  std::string out;
  out +=
      line("plan: P=%d C=%d partitioner=%s reorganized=%s vertices=%d edges=%lld seed=%llu",
           plan.partitions, plan.chunks, plan.partitioner.c_str(), plan.reorganized ? "yes" : "no",
           plan.num_nodes, static_cast<long long>(plan.num_dataset_edges),
           static_cast<unsigned long long>(plan.seed));
  out += line("dataset fingerprint: %s", plan.dataset_fingerprint.c_str());
  out += line("bandwidths: host->GPU %.1f GB/s, GPU<-GPU %.1f GB/s, in place %.1f GB/s",
              plan.bandwidths.h2d / 1e9, plan.bandwidths.p2p / 1e9, plan.bandwidths.reuse / 1e9);
  out += line("replication factor: %.4f", s.replication_factor);
  out += "\n";
  out += line("%-28s %16s %8s %14s %12s", "per layer pass", "rows", "x |V|",
              ("bytes (d=" + std::to_string(dim) + ")").c_str(), "vs baseline");
  // A row of the table; `against_baseline` is its last column (the change from the baseline's
  // rows, or empty).
  auto volume = [&](const char* name, std::int64_t rows, const std::string& against_baseline) {
    out += line("%-28s %16lld %8.3f %14s %12s", name, static_cast<long long>(rows),
                static_cast<double>(rows) / std::max<vertex_t>(1, plan.num_nodes),
                format_bytes(rows * row_bytes).c_str(), against_baseline.c_str());
  };
  const auto change = [&](std::int64_t rows) {
    return percent(-100.0 * reduction(rows, s.volume_baseline_rows));
  };
  volume("host->GPU baseline", s.volume_baseline_rows, "");
  volume("host->GPU +P2P", s.volume_p2p_rows, change(s.volume_p2p_rows));
  volume("host->GPU +P2P +reuse", s.volume_reuse_rows, change(s.volume_reuse_rows));
  volume("GPU<-GPU pulls (P2P)", s.p2p_rows, "");
  volume("reused in place", s.reused_rows, "");
  out += "\n";
  out += line("cost model (d=%lld): before reorganization %.6g ms, after %.6g ms (%+.1f%%)",
              static_cast<long long>(s.cost_feature_dim), 1e3 * s.cost_before, 1e3 * s.cost_after,
              s.cost_before > 0 ? -100.0 * (1.0 - s.cost_after / s.cost_before) : 0.0);
  out += "\n";
  // Per GPU: the host link carries its loads and its own rows (stored in the forward, loaded as
  // blocks in the backward, and as many gradient rows flushed as were loaded), so "link rows"
  // (loads + vertices per layer pass) is what its host link moves, up to the row widths.
  out += line("%-6s %12s %14s %14s %12s %14s %14s %14s %14s", "GPU", "vertices", "CSR entries",
              "transition", "remote", "merged rows",
              ("bytes (d=" + std::to_string(dim) + ")").c_str(), "loads/pass", "link rows");
  for (int p = 0; p < plan.partitions; ++p) {
    const std::int64_t merged = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
    const std::int64_t vertices = partition_vertex_count(plan, p);
    const std::int64_t loads = partition_load_count(plan, p);
    out += line("%-6d %12lld %14lld %14d %12d %14lld %14s %14lld %14lld", p,
                static_cast<long long>(vertices),
                static_cast<long long>(partition_entry_count(plan, p)), plan.transition_rows[p],
                plan.remote_rows[p], static_cast<long long>(merged),
                format_bytes(merged * row_bytes).c_str(), static_cast<long long>(loads),
                static_cast<long long>(loads + vertices));
  }
  out += "\n";
  out += line("build time: level-1 partition %.3f s, everything else %.3f s", s.partition_seconds,
              s.build_seconds);
  return out;
}

std::string plan_stats_json(const Plan& plan, std::int64_t feature_dim) {
  const std::int64_t dim = resolve_dim(plan, feature_dim);
  const std::int64_t row_bytes = 4 * dim;
  const PlanStats& s = plan.stats;
  nlohmann::json j;
  j["partitions"] = plan.partitions;
  j["chunks"] = plan.chunks;
  j["num_nodes"] = plan.num_nodes;
  j["num_dataset_edges"] = plan.num_dataset_edges;
  j["partitioner"] = plan.partitioner;
  j["seed"] = plan.seed;
  j["reorganized"] = plan.reorganized;
  j["dataset_fingerprint"] = plan.dataset_fingerprint;
  j["replication_factor"] = s.replication_factor;
  j["feature_dim"] = dim;
  j["volume_baseline_rows"] = s.volume_baseline_rows;
  j["volume_p2p_rows"] = s.volume_p2p_rows;
  j["volume_reuse_rows"] = s.volume_reuse_rows;
  j["volume_baseline_bytes"] = s.volume_baseline_rows * row_bytes;
  j["volume_p2p_bytes"] = s.volume_p2p_rows * row_bytes;
  j["volume_reuse_bytes"] = s.volume_reuse_rows * row_bytes;
  j["reduction_p2p"] = reduction(s.volume_p2p_rows, s.volume_baseline_rows);
  j["reduction_reuse"] = reduction(s.volume_reuse_rows, s.volume_baseline_rows);
  j["p2p_rows"] = s.p2p_rows;
  j["p2p_bytes"] = s.p2p_rows * row_bytes;
  j["reused_rows"] = s.reused_rows;
  j["cost_before"] = s.cost_before;
  j["cost_after"] = s.cost_after;
  j["cost_feature_dim"] = s.cost_feature_dim;
  std::vector<std::int64_t> vertices, entries, loads, link;
  for (int p = 0; p < plan.partitions; ++p) {
    vertices.push_back(partition_vertex_count(plan, p));
    entries.push_back(partition_entry_count(plan, p));
    loads.push_back(partition_load_count(plan, p));
    link.push_back(loads.back() + vertices.back());
  }
  j["partition_vertices"] = vertices;
  j["partition_entries"] = entries;
  j["partition_loads"] = loads;
  j["partition_link_rows"] = link;
  j["transition_rows"] = plan.transition_rows;
  j["remote_rows"] = plan.remote_rows;
  j["bandwidth_h2d"] = plan.bandwidths.h2d;
  j["bandwidth_p2p"] = plan.bandwidths.p2p;
  j["bandwidth_reuse"] = plan.bandwidths.reuse;
  j["partition_seconds"] = s.partition_seconds;
  j["build_seconds"] = s.build_seconds;
  return j.dump();
}

std::vector<SweepRow> sweep_replication(const Dataset& dataset, const std::vector<int>& counts,
                                        const std::string& partitioner, std::uint64_t seed) {
  std::vector<SweepRow> rows;
  for (int count : counts) {
    StageTimer timer(cat("sweep P=", count));
    const VertexPartition partition = partition_vertices(dataset, count, partitioner, seed);
    const Renumbering renumbering = renumber_by_partition(partition.part, count);
    const ChunkGraph graph = build_chunk_graph(dataset, renumbering);
    const auto bounds = chunk_bounds(graph, renumbering.partition_offsets, 1);
    const NeighborSets sets = build_neighbor_sets(graph, bounds, count, 1);
    SweepRow row;
    row.partitions = count;
    row.partitioner = partition.method;
    row.replication_factor = static_cast<double>(sets.vertices.size()) / dataset.num_nodes;
    row.seconds = partition.seconds;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace sluice
