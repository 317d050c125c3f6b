// Schedule setup (train/schedule_impl.hpp): checks the inputs, derives and checks the plan's
// index lists (schedule_lists.hpp), fills the host matrices and allocates every device buffer
// (schedule_state.hpp) in a fixed order: the working buffers every pass needs, then the optional
// overlap buffers where memory allows, then the chunks' constants, which take the device memory
// left and go to pinned host memory (read zero-copy) beyond it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/log.hpp"
#include "train/schedule_impl.hpp"

namespace sluice {

namespace schedule_detail {

// Widths of the device buffers: over the layers, the widest rows each buffer holds.
struct BufferWidths {
  // X: inputs of the layers that are not pretransformed (their loads land in Zm) and keep their
  // input rows (reloads_inputs()).
  std::int64_t in = 0;
  std::int64_t load = 0;  // the stage: every layer's loaded rows
  // Input gradients of every layer above 0: the flush buffer holds them; dX only those of the
  // layers that do not transform (pretransformed layers flush dZm rows).
  std::int64_t flushed = 0, dx = 0;
  std::int64_t block_out = 0;   // set.out: H^{l+1}, or the T^{l+1} rows and dT^{l+1} blocks
  std::int64_t arrival_in = 0;  // the row slices: inputs of the layers transformed on arrival
  std::int64_t out = 0, aggregate = 0, transform = 0;
  int heads = 1;
  bool any_transform = false, any_stored_transform = false, any_arrival_transform = false;
};

// Row counts of one device's buffers.
struct DeviceSizes {
  std::int64_t merged = 1;   // merged rows (at least 1)
  std::int64_t max_dst = 1;  // destinations of its largest chunk (at least 1)
  std::int64_t max_nnz = 0;  // entries of its densest chunk
  std::int64_t max_loads = 0, max_leaves = 0;
};

namespace {

Idx upload_or_empty(Device& dev, const std::vector<vertex_t>& values, const std::string& what) {
  if (values.empty()) return Idx{};
  return dev.upload(values, what);
}

// The positions 0, 1, ..., n - 1 on the device.
Idx upload_positions(Device& dev, std::int64_t n, const std::string& what) {
  std::vector<vertex_t> positions(static_cast<std::size_t>(n));
  std::iota(positions.begin(), positions.end(), 0);
  return dev.upload(positions, what);
}

DeviceSizes device_sizes(const Plan& plan, int p, const std::vector<ChunkLists>& lists) {
  DeviceSizes sizes;
  const std::int64_t merged = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
  std::int64_t max_dst = 0;
  for (int c = 0; c < plan.chunks; ++c) {
    max_dst = std::max<std::int64_t>(max_dst, plan.chunk(c, p).num_dst());
    sizes.max_nnz = std::max<std::int64_t>(sizes.max_nnz, plan.chunk(c, p).num_entries());
    const ChunkLists& li = lists[std::size_t(c) * plan.partitions + p];
    sizes.max_loads = std::max<std::int64_t>(sizes.max_loads, std::int64_t(li.load_rows.size()));
    sizes.max_leaves = std::max<std::int64_t>(sizes.max_leaves, std::int64_t(li.leave_rows.size()));
  }
  sizes.merged = std::max<std::int64_t>(merged, 1);
  sizes.max_dst = std::max<std::int64_t>(max_dst, 1);
  return sizes;
}

// Chunk c's lists on device d.
void upload_chunk(Device& d, const ChunkPlan& cp, const ChunkLists& li, std::int64_t merged_rows,
                  bool gat, const std::string& where, DeviceChunk& ch) {
  ch.dst_begin = cp.dst_begin;
  ch.num_dst = cp.num_dst();
  ch.nnz = cp.num_entries();
  ch.csr = d.upload_csr(cp.indptr, cp.columns, merged_rows, where + "CSR");
  // Read-only constants: a backend may keep them in host memory when the budget is full.
  if (!gat && ch.nnz > 0)
    ch.values = d.upload_constant(li.values, 1, ch.nnz, where + "entry values");
  ch.self_columns = upload_or_empty(d, li.self_columns, where + "self columns");
  ch.load_vertices = upload_or_empty(d, li.load_vertices, where + "load vertices");
  ch.load_rows = upload_or_empty(d, li.load_rows, where + "load slots");
  ch.load_keys = upload_or_empty(d, li.load_keys, where + "load keys");
  for (const auto& g : li.pulls)
    ch.pulls.push_back({g.owner, d.upload(g.owner_rows, where + "pull owner slots"),
                        d.upload(g.local_rows, where + "pull local slots")});
  for (const auto& g : li.pushes)
    ch.pushes.push_back({g.owner, d.upload(g.owner_rows, where + "push owner slots"),
                         d.upload(g.local_rows, where + "push local slots")});
  ch.remote_rows = upload_or_empty(d, li.remote_rows, where + "remote slots");
  ch.leave_vertices = upload_or_empty(d, li.leave_vertices, where + "leave vertices");
  ch.leave_rows = upload_or_empty(d, li.leave_rows, where + "leave slots");
  ch.leave_keys = upload_or_empty(d, li.leave_keys, where + "leave keys");
  ch.leave_store_count = std::int64_t(li.leave_store_count);
  ch.dst_keys = upload_or_empty(d, li.dst_keys, where + "destination keys");
  ch.labels = upload_or_empty(d, li.labels, where + "labels");
  std::vector<vertex_t> mask(li.train_mask.begin(), li.train_mask.end());
  ch.train_mask = upload_or_empty(d, mask, where + "train mask");
}

}  // namespace
}  // namespace schedule_detail

using namespace schedule_detail;

void Schedule::Impl::setup(const Dataset& dataset) {
  P = plan.partitions;
  C = plan.chunks;
  n = dataset.num_nodes;
  SLUICE_INPUT_CHECK(backend.num_devices() == P, "the backend has ", backend.num_devices(),
                     " devices but the plan has ", P, " partitions");
  SLUICE_INPUT_CHECK(dataset.feature_dim == model.layers.front().in_width &&
                         std::int64_t(dataset.features.size()) ==
                             std::int64_t(dataset.num_nodes) * dataset.feature_dim,
                     "dataset features do not match the model input width");
  SLUICE_INPUT_CHECK(!dataset.train.empty(), "dataset '", dataset.name,
                     "' has no training vertices");
  loss_scale = 1.f / static_cast<float>(dataset.train.size());
  std::vector<ChunkLists> lists = derive_lists(dataset, plan, model, options.comm);
  split_first_flushes(lists, dataset.num_nodes);
  allocate_host_matrices(dataset);

  const int L = model.num_layers();
  // Layer 1's backward pass keeps its tail (keeps_tail()) in the flush buffer when layer 0
  // accumulates into the buffer layer 1's leaving rows sit in (GAT: dZm), a buffer of the overlap
  // path (checked there). Not in baseline mode, whose leave lists hold other partitions' rows
  // (flushed by several devices).
  tail_in_leave =
      L >= 2 && pretransformed(model.layers[1]) && transforms_on_arrival(model.layers[0]);
  const bool keep_tail =
      L >= 2 && options.comm != CommMode::kBaseline && (!tail_in_leave || options.overlap);
  const BufferWidths widths = buffer_widths();
  std::vector<std::vector<TailLists>> tails(static_cast<std::size_t>(P));
  dev.resize(std::size_t(P));
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    s.device = &backend.device(p);
    s.merged_rows = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
    const DeviceSizes sizes = device_sizes(plan, p, lists);
    allocate_working_buffers(s, p, sizes, widths);
    const std::vector<vertex_t> head_block_rows = split_next_pass_head(s, p, lists[std::size_t(p)]);
    if (keep_tail)
      tails[std::size_t(p)] =
          tail_lists(lists[std::size_t(C - 1) * P + p], plan, p,
                     tail_in_leave ? TailPlace::kFlushBuffer : TailPlace::kGradientSlots);
    s.keep_tail = keep_tail;
    if (options.overlap) allocate_overlap_buffers(s, sizes, widths, head_block_rows);
    for (int c = 0; c < C; ++c) {
      ChunkLists& li = lists[std::size_t(c) * P + p];
      upload_chunk(*s.device, plan.chunk(c, p), li, s.merged_rows, gat(),
                   cat("chunk (", c, ",", p, ") "), s.chunks[std::size_t(c)]);
      li = ChunkLists{};  // free host copies as we go
    }
    log_debug("device ", p, ": ", format_bytes(double(s.device->bytes_in_use())),
              " allocated, merged ", s.merged_rows, " rows");
  }
  link_peers();
  if (options.overlap) {
    int staged = 0, flushed = 0, doubled = 0;
    for (const DeviceState& s : dev) {
      staged += !s.stage.empty();
      flushed += !s.leave.empty();
      doubled += s.num_sets == 2;
    }
    log_info("overlap: load prefetch on ", staged, "/", P, " devices, flush behind compute on ",
             flushed, "/", P, ", double block buffers on ", doubled, "/", P);
  }
  upload_tails(tails);
}

// Host matrices in renumbered row order: H^0 (the features), each layer's inputs H^l (or T^l),
// the gradients G^l (or dT^l) below the last layer, and the cached aggregations A^l.
void Schedule::Impl::allocate_host_matrices(const Dataset& dataset) {
  const int L = model.num_layers();
  H.resize(std::size_t(L));
  G.resize(std::size_t(L));
  A_cache.resize(std::size_t(L));
  H[0] = backend.alloc_host(n, dataset.feature_dim, "H^0 (features)");
  {
    HostMat H0 = H[0];
    const std::int64_t dim = dataset.feature_dim;
    const bool normalize = options.row_normalize_features;
#pragma omp parallel for schedule(static)
    for (std::int64_t v = 0; v < n; ++v) {
      float* row = H0.data + v * H0.ld;
      std::memcpy(row, dataset.feature_row(plan.new_to_old[std::size_t(v)]),
                  std::size_t(dim) * sizeof(float));
      if (!normalize) continue;
      double norm = 0;
      for (std::int64_t j = 0; j < dim; ++j) norm += std::abs(double(row[j]));
      const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.f;
      for (std::int64_t j = 0; j < dim; ++j) row[j] *= scale;
    }
  }
  for (int l = 0; l < L; ++l) {
    const LayerSpec& layer = model.layers[std::size_t(l)];
    if (l > 0)
      H[std::size_t(l)] = backend.alloc_host(n, input_width(layer),
                                             pretransformed(layer) ? cat("T^", l) : cat("H^", l));
    // The fused last layer keeps its loss gradients and aggregations on the device.
    if (layer.last) continue;
    if (stores_transform(layer))
      G[std::size_t(l) + 1] = backend.alloc_host(n, input_width(*above(layer)), cat("dT^", l + 1));
    else
      G[std::size_t(l) + 1] = backend.alloc_host(n, layer.out_width, cat("G^", l + 1));
    if (!recompute(layer))
      A_cache[std::size_t(l)] = backend.alloc_host(n, layer.aggregate_width, cat("A^", l));
  }
  predictions.assign(std::size_t(n), -1);
}

BufferWidths Schedule::Impl::buffer_widths() const {
  BufferWidths w;
  for (const auto& layer : model.layers) {
    const bool arrival_transform = transforms_on_arrival(layer);
    w.any_transform |= transforms(layer);
    w.any_arrival_transform |= arrival_transform;
    w.any_stored_transform |= stores_transform(layer);
    if (arrival_transform) w.arrival_in = std::max(w.arrival_in, layer.in_width);
    if (!pretransformed(layer) && !reloads_inputs(layer)) w.in = std::max(w.in, layer.in_width);
    w.load = std::max(w.load, input_width(layer));
    w.block_out = std::max(w.block_out,
                           stores_transform(layer) ? input_width(*above(layer)) : layer.out_width);
    if (layer.index == 0) continue;
    w.flushed = std::max(w.flushed, flushed_width(layer));
    if (!transforms(layer)) w.dx = std::max(w.dx, layer.in_width);
  }
  w.out = model.max_out_width();
  w.aggregate = model.max_aggregate_width();
  w.transform = model.max_transform_width();
  w.heads = model.max_heads();
  return w;
}

// The buffers every pass needs, parameters and optimizer state included.
void Schedule::Impl::allocate_working_buffers(DeviceState& s, int p, const DeviceSizes& sizes,
                                              const BufferWidths& w) {
  Device& d = *s.device;
  const std::int64_t M = sizes.merged, max_dst = sizes.max_dst;
  // The operands of the SpMMs (X, A, dA, dX) get rows 16 bytes apart (padded to a multiple
  // of 4 floats): vectorized sparse kernels need aligned rows (kernels/cuda/NOTES.md).
  if (w.in > 0) s.X = d.alloc(M, aligned_width(w.in), "transition buffer X");
  if (w.dx > 0) s.dX = d.alloc(M, aligned_width(w.dx), "transition gradient dX");
  if (w.aggregate > 0) s.sets[0].A = d.alloc(max_dst, aligned_width(w.aggregate), "aggregation A");
  // Z and dZ are SpMM operands too when a layer transforms first.
  s.Z = d.alloc(max_dst, aligned_width(w.out), "pre-activation Z");
  s.sets[0].out = d.alloc(max_dst, w.block_out, "layer output");
  // T rows leave padded to 16 bytes: their pad column is never written, so it stays 0.
  if (w.any_stored_transform) d.fill(s.sets[0].out, 0.f);
  s.sets[0].dZ = d.alloc(max_dst, aligned_width(w.out), "output gradient dZ");
  if (w.aggregate > 0 || gat())
    s.dA = d.alloc(max_dst, aligned_width(std::max(w.aggregate, w.transform)), "gradient dA");
  if (w.any_transform) {
    s.Zm = d.alloc(M, aligned_width(w.transform), "transformed rows Zm");
    s.dZm = d.alloc(M, aligned_width(w.transform), "transformed-row gradient dZm");
    s.transform_region =
        options.comm == CommMode::kBaseline ? s.merged_rows : plan.transition_rows[p];
  }
  if (gat()) {
    s.el = d.alloc(M, w.heads, "GAT source scores");
    s.er = d.alloc(max_dst, w.heads, "GAT destination scores");
    s.alpha = d.alloc(std::max<std::int64_t>(sizes.max_nnz, 1), w.heads, "GAT attention");
    s.gat = d.alloc(max_dst, w.transform, "GAT head outputs");
  }
  const std::int64_t np = std::max<std::int64_t>(model.num_parameters, 1);
  s.params = d.alloc(1, np, "parameters");
  s.grads = d.alloc(1, np, "gradients");
  s.adam_m = d.alloc(1, np, "Adam m");
  s.adam_v = d.alloc(1, np, "Adam v");
  s.chunks.resize(std::size_t(C));
  if (w.any_arrival_transform) {
    // Slices of at most a quarter of the merged rows, so that they take less memory than the
    // dX buffer these layers do without (the plan's memory estimate counts that one).
    const std::int64_t rows = std::max<std::int64_t>(
        1, std::min({kSliceRows, std::max(sizes.max_loads, sizes.max_leaves), M / 4}));
    s.slice_x = d.alloc(rows, aligned_width(w.arrival_in), "transform row slice");
    s.slice_z = d.alloc(rows, w.transform, "transformed-row slice");
    s.slice_iota = upload_positions(d, rows, "slice positions");
  }
  if (w.any_stored_transform) s.chunk_iota = upload_positions(d, max_dst, "chunk row positions");
}

// Chunk 0's loads from this device's last chunk (a contiguous run of the sorted list; baseline
// loads also hold other devices' rows: then every row waits). Returns their rows in the last
// chunk's output block, where a forward pass that ends early leaves them (ends_early()).
std::vector<vertex_t> Schedule::Impl::split_next_pass_head(DeviceState& s, int p,
                                                           const ChunkLists& first) {
  const std::vector<vertex_t>& v = first.load_vertices;
  const ChunkPlan& last = plan.chunk(C - 1, p);
  std::vector<vertex_t> block_rows;
  s.head.split_begin = 0;
  s.head.split_end = std::int64_t(v.size());
  if (options.comm != CommMode::kBaseline && std::is_sorted(v.begin(), v.end())) {
    const vertex_t begin = last.dst_begin, end = vertex_t(last.dst_begin + last.num_dst());
    s.head.split_begin = std::lower_bound(v.begin(), v.end(), begin) - v.begin();
    s.head.split_end = std::lower_bound(v.begin(), v.end(), end) - v.begin();
    if (model.num_layers() >= 2)
      for (std::int64_t i = s.head.split_begin; i < s.head.split_end; ++i)
        block_rows.push_back(v[std::size_t(i)] - begin);
  }
  return block_rows;
}

// The overlap buffers, after the working buffers and only where memory allows: the load stage
// (prefetch of the next batch's rows, and the next pass's first), the flush buffer (flushes
// behind the next batch) and a second block set (stores and backward block loads behind
// compute).
void Schedule::Impl::allocate_overlap_buffers(DeviceState& s, const DeviceSizes& sizes,
                                              const BufferWidths& w,
                                              const std::vector<vertex_t>& head_block_rows) {
  Device& d = *s.device;
  const std::int64_t loads = sizes.max_loads, leaves = sizes.max_leaves;
  if (loads > 0) s.stage = d.try_alloc(loads, w.load, "load stage");
  if (s.stage.empty()) {
    if (tail_in_leave) s.keep_tail = false;  // no flush buffer to keep the tail in
    return;
  }
  if (!head_block_rows.empty())
    s.head.block_rows = d.upload(head_block_rows, "last-chunk rows of the first batch");
  if (leaves > 0 && w.flushed > 0) {
    s.leave = d.try_alloc(leaves, w.flushed, "flush buffer");
    if (!s.leave.empty()) s.iota = upload_positions(d, leaves, "flush positions");
  }
  if (tail_in_leave && s.leave.empty()) s.keep_tail = false;
  const std::int64_t max_dst = s.sets[0].dZ.rows;
  BlockSet& second = s.sets[1];
  second.out = d.try_alloc(max_dst, w.block_out, "layer output (second set)");
  if (w.any_stored_transform && !second.out.empty()) d.fill(second.out, 0.f);
  second.dZ = second.out.empty() ? Mat{} : d.try_alloc(max_dst, w.out, "dZ (second set)");
  if (w.aggregate > 0 && !second.dZ.empty())
    second.A = d.try_alloc(max_dst, aligned_width(w.aggregate), "aggregation A (second set)");
  if (!second.dZ.empty() && (w.aggregate == 0 || !second.A.empty())) s.num_sets = 2;
}

// Who reads from and writes into whom, per batch (the pairwise cross-device order).
void Schedule::Impl::link_peers() {
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < C; ++c) {
      const DeviceChunk& ch = dev[std::size_t(p)].chunks[std::size_t(c)];
      for (const auto& pull : ch.pulls)
        dev[std::size_t(pull.owner)].chunks[std::size_t(c)].pulled_by.push_back(p);
      for (const auto& push : ch.pushes)
        dev[std::size_t(push.owner)].chunks[std::size_t(c)].pushed_by.push_back(p);
    }
}

// The kept tail's lists, for the devices that keep it (GAT: those with a flush buffer).
void Schedule::Impl::upload_tails(const std::vector<std::vector<TailLists>>& tails) {
  int keeping = 0;
  std::int64_t kept_rows = 0, kept_first = 0;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    if (!s.keep_tail) continue;
    ++keeping;
    for (int c = 0; c < C; ++c) {
      const TailLists& t = tails[std::size_t(p)][std::size_t(c)];
      if (t.src.empty()) continue;
      DeviceChunk& ch = s.chunks[std::size_t(c)];
      const std::string where = cat("chunk (", c, ",", p, ") ");
      ch.tail_src = s.device->upload(t.src, where + "kept tail rows");
      ch.tail_dst = s.device->upload(t.dst, where + "kept tail block positions");
      ch.tail_assign = std::int64_t(t.assign);
      kept_rows += std::int64_t(t.src.size());
      kept_first += std::int64_t(t.assign);
    }
  }
  if (keeping > 0)
    log_info("backward tail: layer 1's last batch keeps ", kept_rows, " gradient rows (",
             kept_first, " flushed for the first time) on the devices for layer 0 (", keeping, "/",
             P, " devices)");
}

}  // namespace sluice
