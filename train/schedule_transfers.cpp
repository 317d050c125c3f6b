// The schedule's transfers (train/schedule_impl.hpp): the load phase (rows of L_c^p from host
// memory or the load stage into the transition buffer), the prefetches on the transfer lane
// (the next batch's rows, the next pass's first batch, the backward blocks), pulls of remote rows
// from their owners, stores of forward results on the store lane; in the backward direction,
// pushes of remote rows' gradients into their owners' buffers and flushes of leaving rows into
// G^l (stored the first time a row leaves in the pass, added after), compacted on the compute
// lane and flushed on the store lane behind the next batch when the flush buffer exists. Layer
// 1's last batch keeps its gradient rows on the devices for layer 0's blocks (keeps_tail()).
#include <algorithm>

#include "train/schedule_impl.hpp"

namespace sluice {

using namespace schedule_detail;

// Phase A: transition update (loads of L_c^p, dropout on arrivals; GAT: their transforms); in
// a backward pass that flushes also zero the gradient rows of arrivals and of the chunk's
// remote region (GAT: of dZm). With a stage the rows were gathered from host memory ahead
// (prefetch) and are scattered into X here; then the next batch's prefetch is issued, to run
// behind this batch's pulls and compute.
void Schedule::Impl::load_phase(const LayerSpec& layer, int c, const BatchSteps& steps) {
  const bool load_inputs = steps.load_inputs;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = batch(s, c);
    Device& d = *s.device;
    // New rows overwrite X only after the peers' pulls of the previous batch read it (batch 0:
    // the previous pass's last batch, where no drain ordered them, join_lanes()).
    if (load_inputs && (c > 0 || runs_through_passes()))
      wait_peers(d, s.chunks[std::size_t(c > 0 ? c : C) - 1].pulled_by, kPulled);
    d.phase_begin(Phase::kLoad, tag(c));
    // A backward pass that flushes adds into its arrivals' gradient rows: they start at zero.
    const bool zeroes_arrivals = steps.flush_gradients && !stores_input_gradients();
    bool arrivals_zeroed = false;
    // The rows may be in place already: layer 0's queued by the step before
    // (prefetch_next_step_inputs()), the fused pass's written by the forward before it
    // (writes_transforms_into_slots()).
    s.next_step_inputs.taken = false;
    bool in_place = false;
    if (load_inputs && layer.index == 0) {
      in_place = takes_next_step_inputs(s);
    } else if (load_inputs && finds_transforms_in_slots(layer, c)) {
      in_place = true;
    }
    if (load_inputs && !in_place && ch.load_rows.size > 0 && !reloads_inputs(layer)) {
      Mat X = input_rows(s, layer);
      // T rows had their dropout before the transform (forward_compute()).
      const DropoutKey key = pretransformed(layer) ? DropoutKey{} : feature_key(layer.index);
      const Mat resident = resident_inputs(s, layer);
      if (!resident.empty()) {
        d.copy_dropout_rows(resident, ch.load_vertices, ch.load_rows, X, ch.load_keys, key);
      } else if (!s.stage.empty()) {
        d.wait(kStageReady);
        if (c == 0 && s.head.pending_in_block) {
          load_head_from_block(s, layer, X, key);
        } else if (zeroes_arrivals) {
          d.scatter_arrivals(rows_of(s.stage, ch.load_rows.size, X.cols), ch.load_rows, X,
                             ch.load_keys, key, exchanged_gradient(s, layer));
          arrivals_zeroed = true;
        } else {
          d.scatter_dropout_rows(rows_of(s.stage, ch.load_rows.size, X.cols), ch.load_rows, X,
                                 ch.load_keys, key);
        }
        d.mark(kStageFree);
      } else {
        d.load_rows(s.vertex.H[std::size_t(layer.index)], ch.load_vertices, ch.load_rows, X);
        if (key.rate > 0) d.dropout_rows(X, ch.load_rows, ch.load_keys, key);
      }
    }
    if (zeroes_arrivals) {
      Mat dX = exchanged_gradient(s, layer);
      if (ch.load_rows.size > 0 && !arrivals_zeroed) d.zero_rows(dX, ch.load_rows);
      if (ch.remote_rows.size > 0) d.zero_rows(dX, ch.remote_rows);
    }
    d.phase_end(Phase::kLoad);
    if (reloads_inputs(layer) && load_inputs && ch.load_rows.size > 0) {
      transform_reloaded_arrivals(s, ch, layer, c);
    } else if (transforms_on_arrival(layer) && !attends_inputs(layer) && load_inputs &&
               ch.load_rows.size > 0) {
      d.phase_begin(Phase::kCompute, tag(c));
      transform_arrivals(s, ch, layer);
      d.phase_end(Phase::kCompute);
    }
    if (load_inputs) update_source_scores(s, layer, ch.load_rows, c);
    d.mark(kLoaded);
  }
  prefetch(layer, c + 1, steps);
  if (c + 1 == batches()) prefetch_next_head();
  phase_boundary();
}

// On the transfer lane: batch c's loads into the stage, (backward) chunk c's G^{l+1} and
// cached A^l blocks into its block set, and the arrays its sparse products read of its CSR. Reads
// only host matrices complete since the last layer boundary.
void Schedule::Impl::prefetch(const LayerSpec& layer, int c, const BatchSteps& steps) {
  if (c >= batches()) return;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = batch(s, c);
    Device& d = *s.device;
    // Batch 0 may be in the stage already but for its pending rows (prefetch_next_head()).
    const bool prefetched = c == 0 && s.head.prefetched;
    if (prefetched) s.head.prefetched = false;
    // (The fused pass finds its own rows in place where the forward wrote them there.)
    const bool stage = steps.load_inputs && !s.stage.empty() && ch.load_rows.size > 0 &&
                       resident_inputs(s, layer).empty() && !finds_transforms_in_slots(layer, c) &&
                       (!prefetched || s.head.pending_end > s.head.pending_begin);
    const bool set = steps.load_blocks && s.prefetch_blocks && ch.num_dst > 0;
    const bool csr = steps.products && ch.num_dst > 0;
    if (!stage && !set && !csr && !s.stores_running) continue;
    LaneScope lane(d, Lane::kTransfer);
    if (stage) {
      d.wait(kStageFree);
      d.phase_begin(Phase::kLoad, tag(c));
      if (prefetched && s.stores_running && options.host_precision == HostPrecision::kFp32)
        s.head.pending_in_block = true;  // load_head_from_block()
      else if (prefetched && s.stores_running)
        copy_head_rows(s, layer);
      else if (prefetched)
        load_stage_part(s, 0, layer, s.head.pending_begin, s.head.pending_end);
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
      load_blocks(s, ch, layer, s.sets[k],
                  c == 0 && s.first_blocks_preloaded ? BlockRows::kPreloaded
                  : c < s.aggregation_preloaded      ? BlockRows::kGradientOnly
                                                     : BlockRows::kFromHost);
      d.phase_end(Phase::kLoad);
      d.mark(kSetReady + k);
    }
    if (csr) d.prefetch_csr(chunk_csr(ch, layer), *steps.products, csr_reuse(s, layer));
  }
}

// Rows [begin, end) of chunk c's load list from H[layer] into the same stage rows.
void Schedule::Impl::load_stage_part(DeviceState& s, int c, const LayerSpec& layer,
                                     std::int64_t begin, std::int64_t end) {
  if (end <= begin) return;
  const DeviceChunk& ch = s.chunks[std::size_t(c)];
  s.device->load_rows(s.vertex.H[std::size_t(layer.index)], ch.load_vertices.slice(begin, end),
                      Idx{},
                      s.stage.row_block(begin, end - begin).col_block(0, input_width(layer)));
}

// During the last batch of a pass, on the transfer lane: batch 0's rows of the next pass into
// the stage (once this batch's rows left it), so that pass does not start with a load. When
// the next pass reads this forward pass's outputs, each device's rows wait for its stores of
// the chunks before the last, and the last chunk's rows (head.split_begin..split_end) wait
// for the next pass.
void Schedule::Impl::prefetch_next_head() {
  if (!next_head) return;
  const LayerSpec& layer = *next_head;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    const std::int64_t n = s.chunks[0].load_rows.size;
    if (s.stage.empty() || n == 0 || !resident_inputs(s, layer).empty()) continue;
    const std::int64_t begin = next_head_reads_outputs ? s.head.split_begin : n;
    const std::int64_t end = next_head_reads_outputs ? s.head.split_end : n;
    s.head.prefetched = true;
    s.head.pending_begin = begin;
    s.head.pending_end = end;
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

// Batch 0's pending rows (the vertices of the device's last chunk) from the last forward
// chunk's output block, where they are what store_blocks() writes to host memory; rounded to
// the host precision, as a load of what the store wrote would give them.
void Schedule::Impl::copy_head_rows(DeviceState& s, const LayerSpec& layer) {
  const int last = C - 1;
  const std::int64_t width = input_width(layer);
  const std::int64_t begin = s.head.pending_begin, n = s.head.pending_end - begin;
  const Mat rows = s.stage.row_block(begin, n).col_block(0, width);
  s.device->wait(kComputed + last % s.num_sets);
  s.device->gather_rows(last_output_block(s, layer, width), s.head.block_rows, rows);
  s.device->round_to_host_precision(rows, options.host_precision);
}

// Batch 0's load from the stage but for its pending rows, which come straight from the last
// forward chunk's output block (NextPassHead::pending_in_block): one copy on the compute lane,
// behind that chunk's compute, instead of a copy into the stage on the transfer lane and one out
// of it.
void Schedule::Impl::load_head_from_block(DeviceState& s, const LayerSpec& layer, Mat X,
                                          const DropoutKey& key) {
  Device& d = *s.device;
  const DeviceChunk& ch = s.chunks[0];
  const std::int64_t n = ch.load_rows.size;
  const std::int64_t begin = s.head.pending_begin, end = s.head.pending_end;
  const auto from_stage = [&](std::int64_t b, std::int64_t e) {
    if (e > b)
      d.scatter_dropout_rows(s.stage.row_block(b, e - b).col_block(0, X.cols),
                             ch.load_rows.slice(b, e), X, ch.load_keys.slice(b, e), key);
  };
  from_stage(0, begin);
  from_stage(end, n);
  SLUICE_EXPECTS(X.cols == input_width(layer), "batch 0 loads ", X.cols, " columns of ",
                 input_width(layer));
  d.copy_dropout_rows(last_output_block(s, layer, X.cols), s.head.block_rows,
                      ch.load_rows.slice(begin, end), X, ch.load_keys.slice(begin, end), key);
  s.head.pending_in_block = false;
}

// Whether the forward pass of `layer` may end without waiting for its last stores: the next
// pass reads its outputs, every device loads them through its stage, and the rows the next
// pass's first batch needs of each device's last chunk can come from the device (head.block_rows).
// Not in baseline mode, whose loads read other devices' rows.
bool Schedule::Impl::ends_early(const LayerSpec& layer) const {
  if (options.comm == CommMode::kBaseline || !next_head || !next_head_reads_outputs || layer.last ||
      reloads_inputs(*next_head))
    return false;
  for (const DeviceState& s : dev) {
    const std::int64_t pending = s.head.pending_end - s.head.pending_begin;
    if (s.chunks[0].load_rows.size == 0) continue;
    if (s.stage.empty() || !s.head.prefetched || s.head.block_rows.size != pending) return false;
  }
  return true;
}

// The backward's per-chunk blocks: G^{l+1} rows and, when cached, A^l rows. Layer 0 completes
// its G^1 block with the kept tail rows: those leaving layer 1's pass for the first time are
// copied over the block's (unwritten) rows, the others added to what earlier flushes left in
// G^1 (the tail rows carry the host precision already, flush_rows(); the sums are rounded as a
// flush's addition into G^1 would round them). The block still loads whole: in fp32 one DMA copy,
// measured faster than a zero-copy gather of only the other rows, whose warps take SMs from the
// compute (docs/benchmarks.md); in bf16 one widening read of the whole block. kPreloaded: the
// host rows are in the set already (preload_next_blocks()), only the kept tail is missing.
void Schedule::Impl::load_blocks(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                 BlockSet& set, BlockRows rows) {
  Device& d = *s.device;
  if (rows == BlockRows::kFromHost) load_host_blocks(s, ch, layer, set, HostBlocks::kAll);
  if (rows == BlockRows::kGradientOnly) load_host_blocks(s, ch, layer, set, HostBlocks::kGradient);
  if (layer.index != 0 || !s.keep_tail || !tail_block(s, ch, layer).empty()) return;
  const Mat kept = tail_rows(s), block = gradient_block(s, ch, layer, set).col_block(0, kept.cols);
  // Each chunk's tail rows into its rows of the block (a row group's: at the chunk's offset).
  const auto add_tail = [&](const DeviceChunk& chunk, Mat dst) {
    const std::int64_t n = chunk.tail_src.size, a = chunk.tail_assign;
    if (n == 0) return;
    d.copy_rows(kept, chunk.tail_src.slice(0, a), chunk.tail_dst.slice(0, a), dst,
                RowCopy::kOverwrite);
    d.copy_rows(kept, chunk.tail_src.slice(a, n), chunk.tail_dst.slice(a, n), dst, RowCopy::kAdd);
    d.round_rows_to_host_precision(dst, chunk.tail_dst.slice(a, n), options.host_precision);
  };
  if (ch.end_chunk == ch.first_chunk) {
    add_tail(ch, block);
    return;
  }
  for (int m = ch.first_chunk; m < ch.end_chunk; ++m) {
    const DeviceChunk& member = s.chunks[std::size_t(m)];
    add_tail(member, block.row_block(member.view_dst_begin - ch.view_dst_begin, member.num_dst));
  }
}

// The block rows from host memory: G[l+1] and, when kept, A^l (GAT: O^l) unless the set still
// holds it (keeps_a_block()); none of a matrix resident in fp32, which the backward reads in
// place (gradient_block(), aggregation_block()).
void Schedule::Impl::load_host_blocks(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                      BlockSet& set, HostBlocks which) {
  Device& d = *s.device;
  const HostMat& G = s.vertex.G[std::size_t(layer.index) + 1];
  if (which != HostBlocks::kAggregation && resident_rows(G, ch).empty() &&
      tail_block(s, ch, layer).empty())
    d.load_block(G, ch.view_dst_begin, gradient_block(s, ch, layer, set));
  const HostMat& A = s.vertex.A[std::size_t(layer.index)];
  if (which != HostBlocks::kGradient && !recompute(layer) && !keeps_a_block(layer) &&
      resident_rows(A, ch).empty())
    d.load_block(A, ch.view_dst_begin, rows_of(set.A, ch.num_dst, layer.aggregate_width));
}

// The fused pass of a two-layer model whose layer 1 is pretransformed, during its last batch:
// the host rows of layer 0's first blocks (dT^1 and A^0 of chunk 0) into the first block set,
// so the backward pass does not start by waiting for them (the fused pass uses only the sets'
// dZ); chunk 1's blocks load behind chunk 0's compute as usual. G^1 is complete in host memory
// but for the kept tail once the flushes of the batches before the last are: the transfer lane
// waits for the last of them (kLeaveFree) and for their additions (join_host_adds()), and the
// tail joins the blocks in the backward pass (load_blocks(), BlockRows::kPreloaded).
void Schedule::Impl::preload_next_blocks(const LayerSpec& layer) {
  const LayerSpec& below = model.layers[0];
  if (layer.index != 1 || !layer.last || !stores_transform(below)) return;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    if (!s.keep_tail || !s.prefetch_blocks || s.leave.empty()) continue;
    Device& d = *s.device;
    LaneScope lane(d, Lane::kTransfer);
    d.wait(kLeaveFree);
    d.join_host_adds();
    d.phase_begin(Phase::kLoad, pass_tag_of(PassKind::kBackward, 0));
    load_host_blocks(s, backward_batch(s, below, 0), below, s.sets[0],
                     s.aggregation_preloaded > 0 ? HostBlocks::kGradient : HostBlocks::kAll);
    s.first_blocks_preloaded = true;
    d.phase_end(Phase::kLoad);
  }
}

// The same fused pass, after its first batch's loads: the A^0 rows of layer 0's first batches
// (one a block set) into their sets, whose A buffers the fused pass leaves alone, so that the
// backward pass loads only their dT^1 rows. A^0 is complete in host memory once the forward
// pass's stores are (the transfer lane waits for them); the link has room beside the fused
// pass's gathers and flushes, and none at the start of the backward pass.
void Schedule::Impl::preload_aggregation_blocks(const LayerSpec& layer) {
  const LayerSpec& below = model.layers[0];
  if (layer.index != 1 || !layer.last || !stores_transform(below) || gat() || recompute(below) ||
      keeps_a_block(below))
    return;
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    if (!s.prefetch_blocks) continue;
    Device& d = *s.device;
    LaneScope lane(d, Lane::kTransfer);
    const int count = std::min(s.num_sets, backward_batches(below));
    for (int k = 0; k < s.num_sets; ++k) d.wait(kStored + k);
    d.phase_begin(Phase::kLoad, pass_tag_of(PassKind::kBackward, 0));
    for (int k = 0; k < count; ++k) {
      const DeviceChunk& ch = backward_batch(s, below, k);
      if (ch.num_dst > 0) load_host_blocks(s, ch, below, s.sets[k], HostBlocks::kAggregation);
    }
    d.phase_end(Phase::kLoad);
    s.aggregation_preloaded = count;
  }
}

void Schedule::Impl::copy_remote_features(DeviceState& s, const DeviceChunk& ch,
                                          const LayerSpec& layer, const DropoutKey& key) {
  std::int64_t first = ch.remote_features_first;
  for (const auto& pull : ch.pulls) {
    const std::int64_t count = pull.local_rows.size;
    s.device->scatter_dropout_rows(s.remote_features.row_block(first, count), pull.local_rows,
                                   exchanged_rows(s, layer),
                                   s.remote_feature_keys.slice(first, first + count), key);
    first += count;
  }
}

bool Schedule::Impl::prefetches_next_step_inputs() const {
  const int L = int(model.layers.size());
  if (!training || C != 1 || L < 2 || !runs_through_passes()) return false;
  const LayerSpec& first = model.layers[0];
  if (transforms(first) || recompute(first) || backward_loads_inputs(first)) return false;
  for (int l = 1; l < L; ++l)
    if (!pretransformed(model.layers[std::size_t(l)])) return false;
  return std::all_of(dev.begin(), dev.end(), [&](const DeviceState& s) {
    const bool own_copies =
        s.chunks[0].pulls.empty() || (pulls_features(first) && !s.remote_features.empty());
    return !resident_inputs(s, first).empty() && own_copies;
  });
}

// Called by forward 0's compute right after its product over X: on the store lane (the lowest
// priority, idle while the vertex data are resident), behind that product, the device's rows of
// the next training step, with the dropout of the next epoch. The rest of the step runs beside
// the copies; the next step's load finds them (takes_next_step_inputs()).
void Schedule::Impl::prefetch_next_step_inputs(DeviceState& s, const DeviceChunk& ch,
                                               const LayerSpec& layer) {
  Device& d = *s.device;
  DropoutKey next = feature_key(layer.index);
  ++next.epoch;
  d.mark(kInputsRead);
  LaneScope lane(d, Lane::kStore);
  d.wait(kInputsRead);
  d.phase_begin(Phase::kLoad, tag(0));
  if (ch.load_rows.size > 0)
    d.copy_dropout_rows(resident_inputs(s, layer), ch.load_vertices, ch.load_rows,
                        input_rows(s, layer), ch.load_keys, next);
  if (!s.remote_features.empty()) copy_remote_features(s, ch, layer, next);
  d.phase_end(Phase::kLoad);
  d.mark(kInputsPrefetched);
  s.next_step_inputs.queued = true;
  s.next_step_inputs.key = next;
}

bool Schedule::Impl::takes_next_step_inputs(DeviceState& s) {
  if (!s.next_step_inputs.queued) return false;
  s.device->wait(kInputsPrefetched);
  s.next_step_inputs.queued = false;
  const DropoutKey want = feature_key(0), have = s.next_step_inputs.key;
  // Without dropout the rows are the features themselves, whatever the epoch.
  s.next_step_inputs.taken =
      want.rate == have.rate &&
      (want.rate == 0 ||
       (want.seed == have.seed && want.epoch == have.epoch && want.layer == have.layer));
  return s.next_step_inputs.taken;
}

// Called by forward 0's compute once its transform wrote range `range` of the device's T rows of
// the next layer (DeviceChunk::send_ranges; `rows`: all of them, in its resident matrix or in
// its slots, writes_transforms_into_slots()): the range's rows each peer pulls (this device's
// received_rows from that peer, DeviceState::pulls_are_pushes) go into the peer's consecutive
// slots for them while the compute lane transforms the next range. The slower device of a pair
// finds its remote rows there when its fused pass begins, instead of pulling them then; the
// peers' slots are idle until that pass (layer 0 aggregates first, and the step began after a
// drain), and the device's own rows stay as they are until the next forward.
//
// The copy engines move them on the peer lane: stores by a kernel on the peer lane ran 3-4x
// slower beside the next range's transform, whose blocks held the SMs (docs/benchmarks.md,
// "Two GPUs"). Rows that are consecutive (SendRange::sent_first; a partition numbered with its
// boundary vertices first) go as one block; others are first compacted into `staging` (the set's
// dZ block, idle until the fused pass's loss gradient, which waits for these sends) on the
// compute lane. Where staging cannot hold every sent row, a kernel on the peer lane stores them
// into the peer's memory.
std::int64_t Schedule::Impl::sent_width(const DeviceChunk& ch, std::int64_t source_ld,
                                        std::int64_t cols) const {
  const std::int64_t padded = aligned_width(cols);
  const bool pads = source_ld >= padded &&
                    std::all_of(ch.received.begin(), ch.received.end(), [&](const ReceivedRows& r) {
                      return dev[std::size_t(r.pusher)].Zm.ld >= padded;
                    });
  return pads ? padded : cols;
}

Mat Schedule::Impl::peer_slots(const ReceivedRows& r, int owner, std::int64_t width) {
  DeviceState& peer = dev[std::size_t(r.pusher)];
  for (const DevicePeerRows& slots : peer.chunks[0].pushes) {
    if (slots.owner != owner) continue;
    SLUICE_EXPECTS(slots.local_first >= 0 && slots.local_rows.size == r.count, "device ", r.pusher,
                   "'s slots for device ", owner, "'s rows");
    const Mat rows = peer.Zm.row_block(slots.local_first, r.count);
    return Mat{rows.data, rows.rows, width, rows.ld};
  }
  return Mat{};
}

void Schedule::Impl::send_transforms(DeviceState& s, const LayerSpec& next, Mat rows,
                                     std::size_t range, Mat staging) {
  Device& d = *s.device;
  const DeviceChunk& ch = s.chunks[0];
  const int self = int(&s - dev.data());
  const std::int64_t width = sent_width(ch, rows.ld, next.transform_width);
  const Mat source{rows.data, rows.rows, width, rows.ld};
  const bool staged = ch.received_rows.size * width <= staging.rows * staging.ld;
  const Mat compact{staging.data, staged ? ch.received_rows.size : 0, width, width};
  // Positions [received_begin[i], received_end[i]) of received[i]'s rows in the range.
  const SendRange& sends = ch.send_ranges[range];
  // A later range that sends nothing leaves kTransformsSent where the earlier ranges' sends
  // marked it: the peers need no more of this device's rows.
  if (range > 0 && sends.received_begin == sends.received_end) return;
  if (staged)
    for (std::size_t i = 0; i < ch.received.size(); ++i) {
      const std::int64_t first = sends.received_begin[i], end = sends.received_end[i];
      if (sends.sent_first[i] < 0 && end > first)
        d.gather_rows(source, ch.received_rows.slice(first, end),
                      compact.row_block(first, end - first));
    }
  d.mark(kTransformsWritten);
  LaneScope lane(d, Lane::kPeer);
  d.wait(kTransformsWritten);
  d.phase_begin(Phase::kP2p, tag(0));
  for (std::size_t i = 0; i < ch.received.size(); ++i) {
    const ReceivedRows& r = ch.received[i];
    const std::int64_t first = sends.received_begin[i], end = sends.received_end[i];
    if (end == first) continue;
    const Mat slots = peer_slots(r, self, width);
    if (slots.empty()) continue;
    Device& peer = *dev[std::size_t(r.pusher)].device;
    const Mat into = slots.row_block(first - r.first, end - first);
    if (sends.sent_first[i] >= 0)
      d.put_block(source.row_block(sends.sent_first[i], end - first), peer, into);
    else if (staged)
      d.put_block(compact.row_block(first, end - first), peer, into);
    else
      d.put_rows(source, ch.received_rows.slice(first, end), peer, into);
  }
  d.phase_end(Phase::kP2p);
  d.mark(kTransformsSent);
}

// The fused pass's loss gradients of device p's rows that its peers read, into the peers' slots
// for those rows (where the forward sent their transforms), once the peer's forward has read
// its slots (kLossGradients); then kLossGradientsSent. Each peer's transposed product takes them
// (owners_transposed_product()). The rows go as one block copy where they are consecutive (a
// partition numbered with its boundary vertices first), else by the peer lane's row kernel.
void Schedule::Impl::send_loss_gradients(int p, const LayerSpec& layer) {
  DeviceState& s = dev[std::size_t(p)];
  Device& d = *s.device;
  const DeviceChunk& ch = s.chunks[0];
  const std::int64_t width = sent_width(ch, s.Zm.ld, layer.out_width);
  const Mat source{s.Zm.data, ch.num_dst, width, s.Zm.ld};
  LaneScope lane(d, Lane::kPeer);
  d.wait(kLossGradients);
  d.phase_begin(Phase::kP2p, tag(0));
  for (std::size_t i = 0; i < ch.received.size(); ++i) {
    const ReceivedRows& r = ch.received[i];
    Device& peer = *dev[std::size_t(r.pusher)].device;
    d.wait_peer(peer, kLossGradients);
    const Mat into = peer_slots(r, p, width);
    if (into.empty()) continue;
    const std::int64_t first = ch.peer_rows.sent_first[i];
    if (first >= 0)
      d.put_block(source.row_block(first, r.count), peer, into);
    else
      d.put_rows(source, ch.received_rows.slice(r.first, r.first + r.count), peer, into);
  }
  d.phase_end(Phase::kP2p);
  d.mark(kLossGradientsSent);
}

// Phase B: remote rows from the owners' transition buffers, once each owner has loaded them; or
// a device's copies of the remote feature rows (place_remote_features()), with the dropout the
// owners' loads apply.
void Schedule::Impl::pull_phase(const LayerSpec& layer, int c) {
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    Device& d = *s.device;
    const DeviceChunk& ch = s.chunks[std::size_t(c)];
    const auto& pulls = ch.pulls;
    if (!s.remote_features.empty() && pulls_features(layer)) {
      if (!s.next_step_inputs.taken) {
        d.phase_begin(Phase::kLoad, tag(c));
        copy_remote_features(s, ch, layer, feature_key(layer.index));
        d.phase_end(Phase::kLoad);
      }
      d.mark(kPulled);
      continue;
    }
    if (pulls_resident_rows(layer) && finds_transforms_sent(layer, c)) {
      // The owners sent the rows as their forward wrote them (send_transforms()). The device's
      // own sends finish before its product too: beside the product a send runs several times
      // slower, and a peer waits for it (docs/benchmarks.md, "Two GPUs").
      d.wait(kTransformsSent);
      for (const auto& pull : pulls)
        d.wait_peer(*dev[std::size_t(pull.owner)].device, kTransformsSent);
      d.mark(kPulled);
      continue;
    }
    if (pulls_resident_rows(layer)) {
      // The owners' T^l is complete since the pass boundary (their compute lanes marked
      // kLanesJoined after the pass that wrote it, or the host waited for them).
      {
        LaneScope lane(d, Lane::kTransfer);
        for (const auto& pull : pulls)
          d.wait_peer(*dev[std::size_t(pull.owner)].device, kLanesJoined);
        d.phase_begin(Phase::kP2p, tag(c));
        for (const auto& pull : pulls) {
          DeviceState& owner = dev[std::size_t(pull.owner)];
          const Mat rows = resident_rows(owner.vertex.H[std::size_t(layer.index)], owner.chunks[0]);
          d.pull_rows(*owner.device, rows.col_block(0, layer.transform_width), pull.owner_rows,
                      pull.local_rows, exchanged_rows(s, layer));
        }
        d.phase_end(Phase::kP2p);
        d.mark(kPulled);
      }
      d.wait(kPulled);  // the compute lane, before the batch's compute
      continue;
    }
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

// Forward results of chunk c on the store lane: A^l (cache mode) and H^{l+1} (or T^{l+1}).
void Schedule::Impl::store_blocks(int p, int c, const LayerSpec& layer, BlockSet& set, int k) {
  DeviceState& s = dev[std::size_t(p)];
  DeviceChunk& ch = s.chunks[std::size_t(c)];
  if (ch.num_dst == 0) return;
  // The last layer's forward runs alone only in evaluation, which stores nothing (training
  // fuses it with its backward).
  if (layer.last) return;
  Device& d = *s.device;
  const bool store_a = training && !recompute(layer) && !keeps_a_block(layer);
  const bool store_out = output_in_place(s, ch, layer).empty();
  LaneScope lane(d, Lane::kStore);
  d.wait(kComputed + k);
  if (store_a || store_out) {  // a resident one-chunk pass stores nothing: no empty phase
    d.phase_begin(Phase::kStore, tag(c));
    if (store_a)
      d.store_block(rows_of(set.A, ch.num_dst, layer.aggregate_width),
                    s.vertex.A[std::size_t(layer.index)], ch.view_dst_begin);
    if (store_out)  // T^{l+1} or H^{l+1}
      d.store_block(rows_of(set.out, ch.num_dst, output_width(layer)),
                    s.vertex.H[std::size_t(layer.index) + 1], ch.view_dst_begin);
    d.phase_end(Phase::kStore);
  }
  d.mark(kStored + k);
}

// The end of a pass where passes run through (end_pass()): per device, the compute lane waits
// for the transfer lane's work so far and, with SideLanes::kTransferAndStore, the store lane's
// (the flushes' additions into host memory included), and those lanes wait for the compute
// lane's. With SideLanes::kTransfer (a forward pass that ends early) the stores run on.
void Schedule::Impl::join_lanes(SideLanes sides) {
  const bool store = sides == SideLanes::kTransferAndStore;
  for (DeviceState& s : dev) {
    Device& d = *s.device;
    {
      LaneScope lane(d, Lane::kTransfer);
      d.mark(kLanesJoined);
    }
    if (store) {
      LaneScope lane(d, Lane::kStore);
      d.join_host_adds();
      d.mark(kStoreJoined);
    }
    LaneScope compute(d, Lane::kCompute);
    d.wait(kLanesJoined);
    if (store) d.wait(kStoreJoined);
    // Re-marked on the compute lane (the waits above took the side lanes' marks as they were):
    // every joined lane's work of the pass.
    d.mark(kLanesJoined);
    for (const Lane side : {Lane::kTransfer, Lane::kStore}) {
      if (side == Lane::kStore && !store) continue;
      LaneScope lane(d, side);
      d.wait(kLanesJoined);
    }
  }
}

// Phase D (backward): remote-row gradients to their owners. On its peer lane each device copies
// its remote rows' gradients into their owners' receive buffers once its compute wrote them
// (kRemoteGradients; transposed_product_remote_first() marks it early) and the owner
// added what it received before (kReceived): one block copy where the rows are consecutive (a
// copy engine's work, beside the compute), else a gather into the owner's memory. Then each
// owner adds what it received into its own rows on its compute lane, pushers ascending: the
// same sums in the same order in every run, whatever the timing and the number of partitions,
// and no device waits for another's compute before it sends.
void Schedule::Impl::push_phase(const LayerSpec& layer, int c) {
  if (sends_loss_gradients(layer)) {  // the owners' products took every entry into their rows
    phase_boundary();
    return;
  }
  // Rows padded only to 16 bytes go whole, their padding with them (no reader looks at it), so
  // that both sides are contiguous; narrower views of a wider buffer (GAT's output layer in a
  // dZm as wide as layer 0's heads) go as their columns. The receive buffer is viewed with the
  // rows' length rounded to 16 bytes.
  const auto sent_rows = [](Mat m) {
    return m.ld - m.cols < 4 ? Mat{m.data, m.rows, m.ld, m.ld} : m;
  };
  const auto inbox = [&](DeviceState& s, const Mat& sent) {
    const std::int64_t ld = (sent.cols + 3) / 4 * 4;
    SLUICE_EXPECTS(ld <= s.received.ld, "receive buffer rows of ", s.received.ld,
                   " floats for gradient rows of ", ld);
    return Mat{s.received.data, s.received.rows, sent.cols, ld};
  };
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    Device& d = *s.device;
    const auto& pushes = s.chunks[std::size_t(c)].pushes;
    if (pushes.empty()) continue;
    const Mat gradient = sent_rows(exchanged_gradient(s, layer));
    LaneScope lane(d, Lane::kPeer);
    d.wait(kRemoteGradients);
    for (const auto& push : pushes) d.wait_peer(*dev[std::size_t(push.owner)].device, kReceived);
    d.phase_begin(Phase::kP2p, tag(c));
    for (const auto& push : pushes) {
      DeviceState& owner = dev[std::size_t(push.owner)];
      const std::int64_t count = push.local_rows.size;
      const Mat target = inbox(owner, gradient).row_block(push.receive_first, count);
      if (push.local_first >= 0 && gradient.ld == gradient.cols)
        d.put_block(gradient.row_block(push.local_first, count), *owner.device, target);
      else
        d.put_rows(gradient, push.local_rows, *owner.device, target);
    }
    d.phase_end(Phase::kP2p);
    d.mark(kPushed);
  }
  for (int o = 0; o < P; ++o) {
    DeviceState& s = dev[std::size_t(o)];
    Device& d = *s.device;
    const DeviceChunk& ch = s.chunks[std::size_t(c)];
    // Its own puts have read its remote rows before the compute lane writes them again.
    if (!ch.pushes.empty()) d.wait(kPushed);
    if (ch.received.empty()) continue;
    const Mat gradient = exchanged_gradient(s, layer);
    const Mat received = inbox(s, sent_rows(gradient)).col_block(0, gradient.cols);
    d.phase_begin(Phase::kP2p, tag(c));
    for (const ReceivedRows& from : ch.received) {
      d.wait_peer(*dev[std::size_t(from.pusher)].device, kPushed);
      d.scatter_add_rows(received.row_block(from.first, from.count),
                         ch.received_rows.slice(from.first, from.first + from.count), gradient);
    }
    d.phase_end(Phase::kP2p);
    d.mark(kReceived);
  }
  phase_boundary();
}

// Leaving rows: dropout backward (the mask multiply is its own derivative), then into G^l:
// rows leaving for the first time in this layer are stored, the others added. With a `leave`
// buffer the rows are compacted on the compute lane and flushed on
// the store lane, behind the next batch's work.
void Schedule::Impl::flush_phase(const LayerSpec& layer, int c) {
  for (int p = 0; p < P; ++p) {
    DeviceState& s = dev[std::size_t(p)];
    DeviceChunk& ch = s.chunks[std::size_t(c)];
    Device& d = *s.device;
    // The peers' pushes of this batch were added into dX (GAT: dZm) on this compute lane
    // (push_phase()).
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
void Schedule::Impl::flush_rows(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                int c) {
  Device& d = *s.device;
  const std::int64_t width = flushed_width(layer);
  const bool transformed = pretransformed(layer);
  const HostMat g = s.vertex.G[std::size_t(layer.index)].col_block(0, width);
  const Mat dX = (transformed ? s.dZm : s.dX).col_block(0, width);
  const std::int64_t n = ch.leave_rows.size, stored = ch.leave_store_count;
  d.phase_begin(Phase::kFlush, tag(c));
  const DropoutKey key = feature_key(layer.index);
  if (key.rate > 0 && !transformed) d.dropout_rows(dX, ch.leave_rows, ch.leave_keys, key);
  if (keeps_tail(s, layer, c)) {  // layer 0's load_blocks() reads them (tail_rows())
    // Rounded to the host precision as the flush they stand in for would round them.
    if (tail_in_flush_buffer) {
      d.wait(kLeaveFree);
      d.gather_rows(dX, ch.leave_rows, rows_of(s.leave, n, width));
      d.round_to_host_precision(rows_of(s.leave, n, width), options.host_precision);
    } else {
      d.round_rows_to_host_precision(dX, ch.leave_rows, options.host_precision);
    }
    d.phase_end(Phase::kFlush);
    return;
  }
  if (s.leave.empty()) {
    d.flush_store_rows(dX, ch.leave_rows.slice(0, stored), ch.leave_vertices.slice(0, stored), g);
    d.flush_add_rows(dX, ch.leave_rows.slice(stored, n), ch.leave_vertices.slice(stored, n), g);
    d.phase_end(Phase::kFlush);
    return;
  }
  d.wait(kLeaveFree);
  d.gather_rows(dX, ch.leave_rows, rows_of(s.leave, n, width));
  d.phase_end(Phase::kFlush);
  flush_leave_buffer(s, ch, layer, c);
}

// The leaving rows' input gradients, compacted in `leave` on the compute lane, into G^l on the
// store lane (first flushes stored, the others added), behind the next batch's work.
void Schedule::Impl::flush_leave_buffer(DeviceState& s, const DeviceChunk& ch,
                                        const LayerSpec& layer, int c) {
  Device& d = *s.device;
  const std::int64_t n = ch.leave_rows.size, stored = ch.leave_store_count;
  const std::int64_t width = flushed_width(layer);
  const HostMat g = s.vertex.G[std::size_t(layer.index)].col_block(0, width);
  const Mat compact = rows_of(s.leave, n, width);
  d.mark(kLeaveReady);
  LaneScope lane(d, Lane::kStore);
  d.wait(kLeaveReady);
  d.phase_begin(Phase::kFlush, tag(c));
  d.flush_store_rows(compact, s.iota.slice(0, stored), ch.leave_vertices.slice(0, stored), g);
  d.flush_add_rows(compact.row_block(stored, n - stored), Idx{}, ch.leave_vertices.slice(stored, n),
                   g);
  d.phase_end(Phase::kFlush);
  d.mark(kLeaveFree);
}

}  // namespace sluice
