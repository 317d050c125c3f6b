// Schedule setup (train/schedule_impl.hpp): checks the inputs, derives and checks the plan's
// index lists (schedule_lists.hpp), fills the host matrices and allocates every device buffer
// (schedule_state.hpp) from the buffer layout (train/layout/buffer_layout.hpp, partition_layout()),
// in its order: the working buffers every pass needs, then the optional overlap buffers where
// memory allows, then the chunks' constants, which take the device memory left and go to pinned
// host memory (read zero-copy) beyond it. The layout gives every buffer's role and size; the
// schedule binds each to its DeviceState field and fills the constants from its own lists,
// checking that their lengths are the layout's.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <numeric>
#include <thread>

#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "kernels/bfloat16.hpp"
#include "train/host_features.hpp"
#include "train/schedule_impl.hpp"

namespace sluice {

namespace schedule_detail {

// Row counts of one device's buffers, from the schedule's own lists: what the layout's sizes
// are checked against.
struct DeviceSizes {
  std::int64_t merged = 1;   // merged rows (at least 1)
  std::int64_t max_dst = 1;  // destinations of its largest chunk (at least 1)
  std::int64_t max_nnz = 0;  // entries of its densest chunk
  std::int64_t max_loads = 0, max_leaves = 0;
  std::int64_t max_received = 0;  // rows the peers push into it in a batch
};

namespace {

// set_up(p) for every device p of `groups` (Backend::setup_groups()): the groups side by side,
// each on a thread of its own with an equal share of the OpenMP threads, a group's devices in
// its order; a single group on the calling thread. Once every group has ended, the first
// group's exception (in group order) is rethrown.
template <typename SetUp>
void in_setup_groups(const std::vector<std::vector<int>>& groups, const SetUp& set_up) {
  if (groups.size() <= 1) {
    for (const std::vector<int>& group : groups)
      for (const int p : group) set_up(p);
    return;
  }
  const int threads = std::max(1, omp_get_max_threads() / int(groups.size()));
  std::vector<std::exception_ptr> errors(groups.size());
  std::vector<std::thread> runs;
  runs.reserve(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    runs.emplace_back([&, g] {
      omp_set_num_threads(threads);  // per thread: the group's share
      try {
        for (const int p : groups[g]) set_up(p);
      } catch (...) {
        errors[g] = std::current_exception();
      }
    });
  for (std::thread& run : runs) run.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

// The positions 0, 1, ..., n - 1.
std::vector<vertex_t> positions(std::int64_t n) {
  std::vector<vertex_t> out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), 0);
  return out;
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
    sizes.max_received =
        std::max<std::int64_t>(sizes.max_received, std::int64_t(li.received_rows.size()));
  }
  sizes.merged = std::max<std::int64_t>(merged, 1);
  sizes.max_dst = std::max<std::int64_t>(max_dst, 1);
  return sizes;
}

// A layout entry whose size is not the one the schedule needs: the layout and the schedule's
// lists disagree (a bug in one of them).
void check_layout_size(const BufferSpec& b, std::int64_t elements, const std::string& where) {
  if (b.rows * b.width != elements)
    SLUICE_FAIL("buffer layout: ", where, buffer_role_name(b.role), " holds ", b.rows, " x ",
                b.width, " elements, the schedule needs ", elements);
}

// An index list, checked against its layout entry.
Idx upload_list(Device& d, const BufferSpec& b, const std::vector<vertex_t>& values,
                const std::string& where) {
  check_layout_size(b, std::int64_t(values.size()), where);
  return d.upload(values, where + buffer_role_name(b.role));
}

// Vertex ids as rows of a device's vertex views (VertexViews), which begin at `first_row`.
void count_from(std::int64_t first_row, std::vector<vertex_t>& vertices) {
  if (first_row == 0) return;
  const vertex_t base = vertex_t(first_row);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(vertices.size())))
  for (std::int64_t i = 0; i < std::int64_t(vertices.size()); ++i) vertices[std::size_t(i)] -= base;
}

// Every list of a chunk went up at its full length: the layout left none out.
void check_chunk_uploaded(const DeviceChunk& ch, const ChunkLists& li, const std::string& where) {
  const auto check = [&](const char* what, std::int64_t uploaded, std::size_t listed) {
    if (uploaded != std::int64_t(listed))
      SLUICE_FAIL("buffer layout: ", where, what, ": ", uploaded, " uploaded of the schedule's ",
                  listed);
  };
  check("self columns", ch.self_columns.size, li.self_columns.size());
  check("load vertices", ch.load_vertices.size, li.load_vertices.size());
  check("load slots", ch.load_rows.size, li.load_rows.size());
  check("load keys", ch.load_keys.size, li.load_keys.size());
  check("pull groups", std::int64_t(ch.pulls.size()), li.pulls.size());
  for (std::size_t g = 0; g < li.pulls.size(); ++g) {
    check("pull owner slots", ch.pulls[g].owner_rows.size, li.pulls[g].owner_rows.size());
    check("pull local slots", ch.pulls[g].local_rows.size, li.pulls[g].local_rows.size());
  }
  check("push groups", std::int64_t(ch.pushes.size()), li.pushes.size());
  for (std::size_t g = 0; g < li.pushes.size(); ++g) {
    check("push local slots", ch.pushes[g].local_rows.size, li.pushes[g].local_rows.size());
  }
  check("remote slots", ch.remote_rows.size, li.remote_rows.size());
  check("received slots", ch.received_rows.size, li.received_rows.size());
  check("leave vertices", ch.leave_vertices.size, li.leave_vertices.size());
  check("leave slots", ch.leave_rows.size, li.leave_rows.size());
  check("leave keys", ch.leave_keys.size, li.leave_keys.size());
  check("destination keys", ch.dst_keys.size, li.dst_keys.size());
  check("labels", ch.labels.size, li.labels.size());
  check("split bits", ch.split_bits.size, li.split_bits.size());
}

// A pull group's owner slots open the group (owners ascending, as in the lists); its local
// slots close it. A push group is its local slots alone: the owner adds the rows it receives at
// its own positions (DeviceChunk::received_rows).
void upload_peer_rows(Device& d, const BufferSpec& b, const std::vector<PeerRows>& groups,
                      std::vector<DevicePeerRows>& bound, const std::string& where) {
  const bool opens_group =
      b.role == BufferRole::kPullOwnerSlots || b.role == BufferRole::kPushLocalSlots;
  if (opens_group && bound.size() >= groups.size())
    SLUICE_FAIL("buffer layout: ", where, "more ", buffer_role_name(b.role),
                " than the schedule's ", groups.size(), " groups");
  if (b.role == BufferRole::kPushLocalSlots) {
    const PeerRows& g = groups[bound.size()];
    bound.push_back({g.owner, Idx{}, upload_list(d, b, g.local_rows, where)});
    bound.back().receive_first = g.receive_first;
    const std::vector<vertex_t>& local = g.local_rows;
    bool consecutive = !local.empty();
    for (std::size_t i = 1; i < local.size() && consecutive; ++i)
      consecutive = local[i] == local[i - 1] + 1;
    if (consecutive) bound.back().local_first = local.front();
  } else if (opens_group) {
    const PeerRows& g = groups[bound.size()];
    bound.push_back({g.owner, upload_list(d, b, g.owner_rows, where), Idx{}});
  } else {
    if (bound.empty() || bound.back().local_rows.size > 0)
      SLUICE_FAIL("buffer layout: ", where, buffer_role_name(b.role), " without owner slots");
    bound.back().local_rows = upload_list(d, b, groups[bound.size() - 1].local_rows, where);
  }
}

// The DeviceState field a working or overlap buffer binds to, and the rows the schedule needs
// of it.
struct BufferSlot {
  Mat* buffer = nullptr;
  std::int64_t rows = 0;
};

BufferSlot buffer_slot(DeviceState& s, BufferRole role, const DeviceSizes& sizes) {
  const std::int64_t M = sizes.merged, D = sizes.max_dst;
  const std::int64_t slices = slice_rows(sizes.max_loads, sizes.max_leaves, M);
  switch (role) {
    case BufferRole::kTransition:
      return {&s.X, M};
    case BufferRole::kTransitionGradient:
      return {&s.dX, M};
    case BufferRole::kAggregation:
      return {&s.sets[0].A, D};
    case BufferRole::kPreActivation:
      return {&s.Z, D};
    case BufferRole::kLayerOutput:
      return {&s.sets[0].out, D};
    case BufferRole::kOutputGradient:
      return {&s.sets[0].dZ, D};
    case BufferRole::kAggregationGradient:
      return {&s.dA, D};
    case BufferRole::kTransformedRows:
      return {&s.Zm, M};
    case BufferRole::kTransformedGradient:
      return {&s.dZm, M};
    case BufferRole::kSourceScores:
      return {&s.el, M};
    case BufferRole::kDestinationScores:
      return {&s.er, D};
    case BufferRole::kAttention:
      return {&s.alpha, std::max<std::int64_t>(sizes.max_nnz, 1)};
    case BufferRole::kHeadOutputs:
      return {&s.gat, D};
    case BufferRole::kInputAggregation:
      return {&s.input_sums, D};
    case BufferRole::kInputAttention:
      return {&s.input_attention, 1};
    case BufferRole::kParameters:
      return {&s.params, 1};
    case BufferRole::kGradients:
      return {&s.grads, 1};
    case BufferRole::kAdamFirstMoment:
      return {&s.adam_m, 1};
    case BufferRole::kAdamSecondMoment:
      return {&s.adam_v, 1};
    case BufferRole::kSideBySideWeights:
      return {&s.side_by_side_w, 1};
    case BufferRole::kReceivedGradients:
      return {&s.received, sizes.max_received};
    case BufferRole::kSliceInputs:
      return {&s.slice_x, slices};
    case BufferRole::kSliceTransformed:
      return {&s.slice_z, slices};
    case BufferRole::kLoadStage:
      return {&s.stage, sizes.max_loads};
    case BufferRole::kFlushBuffer:
      return {&s.leave, sizes.max_leaves};
    case BufferRole::kSecondLayerOutput:
      return {&s.sets[1].out, D};
    case BufferRole::kSecondOutputGradient:
      return {&s.sets[1].dZ, D};
    case BufferRole::kSecondAggregation:
      return {&s.sets[1].A, D};
    case BufferRole::kLastLayerTransformedRows:
      return {&s.last_layer_attention.Zm, M};
    case BufferRole::kLastLayerSourceScores:
      return {&s.last_layer_attention.el, M};
    case BufferRole::kLastLayerDestinationScores:
      return {&s.last_layer_attention.er, D};
    case BufferRole::kLastLayerAttention:
      return {&s.last_layer_attention.alpha, std::max<std::int64_t>(sizes.max_nnz, 1)};
    default:
      SLUICE_FAIL("buffer layout: ", buffer_role_name(role), " is not a working buffer");
  }
}

}  // namespace
}  // namespace schedule_detail

using namespace schedule_detail;

void Schedule::Impl::setup(const Dataset& dataset, Dataset* releasable, Plan* releasable_plan) {
  release_plan = releasable_plan;
  P = plan.partitions;
  C = plan.chunks;
  n = dataset.num_nodes;
  SLUICE_INPUT_CHECK(backend.num_devices() == P, "the backend has ", backend.num_devices(),
                     " devices but the plan has ", P, " partitions");
  SLUICE_INPUT_CHECK(dataset.feature_dim == model.layers.front().in_width &&
                         (std::int64_t(dataset.features.size()) ==
                              std::int64_t(dataset.num_nodes) * dataset.feature_dim ||
                          (dataset.features.empty() && !dataset.features_file.empty())),
                     "dataset features do not match the model input width");
  SLUICE_INPUT_CHECK(!dataset.train.empty(), "dataset '", dataset.name,
                     "' has no training vertices");
  loss_scale = 1.f / static_cast<float>(dataset.train.size());
  StageTimer lists_stage("schedule index lists");
  // The host matrices after the index lists and before the device constants, or on a second
  // thread beside both (ScheduleOptions::host_setup). Both sides read the dataset and plan; only
  // the lists' side releases the graph and the plan's chunk lists, only the matrices' side the
  // features. The device side touches none of the host matrices.
  std::future<void> host_matrices;
  if (options.host_setup == HostSetup::kBesideLists)
    host_matrices = std::async(std::launch::async, [&, threads = omp_get_max_threads()] {
      omp_set_num_threads(threads);  // the thread count is per thread: keep --threads
      StageTimer timer("host matrices");
      allocate_host_matrices(dataset, releasable);
    });
  std::vector<ChunkLists> lists;
  {
    StageTimer timer("derive index lists");
    lists = derive_lists(dataset, plan, model, options.comm);
    receive_pushes(lists, P);
  }
  {
    StageTimer timer("split first flushes");
    split_first_flushes(lists, dataset.num_nodes);
  }
  if (releasable) {  // the lists hold what the schedule needs of the graph
    std::vector<edge_t>().swap(releasable->indptr);
    std::vector<vertex_t>().swap(releasable->indices);
  }
  lists_stage.finish();
  if (!host_matrices.valid()) {
    StageTimer host_stage("host matrices");
    allocate_host_matrices(dataset, releasable);
  }
  if (options.last_layer_rows == LastLayerRows::kLoss && model.layers.size() >= 2)
    loss_rows = loss_row_flags(dataset, plan.old_to_new);
  setup_devices(lists);
  LossRowFlags().swap(loss_rows);
  if (host_matrices.valid()) {
    StageTimer wait("wait for the host matrices");
    host_matrices.get();
  }
  place_vertex_data();
  place_evaluation_aggregation();
  place_kept_outputs();
  place_remote_features();  // reads H^0 in host memory
  release_resident_host_matrices();
}

// With LayerOutputs::kDeviceWhereItFits: on every device a matrix of its partition's rows for
// the outputs of each layer that may keep them (may_keep_outputs()), lowest layer first, where
// it fits after the vertex data and the evaluation cache (an optional buffer). Each device
// decides for itself: the backward pass gives the same bits either way.
void Schedule::Impl::place_kept_outputs() {
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    s.kept_outputs.assign(model.layers.size(), Mat{});
    s.kept_first_row = plan.partition_offsets[std::size_t(p)];
  }
  if (options.layer_outputs != LayerOutputs::kDeviceWhereItFits) return;
  for (const LayerSpec& layer : model.layers) {
    if (!may_keep_outputs(layer)) continue;
    int kept = 0;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      const std::int64_t rows = plan.partition_offsets[std::size_t(p) + 1] - s.kept_first_row;
      if (rows == 0) continue;
      Mat& m = s.kept_outputs[std::size_t(layer.index)];
      m = s.device->try_alloc(rows, layer.out_width, "kept layer outputs");
      kept += !m.empty();
    }
    const std::string where = kept == P ? std::string("kept for the backward pass on every device")
                              : kept == 0
                                  ? std::string("computed again in the backward pass (no room)")
                                  : cat("kept for the backward pass on ", kept, " of ", P,
                                        " devices, computed again on the others");
    log_info("layer ", layer.index, "'s outputs (",
             format_bytes(double(n) * double(layer.out_width) * double(sizeof(float))),
             "): ", where);
  }
}

// Every device's buffers and chunk constants, from the index lists (released as they go up).
void Schedule::Impl::setup_devices(std::vector<ChunkLists>& lists) {
  StageTimer device_stage("device buffers and chunk constants");

  std::vector<std::vector<TailLists>> tails(static_cast<std::size_t>(P));
  std::vector<std::vector<BufferSpec>> tail_buffers(static_cast<std::size_t>(P));
  dev.resize(std::size_t(P));
  compute_order.resize(std::size_t(P));
  std::iota(compute_order.begin(), compute_order.end(), 0);
  // Every partition's layout before any device releases its chunks' plan lists: a partition's
  // receive buffer counts the other partitions' pushes into it.
  std::vector<PartitionLayout> layouts(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p) {
    StageTimer layout_timer(cat("device ", p, ": buffer layout"));
    layouts[std::size_t(p)] =
        options.profiles
            ? partition_layout((*options.profiles)[std::size_t(p)], layer_shapes, layout_options)
            : partition_layout(plan, p, layer_shapes, layout_options, loss_rows);
  }
  loss_gradients_sent = layouts.front().sends_loss_gradients;
  for (const PartitionLayout& layout : layouts)
    if (layout.sends_loss_gradients != loss_gradients_sent)
      SLUICE_FAIL("buffer layout: the partitions disagree on sending the loss gradients");
  if (loss_gradients_sent)
    log_debug(
        "fused pass: each device sends its loss gradients to the owners of the vertices "
        "its loss rows read (LossRowExchange::kSendGradients)");
  // What each device's setup reads of every partition's lists, before any device releases its
  // own.
  std::vector<DeviceSizes> sizes(static_cast<std::size_t>(P));
  std::vector<std::vector<vertex_t>> head_block_rows(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    s.device = &backend.device(p);
    s.merged_rows = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
    s.remote_first = plan.transition_rows[p];
    if (reads_own_rows_only()) {
      s.vertex.first_row = plan.partition_offsets[std::size_t(p)];
      s.vertex.rows = plan.partition_offsets[std::size_t(p) + 1] - s.vertex.first_row;
    } else {
      s.vertex.rows = n;
    }
    sizes[std::size_t(p)] = device_sizes(plan, p, lists);
    head_block_rows[std::size_t(p)] = split_next_pass_head(s, p, lists[std::size_t(p)]);
    // Layer 1's backward pass keeps its tail (keeps_tail()), in the flush buffer only where the
    // device gets one (allocate_device_buffers()).
    s.keep_tail = layouts[std::size_t(p)].widths.keep_tail;
    if (s.keep_tail)
      tails[std::size_t(p)] =
          tail_lists(lists[std::size_t(C - 1) * P + p], plan, p,
                     tail_in_flush_buffer ? TailPlace::kFlushBuffer : TailPlace::kGradientSlots);
  }
  // Each device's buffers and chunk constants, from its own layout and lists; the backend's
  // setup groups (a GPU each on CUDA) side by side, each group's devices in turn.
  const auto set_up = [&](int p) {
    DeviceState& s = dev[std::size_t(p)];
    const PartitionLayout layout = std::move(layouts[std::size_t(p)]);
    StageTimer buffers_timer(cat("device ", p, ": working and overlap buffers"));
    std::size_t next = allocate_device_buffers(s, p, layout, sizes[std::size_t(p)],
                                               head_block_rows[std::size_t(p)]);
    buffers_timer.finish();
    StageTimer chunks_timer(cat("device ", p, ": chunk constants"));
    next = upload_chunks(s, p, layout.buffers, next, lists);
    chunks_timer.finish();
    for (; next < layout.buffers.size(); ++next) {
      const BufferSpec& b = layout.buffers[next];
      if (b.role == BufferRole::kTailRows || b.role == BufferRole::kTailPositions)
        tail_buffers[std::size_t(p)].push_back(b);
    }
    log_debug("device ", p, ": ", format_bytes(double(s.device->bytes_in_use())),
              " allocated, merged ", s.merged_rows, " rows");
  };
  const std::vector<std::vector<int>> groups = backend.setup_groups();
  std::vector<int> times_grouped(static_cast<std::size_t>(P), 0);
  for (const std::vector<int>& group : groups)
    for (const int p : group) {
      SLUICE_EXPECTS(p >= 0 && p < P, "setup groups name device ", p, " of ", P);
      ++times_grouped[std::size_t(p)];
    }
  for (int p = 0; p < P; ++p)
    SLUICE_EXPECTS(times_grouped[std::size_t(p)] == 1, "setup groups hold device ", p, " ",
                   times_grouped[std::size_t(p)], " times (once expected)");
  in_setup_groups(groups, set_up);
  link_peers();
  attention_buffers_everywhere = std::all_of(dev.begin(), dev.end(), [](const DeviceState& s) {
    return s.last_layer_attention.allocated();
  });
  if (options.overlap) {
    int staged = 0, flushed = 0, prefetched = 0;
    for (const DeviceState& s : dev) {
      staged += !s.stage.empty();
      flushed += !s.leave.empty();
      prefetched += s.prefetch_blocks;
    }
    log_debug("overlap: load prefetch on ", staged, "/", P, " devices, flush behind compute on ",
              flushed, "/", P, ", block prefetch on ", prefetched, "/", P);
  }
  {
    StageTimer timer("tail lists");
    upload_tails(tails, tail_buffers);
  }
  build_row_groups();
  device_stage.finish();
}

// Each device's row groups for a pass by rows: runs of consecutive chunks whose destinations
// fit, together, the rows of its largest chunk (the block buffers' and work buffers' rows). A
// chunk whose G^1 block is read in place from the kept tail stays a group of its own. A group
// holds no constants of its own: its rows take their dropout keys and kept tail rows from its
// member chunks (keyed_rows(), load_blocks()), so the device memory stays what the layout and
// the memory estimate count.
void Schedule::Impl::build_row_groups() {
  if (!runs_by_rows(model.layers.front())) return;
  std::size_t most = 0;
  std::int64_t merged = 0;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    std::int64_t capacity = 0;
    for (const DeviceChunk& ch : s.chunks) capacity = std::max<std::int64_t>(capacity, ch.num_dst);
    for (int c = 0; c < C;) {
      const DeviceChunk& first = s.chunks[std::size_t(c)];
      std::int64_t rows = first.num_dst;
      int end = c + 1;
      while (end < C && first.tail_block_first < 0) {
        const DeviceChunk& next = s.chunks[std::size_t(end)];
        if (next.tail_block_first >= 0 || rows + next.num_dst > capacity ||
            next.view_dst_begin != first.view_dst_begin + rows)
          break;
        rows += next.num_dst;
        ++end;
      }
      DeviceChunk group;
      group.dst_begin = first.dst_begin;
      group.view_dst_begin = first.view_dst_begin;
      group.num_dst = vertex_t(rows);
      group.first_chunk = c;
      group.end_chunk = end;
      if (end == c + 1) {
        group.dst_keys = first.dst_keys;
        group.tail_block_first = first.tail_block_first;
      } else {
        merged += end - c;
      }
      s.row_groups.push_back(group);
      c = end;
    }
    most = std::max(most, s.row_groups.size());
  }
  for (DeviceState& s : dev) s.row_groups.resize(most);  // empty groups: batches with no rows
  log_debug("layer 0's backward pass by rows: ", most, " batches for ", C, " chunks a device (",
            merged, " chunks merged into groups)");
}

HostDataOptions host_data_options(const ScheduleOptions& options) {
  return {options.cache_intermediates, options.host_precision,
          options.evaluation_cache == EvaluationCache::kWhereItFits};
}

bool keeps_intermediates(const ModelSpec& model, const ScheduleOptions& options,
                         const LayerSpec& layer) {
  return keeps_intermediates(model_layers(model), host_data_options(options), layer.index);
}

LayoutOptions layout_options(const ScheduleOptions& options) {
  LayoutOptions layout;
  layout.comm = options.comm;
  layout.overlap = options.overlap;
  layout.reload_inputs = options.reload_inputs;
  layout.gat_head_outputs = gat_head_outputs(options.cache_intermediates, options.host_precision);
  layout.gat_layer_zero = options.gat_layer_zero;
  layout.last_layer_rows = options.last_layer_rows;
  layout.loss_row_exchange = options.loss_row_exchange;
  return layout;
}

bool backward_reads_inputs(const ModelSpec& model, const ScheduleOptions& options,
                           const LayerSpec& layer) {
  return backward_reads_inputs(model_layers(model), host_data_options(options), layer.index);
}

bool keeps_a_block(const ModelSpec& model, const ScheduleOptions& options, const LayerSpec& layer,
                   int chunks) {
  return keeps_a_block(model_layers(model), host_data_options(options), layer.index, chunks);
}

std::vector<HostMatrixShape> host_matrix_shapes(const ModelSpec& model,
                                                const ScheduleOptions& options,
                                                std::int64_t num_nodes, int chunks) {
  return host_matrix_shapes(model_layers(model), layout_options(options),
                            host_data_options(options), num_nodes, chunks);
}

std::vector<double> vertex_data_priorities(const ModelSpec& model, const ScheduleOptions& options,
                                           std::int64_t num_nodes, std::int64_t gathered_rows,
                                           int chunks) {
  return vertex_data_priorities(model_layers(model), layout_options(options),
                                host_data_options(options), num_nodes, gathered_rows, chunks);
}

// Every device's views of the host matrices (VertexViews); with VertexData::kDeviceWhereItFits,
// where the devices read and write only their own rows, each device copies its rows of the host
// matrices into its memory, highest priority first (vertex_data_priorities() of its own gathered
// rows, ties in allocation order), each that fits beside what it holds already. A host matrix
// whose rows every device holds is freed. Logs where each matrix lives.
void Schedule::Impl::place_vertex_data() {
  const std::vector<HostMatrixShape> shapes = host_matrix_shapes(model, options, n, C);
  for (DeviceState& s : dev)
    for (auto [views, whole] :
         {std::pair{&s.vertex.H, &H}, {&s.vertex.G, &G}, {&s.vertex.A, &A_cache}}) {
      views->resize(whole->size());
      for (std::size_t i = 0; i < whole->size(); ++i)
        if (!(*whole)[i].empty())
          (*views)[i] = (*whole)[i].row_block(s.vertex.first_row, s.vertex.rows);
    }
  if (options.vertex_data != VertexData::kDeviceWhereItFits) return;
  if (!reads_own_rows_only()) {
    log_info(
        "vertex data: in host memory, where every device reads the rows of other partitions "
        "(--comm baseline)");
    return;
  }
  StageTimer timer("vertex data on the devices");
  std::vector<std::vector<double>> priorities;
  for (const DeviceState& s : dev) {
    std::int64_t gathered_rows = 0;
    for (const DeviceChunk& ch : s.chunks) gathered_rows += ch.load_vertices.size;
    priorities.push_back(vertex_data_priorities(model, options, s.vertex.rows, gathered_rows, C));
  }
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    const std::vector<double>& priority = priorities[std::size_t(p)];
    std::vector<std::size_t> order(shapes.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return priority[a] > priority[b]; });
    std::string resident, host;
    for (const std::size_t i : order) {
      const HostMatrixShape& shape = shapes[i];
      HostMat& view = vertex_view(s, shape);
      view = s.device->try_make_resident(view, shape.name);
      const bool placed = view.residence == Residence::kDevice;
      std::string& list = placed ? resident : host;
      list += cat(list.empty() ? "" : ", ", shape.name, " (",
                  format_bytes(double(view.rows * view.cols * view.element_bytes())), ")");
    }
    log_info("vertex data: in the memory of ", s.device->name(),
             P > 1 ? cat(" (rows of partition ", p, ")") : std::string(), ": ",
             resident.empty() ? std::string("none") : resident,
             "; in host memory: ", host.empty() ? std::string("none") : host);
  }
}

void Schedule::Impl::release_resident_host_matrices() {
  for (const HostMatrixShape& shape : host_matrix_shapes(model, options, n, C)) {
    HostMat& whole = host_matrix(shape);
    if (whole.empty() || !std::all_of(dev.begin(), dev.end(), [&](DeviceState& s) {
          return vertex_view(s, shape).residence == Residence::kDevice;
        }))
      continue;
    backend.release_host(whole);
    whole = HostMat{};
  }
}

// With RemoteFeatures::kDeviceCopyWhereItFits, where layer 0 pulls feature rows
// (pulls_features()): on each device that pulls any, a copy of its pulled rows in pull order and
// their dropout keys (the vertices' dataset ids, as the owners' load keys), where they fit after
// everything else (an optional buffer). Each device decides for itself.
void Schedule::Impl::place_remote_features() {
  const LayerSpec& first = model.layers.front();
  std::string pulls;  // devices without room
  int copies = 0;
  std::int64_t bytes = 0;
  for (DeviceState& s : dev) {
    std::vector<vertex_t> vertices;
    vertices.swap(s.pulled_vertices);
    if (vertices.empty()) continue;
    Device& d = *s.device;
    const std::int64_t rows = std::int64_t(vertices.size()), width = first.in_width;
    const Mat copy = d.try_alloc(rows, width, "remote feature rows");
    if (copy.empty()) {
      pulls += cat(pulls.empty() ? "" : ", ", d.name());
      continue;
    }
    // In blocks of rows, widened from the host precision as a load widens them.
    const HostMat& features = H[0];
    const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t(64) << 20) / (4 * width));
    std::vector<float> rows_here;
    for (std::int64_t begin = 0; begin < rows; begin += block) {
      const std::int64_t count = std::min(block, rows - begin);
      rows_here.resize(std::size_t(count * width));
#pragma omp parallel for schedule(static) if (worth_parallel(count * width))
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t v = vertices[std::size_t(begin + i)];
        float* out = rows_here.data() + i * width;
        if (features.precision == HostPrecision::kFp32) {
          const float* in = static_cast<const float*>(features.at(v, 0));
          std::copy(in, in + width, out);
        } else {
          const bf16_t* in = static_cast<const bf16_t*>(features.at(v, 0));
          for (std::int64_t j = 0; j < width; ++j) out[j] = float_from_bf16(in[j]);
        }
      }
      d.write(rows_here.data(), count * width, copy.row_block(begin, count).data);
    }
    std::vector<vertex_t> keys(vertices.size());
    for (std::size_t i = 0; i < keys.size(); ++i)
      keys[i] = plan.new_to_old[std::size_t(vertices[i])];
    s.remote_feature_keys = d.upload(keys, "remote feature keys");
    s.remote_features = copy;
    bytes += rows * width * std::int64_t(sizeof(float));
    ++copies;
  }
  if (copies > 0 || !pulls.empty())
    log_info("layer 0's feature rows of other partitions: copied on ", copies, " of ", P,
             " devices (", format_bytes(double(bytes)), ")",
             pulls.empty() ? std::string() : cat("; pulled on ", pulls, " (no room)"));
}

// With EvaluationCache::kWhereItFits and a layer 0 that aggregates its input rows (GCN, SAGE):
// on every device a matrix for layer 0's aggregation of its partition's vertices, where it fits
// after the vertex data (an optional buffer, like the overlap buffers). Evaluations skip layer 0's
// loads and pulls on every device or on none: where one device has no room, the others free
// theirs, and with fp32 host data the cache goes to host memory instead (its rows then cross the
// link as one block a chunk, in place of the gathered features; bf16 would round them, so a bf16
// run aggregates every time).
void Schedule::Impl::place_evaluation_aggregation() {
  const LayerSpec& first = model.layers.front();
  if (options.evaluation_cache != EvaluationCache::kWhereItFits || first.aggregate_width == 0 ||
      transforms(first))
    return;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    const std::int64_t rows =
        plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
    s.evaluation_aggregation =
        s.device->try_alloc(rows, first.aggregate_width, "evaluation aggregation");
    if (s.evaluation_aggregation.empty() && rows > 0) {
      for (DeviceState& t : dev) {
        t.device->release(t.evaluation_aggregation);
        t.evaluation_aggregation = Mat{};
      }
      evaluation_cache_on_host = options.host_precision == HostPrecision::kFp32;
      log_info("evaluation: layer 0's aggregation of the features does not fit beside the rest on ",
               s.device->name(),
               evaluation_cache_on_host ? "; the first evaluation that another follows keeps it in "
                                          "host memory, where there is room"
                                        : "; every evaluation aggregates it (bf16 host data)");
      return;
    }
  }
  log_info(
      "evaluation: layer 0's aggregation of the features kept on the devices after the "
      "first evaluation (",
      format_bytes(double(std::int64_t(n) * first.aggregate_width * std::int64_t(sizeof(float)))),
      ")");
}

// At the first evaluation that another follows (Schedule::evaluate(), EvaluationsAhead), not at
// setup: the time to the first epoch pays nothing for it, and a run that evaluates once pins
// none. Host memory must keep room for as much again beside it (the cache is every vertex's
// row).
void Schedule::Impl::allocate_evaluation_host_cache() {
  if (!evaluation_cache_on_host || !evaluation_host_cache.empty()) return;
  evaluation_cache_on_host = false;  // one try
  const LayerSpec& first = model.layers.front();
  const std::int64_t bytes = std::int64_t(n) * first.aggregate_width * std::int64_t(sizeof(float));
  const std::int64_t available = available_host_memory_bytes();
  if (available >= 0 && 2 * bytes > available) {
    log_info("evaluation: layer 0's aggregation (", format_bytes(double(bytes)),
             ") not kept in host memory, ", format_bytes(double(available)),
             " available; every evaluation aggregates it");
    return;
  }
  evaluation_host_cache =
      backend.alloc_host(n, first.aggregate_width, HostPrecision::kFp32, "evaluation aggregation");
  for (int p = 0; p < P; ++p) {
    const std::int64_t begin = plan.partition_offsets[std::size_t(p)];
    dev[std::size_t(p)].evaluation_aggregation_on_host =
        evaluation_host_cache.row_block(begin, plan.partition_offsets[std::size_t(p) + 1] - begin);
  }
  log_info("evaluation: layer 0's aggregation of the features kept in host memory (",
           format_bytes(double(bytes)), ")");
}

// Host matrices in renumbered row order (host_matrix_shapes()), of options.host_precision
// elements: H^0 (the features, row-normalized in fp32 first when asked, then rounded), each
// layer's inputs H^l (or T^l), the gradients G^l (or dT^l) below the last layer, and the cached
// aggregations A^l. When a releasable dataset holds its features in memory, H^0 is filled right
// after its allocation, so that they are freed before the other matrices are allocated.
// Otherwise every matrix is allocated (and pinned) first and H^0 filled last: the pinning then
// ends early, before the device constants that setup_devices() pins beside it.
void Schedule::Impl::allocate_host_matrices(const Dataset& dataset, Dataset* releasable) {
  const int L = model.num_layers();
  const HostPrecision precision = options.host_precision;
  H.resize(std::size_t(L));
  G.resize(std::size_t(L));
  A_cache.resize(std::size_t(L));
  const auto fill_inputs = [&] {
    StageTimer fill_timer("fill H^0");
    fill_features(dataset, plan.new_to_old, plan.old_to_new,
                  options.row_normalize_features ? FeatureScaling::kRowL1 : FeatureScaling::kNone,
                  H[0]);
    if (releasable) std::vector<float>().swap(releasable->features);
  };
  const bool fill_first = releasable && !releasable->features.empty();
  const std::vector<HostMatrixShape> shapes = host_matrix_shapes(model, options, n, C);
  for (const HostMatrixShape& shape : shapes) {
    StageTimer alloc_timer(cat("allocate ", shape.name));
    host_matrix(shape) = backend.alloc_host(shape.rows, shape.cols, precision, shape.name);
    alloc_timer.finish();
    if (fill_first && shape.role == HostMatrixRole::kInput && shape.layer == 0) fill_inputs();
  }
  if (!fill_first) fill_inputs();
  std::int64_t bytes = 0;
  for (const auto* matrices : {&H, &G, &A_cache})
    for (const HostMat& m : *matrices) bytes += m.rows * m.cols * m.element_bytes();
  log_info("host matrices: ", format_bytes(double(bytes)), " (", host_precision_name(precision),
           " vertex data)");
  predictions.assign(std::size_t(n), -1);
}

// The layout's buffers of one device before its first chunk constant: the working buffers every
// pass needs (parameters and optimizer state included), then the overlap buffers where memory
// allows: the load stage (prefetch of the next batch's rows, and the next pass's first), the
// flush buffer (flushes behind the next batch), a second block set (stores and backward block
// loads behind compute), each with the constants that serve it, and the fused last layer's own
// attention buffers (one-chunk GAT). A refused overlap buffer leaves out the rest of its group
// (what the group already got stays allocated), and a refused load stage the flush buffer and
// the second set: they serve the prefetching the stage does. Returns the position of the first
// chunk constant.
std::size_t Schedule::Impl::allocate_device_buffers(DeviceState& s, int p,
                                                    const PartitionLayout& layout,
                                                    const DeviceSizes& sizes,
                                                    const std::vector<vertex_t>& head_block_rows) {
  Device& d = *s.device;
  const std::string where = cat("device ", p, " ");
  constexpr int kGroups = int(OverlapGroup::kKeptAttention) + 1;
  bool refused[kGroups] = {};
  std::string allocated;  // for the log
  // T rows leave padded to 16 bytes: their pad column is never written, so it stays 0 (in the
  // transition slots too, where the forward may write them, Impl::writes_transforms_into_slots()).
  const bool pads_outputs =
      std::any_of(layer_rules.begin(), layer_rules.end(),
                  [](const LayerRoles& roles) { return roles.stores_transform; });
  s.chunks.resize(std::size_t(C));
  std::size_t i = 0;
  for (; i < layout.buffers.size() && layout.buffers[i].chunk < 0; ++i) {
    const BufferSpec& b = layout.buffers[i];
    if (refused[int(b.group)]) continue;
    if (b.kind == BufferKind::kConstant) {
      upload_device_constant(s, b, sizes, head_block_rows, "");  // named by its role alone
      continue;
    }
    if (b.kind != BufferKind::kRequired && b.kind != BufferKind::kOverlap)
      SLUICE_FAIL("buffer layout: ", buffer_role_name(b.role), " before the chunk constants");
    const BufferSlot slot = buffer_slot(s, b.role, sizes);
    if (b.rows != slot.rows)
      SLUICE_FAIL("buffer layout: ", where, buffer_role_name(b.role), " has ", b.rows,
                  " rows, the schedule needs ", slot.rows);
    const char* name = buffer_role_name(b.role);
    const Mat m = b.kind == BufferKind::kOverlap ? d.try_alloc(b.rows, b.width, name)
                                                 : d.alloc(b.rows, b.width, name);
    if (b.rows > 0 && b.width > 0)
      allocated += cat(allocated.empty() ? "" : ", ", name, " ", b.rows, " x ", b.width,
                       m.empty() ? " (refused)" : "");
    if (m.empty()) {  // an overlap buffer that does not fit
      refused[int(b.group)] = true;
      if (b.group == OverlapGroup::kLoadStage)
        for (int g = int(OverlapGroup::kLoadStage); g <= int(OverlapGroup::kSecondBlockSet); ++g)
          refused[g] = true;
      continue;
    }
    *slot.buffer = m;
    if (pads_outputs &&
        (b.role == BufferRole::kLayerOutput || b.role == BufferRole::kSecondLayerOutput ||
         b.role == BufferRole::kTransformedRows || b.role == BufferRole::kLastLayerTransformedRows))
      d.fill(m, 0.f);
    if (b.role == BufferRole::kTransformedRows)
      s.transform_region =
          options.comm == CommMode::kBaseline ? s.merged_rows : plan.transition_rows[p];
  }
  log_debug(where, "working and overlap buffers (rows x floats): ", allocated);
  if (!s.stage.empty() && s.head.block_rows.size != std::int64_t(head_block_rows.size()))
    SLUICE_FAIL("buffer layout: ", where, "has ", s.head.block_rows.size,
                " rows of the last chunk's block for the next pass, the schedule ",
                head_block_rows.size());
  const BlockSet& second = s.sets[1];
  if (!second.dZ.empty() && (layout.widths.aggregation == 0 || !second.A.empty())) s.num_sets = 2;
  // One chunk uses set 0 alone (the layout has no second set); its blocks still load on the
  // transfer lane wherever the overlap buffers are granted.
  s.prefetch_blocks = s.num_sets == 2 || (C == 1 && !s.stage.empty());
  if (tail_in_flush_buffer && s.leave.empty()) s.keep_tail = false;  // no flush buffer for it
  return i;
}

// A device-wide constant of the layout: positions 0, 1, ... (slices, chunk rows, flush buffer
// rows), or the rows of chunk 0's loads in the last chunk's output block.
void Schedule::Impl::upload_device_constant(DeviceState& s, const BufferSpec& b,
                                            const DeviceSizes& sizes,
                                            const std::vector<vertex_t>& head_block_rows,
                                            const std::string& where) {
  Device& d = *s.device;
  switch (b.role) {
    case BufferRole::kSlicePositions:
      s.slice_iota = upload_list(
          d, b, positions(slice_rows(sizes.max_loads, sizes.max_leaves, sizes.merged)), where);
      return;
    case BufferRole::kChunkRowPositions:
      s.chunk_iota = upload_list(d, b, positions(sizes.max_dst), where);
      return;
    case BufferRole::kHeadRows:
      s.head.block_rows = upload_list(d, b, head_block_rows, where);
      return;
    case BufferRole::kFlushPositions:
      s.iota = upload_list(d, b, positions(sizes.max_leaves), where);
      return;
    default:
      SLUICE_FAIL("buffer layout: ", buffer_role_name(b.role), " is not a device constant");
  }
}

// The chunks' constants, in the layout's order from position `next`, filled from the schedule's
// lists (their host copies freed as they go up). Returns the position after the last.
std::size_t Schedule::Impl::upload_chunks(DeviceState& s, int p,
                                          const std::vector<BufferSpec>& buffers, std::size_t next,
                                          std::vector<ChunkLists>& lists) {
  // Seconds by buffer role, for the -v log: where the chunks' upload time goes.
  std::vector<std::pair<BufferRole, double>> seconds;
  double checks = 0;
  for (int c = 0; c < C; ++c) {
    const ChunkPlan& cp = plan.chunk(c, p);
    ChunkLists& li = lists[std::size_t(c) * P + p];
    DeviceChunk& ch = s.chunks[std::size_t(c)];
    ch.dst_begin = cp.dst_begin;
    ch.view_dst_begin = vertex_t(cp.dst_begin - s.vertex.first_row);
    ch.num_dst = cp.num_dst();
    ch.nnz = cp.num_entries();
    ch.leave_store_count = std::int64_t(li.leave_store_count);
    ch.received = li.received;
    if (C == 1) {
      ch.send_ranges = send_ranges(li, ch.num_dst);
      for (const vertex_t row : li.received_rows)
        ch.peers_read_end = std::max<std::int64_t>(ch.peers_read_end, std::int64_t(row) + 1);
      ch.peer_rows = whole_send_range(li, ch.num_dst);
      s.loads_in_row_order = li.load_rows.size() == li.load_vertices.size();
      for (std::size_t i = 0; s.loads_in_row_order && i < li.load_rows.size(); ++i)
        s.loads_in_row_order =
            std::int64_t(li.load_rows[i]) == std::int64_t(li.load_vertices[i]) - s.vertex.first_row;
      s.pulls_are_pushes = li.pulls.size() == li.pushes.size();
      for (std::size_t g = 0; s.pulls_are_pushes && g < li.pulls.size(); ++g) {
        const PeerRows &pull = li.pulls[g], &push = li.pushes[g];
        const std::vector<vertex_t>& local = pull.local_rows;
        s.pulls_are_pushes = pull.owner == push.owner && pull.owner_rows == push.owner_rows &&
                             local == push.local_rows;
        for (std::size_t i = 1; s.pulls_are_pushes && i < local.size(); ++i)
          s.pulls_are_pushes = local[i] == local[i - 1] + 1;
      }
    }
    const std::string where = cat("chunk (", c, ",", p, ") ");
    for (; next < buffers.size() && buffers[next].chunk == c && per_chunk_constant(buffers[next]);
         ++next) {
      const double start = now_seconds();
      upload_chunk_constant(s, buffers[next], cp, li, ch, where);
      const BufferRole role = buffers[next].role;
      auto it = std::find_if(seconds.begin(), seconds.end(),
                             [&](const auto& entry) { return entry.first == role; });
      if (it == seconds.end()) it = seconds.insert(seconds.end(), {role, 0.0});
      it->second += now_seconds() - start;
    }
    if (ch.csr.id < 0) SLUICE_FAIL("buffer layout: ", where, "has no CSR");
    const double start = now_seconds();
    check_chunk_uploaded(ch, li, where);
    ch.remote_features_first = std::int64_t(s.pulled_vertices.size());
    if (options.remote_features == RemoteFeatures::kDeviceCopyWhereItFits &&
        pulls_features(model.layers.front()))
      for (const PeerRows& g : li.pulls)
        s.pulled_vertices.insert(s.pulled_vertices.end(), g.vertices.begin(), g.vertices.end());
    li = ChunkLists{};
    if (release_plan) {  // the constants hold what the schedule needs of the chunk's plan
      ChunkPlan& released = release_plan->chunk(c, p);
      std::vector<vertex_t>().swap(released.columns);
      for (std::vector<vertex_t>* list :
           {&released.load_vertices, &released.load_slots, &released.remote_vertices,
            &released.remote_owner_slots, &released.remote_slots, &released.leave_vertices,
            &released.leave_slots})
        std::vector<vertex_t>().swap(*list);
      std::vector<std::int32_t>().swap(released.remote_owner);
      std::vector<std::uint8_t>().swap(released.remote_pull);
    }
    checks += now_seconds() - start;
  }
  std::string by_role;
  for (const auto& [role, spent] : seconds)
    by_role += cat(buffer_role_name(role), " ", format_seconds(spent), ", ");
  log_debug("device ", p, ": chunk constants by role: ", by_role, "checks and releases ",
            format_seconds(checks));
  return next;
}

// One of a chunk's constants, bound to its DeviceChunk field.
void Schedule::Impl::upload_chunk_constant(DeviceState& s, const BufferSpec& b, const ChunkPlan& cp,
                                           ChunkLists& li, DeviceChunk& ch,
                                           const std::string& where) {
  Device& d = *s.device;
  switch (b.role) {
    case BufferRole::kCsr:
      if (b.csr.rows != cp.num_dst() || b.csr.nnz != cp.num_entries() ||
          b.csr.cols != s.merged_rows)
        SLUICE_FAIL("buffer layout: ", where, "CSR of ", b.csr.rows, " x ", b.csr.cols, " with ",
                    b.csr.nnz, " entries, the plan's is ", cp.num_dst(), " x ", s.merged_rows,
                    " with ", cp.num_entries());
      ch.csr =
          d.upload_csr(cp.indptr, cp.columns, s.merged_rows,
                       CsrWeighting{b.csr.weights, std::move(li.column_degrees)}, where + "CSR");
      return;
    case BufferRole::kLossCsr: {  // before the chunk's CSR, whose upload takes the degrees
      SLUICE_EXPECTS(!loss_rows.empty(), "buffer layout: ", where,
                     "a loss-row CSR without loss-row flags");
      // The owners' loss-row CSR (a row per merged row) where the loss gradients go to their
      // owners, else the chunk's loss rows (a row per chunk row).
      const CsrArrays loss =
          loss_gradients_sent
              ? owners_loss_rows_csr(plan, int(&s - dev.data()), loss_rows)
              : loss_rows_csr(cp.indptr, cp.columns, loss_rows.data() + cp.dst_begin);
      const std::string name = loss_gradients_sent ? "owners' loss-row CSR" : "loss-row CSR";
      const std::int64_t rows = std::int64_t(loss.indptr.size()) - 1;
      if (b.csr.rows != rows || b.csr.nnz != std::int64_t(loss.columns.size()) ||
          b.csr.cols != s.merged_rows)
        SLUICE_FAIL("buffer layout: ", where, name, " of ", b.csr.rows, " x ", b.csr.cols, " with ",
                    b.csr.nnz, " entries, the plan's is ", rows, " x ", s.merged_rows, " with ",
                    loss.columns.size());
      ch.loss_csr = d.upload_csr(loss.indptr, loss.columns, s.merged_rows,
                                 CsrWeighting{b.csr.weights, li.column_degrees}, where + name);
      return;
    }
    case BufferRole::kSelfColumns:
      ch.self_columns = upload_list(d, b, li.self_columns, where);
      ch.self_columns_in_order = true;
      for (std::size_t r = 0; ch.self_columns_in_order && r < li.self_columns.size(); ++r)
        ch.self_columns_in_order = std::size_t(li.self_columns[r]) == r;
      return;
    case BufferRole::kLoadVertices:
      count_from(s.vertex.first_row, li.load_vertices);
      ch.load_vertices = upload_list(d, b, li.load_vertices, where);
      return;
    case BufferRole::kLoadSlots:
      ch.load_rows = upload_list(d, b, li.load_rows, where);
      return;
    case BufferRole::kLoadKeys:
      ch.load_keys = upload_list(d, b, li.load_keys, where);
      return;
    case BufferRole::kPullOwnerSlots:
    case BufferRole::kPullLocalSlots:
      upload_peer_rows(d, b, li.pulls, ch.pulls, where);
      return;
    case BufferRole::kPushLocalSlots:
      upload_peer_rows(d, b, li.pushes, ch.pushes, where);
      return;
    case BufferRole::kRemoteSlots:
      ch.remote_rows = upload_list(d, b, li.remote_rows, where);
      return;
    case BufferRole::kLeaveVertices:
      count_from(s.vertex.first_row, li.leave_vertices);
      ch.leave_vertices = upload_list(d, b, li.leave_vertices, where);
      return;
    case BufferRole::kLeaveSlots:
      ch.leave_rows = upload_list(d, b, li.leave_rows, where);
      return;
    case BufferRole::kLeaveKeys:
      ch.leave_keys = upload_list(d, b, li.leave_keys, where);
      return;
    case BufferRole::kDestinationKeys:
      ch.dst_keys = upload_list(d, b, li.dst_keys, where);
      return;
    case BufferRole::kLabels:
      ch.labels = upload_list(d, b, li.labels, where);
      return;
    case BufferRole::kSplitBits:
      ch.split_bits = upload_list(d, b, li.split_bits, where);
      return;
    case BufferRole::kReceivedSlots:
      ch.received_rows = upload_list(d, b, li.received_rows, where);
      return;
    default:
      SLUICE_FAIL("buffer layout: ", buffer_role_name(b.role), " is not a chunk constant");
  }
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

// Who reads from and writes into whom, per batch (the pairwise cross-device order).
void Schedule::Impl::link_peers() {
  for (int p = 0; p < P; ++p)
    for (int c = 0; c < C; ++c) {
      const DeviceChunk& ch = dev[std::size_t(p)].chunks[std::size_t(c)];
      for (const auto& pull : ch.pulls)
        dev[std::size_t(pull.owner)].chunks[std::size_t(c)].pulled_by.push_back(p);
    }
}

namespace {

// The first row of the tail buffer (`rows` rows) that holds a chunk's whole G^1 block in block
// order, when the chunk's tail rows are exactly that (every block row once, at one offset from
// its tail position, each flushed for the first time); -1 otherwise.
std::int64_t tail_block_first(const TailLists& t, std::int64_t block_rows, std::int64_t rows) {
  const std::int64_t n = std::int64_t(t.src.size());
  if (n == 0 || n != block_rows || std::int64_t(t.assign) != n) return -1;
  const std::int64_t first = std::int64_t(t.src[0]) - t.dst[0];
  if (first < 0 || first + n > rows) return -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::int64_t(t.src[std::size_t(i)]) - t.dst[std::size_t(i)] != first) return -1;
  return first;  // n distinct block positions (tail_lists()) at one offset: all of them
}

}  // namespace

// The kept tail's lists (the layout's tail entries), for the devices that keep it (GAT: those
// with a flush buffer).
void Schedule::Impl::upload_tails(const std::vector<std::vector<TailLists>>& tails,
                                  const std::vector<std::vector<BufferSpec>>& tail_buffers) {
  int keeping = 0;
  std::int64_t kept_rows = 0, kept_first = 0, in_place = 0;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    if (!s.keep_tail) continue;
    ++keeping;
    for (const BufferSpec& b : tail_buffers[std::size_t(p)]) {
      const TailLists& t = tails[std::size_t(p)][std::size_t(b.chunk)];
      DeviceChunk& ch = s.chunks[std::size_t(b.chunk)];
      const std::string where = cat("chunk (", b.chunk, ",", p, ") ");
      if (b.role == BufferRole::kTailRows) {
        ch.tail_src = upload_list(*s.device, b, t.src, where);
        ch.tail_assign = std::int64_t(t.assign);
        ch.tail_block_first = tail_block_first(t, ch.num_dst, tail_rows(s).rows);
        in_place += ch.tail_block_first >= 0 ? ch.num_dst : 0;
        kept_rows += std::int64_t(t.src.size());
        kept_first += std::int64_t(t.assign);
      } else {
        ch.tail_dst = upload_list(*s.device, b, t.dst, where);
      }
    }
    for (int c = 0; c < C; ++c) {
      const TailLists& t = tails[std::size_t(p)][std::size_t(c)];
      const DeviceChunk& ch = s.chunks[std::size_t(c)];
      if (ch.tail_src.size != std::int64_t(t.src.size()) ||
          ch.tail_dst.size != std::int64_t(t.dst.size()))
        SLUICE_FAIL("buffer layout: chunk (", c, ",", p, ") keeps ", ch.tail_src.size,
                    " tail rows, the schedule ", t.src.size());
    }
  }
  if (keeping > 0)
    log_debug("backward tail: layer 1's last batch keeps ", kept_rows, " gradient rows (",
              kept_first, " flushed for the first time) on the devices for layer 0 (", keeping, "/",
              P, " devices), ", in_place, " of them read in place as whole blocks");
}

}  // namespace sluice
