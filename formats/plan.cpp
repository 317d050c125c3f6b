// Implementation of formats/plan.hpp: plan.h5 I/O. Per-chunk arrays are stored flattened
// (concatenated in chunk order k = batch * P + partition) with an int64 offset table of K + 1
// entries each, so that the file holds a few dozen HDF5 objects whatever P and C are. The
// schema is documented in docs/formats.md ("Plan file").
#include "formats/plan.hpp"

#include <algorithm>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "formats/hdf5.hpp"

namespace sluice {

int Plan::owner(vertex_t renumbered) const {
  SLUICE_EXPECTS(renumbered >= 0 && renumbered < num_nodes, "vertex ", renumbered,
                 " out of range [0, ", num_nodes, ")");
  const auto it = std::upper_bound(partition_offsets.begin(), partition_offsets.end(), renumbered);
  return static_cast<int>(it - partition_offsets.begin()) - 1;
}

namespace {

// Concatenates one per-chunk vector field into (offsets[K + 1], values).
template <typename T, typename Get>
void flatten(const std::vector<ChunkPlan>& chunks, Get get, std::vector<std::int64_t>& offsets,
             std::vector<T>& values) {
  offsets.assign(chunks.size() + 1, 0);
  for (std::size_t k = 0; k < chunks.size(); ++k)
    offsets[k + 1] = offsets[k] + static_cast<std::int64_t>(get(chunks[k]).size());
  values.resize(offsets.back());
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const auto& field = get(chunks[k]);
    std::copy(field.begin(), field.end(), values.begin() + offsets[k]);
  }
}

template <typename T, typename Get>
void write_flat(hid_t group, const std::string& name, const std::vector<ChunkPlan>& chunks,
                Get get) {
  std::vector<std::int64_t> offsets;
  std::vector<T> values;
  flatten<T>(chunks, get, offsets, values);
  h5::write_vector(group, name, values);
  h5::write_vector(group, name + "_offsets", offsets);
}

template <typename T>
std::vector<T> read_checked(hid_t location, const std::string& name, const std::string& path,
                            std::int64_t expected_size = -1) {
  SLUICE_INPUT_CHECK(h5::exists(location, name), path, ": plan lacks dataset ", name);
  const auto dims = h5::shape(location, name);
  SLUICE_INPUT_CHECK(dims.size() == 1, path, ": plan dataset ", name, " is not 1-dimensional");
  SLUICE_INPUT_CHECK(expected_size < 0 || dims[0] == std::uint64_t(expected_size), path,
                     ": plan dataset ", name, " has ", dims[0], " entries, expected ",
                     expected_size);
  return h5::read_vector<T>(location, name);
}

// Reads a flattened field straight into the chunks, each its own range of rows (no copy of the
// whole field is held).
template <typename T, typename Get>
void read_flat(hid_t group, const std::string& name, const std::string& path,
               std::vector<ChunkPlan>& chunks, Get get) {
  const auto offsets = read_checked<std::int64_t>(group, name + "_offsets", path,
                                                  static_cast<std::int64_t>(chunks.size()) + 1);
  SLUICE_INPUT_CHECK(h5::exists(group, name), path, ": plan lacks dataset ", name);
  const auto dims = h5::shape(group, name);
  SLUICE_INPUT_CHECK(dims.size() == 1, path, ": plan dataset ", name, " is not 1-dimensional");
  SLUICE_INPUT_CHECK(offsets[0] == 0 && offsets.back() == std::int64_t(dims[0]), path, ": chunks/",
                     name, "_offsets does not span chunks/", name);
  for (std::size_t k = 0; k < chunks.size(); ++k)
    SLUICE_INPUT_CHECK(offsets[k] <= offsets[k + 1], path, ": chunks/", name,
                       "_offsets decreases at chunk ", k);
  // The chunks' arrays are allocated and zeroed in parallel, then each is read (in parallel
  // pieces where it is large).
  const std::int64_t count = std::int64_t(chunks.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 && worth_parallel(offsets.back()))
  for (std::int64_t k = 0; k < count; ++k)
    get(chunks[std::size_t(k)]).resize(std::size_t(offsets[k + 1] - offsets[k]));
  for (std::size_t k = 0; k < chunks.size(); ++k)
    h5::read_rows(group, name, h5::native_type<T>(), std::uint64_t(offsets[k]),
                  std::uint64_t(offsets[k + 1]), get(chunks[k]).data());
}

template <typename T>
T read_attr_checked(hid_t location, const std::string& name, const std::string& path) {
  SLUICE_INPUT_CHECK(h5::has_attr(location, name), path, ": plan lacks attribute ", name);
  return h5::read_attr<T>(location, name);
}

std::string read_string_checked(hid_t location, const std::string& name, const std::string& path) {
  SLUICE_INPUT_CHECK(h5::has_attr(location, name), path, ": plan lacks attribute ", name);
  return h5::read_string_attr(location, name);
}

void write_stats(hid_t file, const PlanStats& s) {
  h5::Handle group = h5::create_group(file, "stats");
  h5::write_attr<double>(group, "replication_factor", s.replication_factor);
  h5::write_attr<std::int64_t>(group, "volume_baseline_rows", s.volume_baseline_rows);
  h5::write_attr<std::int64_t>(group, "volume_p2p_rows", s.volume_p2p_rows);
  h5::write_attr<std::int64_t>(group, "volume_reuse_rows", s.volume_reuse_rows);
  h5::write_attr<std::int64_t>(group, "p2p_rows", s.p2p_rows);
  h5::write_attr<std::int64_t>(group, "reused_rows", s.reused_rows);
  h5::write_attr<double>(group, "cost_before", s.cost_before);
  h5::write_attr<double>(group, "cost_after", s.cost_after);
  h5::write_attr<std::int64_t>(group, "cost_feature_dim", s.cost_feature_dim);
  h5::write_attr<double>(group, "partition_seconds", s.partition_seconds);
  h5::write_attr<double>(group, "build_seconds", s.build_seconds);
}

PlanStats read_stats(hid_t file, const std::string& path) {
  SLUICE_INPUT_CHECK(h5::exists(file, "stats"), path, ": plan lacks group stats");
  h5::Handle group = h5::open_group(file, "stats");
  PlanStats s;
  s.replication_factor = read_attr_checked<double>(group, "replication_factor", path);
  s.volume_baseline_rows = read_attr_checked<std::int64_t>(group, "volume_baseline_rows", path);
  s.volume_p2p_rows = read_attr_checked<std::int64_t>(group, "volume_p2p_rows", path);
  s.volume_reuse_rows = read_attr_checked<std::int64_t>(group, "volume_reuse_rows", path);
  s.p2p_rows = read_attr_checked<std::int64_t>(group, "p2p_rows", path);
  s.reused_rows = read_attr_checked<std::int64_t>(group, "reused_rows", path);
  s.cost_before = read_attr_checked<double>(group, "cost_before", path);
  s.cost_after = read_attr_checked<double>(group, "cost_after", path);
  s.cost_feature_dim = read_attr_checked<std::int64_t>(group, "cost_feature_dim", path);
  if (h5::has_attr(group, "partition_seconds"))
    s.partition_seconds = h5::read_attr<double>(group, "partition_seconds");
  if (h5::has_attr(group, "build_seconds"))
    s.build_seconds = h5::read_attr<double>(group, "build_seconds");
  return s;
}

// Shape checks that make every index safe to use: the trainer may index buffers with them.
void validate_plan(const Plan& plan, const std::string& path) {
  const int P = plan.partitions;
  const int C = plan.chunks;
  const vertex_t n = plan.num_nodes;
  const auto& offsets = plan.partition_offsets;
  SLUICE_INPUT_CHECK(offsets.front() == 0 && offsets.back() == n, path,
                     ": partition_offsets does not span [0, ", n, "]");
  for (int p = 0; p < P; ++p)
    SLUICE_INPUT_CHECK(offsets[p] <= offsets[p + 1], path, ": partition_offsets decreases at ", p);
  // The checks run in parallel; each names the first fault a check in order would meet.
  vertex_t bad_vertex = n;
#pragma omp parallel for schedule(static) reduction(min : bad_vertex) if (worth_parallel(n))
  for (vertex_t v = 0; v < n; ++v) {
    const vertex_t old = plan.new_to_old[std::size_t(v)];
    if (!(old >= 0 && old < n && plan.old_to_new[std::size_t(old)] == v))
      bad_vertex = std::min(bad_vertex, v);
  }
  SLUICE_INPUT_CHECK(bad_vertex == n, path,
                     ": new_to_old and old_to_new are not inverse at renumbered vertex ",
                     bad_vertex);
  // Chunk by chunk (batch-major, as stored), one chunk per thread.
  const auto check_chunk = [&](int c, int p) {
    const ChunkPlan& chunk = plan.chunk(c, p);
    const std::string where = cat(path, ": chunk (batch ", c, ", partition ", p, ")");
    SLUICE_INPUT_CHECK(chunk.partition == p && chunk.batch == c, where,
                       " is stored at the wrong position");
    SLUICE_INPUT_CHECK(chunk.range >= 0 && chunk.range < C, where, ": range ", chunk.range,
                       " out of [0, ", C, ")");
    SLUICE_INPUT_CHECK(offsets[p] <= chunk.dst_begin && chunk.dst_begin <= chunk.dst_end &&
                           chunk.dst_end <= offsets[p + 1],
                       where, ": destination range [", chunk.dst_begin, ", ", chunk.dst_end,
                       ") is not inside the partition");
    SLUICE_INPUT_CHECK(chunk.indptr.size() == std::size_t(chunk.num_dst()) + 1, where,
                       ": indptr has ", chunk.indptr.size(), " entries for ", chunk.num_dst(),
                       " destinations");
    SLUICE_INPUT_CHECK(
        chunk.indptr.front() == 0 && chunk.indptr.back() == edge_t(chunk.columns.size()), where,
        ": indptr does not span the columns");
    for (std::size_t i = 0; i + 1 < chunk.indptr.size(); ++i)
      SLUICE_INPUT_CHECK(chunk.indptr[i] < chunk.indptr[i + 1], where, ": row ", i,
                         " is empty or indptr decreases (every row has a self entry)");
    const std::int64_t merged = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
    for (vertex_t column : chunk.columns)
      SLUICE_INPUT_CHECK(column >= 0 && column < merged, where, ": column ", column,
                         " outside the merged buffer of ", merged, " rows");
    // A transition list ("load" or "leave"): vertices ascending inside the partition, each with
    // a transition slot.
    const auto check_transition_list = [&](const char* kind, const std::vector<vertex_t>& vertices,
                                           const std::vector<vertex_t>& slots) {
      SLUICE_INPUT_CHECK(slots.size() == vertices.size(), where, ": ", kind, "_slots and ", kind,
                         "_vertices differ in length");
      for (std::size_t i = 0; i < vertices.size(); ++i) {
        SLUICE_INPUT_CHECK(vertices[i] >= offsets[p] && vertices[i] < offsets[p + 1] &&
                               (i == 0 || vertices[i - 1] < vertices[i]),
                           where, ": ", kind, "_vertices not ascending inside the partition at ",
                           i);
        SLUICE_INPUT_CHECK(slots[i] >= 0 && slots[i] < plan.transition_rows[p], where, ": ", kind,
                           " slot ", slots[i], " out of range");
      }
    };
    check_transition_list("load", chunk.load_vertices, chunk.load_slots);
    const std::size_t remotes = chunk.remote_vertices.size();
    SLUICE_INPUT_CHECK(
        chunk.remote_owner.size() == remotes && chunk.remote_owner_slots.size() == remotes &&
            chunk.remote_slots.size() == remotes && chunk.remote_pull.size() == remotes,
        where, ": remote arrays differ in length");
    for (std::size_t i = 0; i < remotes; ++i) {
      const int q = chunk.remote_owner[i];
      SLUICE_INPUT_CHECK(chunk.remote_vertices[i] >= 0 && chunk.remote_vertices[i] < n && q >= 0 &&
                             q < P && q != p,
                         where, ": remote entry ", i, " has a bad vertex or owner");
      SLUICE_INPUT_CHECK(
          chunk.remote_owner_slots[i] >= 0 && chunk.remote_owner_slots[i] < plan.transition_rows[q],
          where, ": remote owner slot ", chunk.remote_owner_slots[i], " out of range");
      SLUICE_INPUT_CHECK(chunk.remote_slots[i] >= 0 && chunk.remote_slots[i] < plan.remote_rows[p],
                         where, ": remote slot ", chunk.remote_slots[i], " out of range");
      SLUICE_INPUT_CHECK(chunk.remote_pull[i] <= 1, where, ": remote_pull is not 0/1");
    }
    check_transition_list("leave", chunk.leave_vertices, chunk.leave_slots);
  };
  const std::int64_t chunks = std::int64_t(C) * P;
  std::int64_t entries = 0;
  for (const ChunkPlan& chunk : plan.chunk_plans) entries += std::int64_t(chunk.columns.size());
  check_in_parallel(chunks, 1, chunks > 1 ? entries : 0,
                    [&](std::int64_t k) { check_chunk(int(k / P), int(k % P)); });
}

}  // namespace

void write_plan(const std::string& path, const Plan& plan) {
  StageTimer timer("write plan " + path);
  SLUICE_EXPECTS(plan.chunk_plans.size() == std::size_t(plan.partitions) * plan.chunks, "plan has ",
                 plan.chunk_plans.size(), " chunk plans for P=", plan.partitions,
                 " C=", plan.chunks);
  h5::write_file(path, "plan", [&](hid_t file) {
    h5::write_string_attr(file, "format", "sluice-plan");
    h5::write_attr<std::int32_t>(file, "format_version", kPlanFormatVersion);
    h5::write_attr<std::int32_t>(file, "partitions", plan.partitions);
    h5::write_attr<std::int32_t>(file, "chunks", plan.chunks);
    h5::write_attr<std::int64_t>(file, "num_nodes", plan.num_nodes);
    h5::write_attr<std::int64_t>(file, "num_dataset_edges", plan.num_dataset_edges);
    h5::write_string_attr(file, "dataset_fingerprint", plan.dataset_fingerprint);
    h5::write_string_attr(file, "partitioner", plan.partitioner);
    h5::write_attr<std::uint64_t>(file, "seed", plan.seed);
    h5::write_attr<std::uint8_t>(file, "reorganized", plan.reorganized ? 1 : 0);
    h5::write_attr<double>(file, "bandwidth_h2d", plan.bandwidths.h2d);
    h5::write_attr<double>(file, "bandwidth_p2p", plan.bandwidths.p2p);
    h5::write_attr<double>(file, "bandwidth_reuse", plan.bandwidths.reuse);
    h5::write_vector(file, "new_to_old", plan.new_to_old);
    h5::write_vector(file, "old_to_new", plan.old_to_new);
    h5::write_vector(file, "partition_offsets", plan.partition_offsets);
    h5::write_vector(file, "transition_rows", plan.transition_rows);
    h5::write_vector(file, "remote_rows", plan.remote_rows);
    write_stats(file, plan.stats);

    const auto& chunks = plan.chunk_plans;
    h5::Handle group = h5::create_group(file, "chunks");
    std::vector<std::int32_t> partition, batch, range, dst_begin, dst_end, reuse_count;
    for (const ChunkPlan& chunk : chunks) {
      partition.push_back(chunk.partition);
      batch.push_back(chunk.batch);
      range.push_back(chunk.range);
      dst_begin.push_back(chunk.dst_begin);
      dst_end.push_back(chunk.dst_end);
      reuse_count.push_back(chunk.reuse_count);
    }
    h5::write_vector(group, "partition", partition);
    h5::write_vector(group, "batch", batch);
    h5::write_vector(group, "range", range);
    h5::write_vector(group, "dst_begin", dst_begin);
    h5::write_vector(group, "dst_end", dst_end);
    h5::write_vector(group, "reuse_count", reuse_count);
    write_flat<edge_t>(
        group, "indptr", chunks, [](const ChunkPlan& c) -> auto& { return c.indptr; });
    write_flat<vertex_t>(
        group, "columns", chunks, [](const ChunkPlan& c) -> auto& { return c.columns; });
    write_flat<vertex_t>(
        group, "load_vertices", chunks,
        [](const ChunkPlan& c) -> auto& { return c.load_vertices; });
    write_flat<vertex_t>(
        group, "load_slots", chunks, [](const ChunkPlan& c) -> auto& { return c.load_slots; });
    write_flat<vertex_t>(
        group, "remote_vertices", chunks,
        [](const ChunkPlan& c) -> auto& { return c.remote_vertices; });
    write_flat<std::int32_t>(
        group, "remote_owner", chunks, [](const ChunkPlan& c) -> auto& { return c.remote_owner; });
    write_flat<vertex_t>(
        group, "remote_owner_slots", chunks,
        [](const ChunkPlan& c) -> auto& { return c.remote_owner_slots; });
    write_flat<vertex_t>(
        group, "remote_slots", chunks, [](const ChunkPlan& c) -> auto& { return c.remote_slots; });
    write_flat<std::uint8_t>(
        group, "remote_pull", chunks, [](const ChunkPlan& c) -> auto& { return c.remote_pull; });
    write_flat<vertex_t>(
        group, "leave_vertices", chunks,
        [](const ChunkPlan& c) -> auto& { return c.leave_vertices; });
    write_flat<vertex_t>(
        group, "leave_slots", chunks, [](const ChunkPlan& c) -> auto& { return c.leave_slots; });
  });
}

Plan read_plan(const std::string& path) {
  StageTimer timer("read plan " + path);
  h5::Handle file = h5::open_file(path);
  SLUICE_INPUT_CHECK(
      h5::has_attr(file, "format") && h5::read_string_attr(file, "format") == "sluice-plan", path,
      ": not a Sluice plan (missing format attribute \"sluice-plan\")");
  const auto version = read_attr_checked<std::int32_t>(file, "format_version", path);
  SLUICE_INPUT_CHECK(version == kPlanFormatVersion, path, ": plan format version ", version,
                     " is not supported (expected ", kPlanFormatVersion, ")");
  Plan plan;
  plan.partitions = read_attr_checked<std::int32_t>(file, "partitions", path);
  plan.chunks = read_attr_checked<std::int32_t>(file, "chunks", path);
  const auto num_nodes = read_attr_checked<std::int64_t>(file, "num_nodes", path);
  SLUICE_INPUT_CHECK(plan.partitions >= 1 && plan.chunks >= 1, path, ": bad P=", plan.partitions,
                     " or C=", plan.chunks);
  SLUICE_INPUT_CHECK(num_nodes >= 1 && num_nodes <= kMaxVertices, path, ": bad num_nodes ",
                     num_nodes);
  plan.num_nodes = static_cast<vertex_t>(num_nodes);
  plan.num_dataset_edges = read_attr_checked<std::int64_t>(file, "num_dataset_edges", path);
  plan.dataset_fingerprint = read_string_checked(file, "dataset_fingerprint", path);
  plan.partitioner = read_string_checked(file, "partitioner", path);
  plan.seed = read_attr_checked<std::uint64_t>(file, "seed", path);
  plan.reorganized = read_attr_checked<std::uint8_t>(file, "reorganized", path) != 0;
  plan.bandwidths.h2d = read_attr_checked<double>(file, "bandwidth_h2d", path);
  plan.bandwidths.p2p = read_attr_checked<double>(file, "bandwidth_p2p", path);
  plan.bandwidths.reuse = read_attr_checked<double>(file, "bandwidth_reuse", path);
  const std::int64_t P = plan.partitions;
  const std::int64_t K = P * plan.chunks;
  plan.new_to_old = read_checked<vertex_t>(file, "new_to_old", path, num_nodes);
  plan.old_to_new = read_checked<vertex_t>(file, "old_to_new", path, num_nodes);
  plan.partition_offsets = read_checked<vertex_t>(file, "partition_offsets", path, P + 1);
  plan.transition_rows = read_checked<vertex_t>(file, "transition_rows", path, P);
  plan.remote_rows = read_checked<vertex_t>(file, "remote_rows", path, P);
  for (std::int64_t p = 0; p < P; ++p)
    SLUICE_INPUT_CHECK(plan.transition_rows[p] >= 0 && plan.transition_rows[p] <= num_nodes &&
                           plan.remote_rows[p] >= 0 && plan.remote_rows[p] <= num_nodes,
                       path, ": buffer size of partition ", p, " outside [0, ", num_nodes, "]");
  plan.stats = read_stats(file, path);

  SLUICE_INPUT_CHECK(h5::exists(file, "chunks"), path, ": plan lacks group chunks");
  h5::Handle group = h5::open_group(file, "chunks");
  const auto partition = read_checked<std::int32_t>(group, "partition", path, K);
  plan.chunk_plans.resize(K);  // after a K-entry array read: K is backed by the file
  const auto batch = read_checked<std::int32_t>(group, "batch", path, K);
  const auto range = read_checked<std::int32_t>(group, "range", path, K);
  const auto dst_begin = read_checked<vertex_t>(group, "dst_begin", path, K);
  const auto dst_end = read_checked<vertex_t>(group, "dst_end", path, K);
  const auto reuse_count = read_checked<vertex_t>(group, "reuse_count", path, K);
  for (std::int64_t k = 0; k < K; ++k) {
    ChunkPlan& chunk = plan.chunk_plans[k];
    chunk.partition = partition[k];
    chunk.batch = batch[k];
    chunk.range = range[k];
    chunk.dst_begin = dst_begin[k];
    chunk.dst_end = dst_end[k];
    chunk.reuse_count = reuse_count[k];
  }
  auto& chunks = plan.chunk_plans;
  read_flat<edge_t>(
      group, "indptr", path, chunks, [](ChunkPlan & c) -> auto& { return c.indptr; });
  read_flat<vertex_t>(
      group, "columns", path, chunks, [](ChunkPlan & c) -> auto& { return c.columns; });
  read_flat<vertex_t>(
      group, "load_vertices", path, chunks, [](ChunkPlan & c) -> auto& { return c.load_vertices; });
  read_flat<vertex_t>(
      group, "load_slots", path, chunks, [](ChunkPlan & c) -> auto& { return c.load_slots; });
  read_flat<vertex_t>(
      group, "remote_vertices", path, chunks,
      [](ChunkPlan & c) -> auto& { return c.remote_vertices; });
  read_flat<std::int32_t>(
      group, "remote_owner", path, chunks, [](ChunkPlan & c) -> auto& { return c.remote_owner; });
  read_flat<vertex_t>(
      group, "remote_owner_slots", path, chunks,
      [](ChunkPlan & c) -> auto& { return c.remote_owner_slots; });
  read_flat<vertex_t>(
      group, "remote_slots", path, chunks, [](ChunkPlan & c) -> auto& { return c.remote_slots; });
  read_flat<std::uint8_t>(
      group, "remote_pull", path, chunks, [](ChunkPlan & c) -> auto& { return c.remote_pull; });
  read_flat<vertex_t>(
      group, "leave_vertices", path, chunks,
      [](ChunkPlan & c) -> auto& { return c.leave_vertices; });
  read_flat<vertex_t>(
      group, "leave_slots", path, chunks, [](ChunkPlan & c) -> auto& { return c.leave_slots; });
  validate_plan(plan, path);
  return plan;
}

}  // namespace sluice
