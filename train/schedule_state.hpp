// What the schedule keeps on each device (train/schedule.hpp): the per-chunk index lists
// uploaded once (DeviceChunk), the chunk block buffers (BlockSet), the markers that order a
// device's lanes and the devices among each other, and every buffer of one device
// (DeviceState); schedule_setup.cpp allocates them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.hpp"

namespace sluice::schedule_detail {

struct DevicePeerRows {
  int owner = 0;
  Idx owner_rows, local_rows;  // a push has no owner rows here (the owner holds them)
  // A push's first row in the owner's receive buffer (DeviceState::received), and, where its
  // local rows are the consecutive rows [local_first, + local_rows.size), the first of them
  // (one block copy); -1 otherwise.
  std::int64_t receive_first = 0, local_first = -1;
};

// The gradient rows one pusher sends into this device's receive buffer in a batch: rows
// [first, first + count) there, added at positions [first, first + count) of
// DeviceChunk::received_rows.
struct ReceivedRows {
  int pusher = 0;
  std::int64_t first = 0, count = 0;
};

// Rows [row_begin, row_end) of a chunk's forward transform, and the positions
// [received_begin[i], received_end[i]) of received[i]'s rows among them: the rows of the range
// that pusher i reads in the forward (DeviceChunk::send_ranges). sent_first[i]: the first of
// them where they are consecutive rows (sent_first[i], sent_first[i] + 1, ...), else -1.
struct SendRange {
  std::int64_t row_begin = 0, row_end = 0;
  std::vector<std::int64_t> received_begin, received_end, sent_first;
};

// One chunk's constants on its device (schedule_lists.hpp's ChunkLists, uploaded).
struct DeviceChunk {
  vertex_t dst_begin = 0, num_dst = 0;
  // dst_begin in the device's views of the vertex matrices (VertexViews::first_row subtracted),
  // and the vertex lists (load_vertices, leave_vertices) count from the same row.
  vertex_t view_dst_begin = 0;
  std::int64_t nnz = 0;
  Csr csr;
  // The CSR's loss rows alone (loss_rows_csr()), which the last layer's training passes read
  // (Schedule::Impl::chunk_csr()); id -1 where the chunk keeps none (every row in the loss or
  // none, a one-layer model, or LastLayerRows::kAll).
  Csr loss_csr;
  Idx self_columns;
  // self_columns[r] == r for every row: the chunk's rows are the merged rows 0, 1, ... (one
  // chunk whose slot i holds its vertex i), so their own input rows are X's first rows.
  bool self_columns_in_order = false;
  Idx load_vertices, load_rows, load_keys;
  std::vector<DevicePeerRows> pulls, pushes;
  // What the peers push into this device in the batch (pushers ascending) and where each
  // received row is added.
  std::vector<ReceivedRows> received;
  Idx received_rows;
  // One past the last of the chunk's rows that a peer reads (0: none; one chunk a device), and
  // all the rows the peers read as one range (whole_send_range(): the loss gradients' sends).
  std::int64_t peers_read_end = 0;
  SendRange peer_rows;
  // The forward's transform in row ranges, each range's rows that the peers read sent as soon as
  // it is written (Schedule::Impl::send_transforms(); schedule_lists.hpp's send_ranges()).
  std::vector<SendRange> send_ranges;
  // The first row of the chunk's pulls in DeviceState::remote_features (pull order).
  std::int64_t remote_features_first = 0;
  Idx remote_rows;
  Idx leave_vertices, leave_rows, leave_keys;
  std::int64_t leave_store_count = 0;
  Idx dst_keys, labels, split_bits;
  // The previous backward pass's tail rows whose destinations are in this chunk (TailLists):
  // positions in dX (or the flush buffer) and in the block, the first tail_assign of them
  // copied over the block, the rest added to it.
  Idx tail_src, tail_dst;
  std::int64_t tail_assign = 0;
  // Where the tail rows are the whole block in block order, every one of them flushed for the
  // first time (a one-chunk device): the block is rows [tail_block_first, + num_dst) of the tail
  // buffer, read in place (Schedule::Impl::tail_block()); -1 otherwise.
  std::int64_t tail_block_first = -1;
  // A row group (DeviceState::row_groups): the chunks [first_chunk, end_chunk) whose
  // destinations it spans, each at its own offset from view_dst_begin; 0, 0 for a chunk.
  int first_chunk = 0, end_chunk = 0;
  // Peers whose chunk of the same batch pulls rows from this device's X (cross-device order:
  // wait_peer).
  std::vector<int> pulled_by;
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
  // Cross-device order (peers wait on these with wait_peer), on the compute lane unless said:
  // (GAT: Zm and dZm in place of X and dX.)
  kLoaded = 10,    // batch's rows in X (peers may pull), arrivals' dX rows zeroed
  kPulled = 11,    // batch's pulls read the owners' X (owners may overwrite it)
  kPushed = 12,    // peer lane: the batch's pushes are in the owners' receive buffers (owners
                   // may add them; the device's compute lane may write its remote rows again)
  kReceived = 13,  // the rows received in the batch are added (peers may push again)
  // A pass boundary without the host between the devices (Schedule::Impl::join_lanes()):
  kLanesJoined = 14,  // transfer lane's work of the pass done; re-marked by the compute lane
                      // once it waited for every lane (the side lanes then wait for that)
  kStoreJoined = 15,  // store lane's work of the pass done
  // Compute lane: the batch's remote rows' gradients are computed (its peer lane may push them).
  kRemoteGradients = 16,
  // The next training step's layer-0 input rows (Schedule::Impl::prefetch_next_step_inputs()):
  kInputsRead = 17,        // compute lane: this step's last read of X is queued
  kInputsPrefetched = 18,  // store lane: the next step's rows are in X
  // An owner's T rows sent into its peers' slots (Schedule::Impl::send_transforms()):
  kTransformsWritten = 19,  // compute lane: the forward wrote them
  kTransformsSent = 20,     // peer lane: they are in every peer's slots
  // The fused pass's loss gradients sent to their owners (Schedule::Impl::send_loss_gradients()):
  kLossGradients = 21,      // compute lane: the forward read the slots and wrote the gradients
  kLossGradientsSent = 22,  // peer lane: the gradients the peers read are in their slots
};

// Batch 0's rows of the pass after the running one, loaded into the stage during the running
// pass's last batch (Schedule::Impl::prefetch_next_head()).
struct NextPassHead {
  // Positions [split_begin, split_end) of chunk 0's load list: the vertices of this device's
  // last chunk, whose rows of a layer output are written last in a forward pass.
  std::int64_t split_begin = 0, split_end = 0;
  // The stage holds batch 0's rows of the coming pass except positions [pending_begin,
  // pending_end), loaded during the previous pass.
  bool prefetched = false;
  std::int64_t pending_begin = 0, pending_end = 0;
  // Rows of the last chunk's output block that positions [split_begin, split_end) load when a
  // forward pass ends early (Schedule::Impl::ends_early(); empty without a stage or in baseline
  // mode).
  Idx block_rows;
  // The pending rows wait in the output block for batch 0's load phase, which copies them
  // straight into X on the compute lane (fp32 host matrices: nothing to round first), instead of
  // into the stage on the transfer lane (Schedule::Impl::copy_head_rows()).
  bool pending_in_block = false;
};

// A device's views of the vertex matrices (Schedule::Impl::H, G, A_cache, same indices). When
// its host-matrix transfers touch only its own partition's rows (one partition, or the p2p
// modes, whose loads and flushes are of owned rows and whose blocks are the partition's chunks),
// each view holds rows [first_row, first_row + rows) of its matrix, that range of the host
// matrix or a copy resident in the device's memory (VertexData::kDeviceWhereItFits);
// otherwise (baseline mode on several partitions) the whole host matrices, first_row 0.
struct VertexViews {
  std::int64_t first_row = 0, rows = 0;
  std::vector<HostMat> H, G, A;
};

struct DeviceState {
  Device* device = nullptr;
  VertexViews vertex;
  // While an evaluation runs, per layer l the host view of H[l] that it replaced with rows in a
  // training buffer (Schedule::Impl::lend_training_buffers()); empty views elsewhere.
  std::vector<HostMat> views_lent;
  // While an evaluation runs: its device holds space lent for chunk CSRs (lend_csr_space()).
  bool csr_space_lent = false;
  std::int64_t merged_rows = 0;
  // The merged rows' remote region starts here (after the transition slots).
  std::int64_t remote_first = 0;
  // The running batch's backward compute marked kRemoteGradients before it ended.
  bool remote_gradients_marked = false;
  Mat X, dX;         // merged transition buffer and its gradient
  BlockSet sets[2];  // chunk block buffers (max chunk rows); sets[1] optional
  int num_sets = 1;
  // A chunk's backward blocks load on the transfer lane ahead of its compute (into set c % 2,
  // or into the only set of a one-chunk plan, which uses set 0 alone), instead of in line.
  bool prefetch_blocks = false;
  Mat stage;  // optional: the next batch's loads, compact (max loads)
  NextPassHead head;
  // The last forward pass's stores may still run: it ended early, the next pass takes the
  // head's rows from the block, and its transfer lane waits for the stores before any host read.
  bool stores_running = false;
  // The gradient rows the peers push into this device in a batch (Schedule::Impl::push_phase()),
  // until it adds them into its own.
  Mat received;
  Mat leave;                        // optional: leaving gradient rows, compact (max leaves)
  Idx iota;                         // 0, 1, ... (positions in `leave`)
  Idx chunk_iota;                   // 0, 1, ... (chunk rows)
  Mat dA, Z;                        // chunk work buffers (max chunk rows)
  Mat Zm, dZm, el, er, alpha, gat;  // GAT: merged transforms and attention intermediates
  // GAT's layer 0 attending over its input rows: the chunk rows' per-head weighted sums of X
  // (then, in the backward, dO^h W^hT in their place) and K columns more, the backward's head
  // dots dO^h . O^h (Schedule::Impl::input_head_dots()); and 4 K D floats: the attention vectors
  // folded into W (D x 2K: W^h a_src^h, then W^h a_dst^h) and the score sums (2K x D).
  Mat input_sums, input_attention;
  // GAT on a one-chunk device, where memory allows (OverlapGroup::kKeptAttention): the fused last
  // layer's own Zm, el, er and alpha, swapped with the four above for that pass, so that layer
  // L-2's stay from its forward to its backward pass (Schedule::Impl::attention_kept()).
  struct AttentionBuffers {
    Mat Zm, el, er, alpha;
    bool allocated() const { return !Zm.empty() && !el.empty() && !er.empty() && !alpha.empty(); }
  } last_layer_attention;
  // GAT: rows [0, transform_region) of Zm may be transformed in one GEMM (the transition slots;
  // every merged row in baseline mode, where no remote row is kept between batches); slices of at
  // most slice_x.rows gathered rows (transforms of arrivals, flush-time products) and their
  // positions 0, 1, ... (slice_iota).
  std::int64_t transform_region = 0;
  Mat slice_x, slice_z;
  Idx slice_iota;
  Mat params, grads, adam_m, adam_v;
  // SAGE's transform-first layer: W^t = [W_self | W_neigh] (d_l x 2 d_{l+1}, rows 16-byte
  // aligned) laid side by side from the stacked parameters at the start of each pass sequence
  // (Schedule::Impl::transform_blocks()), so that T = X W^t and its input gradient are one
  // product each. Empty otherwise.
  Mat side_by_side_w;
  // Layer 1's backward pass keeps its last batch's leaving rows on this device (in dX or dZm; for
  // GAT transforming first in the flush buffer) for layer 0's G^1 blocks
  // (Schedule::Impl::keeps_tail()).
  bool keep_tail = false;
  // One chunk whose load list puts each vertex in the transition slot of its own row (slot i
  // holds the device's vertex i): its slots are rows of its resident vertex matrices too
  // (Schedule::Impl::pulls_resident_rows()).
  bool loads_in_row_order = false;
  // One chunk whose pulls are its pushes (the same rows of the same owners in the same order),
  // each owner's rows in consecutive slots: the owners' received_rows name the rows this device
  // pulls, so an owner may send them (Schedule::Impl::send_transforms()).
  bool pulls_are_pushes = false;
  // The host rows of the coming backward pass's first chunk blocks are in sets[0]
  // (Schedule::Impl::preload_next_blocks()).
  bool first_blocks_preloaded = false;
  // The coming backward pass's first batches whose A^l block is in their set already
  // (Schedule::Impl::preload_aggregation_blocks()).
  int aggregation_preloaded = 0;
  // GAT source scores: el holds the scores of every merged row's Zm for pass `scores_pass`,
  // kept current by the load and pull phases (scores of the rows they write), unless a
  // transform over the whole region made them stale (gat_layer() then computes every row's).
  int scores_pass = -1;
  bool scores_stale = true;
  std::vector<DeviceChunk> chunks;
  // The batches of a pass by rows (Schedule::Impl::runs_by_rows()): consecutive chunks merged
  // while their destinations fit the largest chunk's rows, which every block buffer holds; only
  // the destination range and the member chunks are set (a group of one chunk also has its
  // keys). Padded with empty groups to the most any device has; empty where no pass runs by
  // rows.
  std::vector<DeviceChunk> row_groups;
  // Layer 0's aggregation of the features without dropout, one row per vertex (one partition),
  // written by the first evaluation and read by the later ones (EvaluationCache); empty when
  // not kept.
  Mat evaluation_aggregation;
  // Where the device has no room for it (fp32 host data): the same rows in host memory, rows of
  // Schedule::Impl::evaluation_host_cache, allocated by the first evaluation; empty otherwise.
  HostMat evaluation_aggregation_on_host;
  // Per layer: the training forward's output rows H of the partition's vertices (from vertex
  // kept_first_row on), kept for the backward pass (LayerOutputs); empty where not kept.
  std::vector<Mat> kept_outputs;
  std::int64_t kept_first_row = 0;
  // The feature rows this device pulls in layer 0, one per pulled row in pull order (chunk by
  // chunk, owner by owner), and their dropout keys (RemoteFeatures); empty where they are pulled.
  // pulled_vertices: those rows' vertices, on the host from the index lists until placement.
  Mat remote_features;
  Idx remote_feature_keys;
  std::vector<vertex_t> pulled_vertices;
  // Layer 0's input rows of the coming training step (the device's own rows and its copies of
  // the remote feature rows), with that step's dropout `key`, queued into X on the store lane
  // (Schedule::Impl::prefetch_next_step_inputs()); `taken`: the running pass's batch found them
  // there, so its load and pull phases copy nothing.
  struct NextStepInputs {
    bool queued = false, taken = false;
    DropoutKey key;
  } next_step_inputs;
  double loss_sum = 0;
  SplitCounts split_counts;  // of the running evaluation
};

// The weight blocks of a transform T = X W^t (Schedule::Impl::transform_blocks()): block i
// fills columns [i w, (i + 1) w) of T, w its width.
struct TransformBlocks {
  Mat block[2];
  int count = 1;
};

// The first `rows` rows and `cols` columns of a buffer.
inline Mat rows_of(Mat m, std::int64_t rows, std::int64_t cols) {
  return m.row_block(0, rows).col_block(0, cols);
}

}  // namespace sluice::schedule_detail
