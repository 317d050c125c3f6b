// Schedule's implementation (train/schedule.hpp): the host matrices, every device's state
// (schedule_state.hpp) and the steps of a pass, with the rules that say how each layer's rows
// travel (inline here). The steps are defined by concern:
//   schedule.cpp            the pass driver: per layer, per batch: load, pull, compute, store
//                           (backward: push, flush)
//   schedule_setup.cpp      checks, host matrices, device buffers, the chunks' constants
//   schedule_transfers.cpp  loads, prefetches, pulls and stores of forward results; gradient
//                           pushes, flushes of leaving rows and the kept backward tail
//   schedule_compute.cpp    chunk compute: aggregation, GAT attention, transforms, backward
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/layout/buffer_layout.hpp"
#include "train/model_layout.hpp"
#include "train/schedule.hpp"
#include "train/schedule_lists.hpp"
#include "train/schedule_state.hpp"

namespace sluice {

namespace schedule_detail {

// What every batch of a pass does besides its compute (Schedule::Impl::forward_layer(),
// backward_layer()).
struct BatchSteps {
  // Load the layer's input rows and pull the remote ones: forward passes, the fused pass, and
  // backward passes that recompute their layer.
  bool load_inputs = false;
  // Backward passes: the G^{l+1} (and cached A^l) blocks from host memory (the fused pass takes
  // its loss gradient from its own forward).
  bool load_blocks = false;
  // Backward passes with gradient rows to flush: zero the arrivals' gradient rows, push the remote
  // rows' gradients to their owners and flush the leaving rows.
  bool flush_gradients = false;
  // What the batch's sparse products read of the chunk CSR (Schedule::Impl::products_read()),
  // prefetched with the batch's rows; none: the batch runs no sparse product.
  std::optional<CsrAccess> products;
};

// Where the pass after the running one reads its first batch's rows: rows the running (forward)
// pass writes, or rows complete in host memory.
enum class NextInputs { kWrittenByThisPass, kComplete };

// Which of a backward block set's host rows still have to load: all of them; none (the pass
// before loaded them, Schedule::Impl::preload_next_blocks()); or the G^{l+1} rows, the A^l rows
// being there already (Schedule::Impl::preload_aggregation_blocks()).
enum class BlockRows { kFromHost, kPreloaded, kGradientOnly };

// Which host blocks of a backward batch a load copies: G^{l+1} and A^l, or only one of them.
enum class HostBlocks { kAll, kGradient, kAggregation };

// What a backward pass reads of a layer's forward rows
// (Schedule::Impl::transform_outputs_backward): the pre-activation Z computed again, the outputs
// H = dropout(act(Z)) the forward kept, or GAT's kept head outputs O (Z = O + b).
enum class OutputRows { kPreactivation, kKeptOutputs, kHeadOutputs };

struct DeviceSizes;  // schedule_setup.cpp

}  // namespace schedule_detail

struct Schedule::Impl {
  using BatchSteps = schedule_detail::BatchSteps;
  using BlockRows = schedule_detail::BlockRows;
  using HostBlocks = schedule_detail::HostBlocks;
  using OutputRows = schedule_detail::OutputRows;
  using BlockSet = schedule_detail::BlockSet;
  using ChunkLists = schedule_detail::ChunkLists;
  using DeviceChunk = schedule_detail::DeviceChunk;
  using DeviceSizes = schedule_detail::DeviceSizes;
  using DeviceState = schedule_detail::DeviceState;
  using Marker = schedule_detail::Marker;
  using NextInputs = schedule_detail::NextInputs;
  using TailLists = schedule_detail::TailLists;

  Backend& backend;
  const Plan& plan;
  // During setup: the plan itself when setup frees each chunk's columns and lists once uploaded
  // (InputRelease::kDatasetAndPlanLists), else null.
  Plan* release_plan = nullptr;
  // loss_row_flags() of the dataset during setup, where chunks keep loss-row CSRs
  // (LastLayerRows::kLoss, two layers or more); empty otherwise.
  LossRowFlags loss_rows;
  // Every device sends its fused pass's loss gradients to their owners (the layouts'
  // sends_loss_gradients, LossRowExchange::kSendGradients): its chunk's loss_csr is the owners'
  // loss-row CSR (owners_loss_rows_csr()).
  bool loss_gradients_sent = false;
  const ModelSpec& model;
  ScheduleOptions options;
  int P = 1, C = 1;
  vertex_t n = 0;
  float loss_scale = 0.f;
  // The vertex matrices in host memory, whole (transfers go through each device's views of
  // them, DeviceState::vertex; an entry is empty once every device holds its rows resident).
  std::vector<HostMat> H;        // H[l], l = 0..L-1 (H[0] = features, renumbered)
  std::vector<HostMat> G;        // G[l], l = 1..L-1 (G[0] unused; G^L stays on the device)
  std::vector<HostMat> A_cache;  // A[l] in cache mode
  std::vector<DeviceState> dev;
  // The order in which compute_phase() issues the devices' work: the device whose compute lane
  // was busiest in the last training step first (take_times()), else by index. A step starts
  // with every device idle, and each device's first kernel waits until the host has issued the
  // compute of the devices before it; issued first, the slowest device loses nothing, and the
  // others have time to spare. A device's compute reads no other device's state and writes only
  // its peers' slots for its rows, which no compute of the same pass touches (send_transforms()),
  // so the order changes no result.
  std::vector<int> compute_order;
  std::vector<std::int32_t> predictions;
  // The running evaluation writes `predictions` (Schedule::evaluate(), Predictions::kToHost).
  bool predictions_to_host = false;
  // The running evaluation's EvaluationsAhead (Schedule::evaluate()).
  EvaluationsAhead evaluations_ahead = EvaluationsAhead::kMore;
  // Schedule::evaluate_outputs(): the evaluation pass also stores the last layer's logits and,
  // when the last layer's inputs arrive transformed (T^{L-1} in H[L-1]), its input rows H^{L-1}
  // (transform_outputs()) into these host matrices (empty data: not captured).
  HostMat captured_logits, captured_hidden;
  std::int64_t epoch = 0;
  bool training = false;
  // The running pass goes by rows (runs_by_rows()): its batches are the row groups.
  bool by_rows = false;
  // Every device's evaluation_aggregation (or evaluation_aggregation_on_host) holds its rows (an
  // evaluation wrote them).
  bool evaluation_aggregation_ready = false;
  // Layer 0's evaluation aggregation goes to host memory (place_evaluation_aggregation()): the
  // first evaluation that another follows allocates evaluation_host_cache (every vertex's row)
  // where host memory allows, and gives each device its partition's rows.
  bool evaluation_cache_on_host = false;
  HostMat evaluation_host_cache;
  // The pass after the running one when it loads batch 0's rows (from H[next_head->index]):
  // prefetch_next_head() puts them into the stage during the running pass's last batch.
  // next_head_reads_outputs: it reads the running forward pass's outputs (H^{l+1}), so the
  // rows of each device's last chunk wait for the next pass's start.
  const LayerSpec* next_head = nullptr;
  bool next_head_reads_outputs = false;
  std::int32_t next_head_tag = 0;
  // The layout's view of the model and options (train/layout/buffer_layout.hpp): every layer's
  // rules (layer_roles()) and the device buffers (partition_layout()) come from there, so the
  // schedule and the memory estimate agree.
  LayoutOptions layout_options;
  ModelLayers layer_shapes;
  std::vector<LayerRoles> layer_rules;  // per layer
  bool tail_in_flush_buffer = false;    // tail_rows()
  // Timer tags: (pass kind, layer) of the running pass and the batch (tag()).
  static constexpr std::int32_t kTagBatches = 1 << 20, kTagLayers = 256;
  std::int32_t pass_tag = 0;
  std::vector<HostIssueRange>* host_issues = nullptr;  // with the timeline on
  int pass_serial = 0;  // passes begun (begin_pass()): DeviceState::scores_pass
  bool attention_buffers_everywhere = false;  // every device has last_layer_attention
  // Passes follow each other on the devices without the host waiting for them in between
  // (join_lanes() in place of drain()). In the p2p modes a device reads back only host rows it
  // wrote itself (its partition's outputs, gradients and blocks), so ordering its own lanes
  // orders them, and devices meet only in pulls and pushes, each ordered by peer markers.
  // Baseline leave lists flush other partitions' rows, which another device's next pass may
  // read: there the host orders the passes.
  bool runs_through_passes() const { return options.comm != CommMode::kBaseline; }

  Impl(Backend& b, const Plan& p, const ModelSpec& m, const ScheduleOptions& o)
      : backend(b),
        plan(p),
        model(m),
        options(o),
        layout_options(::sluice::layout_options(o)),
        layer_shapes(model_layers(m)),
        tail_in_flush_buffer(::sluice::tail_in_flush_buffer(layer_shapes, layout_options)) {
    for (const LayerSpec& layer : m.layers)
      layer_rules.push_back(layer_roles(layer_shapes, layer.index, layout_options));
  }

  // ---- How each layer's rows travel (layer_roles()) ----

  const LayerRoles& roles(const LayerSpec& layer) const {
    return layer_rules[std::size_t(layer.index)];
  }
  bool gat() const { return model.kind == ModelKind::kGat; }
  // Layers whose rows are transformed by their owner (Zm = X W) and exchanged transformed: GAT's,
  // and GCN's or SAGE's last layer when it narrows (LayerSpec::transform_first).
  bool transforms(const LayerSpec& layer) const { return roles(layer).transforms; }
  // Transforming layers above layer 0 get their inputs transformed by the forward pass below:
  // H[l] holds T^l = dropout(H^l) W_l, loads fill Zm directly, and leaving rows flush their dZm
  // rows into G[l] (dT^l). Rows of T^l are transform_width wide instead of d_l (products GCN:
  // 48 floats instead of 256).
  bool pretransformed(const LayerSpec& layer) const { return roles(layer).pretransformed; }
  // Whether backward passes write a chunk's input gradients (the rows of exchanged_gradient())
  // with a storing transposed product instead of zeroing them in the load phase and adding into
  // them: GCN, whose transposed product is all that writes them before the rows peers push are
  // added (push_phase()) and they leave, on one chunk per partition, whose product covers
  // every merged row (with more chunks, rows a batch keeps from the one before go on adding up).
  bool stores_input_gradients() const { return C == 1 && model.kind == ModelKind::kGcn; }
  // GCN's input gradients of a chunk, dx = A^T dy: stored where stores_input_gradients(), else
  // added into the rows the load phase zeroed.
  void gcn_input_gradients(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat dy,
                           Mat dx) const;
  // dx (=|+=) A^T dy, the remote region's rows first where the chunk pushes enough of them
  // (ScheduleOptions::remote_first_push_bytes), then kRemoteGradients marked (push_phase()
  // sends them beside the rest of the product).
  void transposed_product_remote_first(DeviceState& s, const DeviceChunk& ch,
                                       const LayerSpec& layer, Mat dy, Mat dx, RowCopy write) const;
  // The same where the fused pass's loss gradients go to their owners (sends_loss_gradients()):
  // dx's own rows over the owners' loss-row CSR, whose dy is the merged rows (the chunk's loss
  // gradients, its peers' in their slots): the rows no peer reads first, then, once every peer's
  // gradients are in, the others. Its remote rows are left alone (nothing pushes them).
  void owners_transposed_product(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                 Mat dx, RowCopy write) const;
  // Layer 0 of a transforming model (GAT's; a one-layer GCN's or SAGE's when it narrows) transforms
  // its rows on arrival (transform_arrivals()) and applies the transform's backward when they leave
  // (transform_flush()).
  bool transforms_on_arrival(const LayerSpec& layer) const {
    return roles(layer).transforms_on_arrival;
  }
  // GAT's layer 0 attending over its input rows (GatLayerZero::kAttendInputs): its arrivals are
  // not transformed and its backward flushes nothing; gat_input_layer() and
  // gat_input_layer_backward() read X.
  bool attends_inputs(const LayerSpec& layer) const { return roles(layer).attends_inputs; }
  // Layers whose input rows are not kept in X (ScheduleOptions::reload_inputs): they transform
  // on arrival, and their leaving rows' weight gradients read the rows from host memory again.
  bool reloads_inputs(const LayerSpec& layer) const { return roles(layer).reloads_inputs; }
  // Layers whose backward pass recomputes the forward's intermediates (keeps_intermediates()).
  // These take the layer shapes built once (layer_shapes): they run for every batch.
  bool recompute(const LayerSpec& layer) const {
    return !keeps_intermediates(layer_shapes, host_data_options(options), layer.index);
  }
  // Backward passes that load the layer's input rows (sluice::backward_reads_inputs()).
  bool backward_loads_inputs(const LayerSpec& layer) const {
    return backward_reads_inputs(layer_shapes, host_data_options(options), layer.index);
  }
  // The training passes keep layer L-2's A block in the block set (sluice::keeps_a_block()):
  // no store to A^l and no load back.
  bool keeps_a_block(const LayerSpec& layer) const {
    return training &&
           sluice::keeps_a_block(layer_shapes, host_data_options(options), layer.index, C);
  }
  // A GAT layer's training forward keeps its head outputs in the set's A block for A^l.
  bool keeps_head_outputs(const LayerSpec& layer) const {
    return gat() && training && !recompute(layer);
  }
  // GAT layer L-2 of a one-chunk plan, every device with the last layer's own attention buffers
  // (DeviceState::last_layer_attention): the fused pass between the layer's forward and backward
  // passes leaves its Zm, el, er, alpha and input rows as the forward wrote them, so the backward
  // pass loads, pulls, transforms and scores nothing again.
  bool keeps_attention(const LayerSpec& layer) const {
    return attention_buffers_everywhere && C == 1 && keeps_head_outputs(layer) &&
           layer.index + 2 == int(model.layers.size());
  }
  const LayerSpec* above(const LayerSpec& layer) const {
    return layer.last ? nullptr : &model.layers[std::size_t(layer.index) + 1];
  }
  // The forward pass of `layer` stores the next layer's T rows, and its backward pass takes dT
  // blocks (transform_outputs(), transform_outputs_backward()).
  bool stores_transform(const LayerSpec& layer) const { return roles(layer).stores_transform; }
  // Training runs the last layer's forward and backward in one pass, each batch's backward right
  // after its forward (its loss gradient needs only its own logits, and the weights stay fixed
  // for the epoch): the last layer's aggregations A^{L-1} and loss gradients G^L never go to
  // host memory and back, and GAT's last layer loads and computes its attention once.
  // Evaluation runs the forward alone.
  bool fuses(const LayerSpec& layer) const { return training && layer.last; }
  // A backward pass whose batches read nothing but their destinations' rows: layer 0 of GCN or
  // SAGE from its kept aggregation (no input rows, no sparse product, no flush; the dropout of
  // its outputs is keyed by destination). It runs by rows: over the devices' row groups
  // (DeviceState::row_groups), fewer and larger batches through the same buffers, so that the
  // many small chunks of a graph's dense end do not each pay a batch's fixed costs.
  bool runs_by_rows(const LayerSpec& layer) const {
    return C > 1 && layer.index == 0 && !layer.last && !gat() && !transforms(layer) &&
           !recompute(layer);
  }
  // A batch's destination rows [first, first + rows) with their dropout keys: a chunk's rows
  // with its list, a row group's by member chunk.
  struct KeyedRows {
    std::int64_t first = 0, rows = 0;
    Idx keys;
  };
  std::vector<KeyedRows> keyed_rows(const DeviceState& s, const DeviceChunk& ch) const {
    if (ch.end_chunk == ch.first_chunk) return {{0, ch.num_dst, ch.dst_keys}};
    std::vector<KeyedRows> out;
    for (int m = ch.first_chunk; m < ch.end_chunk; ++m) {
      const DeviceChunk& member = s.chunks[std::size_t(m)];
      out.push_back({member.view_dst_begin - ch.view_dst_begin, member.num_dst, member.dst_keys});
    }
    return out;
  }
  // The CSR a pass over `layer` reads of chunk ch: a training pass of the last layer reads the
  // chunk's loss rows alone where it keeps them (DeviceChunk::loss_csr); its other rows get no
  // gradient from the loss, so their sums would be wasted. Its nnz sizes the layer's alpha.
  const Csr& chunk_csr(const DeviceChunk& ch, const LayerSpec& layer) const {
    return training && layer.last && ch.loss_csr.id >= 0 ? ch.loss_csr : ch.csr;
  }
  // The running pass's batches: the chunks, or the row groups of a pass by rows.
  int batches() const { return by_rows ? int(dev.front().row_groups.size()) : C; }
  DeviceChunk& batch(DeviceState& s, int c) {
    return by_rows ? s.row_groups[std::size_t(c)] : s.chunks[std::size_t(c)];
  }
  // Batch c of the backward pass of `layer` (the next pass, from the pass before it).
  DeviceChunk& backward_batch(DeviceState& s, const LayerSpec& layer, int c) {
    return runs_by_rows(layer) ? s.row_groups[std::size_t(c)] : s.chunks[std::size_t(c)];
  }
  int backward_batches(const LayerSpec& layer) const {
    return runs_by_rows(layer) ? int(dev.front().row_groups.size()) : C;
  }
  // Width of a layer's input rows in host memory (H[l]) and in loads: T rows are padded to 16
  // bytes (their pad column stays 0).
  std::int64_t input_width(const LayerSpec& layer) const { return roles(layer).input_width; }
  // Width of the gradient rows a layer flushes into G[l] (dT^l or G^l).
  std::int64_t flushed_width(const LayerSpec& layer) const { return roles(layer).flushed_width; }
  // Width of a layer's output rows: H^{l+1}, or T^{l+1} (and its dT^{l+1} blocks) when the layer
  // stores the next layer's transform.
  std::int64_t output_width(const LayerSpec& layer) const { return roles(layer).output_width; }

  // ---- Where rows live on a device ----

  // Where a layer's loads land: Zm for pretransformed layers, X otherwise.
  Mat input_rows(DeviceState& s, const LayerSpec& layer) const {
    return pretransformed(layer) ? s.Zm.col_block(0, input_width(layer))
                                 : s.X.col_block(0, layer.in_width);
  }
  // Layer 0's source rows where the device holds the features in its memory in fp32, as a
  // device matrix: its loads copy them into X on the compute lane (one pass, with the dropout)
  // instead of a gather into the load stage on the transfer lane and a copy out of it, which
  // moves every row twice and slows the compute it overlaps. Empty otherwise.
  Mat resident_inputs(const DeviceState& s, const LayerSpec& layer) const {
    if (layer.index != 0 || reloads_inputs(layer)) return Mat{};
    const HostMat& H = s.vertex.H[0];
    if (H.residence != Residence::kDevice || H.precision != HostPrecision::kFp32 || H.empty() ||
        H.cols != input_width(layer))
      return Mat{};
    return Mat{H.fp32(), H.rows, H.cols, H.ld};
  }
  // The rows devices exchange: pulls copy the owners' rows of X, pushes add into the owners'
  // rows of dX. Transforming layers exchange transformed rows instead (Zm = X W, computed once
  // by the owner, and their gradients dZm): a peer needs no X row of a remote vertex, and the
  // owner applies the backward of the transform. GAT's layer 0 attending over its input rows
  // transforms per destination, after the attention: it exchanges X rows, and no gradients.
  Mat exchanged_rows(DeviceState& s, const LayerSpec& layer) const {
    return transforms(layer) && !attends_inputs(layer) ? s.Zm.col_block(0, layer.transform_width)
                                                       : s.X.col_block(0, layer.in_width);
  }
  Mat exchanged_gradient(DeviceState& s, const LayerSpec& layer) const {
    return transforms(layer) ? s.dZm.col_block(0, layer.transform_width)
                             : s.dX.col_block(0, layer.in_width);
  }
  // A chunk's rows of a vertex matrix the device holds in its memory in fp32, as a device
  // matrix the backward reads (and changes) in place; empty for a host matrix or a bf16 one.
  static Mat resident_rows(const HostMat& m, const DeviceChunk& ch) {
    if (m.residence != Residence::kDevice || m.precision != HostPrecision::kFp32 || m.empty())
      return Mat{};
    const HostMat rows = m.row_block(ch.view_dst_begin, ch.num_dst);
    return Mat{rows.fp32(), rows.rows, rows.cols, rows.ld};
  }
  // A forward chunk's output rows (H^{l+1}, or T^{l+1} where the next layer is pretransformed)
  // written in place into the resident fp32 matrix, so that no store copies them; empty where
  // the matrix is in host memory or is bf16, and for the last layer. T rows are padded to 16
  // bytes: the forward leaves the pad columns unwritten, and they stay 0 as the resident copy
  // of the zero-filled host matrix starts them (every store into T^{l+1} copies rows whose pad
  // is 0 too: the layer output buffers are zero-filled).
  // Where the training forward writes the transforms into the transition slots of the rows
  // (writes_transforms_into_slots()), those slots.
  Mat output_in_place(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer) const {
    if (layer.last) return Mat{};
    const HostMat& H = s.vertex.H[std::size_t(layer.index) + 1];
    const std::int64_t written = output_width(layer);
    if (H.cols != written) return Mat{};
    if (writes_transforms_into_slots(layer))
      return schedule_detail::rows_of(fused_slots(s), ch.num_dst, written);
    return resident_rows(H, ch);
  }
  // A forward chunk's output block: its rows of H^{l+1} in place (output_in_place()), or the
  // set's output rows, which store_blocks() copies to H^{l+1}.
  Mat forward_output_block(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                           BlockSet& set) const {
    const Mat in_place = output_in_place(s, ch, layer);
    if (!in_place.empty()) return in_place;
    return schedule_detail::rows_of(set.out, ch.num_dst, output_width(layer));
  }
  // The output block of the device's last chunk in the pass before `layer`'s (the rows a forward
  // pass that ends early leaves for the next pass's batch 0), `width` columns.
  Mat last_output_block(DeviceState& s, const LayerSpec& layer, std::int64_t width) const {
    SLUICE_EXPECTS(layer.index > 0, "layer 0 reads no layer's outputs");
    const LayerSpec& producer = model.layers[std::size_t(layer.index) - 1];
    return forward_output_block(s, s.chunks[std::size_t(C) - 1], producer,
                                s.sets[(C - 1) % s.num_sets])
        .col_block(0, width);
  }
  // A backward chunk's G[l+1] block: its rows of G^{l+1} where they are resident (no copy: the
  // backward of layer l is their last reader in the step), else the block they load into:
  // dT^{l+1} blocks the set's output rows (transform_outputs_backward()), G^{l+1} blocks its dZ.
  Mat gradient_block(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                     BlockSet& set) const {
    const Mat in_place = tail_block(s, ch, layer);
    if (!in_place.empty()) return in_place;
    const Mat resident = resident_rows(s.vertex.G[std::size_t(layer.index) + 1], ch);
    if (!resident.empty()) return resident;
    return stores_transform(layer)
               ? schedule_detail::rows_of(set.out, ch.num_dst, output_width(layer))
               : schedule_detail::rows_of(set.dZ, ch.num_dst, layer.out_width);
  }
  // A backward chunk's A^l block (GAT: O^l): its rows of the resident A^l, else the set's A
  // rows (loaded, or kept from the forward pass: keeps_a_block()).
  Mat aggregation_block(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                        BlockSet& set) const {
    if (!keeps_a_block(layer)) {
      const Mat resident = resident_rows(s.vertex.A[std::size_t(layer.index)], ch);
      if (!resident.empty()) return resident;
    }
    return schedule_detail::rows_of(set.A, ch.num_dst, layer.aggregate_width);
  }
  // Layer 1's backward pass keeps the rows leaving in its last batch on the device: their
  // gradients are complete there, and the only reader of G^1 is layer 0's backward pass, which
  // takes them into its blocks (load_blocks()) instead of a flush to host memory and a load
  // back. Layer 0's backward writes neither dX nor the flush buffer; deeper layers' backward
  // passes would (they accumulate the next layer's dX), so only layer 1 keeps its tail.
  bool keeps_tail(const DeviceState& s, const LayerSpec& layer, int c) const {
    return s.keep_tail && layer.index == 1 && c + 1 == C;
  }
  // Layer 0's G^1 block of a chunk whose kept tail is the whole block in block order
  // (DeviceChunk::tail_block_first): those rows of the tail buffer, which layer 0's backward
  // reads (and changes) in place instead of a copy; empty otherwise.
  Mat tail_block(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer) const {
    if (layer.index != 0 || !s.keep_tail || ch.tail_block_first < 0) return Mat{};
    return tail_rows(s).row_block(ch.tail_block_first, ch.num_dst);
  }
  // Where layer 1's backward pass keeps its tail: in the flush buffer when layer 0 writes the
  // buffer the rows accumulate in (GAT's dZm, where layer 0 transforms first), else in that
  // buffer (dX, or dZm of a pretransformed layer 1).
  Mat tail_rows(DeviceState& s) const {
    const LayerSpec& one = model.layers[1];
    const Mat m = tail_in_flush_buffer ? s.leave : pretransformed(one) ? s.dZm : s.dX;
    return m.col_block(0, flushed_width(one));
  }
  Mat param(DeviceState& s, std::int64_t offset, std::int64_t rows, std::int64_t cols) const {
    return Mat{s.params.data + offset, rows, cols, cols};
  }
  Mat grad(DeviceState& s, std::int64_t offset, std::int64_t rows, std::int64_t cols) const {
    return Mat{s.grads.data + offset, rows, cols, cols};
  }
  // A transforming layer's T = X W^t (W^t: d_l x transform_width) as the blocks of W^t side by
  // side, from the parameters (Weights::kParameters) or their gradients (kGradients): GAT's and
  // GCN's W is W^t; SAGE's W stacks W_self over W_neigh (2 d_l x d_{l+1}) and
  // T = [X W_self | X W_neigh]: the parameters as one block, the last layer's side-by-side copy,
  // where the device has one (DeviceState::side_by_side_w), else as two; the gradients as two (one
  // product X^T [dT_self | dT_neigh] ran slower than two in cuBLAS on products-like shapes).
  enum class Weights { kParameters, kGradients };
  schedule_detail::TransformBlocks transform_blocks(DeviceState& s, const LayerSpec& layer,
                                                    Weights weights) const {
    float* base = (weights == Weights::kParameters ? s.params.data : s.grads.data) + layer.w_offset;
    schedule_detail::TransformBlocks t;
    if (model.kind == ModelKind::kSage && weights == Weights::kParameters && layer.last &&
        !s.side_by_side_w.empty()) {
      const std::int64_t width = 2 * layer.out_width, ld = aligned_width(width);
      SLUICE_EXPECTS(s.side_by_side_w.cols == layer.in_width * ld, "side-by-side weights of ",
                     s.side_by_side_w.cols, " floats for a ", layer.in_width, " x ", width,
                     " transform");
      t.block[0] = Mat{s.side_by_side_w.data, layer.in_width, width, ld};
    } else if (model.kind == ModelKind::kSage) {
      const std::int64_t d = layer.in_width, f = layer.out_width;
      t.count = 2;
      t.block[0] = Mat{base, d, f, f};
      t.block[1] = Mat{base + d * f, d, f, f};
    } else {
      t.block[0] = Mat{base, layer.w_rows, layer.w_cols, layer.w_cols};
    }
    return t;
  }
  DropoutKey feature_key(int layer) const {
    return DropoutKey{options.seed, epoch, layer, training ? options.dropout : 0.f};
  }
  DropoutKey attention_key(int layer) const {
    return DropoutKey{options.seed, epoch, layer, training ? options.attention_dropout : 0.f};
  }

  // ---- Passes and their order (schedule.cpp) ----

  void forward_layer(const LayerSpec& layer);
  // SAGE's transform-first layer (DeviceState::side_by_side_w): lays W_self and W_neigh side by
  // side for a training step or an evaluation.
  void lay_weights_side_by_side();
  void backward_layer(const LayerSpec& layer, PassKind kind);
  void end_forward_early();
  void take_times(PhaseTimes& times, std::vector<PhaseTimes>& per_device,
                  std::vector<TimelineRange>* timeline);
  static std::int32_t pass_tag_of(PassKind kind, int layer) {
    return (int(kind) * kTagLayers + layer) * kTagBatches;
  }
  void begin_pass(PassKind kind, int layer) {
    pass_tag = pass_tag_of(kind, layer);
    ++pass_serial;
  }
  // The fused pass of a GAT model works in each device's last-layer attention buffers where it
  // has them (DeviceState::last_layer_attention): swapped in before the pass, out after it.
  void swap_last_layer_attention() {
    for (DeviceState& s : dev) {
      DeviceState::AttentionBuffers& kept = s.last_layer_attention;
      if (!kept.allocated()) continue;
      std::swap(s.Zm, kept.Zm);
      std::swap(s.el, kept.el);
      std::swap(s.er, kept.er);
      std::swap(s.alpha, kept.alpha);
    }
  }
  std::int32_t tag(int c) const { return pass_tag + c; }
  // The pass after the one about to run (nullptr: none, or it loads nothing).
  void set_next_head(const LayerSpec* layer, PassKind kind, NextInputs inputs) {
    next_head = options.overlap ? layer : nullptr;
    next_head_reads_outputs = inputs == NextInputs::kWrittenByThisPass;
    next_head_tag = layer ? pass_tag_of(kind, layer->index) : 0;
  }
  // Phase boundary. Devices order their cross-device work pairwise (wait_peer on the markers of
  // schedule_state.hpp: a device waits only for the peers whose rows it reads or overwrites);
  // synchronize_phases blocks the host instead.
  void phase_boundary() {
    if (options.synchronize_phases) backend.synchronize_all();
  }
  void wait_peers(Device& d, const std::vector<int>& peers, Marker marker) {
    for (int q : peers) d.wait_peer(*dev[std::size_t(q)].device, marker);
  }
  // Layer boundary: every lane of every device done (host matrices complete).
  void drain() { backend.synchronize_all(); }
  // The end of a pass that another of the same sequence follows: drain(), or with
  // runs_through_passes() the same order per device without the host: the transfer and store
  // lanes' work so far precedes the compute lane's next work and the reverse, and no device
  // waits for another (the next pass's loads wait for the peers' pulls of this one,
  // load_phase()).
  void end_pass() {
    if (runs_through_passes())
      join_lanes(SideLanes::kTransferAndStore);
    else
      drain();
  }
  // The lanes join_lanes() joins with each device's compute lane.
  enum class SideLanes { kTransfer, kTransferAndStore };
  void join_lanes(SideLanes sides);

  // ---- Setup (schedule_setup.cpp) ----

  // `releasable`, `releasable_plan`: the dataset and the plan themselves when setup may release
  // their parts (InputRelease::kDatasetAndPlanLists), else null.
  void setup(const Dataset& dataset, Dataset* releasable, Plan* releasable_plan);
  void allocate_host_matrices(const Dataset& dataset, Dataset* releasable);
  void setup_devices(std::vector<ChunkLists>& lists);
  void place_vertex_data();
  // The member of H, G or A_cache that holds `shape`'s matrix, and device s's view of it.
  HostMat& host_matrix(const HostMatrixShape& shape) {
    std::vector<HostMat>& matrices = shape.role == HostMatrixRole::kInput      ? H
                                     : shape.role == HostMatrixRole::kGradient ? G
                                                                               : A_cache;
    return matrices[std::size_t(shape.layer)];
  }
  static HostMat& vertex_view(DeviceState& s, const HostMatrixShape& shape) {
    std::vector<HostMat>& views = shape.role == HostMatrixRole::kInput      ? s.vertex.H
                                  : shape.role == HostMatrixRole::kGradient ? s.vertex.G
                                                                            : s.vertex.A;
    return views[std::size_t(shape.layer)];
  }
  // Whether every device's host-matrix transfers touch only its own partition's rows: one
  // partition, or the p2p modes (VertexViews).
  bool reads_own_rows_only() const { return P == 1 || options.comm != CommMode::kBaseline; }
  void place_evaluation_aggregation();
  void place_kept_outputs();
  // Whether the pulls of a layer above 0 read the owners' resident input rows (T^l in fp32 in
  // their memory) in place of their transition buffers: every device has one chunk whose slots
  // are its rows (DeviceState::loads_in_row_order), and the loads apply no dropout (T rows had it
  // before the transform). Then a pull waits only for the owner's rows of the pass before, not
  // for its load, and runs on the transfer lane beside the device's own load (pull_phase()).
  bool pulls_resident_rows(const LayerSpec& layer) const {
    if (layer.index == 0 || P == 1 || gat() || !pretransformed(layer) ||
        options.comm == CommMode::kBaseline)
      return false;
    return std::all_of(dev.begin(), dev.end(), [&](const DeviceState& s) {
      return s.loads_in_row_order &&
             !resident_rows(s.vertex.H[std::size_t(layer.index)], s.chunks[0]).empty();
    });
  }
  // Whether `layer`'s pass is the training forward right below the fused pass on one chunk a
  // device: layer 0 of two. Its outputs may go straight where that pass reads them
  // (sends_transforms(), writes_transforms_into_slots()).
  bool feeds_fused_pass(const LayerSpec& layer) const {
    return training && layer.index == 0 && model.layers.size() == 2 && C == 1;
  }
  // Whether batch c of `layer`'s pass finds its own T rows in their slots and its peers' rows
  // sent there, by this step's forward below (writes_transforms_into_slots(),
  // sends_transforms()): the fused pass's, which that forward always precedes in a step.
  bool finds_transforms_in_slots(const LayerSpec& layer, int c) const {
    return layer.index == 1 && c == 0 && writes_transforms_into_slots(model.layers[0]);
  }
  bool finds_transforms_sent(const LayerSpec& layer, int c) const {
    return layer.index == 1 && c == 0 && sends_transforms(model.layers[0]);
  }
  // Whether the training forward of `layer` sends the next layer's T rows into the peers' slots
  // as soon as it has written them (send_transforms()), where pulls_resident_rows() would have
  // each peer pull them at the next pass's start: two layers on one chunk a device, the pass
  // between (layer 0's forward) leaving the peers' transformed rows alone (layer 0 aggregates
  // first), and every device's pulls its pushes (DeviceState::pulls_are_pushes: its rows' owners
  // hold their lists as received_rows).
  bool sends_transforms(const LayerSpec& layer) const {
    if (!feeds_fused_pass(layer) || transforms(layer)) return false;
    return pulls_resident_rows(model.layers[1]) &&
           std::all_of(dev.begin(), dev.end(),
                       [](const DeviceState& s) { return s.pulls_are_pushes; });
  }
  void send_transforms(DeviceState& s, const LayerSpec& next, Mat rows, std::size_t range,
                       Mat staging);
  // The width rows of `cols` floats go with from a one-chunk device into its peers' slots: with
  // their padding to 16 bytes where the source (leading dimension source_ld) and every peer's
  // merged buffer have it (no reader looks at it), so that each row moves in 16-byte words.
  std::int64_t sent_width(const DeviceChunk& ch, std::int64_t source_ld, std::int64_t cols) const;
  // The rows of peer r.pusher's merged buffer (Zm) that hold device `owner`'s rows it reads, in
  // r's order (one run of slots), `width` floats wide; empty where it has no slots for them.
  Mat peer_slots(const schedule_detail::ReceivedRows& r, int owner, std::int64_t width);
  // Whether the training pass of `layer` (the fused last layer) sends its loss gradients to the
  // owners of the vertices its loss rows read, whose transposed products take them, instead of
  // pushing its transposed product's rows of those vertices (LossRowExchange).
  bool sends_loss_gradients(const LayerSpec& layer) const {
    return training && layer.last && loss_gradients_sent;
  }
  void send_loss_gradients(int p, const LayerSpec& layer);
  // Where the fused pass's loss gradient of a chunk's `rows` rows goes: the set's dZ, or where
  // it goes to its owners (sends_loss_gradients()), the merged buffer's own rows of the chunk's
  // T (read by then), whose remote slots receive the peers' gradients: the transposed product
  // reads both as one matrix.
  Mat loss_gradient_rows(DeviceState& s, const LayerSpec& layer, BlockSet& set,
                         std::int64_t rows) const {
    return schedule_detail::rows_of(sends_loss_gradients(layer) ? s.Zm : set.dZ, rows,
                                    layer.out_width);
  }
  // Whether the training forward of `layer` writes the next layer's T rows straight into the
  // device's transition slots of its own rows (where the fused pass would copy them from the
  // resident T^{l+1} first) and leaves T^{l+1} as it was: two layers on one chunk a device whose
  // slot i holds its vertex i, with T^1 resident in fp32, a layer 0 that leaves the slots alone
  // (aggregating first, or GAT's attending over its inputs), and on several partitions the rows
  // sent to the peers from there (sends_transforms()), so that nothing reads T^1 before the
  // next forward (an evaluation's included) writes it again.
  bool writes_transforms_into_slots(const LayerSpec& layer) const {
    if (!feeds_fused_pass(layer) || (transforms(layer) && !attends_inputs(layer)) ||
        !stores_transform(layer) || !runs_through_passes() || !pretransformed(model.layers[1]))
      return false;
    if (P > 1 && !sends_transforms(layer)) return false;
    const std::int64_t written = output_width(layer);
    return std::all_of(dev.begin(), dev.end(), [&](const DeviceState& s) {
      const HostMat& T = s.vertex.H[1];
      return s.loads_in_row_order && fused_slots(s).cols >= written && T.cols == written &&
             !resident_rows(T, s.chunks[0]).empty();
    });
  }
  // The transition slots of the fused pass's rows: GAT's last layer's own where the device has
  // them (swap_last_layer_attention() brings them in for that pass), else Zm.
  static const Mat& fused_slots(const DeviceState& s) {
    return s.last_layer_attention.allocated() ? s.last_layer_attention.Zm : s.Zm;
  }
  // Layers whose pulls a device may take from its own copy of the remote feature rows
  // (RemoteFeatures): layer 0 where it exchanges input rows (GCN, SAGE, GAT attending over its
  // input rows) between partitions.
  bool pulls_features(const LayerSpec& layer) const {
    return layer.index == 0 && P > 1 && options.comm != CommMode::kBaseline &&
           (!transforms(layer) || attends_inputs(layer));
  }
  void place_remote_features();
  // Whether a training step queues the next step's layer-0 input rows into X as soon as its
  // forward 0 has read them (prefetch_next_step_inputs()), instead of copying them on the
  // compute lane when the next step begins: one batch a device, passes that run through, a
  // layer 0 that aggregates first and reads X in its forward alone (the backward takes the kept
  // aggregation), layers above that take transformed rows (Zm), and devices that hold their
  // input rows in fp32 and copies of their remote feature rows, so that nothing but the next
  // layer-0 load touches X and no peer reads it.
  bool prefetches_next_step_inputs() const;
  void prefetch_next_step_inputs(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer);
  // load_phase(), layer 0: whether X holds the batch's rows with the running pass's dropout,
  // queued by the step before (the compute lane waits for them either way: any other load
  // overwrites them).
  bool takes_next_step_inputs(DeviceState& s);
  // The device's copies of the chunk's remote feature rows into their X rows, with `key`'s dropout.
  void copy_remote_features(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                            const DropoutKey& key);
  // Frees every host matrix whose rows all devices hold (place_vertex_data()).
  void release_resident_host_matrices();
  // Layers whose training forward may keep its output rows for the backward pass
  // (LayerOutputs): GCN's and SAGE's ReLU layers whose outputs the next layer transforms.
  bool may_keep_outputs(const LayerSpec& layer) const {
    return !gat() && stores_transform(layer) && layer.activation == Activation::kRelu;
  }
  // A GCN or SAGE ReLU layer's output rows for the chunk where the forward stored them into a
  // device-resident fp32 H^{l+1} (the next layer aggregates them as they are); empty otherwise.
  Mat resident_output_rows(const DeviceState& s, const DeviceChunk& ch,
                           const LayerSpec& layer) const {
    if (!training || gat() || layer.last || stores_transform(layer) ||
        layer.activation != Activation::kRelu)
      return Mat{};
    const Mat rows = resident_rows(s.vertex.H[std::size_t(layer.index) + 1], ch);
    return rows.empty() ? rows : rows.col_block(0, layer.out_width);
  }
  // The chunk's rows of the layer's kept outputs in a training pass; empty where not kept.
  Mat kept_output_rows(const DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer) const {
    const std::size_t i = std::size_t(layer.index);
    if (!training || i >= s.kept_outputs.size() || s.kept_outputs[i].empty()) return Mat{};
    return s.kept_outputs[i].row_block(ch.dst_begin - s.kept_first_row, ch.num_dst);
  }
  // Whether this forward pass of `layer` takes its aggregation from the evaluation cache, and
  // whether it writes the cache.
  bool reads_evaluation_aggregation(const LayerSpec& layer) const {
    return !training && layer.index == 0 && evaluation_aggregation_ready;
  }
  bool writes_evaluation_aggregation(const LayerSpec& layer) const {
    return !training && layer.index == 0 && !evaluation_aggregation_ready &&
           std::any_of(dev.begin(), dev.end(), [](const DeviceState& s) {
             return !s.evaluation_aggregation.empty() || !s.evaluation_aggregation_on_host.empty();
           });
  }
  // For the running evaluation (EvaluationOutputs::kTrainingBuffersWhereTheyFit): each device's
  // views of H[l], l >= 1, that are fp32 host memory move into its block sets' dZ buffers,
  // narrowest first, each into the smallest free one that holds it, zero-filled (T rows' pad
  // columns start at 0, as in the host matrix); what they leave of the dZ buffers, and dX, dA,
  // dZm, the flush and receive buffers, are lent to the device for chunk CSRs
  // (EvaluationCsrs::kKeptWhereTheyFit, models of several layers). Every lane is idle before and
  // after an evaluation, and no evaluation pass touches those buffers.
  // return_training_buffers() puts the host views back and releases the CSR space.
  void lend_training_buffers();
  void return_training_buffers();
  // An evaluation's passes before its last keep the chunk CSRs they prefetch in the lent space
  // (EvaluationCsrs::kKeptWhereTheyFit): the next pass reads them again.
  CsrReuse csr_reuse(const DeviceState& s, const LayerSpec& layer) const {
    return !training && s.csr_space_lent && layer.index + 1 < model.num_layers() ? CsrReuse::kAgain
                                                                                 : CsrReuse::kOnce;
  }
  bool training_buffers_logged = false;
  // The first evaluation's host-memory cache (evaluation_cache_on_host), where host memory allows.
  void allocate_evaluation_host_cache();
  // A chunk's rows of layer 0's evaluation aggregation: read in place from the device's cache, or
  // loaded from host memory into the block set; and the rows an evaluation keeps there.
  Mat evaluation_rows(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int p,
                      BlockSet& set);
  void keep_evaluation_rows(DeviceState& s, const DeviceChunk& ch, int p, Mat A);
  std::vector<vertex_t> split_next_pass_head(DeviceState& s, int p, const ChunkLists& first);
  std::size_t allocate_device_buffers(DeviceState& s, int p, const PartitionLayout& layout,
                                      const DeviceSizes& sizes,
                                      const std::vector<vertex_t>& head_block_rows);
  void upload_device_constant(DeviceState& s, const BufferSpec& b, const DeviceSizes& sizes,
                              const std::vector<vertex_t>& head_block_rows,
                              const std::string& where);
  std::size_t upload_chunks(DeviceState& s, int p, const std::vector<BufferSpec>& buffers,
                            std::size_t next, std::vector<ChunkLists>& lists);
  // Uploads one of a chunk's constants (the CSR takes li's column degrees).
  void upload_chunk_constant(DeviceState& s, const BufferSpec& b, const ChunkPlan& cp,
                             ChunkLists& li, DeviceChunk& ch, const std::string& where);
  void link_peers();
  void build_row_groups();
  void upload_tails(const std::vector<std::vector<TailLists>>& tails,
                    const std::vector<std::vector<BufferSpec>>& tail_buffers);

  // ---- Transfers (schedule_transfers.cpp) ----

  void load_phase(const LayerSpec& layer, int c, const BatchSteps& steps);
  void prefetch(const LayerSpec& layer, int c, const BatchSteps& steps);
  void load_stage_part(DeviceState& s, int c, const LayerSpec& layer, std::int64_t begin,
                       std::int64_t end);
  void prefetch_next_head();
  void copy_head_rows(DeviceState& s, const LayerSpec& layer);
  void load_head_from_block(DeviceState& s, const LayerSpec& layer, Mat X, const DropoutKey& key);
  bool ends_early(const LayerSpec& layer) const;
  void load_blocks(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set,
                   BlockRows rows);
  void load_host_blocks(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                        BlockSet& set, HostBlocks which);
  void preload_next_blocks(const LayerSpec& layer);
  void preload_aggregation_blocks(const LayerSpec& layer);
  void pull_phase(const LayerSpec& layer, int c);
  void store_blocks(int p, int c, const LayerSpec& layer, BlockSet& set, int k);

  void push_phase(const LayerSpec& layer, int c);
  void flush_phase(const LayerSpec& layer, int c);
  void flush_rows(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c);
  void flush_leave_buffer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c);

  // ---- Chunk compute (schedule_compute.cpp) ----

  void compute_phase(const LayerSpec& layer, int c, PassKind kind);
  std::optional<CsrAccess> products_read(const LayerSpec& layer, PassKind kind) const;
  Mat forward_aggregation(int p, int c, const LayerSpec& layer, BlockSet& set);
  void forward_compute(int p, int c, const LayerSpec& layer, BlockSet& set, Mat A);
  void backward_compute(int p, int c, const LayerSpec& layer, BlockSet& set, PassKind kind);
  void aggregate_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat A,
                          Mat dZ);
  void gat_layer_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat dZ,
                          Mat O, Mat head_dots);
  Mat aggregate(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set);
  Mat gat_layer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat O);
  void gat_coefficients_again(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer);
  void gat_input_scores(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer);
  Mat gat_input_layer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat O);
  void gat_input_layer_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                Mat dO, Mat O, Mat head_dots);
  // The chunk rows' head dots dO^h . O^h of a layer attending over its inputs (nd x K), the
  // columns of s.input_sums after the weighted sums.
  static Mat input_head_dots(DeviceState& s, const LayerSpec& layer, std::int64_t nd) {
    const std::int64_t sums = layer.heads * layer.in_width;
    return Mat{s.input_sums.data + sums, nd, layer.heads, s.input_sums.ld};
  }
  SourceScores take_source_scores(DeviceState& s);
  void aggregate_transformed(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat Z);
  void aggregate_transformed_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                      Mat dZ);
  Mat layer_preactivation(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat A,
                          Activation applied, Mat Z, const DropoutKey& dropout = DropoutKey{});
  void transform_outputs(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat H,
                         Mat out, std::int64_t first_row);
  void transform_outputs_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                  BlockSet& set, Mat rows, OutputRows kind, Mat dZ, Mat head_dots);
  void transform_arrivals(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer);
  void transform_reloaded_arrivals(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                   int c);
  void update_source_scores(DeviceState& s, const LayerSpec& layer, Idx rows, int c);
  void transform_flush(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c);
};

}  // namespace sluice
