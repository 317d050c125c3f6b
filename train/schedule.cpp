// Implementation of train/schedule.hpp. Setup derives, from the plan, the index lists of the
// chosen transfer scheme (schedule_lists.hpp, which checks every plan index on the way by
// simulating the slot contents of every device across batches), uploads them once per chunk, and
// then runs the phases of each batch on all devices. A device waits only for the peers it reads
// from or writes into (pulls after the owner's load, the owner's next load after the pulls, pushes
// after the owner's compute, flushes after the pushes); transfers that need no cross-device order
// run on the transfer and store lanes, ordered by markers.
#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/log.hpp"
#include "train/schedule_lists.hpp"

namespace sluice {

CommMode parse_comm_mode(const std::string& name) {
  if (name == "baseline") return CommMode::kBaseline;
  if (name == "p2p") return CommMode::kP2p;
  if (name == "p2p+reuse") return CommMode::kP2pReuse;
  throw InputError(cat("unknown --comm '", name, "' (expected baseline, p2p or p2p+reuse)"));
}

const char* pass_kind_name(PassKind kind) {
  switch (kind) {
    case PassKind::kForward:
      return "forward";
    case PassKind::kBackward:
      return "backward";
    case PassKind::kEvaluate:
      return "evaluate";
    case PassKind::kFused:
      return "fused";
  }
  return "?";
}

std::string comm_mode_name(CommMode mode) {
  switch (mode) {
    case CommMode::kBaseline:
      return "baseline";
    case CommMode::kP2p:
      return "p2p";
    case CommMode::kP2pReuse:
      return "p2p+reuse";
  }
  return "?";
}

using namespace schedule_detail;

namespace {

struct DevicePeerRows {
  int owner = 0;
  Idx owner_rows, local_rows;
};

struct DeviceChunk {
  vertex_t dst_begin = 0, num_dst = 0;
  std::int64_t nnz = 0;
  Csr csr;
  Mat values;
  Idx self_columns;
  Idx load_vertices, load_rows, load_keys;
  std::vector<DevicePeerRows> pulls, pushes;
  Idx remote_rows;
  Idx leave_vertices, leave_rows, leave_keys;
  std::int64_t leave_store_count = 0;
  Idx dst_keys, labels, train_mask;
  // The previous backward pass's tail rows whose destinations are in this chunk (TailLists):
  // positions in dX (or the flush buffer) and in the block, the first tail_assign of them
  // copied over the block, the rest added to it.
  Idx tail_src, tail_dst;
  std::int64_t tail_assign = 0;
  // Peers whose chunk of the same batch pulls rows from this device's X / pushes gradient rows
  // into its dX (cross-device order: wait_peer).
  std::vector<int> pulled_by, pushed_by;
};

// Chunk block buffers: aggregation, layer output and output gradient of one chunk (A^l, H^{l+1}
// and G^{l+1} blocks). A second set lets one chunk's blocks be stored or prefetched while the
// other chunk computes.
struct BlockSet {
  Mat A, out, dZ;
};

// Markers (Device::mark/wait) of one device; "+ k" for block set k.
enum Marker : int {
  kStageReady = 0,  // transfer lane: next batch's loads are in the stage
  kStageFree = 1,   // compute lane: the stage was scattered into X
  kSetReady = 2,    // + k, transfer lane: backward blocks prefetched into set k
  kComputed = 4,    // + k, compute lane: the chunk using set k is computed
  kStored = 6,      // + k, store lane: set k's blocks are in host memory
  kLeaveReady = 8,  // compute lane: leaving gradient rows compacted
  kLeaveFree = 9,   // store lane: compacted rows flushed into G^l
  // Cross-device order (peers wait on these with wait_peer), all on the compute lane:
  // (GAT: Zm and dZm in place of X and dX.)
  kLoaded = 10,         // batch's rows in X (peers may pull), arrivals' dX rows zeroed
  kPulled = 11,         // batch's pulls read the owners' X (owners may overwrite it)
  kBatchComputed = 12,  // backward compute wrote dX (peers may push into it)
  kPushed = 13,         // batch's pushes added into the owners' dX (owners may flush)
};

struct DeviceState {
  Device* device = nullptr;
  std::int64_t merged_rows = 0;
  Mat X, dX;         // merged transition buffer and its gradient
  BlockSet sets[2];  // chunk block buffers (max chunk rows); sets[1] optional
  int num_sets = 1;
  Mat stage;  // optional: the next batch's loads, compact (max loads)
  // Positions [head_split_begin, head_split_end) of chunk 0's load list: the vertices of this
  // device's last chunk, whose rows of a layer output are written last in a forward pass.
  std::int64_t head_split_begin = 0, head_split_end = 0;
  // The stage holds batch 0's rows of the coming pass except positions [head_pending_begin,
  // head_pending_end), loaded during the previous pass (prefetch_next_head()).
  bool head_prefetched = false;
  std::int64_t head_pending_begin = 0, head_pending_end = 0;
  // Rows of the last chunk's output block that positions [head_split_begin, head_split_end)
  // load (Impl::ends_early(); empty without a stage or in baseline mode), and
  // whether the last forward pass's stores may still run (the next pass takes those rows from
  // the block, and its transfer lane waits for the stores before any host read).
  Idx head_rows;
  bool stores_running = false;
  Mat leave;                        // optional: leaving gradient rows, compact (max leaves)
  Idx iota;                         // 0, 1, ... (positions in `leave`)
  Idx chunk_iota;                   // 0, 1, ... (chunk rows: transform_outputs())
  Mat dA, Z;                        // chunk work buffers (max chunk rows)
  Mat Zm, dZm, el, er, alpha, gat;  // GAT: merged transforms and attention intermediates
  // GAT: rows [0, transform_region) of Zm may be transformed in one GEMM (the transition slots;
  // every merged row in baseline mode, where no remote row is kept between batches); slices of at
  // most slice_x.rows gathered rows (transforms of arrivals, flush-time products) and their
  // positions 0, 1, ... (slice_iota).
  std::int64_t transform_region = 0;
  Mat slice_x, slice_z;
  Idx slice_iota;
  Mat params, grads, adam_m, adam_v;
  // Layer 1's backward pass keeps its last batch's leaving rows on this device (in dX, for GAT
  // in the flush buffer) for layer 0's G^1 blocks (Impl::keeps_tail()).
  bool keep_tail = false;
  // The host rows of the coming backward pass's first chunk blocks are in sets[0]
  // (Impl::preload_next_blocks()).
  bool first_blocks_preloaded = false;
  // GAT source scores: el holds the scores of every merged row's Zm for pass `scores_pass`,
  // kept current by the load and pull phases (scores of the rows they write), unless a
  // transform over the whole region made them stale (gat_layer() then computes every row's).
  int scores_pass = -1;
  bool scores_stale = true;
  std::vector<DeviceChunk> chunks;
  double loss_sum = 0;
};

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

// Rows per GAT slice (transforms of arrivals, flush-time products): large enough for efficient
// GEMMs, small next to the merged buffer.
constexpr std::int64_t kSliceRows = 65536;

// A row width rounded up to a multiple of 4 floats (16-byte rows).
std::int64_t aligned_width(std::int64_t cols) {
  return (cols + 3) / 4 * 4;
}

Mat rows_of(Mat m, std::int64_t rows, std::int64_t cols) {
  return m.row_block(0, rows).col_block(0, cols);
}

// Positions [begin, end) of an index list.
Idx part(Idx idx, std::int64_t begin, std::int64_t end) {
  return Idx{idx.data + begin, end - begin};
}

// What every batch of a pass does besides its compute (Impl::forward_layer(),
// Impl::backward_layer()).
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
};

// Where the pass after the running one reads its first batch's rows: rows the running (forward)
// pass writes, or rows complete in host memory.
enum class NextInputs { kWrittenByThisPass, kComplete };

// Whether a backward block set's host rows still have to load or are there already
// (Impl::preload_next_blocks()).
enum class BlockRows { kFromHost, kPreloaded };

// Device::copy_rows: copy over the destination rows, or add into them.
constexpr bool kCopyOver = false, kAddInto = true;

// The dense products of the layers (Device::gemm with its transposes named).
void multiply(Device& d, Mat a, Mat b, Mat out) {  // out = a b
  d.gemm(false, false, 1.f, a, b, 0.f, out);
}
void multiply_by_transpose(Device& d, Mat a, Mat b, Mat out) {  // out = a b^T
  d.gemm(false, true, 1.f, a, b, 0.f, out);
}
void add_transposed_product(Device& d, Mat a, Mat b, Mat out) {  // out += a^T b
  d.gemm(true, false, 1.f, a, b, 1.f, out);
}

}  // namespace

struct Schedule::Impl {
  Backend& backend;
  const Plan& plan;
  const ModelSpec& model;
  ScheduleOptions options;
  int P = 1, C = 1;
  vertex_t n = 0;
  float loss_scale = 0.f;
  std::vector<HostMat> H;        // H[l], l = 0..L-1 (H[0] = features, renumbered)
  std::vector<HostMat> G;        // G[l], l = 1..L-1 (G[0] unused; G^L stays on the device)
  std::vector<HostMat> A_cache;  // A[l] in cache mode
  std::vector<DeviceState> dev;
  std::vector<std::int32_t> predictions;
  std::int64_t epoch = 0;
  bool training = false;
  // The pass after the running one when it loads batch 0's rows (from H[next_head->index]):
  // prefetch_next_head() puts them into the stage during the running pass's last batch.
  // next_head_reads_outputs: it reads the running forward pass's outputs (H^{l+1}), so the
  // rows of each device's last chunk wait for the next pass's start.
  const LayerSpec* next_head = nullptr;
  bool next_head_reads_outputs = false;
  bool tail_in_leave = false;  // tail_rows()
  std::int32_t next_head_tag = 0;
  // Timer tags: (pass kind, layer) of the running pass and the batch (tag()).
  static constexpr std::int32_t kTagBatches = 1 << 20, kTagLayers = 256;
  std::int32_t pass_tag = 0;
  int pass_serial = 0;  // passes begun (begin_pass()): DeviceState::scores_pass

  Impl(Backend& b, const Plan& p, const ModelSpec& m, const ScheduleOptions& o)
      : backend(b), plan(p), model(m), options(o) {}

  static std::int32_t pass_tag_of(PassKind kind, int layer) {
    return (int(kind) * kTagLayers + layer) * kTagBatches;
  }
  void begin_pass(PassKind kind, int layer) {
    pass_tag = pass_tag_of(kind, layer);
    ++pass_serial;
  }
  // The pass after the one about to run (nullptr: none, or it loads nothing).
  void set_next_head(const LayerSpec* layer, PassKind kind, NextInputs inputs) {
    next_head = options.overlap ? layer : nullptr;
    next_head_reads_outputs = inputs == NextInputs::kWrittenByThisPass;
    next_head_tag = layer ? pass_tag_of(kind, layer->index) : 0;
  }
  std::int32_t tag(int c) const { return pass_tag + c; }

  // GAT and transform-first GCN layers have no aggregation to cache (aggregate_width 0).
  bool recompute(const LayerSpec& layer) const {
    return layer.aggregate_width == 0 || !options.cache_intermediates;
  }
  DropoutKey feature_key(int layer) const {
    return DropoutKey{options.seed, epoch, layer, training ? options.dropout : 0.f};
  }
  DropoutKey attention_key(int layer) const {
    return DropoutKey{options.seed, epoch, layer, training ? options.attention_dropout : 0.f};
  }
  Mat param(DeviceState& s, std::int64_t offset, std::int64_t rows, std::int64_t cols) const {
    return Mat{s.params.data + offset, rows, cols, cols};
  }
  Mat grad(DeviceState& s, std::int64_t offset, std::int64_t rows, std::int64_t cols) const {
    return Mat{s.grads.data + offset, rows, cols, cols};
  }

  // Phase boundary. Devices order their cross-device work pairwise (wait_peer on the markers
  // above: a device waits only for the peers whose rows it reads or overwrites);
  // synchronize_phases blocks the host instead.
  void phase_boundary() {
    if (options.synchronize_phases) backend.synchronize_all();
  }
  void wait_peers(Device& d, const std::vector<int>& peers, Marker marker) {
    for (int q : peers) d.wait_peer(*dev[std::size_t(q)].device, marker);
  }

  bool gat() const { return model.kind == ModelKind::kGat; }
  // Layers whose rows are transformed by their owner on arrival (Zm = X W) and exchanged
  // transformed: GAT's, and GCN's last layer when it narrows (LayerSpec::transform_first).
  bool transforms(const LayerSpec& layer) const { return gat() || layer.transform_first; }

  // The rows devices exchange: pulls copy the owners' rows of X, pushes add into the owners'
  // rows of dX. GAT exchanges transformed rows instead (Zm = X W, computed once by the owner,
  // and their gradients dZm): a peer needs no X row of a remote vertex, and the owner applies
  // the backward of the transform (transform_arrivals(), transform_flush()).
  Mat exchanged_rows(DeviceState& s, const LayerSpec& layer) const {
    return transforms(layer) ? s.Zm.col_block(0, layer.transform_width)
                             : s.X.col_block(0, layer.in_width);
  }
  Mat exchanged_gradient(DeviceState& s, const LayerSpec& layer) const {
    return transforms(layer) ? s.dZm.col_block(0, layer.transform_width)
                             : s.dX.col_block(0, layer.in_width);
  }

  // Transforming layers above layer 0 get their inputs transformed by the forward pass below:
  // H[l] holds T^l = dropout(H^l) W_l, loads fill Zm directly, and leaving rows flush their dZm
  // rows into G[l] (dT^l). Rows of T^l are transform_width wide instead of d_l (products GCN:
  // 48 floats instead of 256).
  bool pretransformed(const LayerSpec& layer) const { return layer.index > 0 && transforms(layer); }
  // Layer 0 of a transforming model (GAT's; a one-layer GCN's when it narrows) transforms its
  // rows on arrival (transform_arrivals()) and applies the transform's backward when they leave
  // (transform_flush()).
  bool transforms_on_arrival(const LayerSpec& layer) const {
    return transforms(layer) && !pretransformed(layer);
  }
  const LayerSpec* above(const LayerSpec& layer) const {
    return layer.last ? nullptr : &model.layers[std::size_t(layer.index) + 1];
  }
  // Layers whose input rows are not kept in X (ScheduleOptions::reload_inputs): they transform
  // on arrival, and their leaving rows' weight gradients read the rows from host memory again.
  bool reloads_inputs(const LayerSpec& layer) const {
    return options.reload_inputs && transforms_on_arrival(layer);
  }
  // The forward pass of `layer` stores the next layer's T rows, and its backward pass takes dT
  // blocks (transform_outputs(), transform_outputs_backward()).
  bool stores_transform(const LayerSpec& layer) const {
    const LayerSpec* next = above(layer);
    return next && pretransformed(*next);
  }
  // Width of a layer's input rows in host memory (H[l]) and in loads: T rows are padded to 16
  // bytes (their pad column stays 0).
  std::int64_t input_width(const LayerSpec& layer) const {
    return pretransformed(layer) ? aligned_width(layer.transform_width) : layer.in_width;
  }
  // Width of the gradient rows a layer flushes into G[l] (dT^l or G^l).
  std::int64_t flushed_width(const LayerSpec& layer) const {
    return pretransformed(layer) ? layer.transform_width : layer.in_width;
  }
  // Where a layer's loads land: Zm for pretransformed layers, X otherwise.
  Mat input_rows(DeviceState& s, const LayerSpec& layer) const {
    return pretransformed(layer) ? s.Zm.col_block(0, input_width(layer))
                                 : s.X.col_block(0, layer.in_width);
  }
  // Where layer 1's backward pass keeps its tail (keeps_tail()): in the flush buffer when layer 0
  // writes the buffer the rows accumulate in (GAT's dZm), else in that buffer (dX, or dZm of a
  // pretransformed layer 1).
  Mat tail_rows(DeviceState& s) const {
    const LayerSpec& one = model.layers[1];
    const Mat m = tail_in_leave ? s.leave : pretransformed(one) ? s.dZm : s.dX;
    return m.col_block(0, flushed_width(one));
  }

  // GAT: Zm rows of the batch's arrivals = their X rows W. Rows that stay keep their transforms
  // (X and W are fixed within a pass), so each row is transformed once per stay, not once per
  // batch. When at least half the transform region arrives, one GEMM over it is cheaper than
  // gathering; otherwise slices of arrivals are gathered, multiplied and scattered.
  void transform_arrivals(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer) {
    Device& d = *s.device;
    const std::int64_t n = ch.load_rows.size, R = s.transform_region;
    const Mat W = param(s, layer.w_offset, layer.w_rows, layer.w_cols);
    const Mat X = s.X.col_block(0, layer.in_width);
    const Mat Zm = s.Zm.col_block(0, layer.transform_width);
    if (2 * n >= R) {
      multiply(d, X.row_block(0, R), W, Zm.row_block(0, R));
      s.scores_stale = true;  // the rows that stayed may round differently in this product
      return;
    }
    for (std::int64_t b = 0; b < n; b += s.slice_x.rows) {
      const std::int64_t e = std::min(n, b + s.slice_x.rows);
      const Idx rows = part(ch.load_rows, b, e);
      const Mat x = rows_of(s.slice_x, e - b, layer.in_width);
      const Mat z = rows_of(s.slice_z, e - b, layer.transform_width);
      d.gather_rows(X, rows, x);
      multiply(d, x, W, z);
      d.scatter_rows(z, rows, Zm);
    }
  }

  // GAT: the source scores of merged rows whose Zm the batch wrote (arrivals, pulled rows), once
  // the pass's scores are current (the first chunk's gat_layer() computes every row's).
  void update_source_scores(DeviceState& s, const LayerSpec& layer, Idx rows, int c) {
    if (!gat() || rows.size == 0 || s.scores_pass != pass_serial || s.scores_stale) return;
    Device& d = *s.device;
    d.phase_begin(Phase::kCompute, tag(c));
    d.gat_source_scores(rows_of(s.Zm, s.merged_rows, layer.transform_width), rows,
                        s.params.data + layer.att_src_offset, layer.heads,
                        rows_of(s.el, s.merged_rows, layer.heads));
    d.phase_end(Phase::kCompute);
  }

  // Arrivals of a layer that keeps no input rows (reloads_inputs()): slices of the batch's
  // loads, from the stage or gathered from host memory into slice_x, get their dropout and
  // transform, and their Zm rows are scattered into place.
  void transform_reloaded_arrivals(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                   int c) {
    Device& d = *s.device;
    const std::int64_t n = ch.load_rows.size, in = layer.in_width, KF = layer.transform_width;
    const Mat W = param(s, layer.w_offset, layer.w_rows, layer.w_cols);
    const Mat Zm = s.Zm.col_block(0, KF);
    const DropoutKey key = feature_key(layer.index);
    const bool staged = !s.stage.empty();
    if (staged) d.wait(kStageReady);
    for (std::int64_t b = 0; b < n; b += s.slice_x.rows) {
      const std::int64_t e = std::min(n, b + s.slice_x.rows), len = e - b;
      Mat x = rows_of(s.slice_x, len, in);
      if (staged) {
        x = s.stage.row_block(b, len).col_block(0, in);
      } else {
        d.phase_begin(Phase::kLoad, tag(c));
        d.load_rows(H[std::size_t(layer.index)], part(ch.load_vertices, b, e), Idx{}, x);
        d.phase_end(Phase::kLoad);
      }
      d.phase_begin(Phase::kCompute, tag(c));
      if (key.rate > 0)
        d.dropout_rows(x, part(s.slice_iota, 0, len), part(ch.load_keys, b, e), key);
      const Mat z = rows_of(s.slice_z, len, KF);
      multiply(d, x, W, z);
      d.scatter_rows(z, part(ch.load_rows, b, e), Zm);
      d.phase_end(Phase::kCompute);
    }
    if (staged) d.mark(kStageFree);
  }

  // Phase A: transition update (loads of L_c^p, dropout on arrivals; GAT: their transforms); in
  // a backward pass that flushes also zero the gradient rows of arrivals and of the chunk's
  // remote region (GAT: of dZm). With a stage the rows were gathered from host memory ahead
  // (prefetch) and are scattered into X here; then the next batch's prefetch is issued, to run
  // behind this batch's pulls and compute.
  void load_phase(const LayerSpec& layer, int c, const BatchSteps& steps) {
    const bool load_inputs = steps.load_inputs;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      DeviceChunk& ch = s.chunks[std::size_t(c)];
      Device& d = *s.device;
      // New rows overwrite X only after the peers' pulls of the previous batch read it.
      if (load_inputs && c > 0) wait_peers(d, s.chunks[std::size_t(c) - 1].pulled_by, kPulled);
      d.phase_begin(Phase::kLoad, tag(c));
      if (load_inputs && ch.load_rows.size > 0 && !reloads_inputs(layer)) {
        Mat X = input_rows(s, layer);
        if (!s.stage.empty()) {
          d.wait(kStageReady);
          d.scatter_rows(rows_of(s.stage, ch.load_rows.size, X.cols), ch.load_rows, X);
          d.mark(kStageFree);
        } else {
          d.load_rows(H[std::size_t(layer.index)], ch.load_vertices, ch.load_rows, X);
        }
        // T rows had their dropout before the transform (transform_outputs()).
        const DropoutKey key = feature_key(layer.index);
        if (key.rate > 0 && !pretransformed(layer))
          d.dropout_rows(X, ch.load_rows, ch.load_keys, key);
      }
      if (steps.flush_gradients) {
        Mat dX = exchanged_gradient(s, layer);
        if (ch.load_rows.size > 0) d.zero_rows(dX, ch.load_rows);
        if (ch.remote_rows.size > 0) d.zero_rows(dX, ch.remote_rows);
      }
      d.phase_end(Phase::kLoad);
      if (reloads_inputs(layer) && load_inputs && ch.load_rows.size > 0) {
        transform_reloaded_arrivals(s, ch, layer, c);
      } else if (transforms_on_arrival(layer) && load_inputs && ch.load_rows.size > 0) {
        d.phase_begin(Phase::kCompute, tag(c));
        transform_arrivals(s, ch, layer);
        d.phase_end(Phase::kCompute);
      }
      if (load_inputs) update_source_scores(s, layer, ch.load_rows, c);
      d.mark(kLoaded);
    }
    prefetch(layer, c + 1, steps);
    if (c + 1 == C) prefetch_next_head();
    phase_boundary();
  }

  // Rows [begin, end) of chunk c's load list from H[layer] into the same stage rows.
  void load_stage_part(DeviceState& s, int c, const LayerSpec& layer, std::int64_t begin,
                       std::int64_t end) {
    if (end <= begin) return;
    const DeviceChunk& ch = s.chunks[std::size_t(c)];
    s.device->load_rows(H[std::size_t(layer.index)], part(ch.load_vertices, begin, end), Idx{},
                        s.stage.row_block(begin, end - begin).col_block(0, input_width(layer)));
  }

  // Batch 0's pending rows (the vertices of the device's last chunk) from the last forward
  // chunk's output block, where they are what store_blocks() writes to host memory.
  void copy_head_rows(DeviceState& s, const LayerSpec& layer) {
    const int last = C - 1;
    const DeviceChunk& ch = s.chunks[std::size_t(last)];
    const std::int64_t width = input_width(layer);
    const std::int64_t begin = s.head_pending_begin, n = s.head_pending_end - begin;
    s.device->wait(kComputed + last % s.num_sets);
    s.device->gather_rows(rows_of(s.sets[last % s.num_sets].out, ch.num_dst, width), s.head_rows,
                          s.stage.row_block(begin, n).col_block(0, width));
  }

  // During the last batch of a pass, on the transfer lane: batch 0's rows of the next pass into
  // the stage (once this batch's rows left it), so that pass does not start with a load. When
  // the next pass reads this forward pass's outputs, each device's rows wait for its stores of
  // the chunks before the last, and the last chunk's rows (head_split) wait for the next pass.
  void prefetch_next_head() {
    if (!next_head) return;
    const LayerSpec& layer = *next_head;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      const std::int64_t n = s.chunks[0].load_rows.size;
      if (s.stage.empty() || n == 0) continue;
      const std::int64_t begin = next_head_reads_outputs ? s.head_split_begin : n;
      const std::int64_t end = next_head_reads_outputs ? s.head_split_end : n;
      s.head_prefetched = true;
      s.head_pending_begin = begin;
      s.head_pending_end = end;
      if (begin == 0 && end == n) continue;  // every row waits for the next pass
      Device& d = *s.device;
      LaneScope lane(d, Lane::kTransfer);
      d.wait(kStageFree);
      if (next_head_reads_outputs)
        for (int k = 0; k < s.num_sets; ++k) d.wait(kStored + k);  // in order: all stores
      d.phase_begin(Phase::kLoad, next_head_tag);
      load_stage_part(s, 0, layer, 0, begin);
      load_stage_part(s, 0, layer, end, n);
      d.phase_end(Phase::kLoad);
      d.mark(kStageReady);
    }
  }

  // Whether the forward pass of `layer` may end without waiting for its last stores: the next
  // pass reads its outputs, every device loads them through its stage, and the rows the next
  // pass's first batch needs of each device's last chunk can come from the device (head_rows).
  // Not in baseline mode, whose loads read other devices' rows.
  bool ends_early(const LayerSpec& layer) const {
    if (options.comm == CommMode::kBaseline || !next_head || !next_head_reads_outputs ||
        layer.last || reloads_inputs(*next_head))
      return false;
    for (const DeviceState& s : dev) {
      const std::int64_t pending = s.head_pending_end - s.head_pending_begin;
      if (s.chunks[0].load_rows.size == 0) continue;
      if (s.stage.empty() || !s.head_prefetched || s.head_rows.size != pending) return false;
    }
    return true;
  }

  // On the transfer lane: batch c's loads into the stage and (backward) chunk c's G^{l+1} and
  // cached A^l blocks into its block set. Reads only host matrices complete since the last
  // layer boundary.
  void prefetch(const LayerSpec& layer, int c, const BatchSteps& steps) {
    if (c >= C) return;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      DeviceChunk& ch = s.chunks[std::size_t(c)];
      Device& d = *s.device;
      // Batch 0 may be in the stage already but for its pending rows (prefetch_next_head()).
      const bool prefetched = c == 0 && s.head_prefetched;
      if (prefetched) s.head_prefetched = false;
      const bool stage = steps.load_inputs && !s.stage.empty() && ch.load_rows.size > 0 &&
                         (!prefetched || s.head_pending_end > s.head_pending_begin);
      const bool set = steps.load_blocks && s.num_sets > 1 && ch.num_dst > 0;
      if (!stage && !set && !s.stores_running) continue;
      LaneScope lane(d, Lane::kTransfer);
      if (stage) {
        d.wait(kStageFree);
        d.phase_begin(Phase::kLoad, tag(c));
        if (prefetched && s.stores_running)
          copy_head_rows(s, layer);
        else if (prefetched)
          load_stage_part(s, 0, layer, s.head_pending_begin, s.head_pending_end);
        else
          load_stage_part(s, c, layer, 0, ch.load_rows.size);
        d.phase_end(Phase::kLoad);
        d.mark(kStageReady);
      }
      if (s.stores_running) {
        // Everything the transfer lane does from here on may read host rows the stores write.
        for (int k = 0; k < s.num_sets; ++k) d.wait(kStored + k);
        s.stores_running = false;
      }
      if (set) {
        const int k = c % s.num_sets;
        d.wait(kComputed + k);
        d.wait(kStored + k);
        d.phase_begin(Phase::kLoad, tag(c));
        load_blocks(
            s, ch, layer, s.sets[k],
            c == 0 && s.first_blocks_preloaded ? BlockRows::kPreloaded : BlockRows::kFromHost);
        d.phase_end(Phase::kLoad);
        d.mark(kSetReady + k);
      }
    }
  }

  // Layer 1's backward pass keeps the rows leaving in its last batch on the device: their
  // gradients are complete there, and the only reader of G^1 is layer 0's backward pass, which
  // takes them into its blocks (load_blocks()) instead of a flush to host memory and a load
  // back. Layer 0's backward writes neither dX nor the flush buffer; deeper layers' backward
  // passes would (they accumulate the next layer's dX), so only layer 1 keeps its tail.
  bool keeps_tail(const DeviceState& s, const LayerSpec& layer, int c) const {
    return s.keep_tail && layer.index == 1 && c + 1 == C;
  }

  // The backward's per-chunk blocks: G^{l+1} rows and, when cached, A^l rows. Layer 0 completes
  // its G^1 block with the kept tail rows: those leaving layer 1's pass for the first time are
  // copied over the block's (unwritten) rows, the others added to what earlier flushes left in
  // G^1. The block still loads whole: one DMA copy, measured faster than a zero-copy gather of
  // only the other rows, whose warps take SMs from the compute (docs/benchmarks.md, session 6).
  // kPreloaded: the host rows are in the set already (preload_next_blocks()), only the kept
  // tail is missing.
  void load_blocks(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set,
                   BlockRows rows) {
    Device& d = *s.device;
    if (rows == BlockRows::kFromHost) load_host_blocks(d, ch, layer, set);
    if (layer.index == 0 && s.keep_tail && ch.tail_src.size > 0) {
      const Mat kept = tail_rows(s), dst = gradient_block(ch, layer, set).col_block(0, kept.cols);
      const std::int64_t n = ch.tail_src.size, a = ch.tail_assign;
      d.copy_rows(kept, part(ch.tail_src, 0, a), part(ch.tail_dst, 0, a), dst, kCopyOver);
      d.copy_rows(kept, part(ch.tail_src, a, n), part(ch.tail_dst, a, n), dst, kAddInto);
    }
  }
  // Where a chunk's G[l+1] block goes: dT^{l+1} blocks to the set's output rows
  // (transform_outputs_backward()), G^{l+1} blocks to its dZ.
  Mat gradient_block(const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set) const {
    return stores_transform(layer) ? rows_of(set.out, ch.num_dst, input_width(*above(layer)))
                                   : rows_of(set.dZ, ch.num_dst, layer.out_width);
  }
  // The block rows from host memory: G[l+1] and, when cached, A^l.
  void load_host_blocks(Device& d, const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set) {
    d.load_block(G[std::size_t(layer.index) + 1], ch.dst_begin, gradient_block(ch, layer, set));
    if (model.kind != ModelKind::kGat && !recompute(layer))
      d.load_block(A_cache[std::size_t(layer.index)], ch.dst_begin,
                   rows_of(set.A, ch.num_dst, layer.aggregate_width));
  }

  // The fused pass of a two-layer model whose layer 1 is pretransformed, during its last batch:
  // the host rows of layer 0's first blocks (dT^1 and A^0 of chunk 0) into the first block set,
  // so the backward pass does not start by waiting for them (the fused pass uses only the sets'
  // dZ); chunk 1's blocks load behind chunk 0's compute as usual. G^1 is complete in host memory
  // but for the kept tail once the flushes of the batches before the last are: the transfer lane
  // waits for the last of them (kLeaveFree), and the tail joins the blocks in the backward pass
  // (load_blocks(), preloaded).
  void preload_next_blocks(const LayerSpec& layer) {
    const LayerSpec& below = model.layers[0];
    if (layer.index != 1 || !layer.last || !stores_transform(below)) return;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      if (!s.keep_tail || s.num_sets < 2 || s.leave.empty()) continue;
      Device& d = *s.device;
      LaneScope lane(d, Lane::kTransfer);
      d.wait(kLeaveFree);
      d.phase_begin(Phase::kLoad, pass_tag_of(PassKind::kBackward, 0));
      load_host_blocks(d, s.chunks[0], below, s.sets[0]);
      s.first_blocks_preloaded = true;
      d.phase_end(Phase::kLoad);
    }
  }

  // Phase B: remote rows from the owners' transition buffers, once each owner has loaded them.
  void pull_phase(const LayerSpec& layer, int c) {
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      Device& d = *s.device;
      const auto& pulls = s.chunks[std::size_t(c)].pulls;
      for (const auto& pull : pulls) d.wait_peer(*dev[std::size_t(pull.owner)].device, kLoaded);
      d.phase_begin(Phase::kP2p, tag(c));
      for (const auto& pull : pulls) {
        DeviceState& owner = dev[std::size_t(pull.owner)];
        d.pull_rows(*owner.device, exchanged_rows(owner, layer), pull.owner_rows, pull.local_rows,
                    exchanged_rows(s, layer));
      }
      d.phase_end(Phase::kP2p);
      for (const auto& pull : pulls) update_source_scores(s, layer, pull.local_rows, c);
      d.mark(kPulled);
    }
    phase_boundary();
  }

  // Phase C: the chunk compute of every device on its compute lane; forward results go back to
  // host memory on the store lane. kFused: the last layer's forward, then its backward from the
  // loss gradient and intermediates the forward left in the set (nothing is stored).
  void compute_phase(const LayerSpec& layer, int c, PassKind kind) {
    const bool forward = kind != PassKind::kBackward;
    const bool backward = kind == PassKind::kBackward || kind == PassKind::kFused;
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      Device& d = *s.device;
      const int k = c % s.num_sets;
      d.wait(kSetReady + k);  // backward blocks prefetched into the set
      // The set's previous blocks are in host memory (a fused transforming layer writes only the
      // set's dZ, which no store reads: it need not wait for the last forward pass's stores).
      if (kind != PassKind::kFused || !transforms(layer)) d.wait(kStored + k);
      d.phase_begin(Phase::kCompute, tag(c));
      if (forward) forward_compute(p, c, layer, s.sets[k]);
      if (backward) backward_compute(p, c, layer, s.sets[k], kind);
      d.phase_end(Phase::kCompute);
      d.mark(kComputed + k);
      if (backward) d.mark(kBatchComputed);
      if (!backward) store_blocks(p, c, layer, s.sets[k], k);
    }
    phase_boundary();
  }

  // Forward results of chunk c on the store lane: A^l (cache mode) and H^{l+1} (or T^{l+1}).
  void store_blocks(int p, int c, const LayerSpec& layer, BlockSet& set, int k) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = s.chunks[std::size_t(c)];
    if (ch.num_dst == 0) return;
    // The last layer's forward runs alone only in evaluation, which stores nothing (training
    // fuses it with its backward).
    if (layer.last) return;
    Device& d = *s.device;
    const bool store_a = training && !recompute(layer);
    LaneScope lane(d, Lane::kStore);
    d.wait(kComputed + k);
    d.phase_begin(Phase::kStore, tag(c));
    if (store_a)
      d.store_block(rows_of(set.A, ch.num_dst, layer.aggregate_width),
                    A_cache[std::size_t(layer.index)], ch.dst_begin);
    const std::int64_t width = input_width(*above(layer));  // T^{l+1} or H^{l+1}
    d.store_block(rows_of(set.out, ch.num_dst, width), H[std::size_t(layer.index) + 1],
                  ch.dst_begin);
    d.phase_end(Phase::kStore);
    d.mark(kStored + k);
  }

  // GCN/SAGE aggregation A = agg(X) for the chunk (nd x aggregate_width).
  Mat aggregate(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, BlockSet& set) {
    Device& d = *s.device;
    Mat X = s.X.col_block(0, layer.in_width);
    Mat A = rows_of(set.A, ch.num_dst, layer.aggregate_width);
    if (model.kind == ModelKind::kGcn) {
      d.spmm(ch.csr, ch.values.data, X, A);
    } else {
      d.gather_rows(X, ch.self_columns, A.col_block(0, layer.in_width));
      d.spmm(ch.csr, ch.values.data, X, A.col_block(layer.in_width, layer.in_width));
    }
    return A;
  }

  // GAT layer up to the concatenated head outputs: attention over Zm (X W of the owned rows from
  // the load phase, remote rows pulled from their owners), O (nd x K*F).
  Mat gat_layer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer) {
    Device& d = *s.device;
    const std::int64_t M = s.merged_rows, KF = layer.transform_width;
    Mat Zm = rows_of(s.Zm, M, KF);
    Mat O = rows_of(s.gat, ch.num_dst, KF);
    const bool scores_ready = s.scores_pass == pass_serial && !s.scores_stale;
    d.gat_forward(ch.csr, Zm, s.params.data + layer.att_src_offset,
                  s.params.data + layer.att_dst_offset, layer.heads, ch.dst_keys,
                  attention_key(layer.index), rows_of(s.el, M, layer.heads),
                  rows_of(s.er, ch.num_dst, layer.heads), rows_of(s.alpha, ch.nnz, layer.heads), O,
                  scores_ready);
    s.scores_pass = pass_serial;  // every merged row's score is current now
    s.scores_stale = false;
    return O;
  }

  // Pre-activation Z of the layer for the chunk (nd x out_width) into s.Z.
  Mat layer_preactivation(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat A) {
    Device& d = *s.device;
    Mat Z = rows_of(s.Z, ch.num_dst, layer.out_width);
    const float* bias = s.params.data + layer.b_offset;
    if (model.kind == ModelKind::kGat) {
      Mat O = gat_layer(s, ch, layer);
      if (layer.last) {
        d.head_mean(O, layer.heads, Z);
        d.bias_activation(Z, bias, Activation::kNone, Z);
      } else {
        d.bias_activation(O, bias, Activation::kNone, Z);
      }
    } else if (layer.transform_first) {
      d.spmm(ch.csr, ch.values.data, rows_of(s.Zm, s.merged_rows, layer.transform_width), Z);
      d.bias_activation(Z, bias, Activation::kNone, Z);
    } else {
      multiply(d, A, param(s, layer.w_offset, layer.w_rows, layer.w_cols), Z);
      d.bias_activation(Z, bias, Activation::kNone, Z);
    }
    return Z;
  }

  // Computes into `set`; store_blocks() writes the results to host memory.
  void forward_compute(int p, int c, const LayerSpec& layer, BlockSet& set) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = s.chunks[std::size_t(c)];
    if (ch.num_dst == 0) return;
    Device& d = *s.device;
    Mat A;
    if (!transforms(layer)) A = aggregate(s, ch, layer, set);
    Mat Z = layer_preactivation(s, ch, layer, A);
    if (stores_transform(layer)) {
      transform_outputs(s, ch, layer, Z, set);
      return;
    }
    if (!layer.last) {
      d.bias_activation(Z, nullptr, layer.activation,
                        rows_of(set.out, ch.num_dst, layer.out_width));
      return;
    }
    Mat grad_logits = training ? rows_of(set.dZ, ch.num_dst, layer.out_width) : Mat{};
    d.softmax_cross_entropy(Z, ch.labels, ch.train_mask, loss_scale, grad_logits, &s.loss_sum,
                            predictions.data() + ch.dst_begin);
  }

  // The next layer's inputs for the chunk's rows, transformed (pretransformed()): H = act(Z) in
  // Z's place, its dropout (keyed as the next layer's loads would apply it), then
  // T = H W_{l+1} into the set's output rows for store_blocks().
  void transform_outputs(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, Mat Z,
                         BlockSet& set) {
    Device& d = *s.device;
    const LayerSpec& next = *above(layer);
    d.bias_activation(Z, nullptr, layer.activation, Z);
    const DropoutKey key = feature_key(next.index);
    if (key.rate > 0) d.dropout_rows(Z, part(s.chunk_iota, 0, ch.num_dst), ch.dst_keys, key);
    multiply(d, Z, param(s, next.w_offset, next.w_rows, next.w_cols),
             rows_of(set.out, ch.num_dst, next.transform_width));
  }

  // Backward of transform_outputs() from the chunk's dT block (in the set's output rows) and the
  // recomputed pre-activation Z: dZ = act'(Z) * dropout(dT W^T), and dW_{l+1} += H^T dT with H
  // recomputed in Z's place. Each vertex's dT row is complete here: the layer above flushed every
  // stay's share into G[l+1].
  void transform_outputs_backward(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                  BlockSet& set, Mat Z, Mat dZ) {
    Device& d = *s.device;
    const LayerSpec& next = *above(layer);
    const Mat dT = rows_of(set.out, ch.num_dst, next.transform_width);
    const Idx positions = part(s.chunk_iota, 0, ch.num_dst);
    const DropoutKey key = feature_key(next.index);
    multiply_by_transpose(d, dT, param(s, next.w_offset, next.w_rows, next.w_cols), dZ);
    if (key.rate > 0) d.dropout_rows(dZ, positions, ch.dst_keys, key);
    d.activation_backward(dZ, Z, layer.activation, dZ);
    d.bias_activation(Z, nullptr, layer.activation, Z);
    if (key.rate > 0) d.dropout_rows(Z, positions, ch.dst_keys, key);
    add_transposed_product(d, Z, dT, grad(s, next.w_offset, next.w_rows, next.w_cols));
  }

  // With two block sets the blocks were prefetched (prefetch()); else they load here. kFused (the
  // last layer): the forward of this chunk just ran, so the loss gradient is in the set's dZ, the
  // aggregation in its A and GAT's attention intermediates in s.el, s.er, s.alpha.
  void backward_compute(int p, int c, const LayerSpec& layer, BlockSet& set, PassKind kind) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = s.chunks[std::size_t(c)];
    if (ch.num_dst == 0) return;
    const bool fresh = kind == PassKind::kFused;
    SLUICE_EXPECTS(fresh == layer.last, "training fuses the last layer's forward and backward");
    Device& d = *s.device;
    const std::int64_t nd = ch.num_dst;
    const bool input_gradient = layer.index > 0;
    if (s.num_sets == 1 && !fresh) load_blocks(s, ch, layer, set, BlockRows::kFromHost);
    Mat dZ = rows_of(set.dZ, nd, layer.out_width);
    Mat A;
    if (!transforms(layer)) {
      A = recompute(layer) && !fresh ? aggregate(s, ch, layer, set)
                                     : rows_of(set.A, nd, layer.aggregate_width);
    }
    // Layers below the last recompute the pre-activation (and, for GAT, the attention
    // intermediates) for their activation's backward.
    if (!fresh) {
      Mat Z = layer_preactivation(s, ch, layer, A);
      if (stores_transform(layer))
        transform_outputs_backward(s, ch, layer, set, Z, dZ);
      else
        d.activation_backward(dZ, Z, layer.activation, dZ);
    }
    d.add_column_sums(dZ, s.grads.data + layer.b_offset);
    if (layer.transform_first) {
      // dZm accumulates Â^T dZ while its rows stay, as GAT's (transform_flush()).
      d.spmm_transpose_add(ch.csr, ch.values.data, dZ,
                           rows_of(s.dZm, s.merged_rows, layer.transform_width));
      return;
    }
    if (model.kind == ModelKind::kGat) {
      // dZm accumulates over the batches a row stays (zeroed on arrival, remote rows every batch);
      // transform_flush() turns it into dW and dX when the row leaves.
      const std::int64_t M = s.merged_rows, KF = layer.transform_width;
      Mat dO = dZ;
      if (layer.last) {
        dO = rows_of(s.dA, nd, KF);
        d.head_mean_backward(dZ, layer.heads, dO);
      }
      d.gat_backward(ch.csr, rows_of(s.Zm, M, KF), s.params.data + layer.att_src_offset,
                     s.params.data + layer.att_dst_offset, layer.heads, ch.dst_keys,
                     attention_key(layer.index), rows_of(s.el, M, layer.heads),
                     rows_of(s.er, nd, layer.heads), rows_of(s.alpha, ch.nnz, layer.heads), dO,
                     rows_of(s.dZm, M, KF), s.grads.data + layer.att_src_offset,
                     s.grads.data + layer.att_dst_offset);
      return;
    }
    Mat W = param(s, layer.w_offset, layer.w_rows, layer.w_cols);
    Mat dW = grad(s, layer.w_offset, layer.w_rows, layer.w_cols);
    Mat dX = input_gradient ? s.dX.col_block(0, layer.in_width) : Mat{};
    add_transposed_product(d, A, dZ, dW);
    if (!input_gradient) return;
    Mat dA = rows_of(s.dA, nd, layer.aggregate_width);
    multiply_by_transpose(d, dZ, W, dA);
    if (model.kind == ModelKind::kGcn) {
      d.spmm_transpose_add(ch.csr, ch.values.data, dA, dX);
    } else {
      d.scatter_add_rows(dA.col_block(0, layer.in_width), ch.self_columns, dX);
      d.spmm_transpose_add(ch.csr, ch.values.data, dA.col_block(layer.in_width, layer.in_width),
                           dX);
    }
  }

  // Phase D (backward): remote-row gradients added into the owners' dX, once each owner's own
  // compute of the batch has written it.
  void push_phase(const LayerSpec& layer, int c) {
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      Device& d = *s.device;
      const auto& pushes = s.chunks[std::size_t(c)].pushes;
      for (const auto& push : pushes)
        d.wait_peer(*dev[std::size_t(push.owner)].device, kBatchComputed);
      d.phase_begin(Phase::kP2p, tag(c));
      for (const auto& push : pushes) {
        DeviceState& owner = dev[std::size_t(push.owner)];
        d.push_add_rows(exchanged_gradient(s, layer), push.local_rows, *owner.device,
                        exchanged_gradient(owner, layer), push.owner_rows);
      }
      d.phase_end(Phase::kP2p);
      d.mark(kPushed);
    }
    phase_boundary();
  }

  // Leaving rows: dropout backward (the mask multiply is its own derivative), then into G^l:
  // rows leaving for the first time in this layer are stored, the others added (by CPU threads
  // on CUDA). With a `leave` buffer the rows are compacted on the compute lane and flushed on
  // the store lane, behind the next batch's work.
  void flush_phase(const LayerSpec& layer, int c) {
    for (int p = 0; p < P; ++p) {
      DeviceState& s = dev[std::size_t(p)];
      DeviceChunk& ch = s.chunks[std::size_t(c)];
      Device& d = *s.device;
      // The peers' pushes of this batch are in dX (GAT: dZm) before it is flushed, zeroed or
      // computed on.
      wait_peers(d, ch.pushed_by, kPushed);
      if (ch.leave_rows.size == 0) continue;
      if (transforms_on_arrival(layer))
        transform_flush(s, ch, layer, c);
      else
        flush_rows(s, ch, layer, c);
      // Baseline leave lists hold other partitions' vertices too: devices flushing into the
      // same host rows must not overlap, and a row's first flush must come first (the other
      // schemes flush owned rows only).
      if (options.comm == CommMode::kBaseline) d.synchronize();
    }
    phase_boundary();
  }

  // GCN/SAGE, leaving rows: their accumulated dX rows into G^l; pretransformed layers: their
  // dZm rows into G[l] (dT^l: the layer below applies the dropout and transform backward).
  void flush_rows(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c) {
    Device& d = *s.device;
    const std::int64_t width = flushed_width(layer);
    const bool transformed = pretransformed(layer);
    const HostMat g = G[std::size_t(layer.index)].col_block(0, width);
    const Mat dX = (transformed ? s.dZm : s.dX).col_block(0, width);
    const std::int64_t n = ch.leave_rows.size, stored = ch.leave_store_count;
    d.phase_begin(Phase::kFlush, tag(c));
    const DropoutKey key = feature_key(layer.index);
    if (key.rate > 0 && !transformed) d.dropout_rows(dX, ch.leave_rows, ch.leave_keys, key);
    if (keeps_tail(s, layer, c)) {  // layer 0's load_blocks() reads them (tail_rows())
      if (tail_in_leave) {
        d.wait(kLeaveFree);
        d.gather_rows(dX, ch.leave_rows, rows_of(s.leave, n, width));
      }
      d.phase_end(Phase::kFlush);
      return;
    }
    if (s.leave.empty()) {
      d.flush_store_rows(dX, part(ch.leave_rows, 0, stored), part(ch.leave_vertices, 0, stored), g);
      d.flush_add_rows(dX, part(ch.leave_rows, stored, n), part(ch.leave_vertices, stored, n), g);
      d.phase_end(Phase::kFlush);
      return;
    }
    d.wait(kLeaveFree);
    d.gather_rows(dX, ch.leave_rows, rows_of(s.leave, n, width));
    d.phase_end(Phase::kFlush);
    flush_leave_buffer(s, ch, layer, c);
  }

  // Layer 0 of a transforming model, leaving rows: the dZm they accumulated while they stayed
  // (this device's batches and its peers' pushes) gives the weight gradient of Zm = X W once per
  // stay, dW += X^T dZm, in slices of leaving rows gathered on the compute lane (layer 0 has no
  // input gradient).
  void transform_flush(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c) {
    SLUICE_EXPECTS(layer.index == 0, "only layer 0 transforms its rows on arrival");
    Device& d = *s.device;
    const std::int64_t n = ch.leave_rows.size;
    const std::int64_t in = layer.in_width, KF = layer.transform_width;
    const Mat dW = grad(s, layer.w_offset, layer.w_rows, layer.w_cols);
    const Mat X = reloads_inputs(layer) ? Mat{} : s.X.col_block(0, in);
    const Mat dZm = s.dZm.col_block(0, KF);
    const DropoutKey key = feature_key(layer.index);
    d.phase_begin(Phase::kCompute, tag(c));
    for (std::int64_t b = 0; b < n; b += s.slice_x.rows) {
      const std::int64_t e = std::min(n, b + s.slice_x.rows), len = e - b;
      const Idx rows = part(ch.leave_rows, b, e), positions = part(s.slice_iota, 0, len);
      const Mat x = rows_of(s.slice_x, len, in), z = rows_of(s.slice_z, len, KF);
      if (reloads_inputs(layer)) {
        // The input rows again, from host memory, with the dropout they had on arrival.
        d.phase_end(Phase::kCompute);
        d.phase_begin(Phase::kLoad, tag(c));
        d.load_rows(H[std::size_t(layer.index)], part(ch.leave_vertices, b, e), Idx{}, x);
        d.phase_end(Phase::kLoad);
        d.phase_begin(Phase::kCompute, tag(c));
        if (key.rate > 0) d.dropout_rows(x, positions, part(ch.leave_keys, b, e), key);
      } else {
        d.gather_rows(X, rows, x);
      }
      d.gather_rows(dZm, rows, z);
      add_transposed_product(d, x, z, dW);
    }
    d.phase_end(Phase::kCompute);
  }

  // The leaving rows' input gradients, compacted in `leave` on the compute lane, into G^l on the
  // store lane (first flushes stored, the others added), behind the next batch's work.
  void flush_leave_buffer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer, int c) {
    Device& d = *s.device;
    const std::int64_t n = ch.leave_rows.size, stored = ch.leave_store_count;
    const std::int64_t width = flushed_width(layer);
    const HostMat g = G[std::size_t(layer.index)].col_block(0, width);
    const Mat compact = rows_of(s.leave, n, width);
    d.mark(kLeaveReady);
    LaneScope lane(d, Lane::kStore);
    d.wait(kLeaveReady);
    d.phase_begin(Phase::kFlush, tag(c));
    d.flush_store_rows(compact, part(s.iota, 0, stored), part(ch.leave_vertices, 0, stored), g);
    d.flush_add_rows(compact, part(s.iota, stored, n), part(ch.leave_vertices, stored, n), g);
    d.phase_end(Phase::kFlush);
    d.mark(kLeaveFree);
  }

  // Layer boundary: every lane of every device done (host matrices complete).
  void drain() { backend.synchronize_all(); }

  // One layer's forward over all batches (training or evaluation), drained at the end.
  void forward_layer(const LayerSpec& layer) {
    const PassKind kind = training ? PassKind::kForward : PassKind::kEvaluate;
    if (!layer.last)
      set_next_head(&model.layers[std::size_t(layer.index) + 1],
                    fuses(model.layers[std::size_t(layer.index) + 1]) ? PassKind::kFused : kind,
                    NextInputs::kWrittenByThisPass);
    else  // evaluation: the last pass
      set_next_head(nullptr, kind, NextInputs::kComplete);
    begin_pass(kind, layer.index);
    BatchSteps steps;
    steps.load_inputs = true;
    prefetch(layer, 0, steps);
    for (int c = 0; c < C; ++c) {
      load_phase(layer, c, steps);
      pull_phase(layer, c);
      compute_phase(layer, c, kind);
    }
    if (ends_early(layer)) {
      // The next pass orders its host reads after the stores on the devices (prefetch()); the
      // host waits only for the compute and transfer lanes, so the cross-device order at the
      // pass boundary (pulls of the last batch before the owners' next loads) still holds.
      for (DeviceState& s : dev) {
        s.device->synchronize_lane(Lane::kCompute);
        s.device->synchronize_lane(Lane::kTransfer);
        s.stores_running = true;
      }
      return;
    }
    drain();  // H^{l+1} (and the loss, predictions) complete
  }

  // Training runs the last layer's forward and backward in one pass, each batch's backward right
  // after its forward (its loss gradient needs only its own logits, and the weights stay fixed
  // for the epoch): the last layer's aggregations A^{L-1} and loss gradients G^L never go to
  // host memory and back, and GAT's last layer loads and computes its attention once.
  // Evaluation runs the forward alone.
  bool fuses(const LayerSpec& layer) const { return training && layer.last; }

  // One layer's backward pass, or with kFused the last layer's forward and backward in one pass
  // (loads and pulls as a forward pass, no blocks from host memory); drained at the end (G^l
  // complete before the next layer prefetches its blocks).
  void backward_layer(const LayerSpec& layer, PassKind kind) {
    const bool fused = kind == PassKind::kFused;
    const LayerSpec* below =
        layer.index > 0 ? &model.layers[std::size_t(layer.index) - 1] : nullptr;
    // Layer 0's backward pass prefetches the next epoch's first batch: features are constant (their
    // dropout is applied after the load), so forward 0 (or an evaluation) starts without a load.
    if (below)
      set_next_head(recompute(*below) ? below : nullptr, PassKind::kBackward,
                    NextInputs::kComplete);
    else
      set_next_head(&model.layers[0], PassKind::kForward, NextInputs::kComplete);
    begin_pass(kind, layer.index);
    BatchSteps steps;
    steps.load_inputs = fused || recompute(layer);
    steps.load_blocks = !fused;
    // Transforming layers flush at every layer: leaving rows carry the weight gradient too.
    steps.flush_gradients = layer.index > 0 || transforms(layer);
    prefetch(layer, 0, steps);
    for (int c = 0; c < C; ++c) {
      load_phase(layer, c, steps);
      if (fused && c + 1 == C) preload_next_blocks(layer);
      if (steps.load_inputs) pull_phase(layer, c);
      compute_phase(layer, c, kind);
      if (steps.flush_gradients) {
        push_phase(layer, c);
        flush_phase(layer, c);
      }
    }
    drain();
    if (!fused)
      for (auto& s : dev) s.first_blocks_preloaded = false;
  }

  // Adds each phase's device time to `per_device` and the slowest device's to `times`, and the
  // timed ranges to *timeline when given (after a drain).
  void take_times(PhaseTimes& times, std::vector<PhaseTimes>& per_device,
                  std::vector<TimelineRange>* timeline) {
    per_device.resize(dev.size());
    double slowest[kPhases] = {};
    std::vector<PhaseRange> ranges;
    for (std::size_t p = 0; p < dev.size(); ++p) {
      double seconds[kPhases] = {};
      ranges.clear();
      dev[p].device->take_phase_times(seconds, timeline ? &ranges : nullptr);
      for (const PhaseRange& r : ranges) {
        const std::int32_t pass = r.tag / kTagBatches;
        timeline->push_back(TimelineRange{int(p), PassKind(pass / kTagLayers), pass % kTagLayers,
                                          r.tag % kTagBatches, r.phase, r.lane, r.begin, r.end});
      }
      for (int k = 0; k < kPhases; ++k) slowest[k] = std::max(slowest[k], seconds[k]);
      PhaseTimes& mine = per_device[p];
      mine.load += seconds[int(Phase::kLoad)];
      mine.p2p += seconds[int(Phase::kP2p)];
      mine.compute += seconds[int(Phase::kCompute)];
      mine.store += seconds[int(Phase::kStore)];
      mine.flush += seconds[int(Phase::kFlush)];
    }
    times.load += slowest[int(Phase::kLoad)];
    times.p2p += slowest[int(Phase::kP2p)];
    times.compute += slowest[int(Phase::kCompute)];
    times.store += slowest[int(Phase::kStore)];
    times.flush += slowest[int(Phase::kFlush)];
  }
};

Schedule::Schedule(Backend& backend, const Dataset& dataset, const Plan& plan,
                   const ModelSpec& model, const ScheduleOptions& options)
    : impl_(std::make_unique<Impl>(backend, plan, model, options)) {
  Impl& m = *impl_;
  m.P = plan.partitions;
  m.C = plan.chunks;
  m.n = dataset.num_nodes;
  SLUICE_INPUT_CHECK(backend.num_devices() == m.P, "the backend has ", backend.num_devices(),
                     " devices but the plan has ", m.P, " partitions");
  SLUICE_INPUT_CHECK(dataset.feature_dim == model.layers.front().in_width &&
                         std::int64_t(dataset.features.size()) ==
                             std::int64_t(dataset.num_nodes) * dataset.feature_dim,
                     "dataset features do not match the model input width");
  SLUICE_INPUT_CHECK(!dataset.train.empty(), "dataset '", dataset.name,
                     "' has no training vertices");
  m.loss_scale = 1.f / static_cast<float>(dataset.train.size());
  std::vector<ChunkLists> lists = derive_lists(dataset, plan, model, options.comm);
  split_first_flushes(lists, dataset.num_nodes);

  const int L = model.num_layers();
  const std::int64_t n = m.n;
  // Host matrices in renumbered row order.
  m.H.resize(std::size_t(L));
  m.G.resize(std::size_t(L));
  m.A_cache.resize(std::size_t(L));
  m.H[0] = backend.alloc_host(n, dataset.feature_dim, "H^0 (features)");
  {
    HostMat H0 = m.H[0];
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
      m.H[std::size_t(l)] = backend.alloc_host(
          n, m.input_width(layer), m.pretransformed(layer) ? cat("T^", l) : cat("H^", l));
    // The fused last layer keeps its loss gradients and aggregations on the device.
    if (layer.last) continue;
    if (m.stores_transform(layer))
      m.G[std::size_t(l) + 1] =
          backend.alloc_host(n, m.input_width(*m.above(layer)), cat("dT^", l + 1));
    else
      m.G[std::size_t(l) + 1] = backend.alloc_host(n, layer.out_width, cat("G^", l + 1));
    if (!m.recompute(layer))
      m.A_cache[std::size_t(l)] = backend.alloc_host(n, layer.aggregate_width, cat("A^", l));
  }
  m.predictions.assign(std::size_t(n), -1);

  // Device buffers and per-chunk indices.
  // X holds the inputs of the layers that are not pretransformed (their loads land in Zm) and
  // keep their input rows (reloads_inputs()), the stage every layer's loads. Input gradients: of
  // every layer above 0 (the flush buffer holds them), in dX only for the layers that do not
  // transform (pretransformed layers flush dZm rows).
  std::int64_t in_max = 0, load_max = 0, grad_in_max = 0, dx_max = 0, block_out_max = 0;
  std::int64_t arrival_in_max = 0;  // the row slices: inputs of the layers transformed on arrival
  bool any_transform = false, any_stored_transform = false, any_arrival_transform = false;
  for (const auto& layer : model.layers) {
    const bool arrival_transform = m.transforms_on_arrival(layer);
    any_transform |= m.transforms(layer);
    any_arrival_transform |= arrival_transform;
    any_stored_transform |= m.stores_transform(layer);
    if (arrival_transform) arrival_in_max = std::max(arrival_in_max, layer.in_width);
    if (!m.pretransformed(layer) && !m.reloads_inputs(layer))
      in_max = std::max(in_max, layer.in_width);
    load_max = std::max(load_max, m.input_width(layer));
    // The layer's output rows (set.out): H^{l+1}, or the T^{l+1} rows and dT^{l+1} blocks.
    block_out_max =
        std::max(block_out_max,
                 m.stores_transform(layer) ? m.input_width(*m.above(layer)) : layer.out_width);
    if (layer.index == 0) continue;
    grad_in_max = std::max(grad_in_max, m.flushed_width(layer));
    if (!m.transforms(layer)) dx_max = std::max(dx_max, layer.in_width);
  }
  const std::int64_t out_max = model.max_out_width();
  const std::int64_t agg_max = model.max_aggregate_width();
  const std::int64_t tw_max = model.max_transform_width();
  const int k_max = model.max_heads();
  const bool gat = model.kind == ModelKind::kGat;
  std::vector<std::int64_t> max_loads(std::size_t(m.P), 0), max_leaves(std::size_t(m.P), 0);
  // Layer 1's backward pass keeps its tail (Impl::keeps_tail()) in the flush buffer when layer 0
  // accumulates into the buffer layer 1's leaving rows sit in (GAT: dZm), a buffer of the overlap
  // path (checked there). Not in baseline mode, whose leave lists hold other partitions' rows
  // (flushed by several devices).
  const bool tail_in_leave =
      L >= 2 && m.pretransformed(model.layers[1]) && m.transforms_on_arrival(model.layers[0]);
  m.tail_in_leave = tail_in_leave;
  const bool keep_tail =
      L >= 2 && options.comm != CommMode::kBaseline && (!tail_in_leave || options.overlap);
  std::vector<std::vector<TailLists>> tails(std::size_t(m.P));
  // Overlap buffers, after every required buffer, only where memory allows: the load stage
  // (prefetch of the next batch's rows), the flush buffer (flushes behind the next batch) and a
  // second block set (stores and backward block loads behind compute). They come before the
  // chunks' constants, which take the device memory left and go to pinned host memory (read
  // zero-copy) beyond it.
  int staged = 0, flushed = 0, doubled = 0;
  // Per device: rows of the last chunk's output block that chunk 0's loads take from it when a
  // forward pass ends early (Impl::ends_early()), uploaded with the stage.
  std::vector<std::vector<vertex_t>> head_rows(std::size_t(m.P));
  auto allocate_overlap = [&](int p) {
    DeviceState& s = m.dev[std::size_t(p)];
    Device& d = *s.device;
    const std::int64_t loads = max_loads[std::size_t(p)], leaves = max_leaves[std::size_t(p)];
    if (loads > 0) s.stage = d.try_alloc(loads, load_max, "load stage");
    if (s.stage.empty()) {
      if (tail_in_leave) s.keep_tail = false;  // no flush buffer to keep the tail in
      return;
    }
    ++staged;
    if (!head_rows[std::size_t(p)].empty())
      s.head_rows = d.upload(head_rows[std::size_t(p)], "last-chunk rows of the first batch");
    if (leaves > 0 && grad_in_max > 0) {
      s.leave = d.try_alloc(leaves, grad_in_max, "flush buffer");
      if (!s.leave.empty()) {
        s.iota = upload_positions(d, leaves, "flush positions");
        ++flushed;
      }
    }
    if (tail_in_leave && s.leave.empty()) s.keep_tail = false;
    const std::int64_t max_dst = s.sets[0].dZ.rows;
    BlockSet& second = s.sets[1];
    second.out = d.try_alloc(max_dst, block_out_max, "layer output (second set)");
    if (any_stored_transform && !second.out.empty()) d.fill(second.out, 0.f);
    second.dZ = second.out.empty() ? Mat{} : d.try_alloc(max_dst, out_max, "dZ (second set)");
    if (agg_max > 0 && !second.dZ.empty())
      second.A = d.try_alloc(max_dst, aligned_width(agg_max), "aggregation A (second set)");
    if (!second.dZ.empty() && (agg_max == 0 || !second.A.empty())) {
      s.num_sets = 2;
      ++doubled;
    }
  };
  m.dev.resize(std::size_t(m.P));
  for (int p = 0; p < m.P; ++p) {
    DeviceState& s = m.dev[std::size_t(p)];
    Device& d = backend.device(p);
    s.device = &d;
    s.merged_rows = std::int64_t(plan.transition_rows[p]) + plan.remote_rows[p];
    std::int64_t max_dst = 0, max_nnz = 0;
    for (int c = 0; c < m.C; ++c) {
      max_dst = std::max<std::int64_t>(max_dst, plan.chunk(c, p).num_dst());
      max_nnz = std::max<std::int64_t>(max_nnz, plan.chunk(c, p).num_entries());
    }
    const std::int64_t M = std::max<std::int64_t>(s.merged_rows, 1);
    max_dst = std::max<std::int64_t>(max_dst, 1);
    // The operands of the SpMMs (X, A, dA, dX) get rows 16 bytes apart (padded to a multiple
    // of 4 floats): vectorized sparse kernels need aligned rows (kernels/cuda/NOTES.md).
    if (in_max > 0) s.X = d.alloc(M, aligned_width(in_max), "transition buffer X");
    if (dx_max > 0) s.dX = d.alloc(M, aligned_width(dx_max), "transition gradient dX");
    if (agg_max > 0) s.sets[0].A = d.alloc(max_dst, aligned_width(agg_max), "aggregation A");
    // Z and dZ are SpMM operands too when a layer transforms first.
    s.Z = d.alloc(max_dst, aligned_width(out_max), "pre-activation Z");
    s.sets[0].out = d.alloc(max_dst, block_out_max, "layer output");
    // T rows leave padded to 16 bytes: their pad column is never written, so it stays 0.
    if (any_stored_transform) d.fill(s.sets[0].out, 0.f);
    s.sets[0].dZ = d.alloc(max_dst, aligned_width(out_max), "output gradient dZ");
    if (agg_max > 0 || gat)
      s.dA = d.alloc(max_dst, aligned_width(std::max(agg_max, tw_max)), "gradient dA");
    if (any_transform) {
      s.Zm = d.alloc(M, aligned_width(tw_max), "transformed rows Zm");
      s.dZm = d.alloc(M, aligned_width(tw_max), "transformed-row gradient dZm");
      s.transform_region =
          options.comm == CommMode::kBaseline ? s.merged_rows : plan.transition_rows[p];
    }
    if (gat) {
      s.el = d.alloc(M, k_max, "GAT source scores");
      s.er = d.alloc(max_dst, k_max, "GAT destination scores");
      s.alpha = d.alloc(std::max<std::int64_t>(max_nnz, 1), k_max, "GAT attention");
      s.gat = d.alloc(max_dst, tw_max, "GAT head outputs");
    }
    const std::int64_t np = std::max<std::int64_t>(model.num_parameters, 1);
    s.params = d.alloc(1, np, "parameters");
    s.grads = d.alloc(1, np, "gradients");
    s.adam_m = d.alloc(1, np, "Adam m");
    s.adam_v = d.alloc(1, np, "Adam v");
    s.chunks.resize(std::size_t(m.C));
    for (int c = 0; c < m.C; ++c) {
      const ChunkLists& li = lists[std::size_t(c) * m.P + p];
      max_loads[std::size_t(p)] =
          std::max<std::int64_t>(max_loads[std::size_t(p)], std::int64_t(li.load_rows.size()));
      max_leaves[std::size_t(p)] =
          std::max<std::int64_t>(max_leaves[std::size_t(p)], std::int64_t(li.leave_rows.size()));
    }
    if (any_arrival_transform) {
      // Slices of at most a quarter of the merged rows, so that they take less memory than the
      // dX buffer these layers do without (the plan's memory estimate counts that one).
      const std::int64_t rows = std::max<std::int64_t>(
          1, std::min({kSliceRows, std::max(max_loads[std::size_t(p)], max_leaves[std::size_t(p)]),
                       M / 4}));
      s.slice_x = d.alloc(rows, aligned_width(arrival_in_max), "transform row slice");
      s.slice_z = d.alloc(rows, tw_max, "transformed-row slice");
      s.slice_iota = upload_positions(d, rows, "slice positions");
    }
    if (any_stored_transform) s.chunk_iota = upload_positions(d, max_dst, "chunk row positions");
    {
      // Chunk 0's loads from this device's last chunk (a contiguous run of the sorted list;
      // baseline loads also hold other devices' rows: then every row waits).
      const std::vector<vertex_t>& v = lists[std::size_t(p)].load_vertices;
      const ChunkPlan& last = plan.chunk(m.C - 1, p);
      s.head_split_begin = 0;
      s.head_split_end = std::int64_t(v.size());
      if (options.comm != CommMode::kBaseline && std::is_sorted(v.begin(), v.end())) {
        const vertex_t first = last.dst_begin, stop = vertex_t(last.dst_begin + last.num_dst());
        s.head_split_begin = std::lower_bound(v.begin(), v.end(), first) - v.begin();
        s.head_split_end = std::lower_bound(v.begin(), v.end(), stop) - v.begin();
        if (L >= 2)
          for (std::int64_t i = s.head_split_begin; i < s.head_split_end; ++i)
            head_rows[std::size_t(p)].push_back(v[std::size_t(i)] - first);
      }
    }
    if (keep_tail)
      tails[std::size_t(p)] =
          tail_lists(lists[std::size_t(m.C - 1) * m.P + p], plan, p,
                     tail_in_leave ? TailPlace::kFlushBuffer : TailPlace::kGradientSlots);
    s.keep_tail = keep_tail;
    if (options.overlap) allocate_overlap(p);
    for (int c = 0; c < m.C; ++c) {
      const ChunkPlan& cp = plan.chunk(c, p);
      ChunkLists& li = lists[std::size_t(c) * m.P + p];
      DeviceChunk& ch = s.chunks[std::size_t(c)];
      const std::string where = cat("chunk (", c, ",", p, ") ");
      ch.dst_begin = cp.dst_begin;
      ch.num_dst = cp.num_dst();
      ch.nnz = cp.num_entries();
      ch.csr = d.upload_csr(cp.indptr, cp.columns, s.merged_rows, where + "CSR");
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
      li = ChunkLists{};  // free host copies as we go
    }
    log_debug("device ", p, ": ", format_bytes(double(d.bytes_in_use())), " allocated, merged ",
              s.merged_rows, " rows");
  }
  // Who reads from and writes into whom, per batch (the pairwise cross-device order).
  for (int p = 0; p < m.P; ++p)
    for (int c = 0; c < m.C; ++c) {
      const DeviceChunk& ch = m.dev[std::size_t(p)].chunks[std::size_t(c)];
      for (const auto& pull : ch.pulls)
        m.dev[std::size_t(pull.owner)].chunks[std::size_t(c)].pulled_by.push_back(p);
      for (const auto& push : ch.pushes)
        m.dev[std::size_t(push.owner)].chunks[std::size_t(c)].pushed_by.push_back(p);
    }
  if (options.overlap)
    log_info("overlap: load prefetch on ", staged, "/", m.P, " devices, flush behind compute on ",
             flushed, "/", m.P, ", double block buffers on ", doubled, "/", m.P);
  // The kept tail's lists, for the devices that keep it (GAT: those with a flush buffer).
  int keeping = 0;
  std::int64_t kept_rows = 0, kept_first = 0;
  for (int p = 0; p < m.P; ++p) {
    DeviceState& s = m.dev[std::size_t(p)];
    if (!s.keep_tail) continue;
    ++keeping;
    for (int c = 0; c < m.C; ++c) {
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
             m.P, " devices)");
}

Schedule::~Schedule() = default;

void Schedule::set_parameters(const std::vector<float>& flat) {
  SLUICE_EXPECTS(std::int64_t(flat.size()) == impl_->model.num_parameters, "bad parameter size");
  for (auto& s : impl_->dev) s.device->write(flat.data(), std::int64_t(flat.size()), s.params.data);
}

std::vector<float> Schedule::parameters() {
  std::vector<float> flat(std::size_t(impl_->model.num_parameters));
  auto& s = impl_->dev.front();
  s.device->synchronize();
  s.device->read(s.params.data, std::int64_t(flat.size()), flat.data());
  return flat;
}

void Schedule::set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v) {
  const auto n = impl_->model.num_parameters;
  SLUICE_EXPECTS(std::int64_t(m.size()) == n && std::int64_t(v.size()) == n,
                 "bad optimizer state size");
  for (auto& s : impl_->dev) {
    s.device->write(m.data(), n, s.adam_m.data);
    s.device->write(v.data(), n, s.adam_v.data);
  }
}

void Schedule::optimizer_state(std::vector<float>& m, std::vector<float>& v) {
  const auto n = impl_->model.num_parameters;
  m.assign(std::size_t(n), 0.f);
  v.assign(std::size_t(n), 0.f);
  auto& s = impl_->dev.front();
  s.device->synchronize();
  s.device->read(s.adam_m.data, n, m.data());
  s.device->read(s.adam_v.data, n, v.data());
}

void Schedule::set_timeline(bool on) {
  timeline_on_ = on;
  timeline_.clear();
}

void Schedule::start_timeline() {
  timeline_.clear();
  if (!timeline_on_) return;
  impl_->backend.synchronize_all();
  timeline_origin_ = now_seconds();
  for (auto& s : impl_->dev) s.device->set_time_origin();
}

double Schedule::forward_backward(std::int64_t epoch) {
  start_timeline();
  Impl& m = *impl_;
  m.epoch = epoch;
  m.training = true;
  const int L = m.model.num_layers();
  for (auto& s : m.dev) {
    s.loss_sum = 0;
    s.device->fill(s.grads, 0.f);
  }
  for (int l = 0; l + 1 < L; ++l) m.forward_layer(m.model.layers[std::size_t(l)]);
  m.backward_layer(m.model.layers.back(), PassKind::kFused);
  for (int l = L - 2; l >= 0; --l)
    m.backward_layer(m.model.layers[std::size_t(l)], PassKind::kBackward);
  const double t = now_seconds();
  std::vector<float*> grads;
  for (auto& s : m.dev) grads.push_back(s.grads.data);
  m.backend.all_reduce_sum(grads, m.model.num_parameters);
  m.backend.synchronize_all();
  times_.optimizer += now_seconds() - t;
  m.take_times(times_, device_times_, timeline_on_ ? &timeline_ : nullptr);
  double loss = 0;
  for (auto& s : m.dev) loss += s.loss_sum;
  m.training = false;
  return loss * double(m.loss_scale);
}

void Schedule::sgd_step(float lr, float weight_decay) {
  const double t = now_seconds();
  for (auto& s : impl_->dev)
    s.device->sgd_step(impl_->model.num_parameters, lr, weight_decay, s.params.data, s.grads.data);
  impl_->backend.synchronize_all();
  times_.optimizer += now_seconds() - t;
}

void Schedule::adam_step(float lr, float weight_decay, std::int64_t step) {
  const double t = now_seconds();
  for (auto& s : impl_->dev)
    s.device->adam_step(impl_->model.num_parameters, lr, 0.9f, 0.999f, 1e-8f, weight_decay, step,
                        s.params.data, s.grads.data, s.adam_m.data, s.adam_v.data);
  impl_->backend.synchronize_all();
  times_.optimizer += now_seconds() - t;
}

const std::vector<std::int32_t>& Schedule::evaluate() {
  start_timeline();
  Impl& m = *impl_;
  m.training = false;
  for (const LayerSpec& layer : m.model.layers) m.forward_layer(layer);
  // Predictions are host-visible after forward_layer's drain.
  m.take_times(times_, device_times_, timeline_on_ ? &timeline_ : nullptr);
  return m.predictions;
}

TransferCounters Schedule::counters() const {
  TransferCounters total;
  for (const auto& s : impl_->dev) {
    const TransferCounters& c = s.device->counters();
    total.h2d_gather_rows += c.h2d_gather_rows;
    total.h2d_gather_bytes += c.h2d_gather_bytes;
    total.h2d_block_bytes += c.h2d_block_bytes;
    total.d2h_bytes += c.d2h_bytes;
    total.p2p_rows += c.p2p_rows;
    total.p2p_bytes += c.p2p_bytes;
  }
  return total;
}

void Schedule::reset_counters() {
  for (auto& s : impl_->dev) s.device->reset_counters();
}

std::int64_t Schedule::peak_device_bytes() const {
  std::int64_t peak = 0;
  for (const auto& s : impl_->dev) peak = std::max(peak, s.device->peak_bytes());
  return peak;
}

}  // namespace sluice
