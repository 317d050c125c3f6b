// Chunk compute of the schedule (train/schedule_impl.hpp), on each device's compute lane:
// forward (GCN/SAGE aggregation and transform, GAT attention over transformed rows, the loss of
// the last layer) into a block set, backward from the set's gradient block into the weight
// gradients and the transition gradient rows, and the transforms of layers whose rows are
// exchanged transformed (on arrival, at the output of the layer below, and their backward).
#include <algorithm>

#include "train/schedule_impl.hpp"

namespace sluice {

using namespace schedule_detail;

namespace {

// The dense products of the layers (Device::gemm with its transposes named).
void multiply(Device& d, Mat a, Mat b, Mat out) {  // out = a b
  d.gemm(Transpose::kNo, Transpose::kNo, 1.f, a, b, 0.f, out);
}
void multiply_by_transpose(Device& d, Mat a, Mat b, Mat out) {  // out = a b^T
  d.gemm(Transpose::kNo, Transpose::kYes, 1.f, a, b, 0.f, out);
}
void add_transposed_product(Device& d, Mat a, Mat b, Mat out) {  // out += a^T b
  d.gemm(Transpose::kYes, Transpose::kNo, 1.f, a, b, 1.f, out);
}

// The products of a transform T = X W^t whose W^t is given as blocks side by side
// (TransformBlocks): t = x W^t, dx = dt W^t^T, and dW^t += x^T dt (dw: the gradient's blocks).
void transform(Device& d, const TransformBlocks& w, Mat x, Mat t) {
  std::int64_t col = 0;
  for (int i = 0; i < w.count; col += w.block[i].cols, ++i)
    multiply(d, x, w.block[i], t.col_block(col, w.block[i].cols));
}
void transform_input_gradient(Device& d, const TransformBlocks& w, Mat dt, Mat dx) {
  std::int64_t col = 0;
  for (int i = 0; i < w.count; col += w.block[i].cols, ++i)
    d.gemm(Transpose::kNo, Transpose::kYes, 1.f, dt.col_block(col, w.block[i].cols), w.block[i],
           i == 0 ? 0.f : 1.f, dx);
}
void add_transform_gradient(Device& d, const TransformBlocks& dw, Mat x, Mat dt) {
  std::int64_t col = 0;
  for (int i = 0; i < dw.count; col += dw.block[i].cols, ++i)
    add_transposed_product(d, x, dt.col_block(col, dw.block[i].cols), dw.block[i]);
}

}  // namespace

// Phase C: the chunk compute of every device on its compute lane; forward results go back to
// host memory on the store lane. kFused: the last layer's forward, then its backward from the
// loss gradient and intermediates the forward left in the set (nothing is stored).
void Schedule::Impl::compute_phase(const LayerSpec& layer, int c, PassKind kind) {
  const bool forward = kind != PassKind::kBackward;
  const bool backward = kind == PassKind::kBackward || kind == PassKind::kFused;
  // Every device's first product is issued before the rest of any device's compute: issued one
  // device after the other, a chunk's compute takes the host 0.1-0.3 ms, which the next device's
  // product would wait (docs/benchmarks.md, "Two GPUs"). Each device's operations keep their
  // order.
  std::vector<Mat> aggregations(static_cast<std::size_t>(P));
  // Where the fused pass sends its loss gradients to their owners, every device's forward and
  // sends are issued before any device's backward, which waits for its peers' sends.
  const bool sends = kind == PassKind::kFused && sends_loss_gradients(layer);
  for (const int p : compute_order) {
    DeviceState& s = dev[std::size_t(p)];
    Device& d = *s.device;
    const int k = c % s.num_sets;
    d.wait(kSetReady + k);  // backward blocks prefetched into the set
    // The set's previous blocks are in host memory (a fused transforming layer writes only the
    // set's dZ, which no store reads: it need not wait for the last forward pass's stores).
    if (kind != PassKind::kFused || !transforms(layer)) d.wait(kStored + k);
    d.phase_begin(Phase::kCompute, tag(c));
    if (forward) aggregations[std::size_t(p)] = forward_aggregation(p, c, layer, s.sets[k]);
  }
  if (sends) {
    for (const int p : compute_order) {
      DeviceState& s = dev[std::size_t(p)];
      forward_compute(p, c, layer, s.sets[c % s.num_sets], aggregations[std::size_t(p)]);
      s.device->mark(kLossGradients);
    }
    for (const int p : compute_order) send_loss_gradients(p, layer);
  }
  for (const int p : compute_order) {
    DeviceState& s = dev[std::size_t(p)];
    Device& d = *s.device;
    const int k = c % s.num_sets;
    if (forward && !sends) forward_compute(p, c, layer, s.sets[k], aggregations[std::size_t(p)]);
    if (backward) backward_compute(p, c, layer, s.sets[k], kind);
    d.phase_end(Phase::kCompute);
    d.mark(kComputed + k);
    // The remote rows' gradients are complete (unless the compute marked that earlier).
    if (backward && !sends && !s.chunks[std::size_t(c)].pushes.empty() &&
        !s.remote_gradients_marked)
      d.mark(kRemoteGradients);
    s.remote_gradients_marked = false;
    if (!backward) store_blocks(p, c, layer, s.sets[k], k);
  }
  phase_boundary();
}

// What compute_phase() reads of the chunk CSR in a pass of `kind` over `layer`: the forward's
// aggregation (aggregate(), aggregate_transformed(), gat_layer()) reads its rows unless an
// evaluation takes layer 0's aggregation from the cache; the backward the transpose
// (aggregate_backward() above layer 0, aggregate_transformed_backward()), GAT's both (GAT's
// layer 0 attending over its input rows too: its score gradients add up by source over the
// transpose), and a recomputed aggregation the rows again.
std::optional<CsrAccess> Schedule::Impl::products_read(const LayerSpec& layer,
                                                       PassKind kind) const {
  if (attends_inputs(layer))
    return kind == PassKind::kBackward ? CsrAccess::kBoth : CsrAccess::kRows;
  bool rows = false, transposed = false;
  if (kind != PassKind::kBackward)
    rows = gat() || transforms(layer) || !reads_evaluation_aggregation(layer);
  if (kind == PassKind::kBackward || kind == PassKind::kFused) {
    if (gat()) {
      rows = transposed = true;
    } else if (transforms(layer)) {
      // A transforming layer below the last computes its pre-activation again by the rows
      // (backward_compute(): where no output rows of it are on the device).
      transposed = true;
      rows = rows || (kind == PassKind::kBackward && !layer.last);
    } else {
      rows = rows || (kind == PassKind::kBackward && recompute(layer));
      transposed = layer.index > 0;
    }
  }
  if (rows && transposed) return CsrAccess::kBoth;
  if (rows) return CsrAccess::kRows;
  if (transposed) return CsrAccess::kTransposed;
  return std::nullopt;
}

// The evaluation cache holds the partition's vertices: a chunk's rows start at its first
// destination's offset in the partition. The host cache's rows go through the block set's A (a
// DMA copy each way, on the compute lane: an evaluation stores no A^l).
Mat Schedule::Impl::evaluation_rows(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                    int p, BlockSet& set) {
  const std::int64_t row = ch.dst_begin - plan.partition_offsets[std::size_t(p)];
  if (!s.evaluation_aggregation.empty()) return s.evaluation_aggregation.row_block(row, ch.num_dst);
  const Mat A = rows_of(set.A, ch.num_dst, layer.aggregate_width);
  s.device->load_block(s.evaluation_aggregation_on_host, row, A);
  return A;
}

void Schedule::Impl::keep_evaluation_rows(DeviceState& s, const DeviceChunk& ch, int p, Mat A) {
  const std::int64_t row = ch.dst_begin - plan.partition_offsets[std::size_t(p)];
  if (!s.evaluation_aggregation.empty())
    s.device->copy(A, s.evaluation_aggregation.row_block(row, ch.num_dst));
  else if (!s.evaluation_aggregation_on_host.empty())
    s.device->store_block(A, s.evaluation_aggregation_on_host, row);
}

// The first product of a forward chunk compute: the aggregation of a layer that aggregates first
// (or the evaluation's rows of it); empty for a transforming layer.
Mat Schedule::Impl::forward_aggregation(int p, int c, const LayerSpec& layer, BlockSet& set) {
  DeviceState& s = dev[std::size_t(p)];
  const DeviceChunk& ch = s.chunks[std::size_t(c)];
  if (ch.num_dst == 0) return Mat{};
  if (reads_evaluation_aggregation(layer)) return evaluation_rows(s, ch, layer, p, set);
  if (!transforms(layer)) return aggregate(s, ch, layer, set);
  return Mat{};
}

// Computes into `set` from the chunk's forward_aggregation() A; store_blocks() writes the
// results to host memory.
void Schedule::Impl::forward_compute(int p, int c, const LayerSpec& layer, BlockSet& set, Mat A) {
  DeviceState& s = dev[std::size_t(p)];
  DeviceChunk& ch = s.chunks[std::size_t(c)];
  if (ch.num_dst == 0) return;
  Device& d = *s.device;
  if (!reads_evaluation_aggregation(layer)) {
    if (!transforms(layer)) {
      if (writes_evaluation_aggregation(layer)) keep_evaluation_rows(s, ch, p, A);
      if (layer.index == 0 && prefetches_next_step_inputs())
        prefetch_next_step_inputs(s, ch, layer);
    } else if (keeps_head_outputs(layer)) {
      A = rows_of(set.A, ch.num_dst, layer.aggregate_width);  // GAT's O, stored as A^l
    }
  }
  // A forward pass keeps no pre-activation: the activation is applied with the bias, and with
  // the dropout of the next layer's inputs where this pass transforms them.
  if (stores_transform(layer)) {
    const Mat kept = kept_output_rows(s, ch, layer);
    const Mat H =
        layer_preactivation(s, ch, layer, A, layer.activation,
                            kept.empty() ? rows_of(s.Z, ch.num_dst, layer.out_width) : kept,
                            feature_key(above(layer)->index));
    const Mat T = forward_output_block(s, ch, layer, set);
    if (!sends_transforms(layer)) {
      transform_outputs(s, ch, layer, H, T, 0);
      return;
    }
    for (std::size_t k = 0; k < ch.send_ranges.size(); ++k) {
      const std::int64_t row = ch.send_ranges[k].row_begin, rows = ch.send_ranges[k].row_end - row;
      transform_outputs(s, ch, layer, H.row_block(row, rows), T.row_block(row, rows), row);
      send_transforms(s, *above(layer), T, k, set.dZ);
    }
    return;
  }
  if (!layer.last) {
    layer_preactivation(s, ch, layer, A, layer.activation,
                        forward_output_block(s, ch, layer, set).col_block(0, layer.out_width));
    return;
  }
  const Mat Z = layer_preactivation(s, ch, layer, A, Activation::kNone,
                                    rows_of(s.Z, ch.num_dst, layer.out_width));
  Mat grad_logits;
  if (training) {
    grad_logits = loss_gradient_rows(s, layer, set, ch.num_dst);
    // The peers that pull this device's rows have read them before its gradients replace them.
    if (sends_loss_gradients(layer))
      for (const int q : ch.pulled_by) d.wait_peer(*dev[std::size_t(q)].device, kPulled);
  }
  if (!training && captured_logits.data) d.store_block(Z, captured_logits, ch.dst_begin);
  // Split counts come back from evaluations, predictions from those that ask for them.
  LossOutputs out;
  out.loss_sum = &s.loss_sum;
  if (!training) {
    if (predictions_to_host) out.predictions = predictions.data() + ch.dst_begin;
    out.split_counts = &s.split_counts;
  }
  d.softmax_cross_entropy(Z, ch.labels, ch.split_bits, loss_scale, grad_logits, out);
}

// With two block sets the blocks were prefetched (prefetch()); else they load here. kFused (the
// last layer): the forward of this chunk just ran, so the loss gradient is in the set's dZ, the
// aggregation in its A and GAT's attention intermediates in s.el, s.er, s.alpha.
void Schedule::Impl::backward_compute(int p, int c, const LayerSpec& layer, BlockSet& set,
                                      PassKind kind) {
  DeviceState& s = dev[std::size_t(p)];
  DeviceChunk& ch = batch(s, c);
  if (ch.num_dst == 0) return;
  const bool fresh = kind == PassKind::kFused;
  SLUICE_EXPECTS(fresh == layer.last, "training fuses the last layer's forward and backward");
  Device& d = *s.device;
  const std::int64_t nd = ch.num_dst;
  if (!s.prefetch_blocks && !fresh) load_blocks(s, ch, layer, set, BlockRows::kFromHost);
  // The loss gradient (fresh), the gradient through the next layer's transform, or G^{l+1}.
  Mat dZ = fresh                     ? loss_gradient_rows(s, layer, set, nd)
           : stores_transform(layer) ? rows_of(set.dZ, nd, layer.out_width)
                                     : gradient_block(s, ch, layer, set);
  Mat A;
  if (!transforms(layer)) {
    A = fresh              ? rows_of(set.A, nd, layer.aggregate_width)
        : recompute(layer) ? aggregate(s, ch, layer, set)
                           : aggregation_block(s, ch, layer, set);
  }
  // Layers below the last compute the pre-activation again for their activation's backward:
  // from the aggregation (recomputed or kept), GAT's from its head outputs O, recomputed with the
  // attention intermediates, or kept (then only the coefficients are computed again). A ReLU
  // layer reads its outputs instead where they are on the device: kept by the forward
  // (LayerOutputs), or its rows of H^{l+1} (relu(Z), whose sign is Z's).
  Mat O = gat() ? rows_of(s.gat, nd, layer.transform_width) : Mat{};
  const Mat kept = fresh ? Mat{} : kept_output_rows(s, ch, layer);
  const Mat stored = fresh || !kept.empty() ? Mat{} : resident_output_rows(s, ch, layer);
  // GAT's head dots dO^h . O^h of a layer attending over its inputs, where the activation
  // backward from the kept head outputs takes them on its way.
  Mat head_dots;
  if (!kept.empty()) {
    transform_outputs_backward(s, ch, layer, set, kept, OutputRows::kKeptOutputs, dZ, Mat{});
  } else if (!stored.empty()) {
    d.activation_backward(dZ, stored, Activation::kRelu, dZ);
  } else if (!fresh && gat() && !recompute(layer)) {
    // GAT with its head outputs kept: the coefficients again unless the layer's attention stayed
    // (keeps_attention()); the pre-activation is O + b.
    O = aggregation_block(s, ch, layer, set);
    if (!keeps_attention(layer)) gat_coefficients_again(s, ch, layer);
    if (stores_transform(layer)) {
      if (attends_inputs(layer)) head_dots = input_head_dots(s, layer, nd);
      transform_outputs_backward(s, ch, layer, set, O, OutputRows::kHeadOutputs, dZ, head_dots);
    } else {
      const Mat Z = rows_of(s.Z, nd, layer.out_width);
      d.bias_activation(O, s.params.data + layer.b_offset, Activation::kNone, Z);
      d.activation_backward(dZ, Z, layer.activation, dZ);
    }
  } else if (!fresh) {
    const Mat Z = layer_preactivation(s, ch, layer, A, Activation::kNone,
                                      rows_of(s.Z, ch.num_dst, layer.out_width));
    if (stores_transform(layer))
      transform_outputs_backward(s, ch, layer, set, Z, OutputRows::kPreactivation, dZ, Mat{});
    else
      d.activation_backward(dZ, Z, layer.activation, dZ);
  }
  d.add_column_sums(dZ, s.grads.data + layer.b_offset);
  if (layer.transform_first) {
    aggregate_transformed_backward(s, ch, layer, dZ);
  } else if (gat()) {
    gat_layer_backward(s, ch, layer, dZ, O, head_dots);
  } else {
    aggregate_backward(s, ch, layer, A, dZ);
  }
}

// GAT: the attention backward into dZm, which accumulates over the batches a row stays (zeroed
// on arrival, remote rows every batch). When the row leaves, flush_rows() sends it to G^l as
// dT^l (layers above 0), and transform_flush() turns layer 0's into dW. O: the chunk's head
// outputs (in s.gat from the fused pass's forward or backward_compute()'s recomputation, or
// kept in the set's A block).
void Schedule::Impl::gat_layer_backward(DeviceState& s, const DeviceChunk& ch,
                                        const LayerSpec& layer, Mat dZ, Mat O, Mat head_dots) {
  Device& d = *s.device;
  const std::int64_t M = s.merged_rows, KF = layer.transform_width, nd = ch.num_dst;
  if (attends_inputs(layer)) {
    gat_input_layer_backward(s, ch, layer, dZ, O, head_dots);
    return;
  }
  Mat dO = dZ;  // a hidden layer's, or one output head's (the mean of one head is the head)
  if (layer.last && layer.heads > 1) {
    dO = rows_of(s.dA, nd, KF);
    d.head_mean_backward(dZ, layer.heads, dO);
  }
  const Csr& csr = chunk_csr(ch, layer);
  d.gat_backward(csr, rows_of(s.Zm, M, KF), s.params.data + layer.att_src_offset,
                 s.params.data + layer.att_dst_offset, layer.heads, ch.dst_keys,
                 attention_key(layer.index), rows_of(s.el, M, layer.heads),
                 rows_of(s.er, nd, layer.heads), rows_of(s.alpha, csr.nnz, layer.heads), O, dO,
                 rows_of(s.dZm, M, KF), s.grads.data + layer.att_src_offset,
                 s.grads.data + layer.att_dst_offset);
}

// GCN's input gradients (schedule_impl.hpp).
void Schedule::Impl::gcn_input_gradients(DeviceState& s, const DeviceChunk& ch,
                                         const LayerSpec& layer, Mat dy, Mat dx) const {
  const RowCopy write = stores_input_gradients() ? RowCopy::kOverwrite : RowCopy::kAdd;
  if (sends_loss_gradients(layer))
    owners_transposed_product(s, ch, layer, dx, write);
  else
    transposed_product_remote_first(s, ch, layer, dy, dx, write);
}

void Schedule::Impl::owners_transposed_product(DeviceState& s, const DeviceChunk& ch,
                                               const LayerSpec& layer, Mat dx,
                                               RowCopy write) const {
  Device& d = *s.device;
  const std::int64_t rows = ch.num_dst, read = std::min(ch.peers_read_end, rows);
  const auto product = [&](std::int64_t begin, std::int64_t end) {
    if (begin == end) return;
    if (ch.loss_csr.id >= 0)
      d.spmm_transpose_rows(ch.loss_csr, nullptr, rows_of(s.Zm, s.merged_rows, layer.out_width), dx,
                            RowRange{begin, end}, write);
    else if (write == RowCopy::kOverwrite)  // no loss row reaches the partition's vertices
      d.fill(dx.row_block(begin, end - begin), 0.f);
  };
  product(read, rows);
  // The owners of the rows this device reads send it their rows' gradients.
  for (const DevicePeerRows& owner : ch.pushes)
    d.wait_peer(*dev[std::size_t(owner.owner)].device, kLossGradientsSent);
  product(0, read);
}

// dx (=|+=) A^T dy of a chunk's merged rows. A chunk that pushes at least
// ScheduleOptions::remote_first_push_bytes (and some rows) computes the remote region's rows
// first and marks kRemoteGradients, so that they go to their owners on the peer lane while the
// partition's own rows are computed (push_phase()); each row gets the same sum either way.
void Schedule::Impl::transposed_product_remote_first(DeviceState& s, const DeviceChunk& ch,
                                                     const LayerSpec& layer, Mat dy, Mat dx,
                                                     RowCopy write) const {
  Device& d = *s.device;
  const Csr& csr = chunk_csr(ch, layer);
  std::int64_t pushed_rows = 0;
  for (const DevicePeerRows& push : ch.pushes) pushed_rows += push.local_rows.size;
  const std::int64_t pushed_bytes = pushed_rows * dx.cols * std::int64_t(sizeof(float));
  if (pushed_rows == 0 || pushed_bytes < options.remote_first_push_bytes ||
      s.remote_first >= dx.rows) {
    if (write == RowCopy::kOverwrite)
      d.spmm_transpose(csr, nullptr, dy, dx);
    else
      d.spmm_transpose_add(csr, nullptr, dy, dx);
    return;
  }
  d.spmm_transpose_rows(csr, nullptr, dy, dx, RowRange{s.remote_first, dx.rows}, write);
  d.mark(kRemoteGradients);
  s.remote_gradients_marked = true;
  d.spmm_transpose_rows(csr, nullptr, dy, dx, RowRange{0, s.remote_first}, write);
}

// GCN/SAGE aggregating first: dW += A^T dZ and, above layer 0, the input gradient
// dX += agg^T (dZ W^T) (SAGE: its self half scattered, its mean half through the CSR).
void Schedule::Impl::aggregate_backward(DeviceState& s, const DeviceChunk& ch,
                                        const LayerSpec& layer, Mat A, Mat dZ) {
  Device& d = *s.device;
  Mat W = param(s, layer.w_offset, layer.w_rows, layer.w_cols);
  Mat dW = grad(s, layer.w_offset, layer.w_rows, layer.w_cols);
  add_transposed_product(d, A, dZ, dW);
  if (layer.index == 0) return;  // no input gradient
  Mat dX = s.dX.col_block(0, layer.in_width);
  Mat dA = rows_of(s.dA, ch.num_dst, layer.aggregate_width);
  multiply_by_transpose(d, dZ, W, dA);
  if (model.kind == ModelKind::kGcn) {
    gcn_input_gradients(s, ch, layer, dA, dX);
  } else {
    d.scatter_add_rows(dA.col_block(0, layer.in_width), ch.self_columns, dX);
    transposed_product_remote_first(s, ch, layer, dA.col_block(layer.in_width, layer.in_width), dX,
                                    RowCopy::kAdd);
  }
}

// GCN/SAGE aggregation A = agg(X) for the chunk (nd x aggregate_width).
Mat Schedule::Impl::aggregate(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                              BlockSet& set) {
  Device& d = *s.device;
  Mat X = s.X.col_block(0, layer.in_width);
  Mat A = rows_of(set.A, ch.num_dst, layer.aggregate_width);
  if (model.kind == ModelKind::kGcn) {
    d.spmm(chunk_csr(ch, layer), nullptr, X, A);
  } else {
    d.gather_rows(X, ch.self_columns, A.col_block(0, layer.in_width));
    d.spmm(chunk_csr(ch, layer), nullptr, X, A.col_block(layer.in_width, layer.in_width));
  }
  return A;
}

// A transform-first layer's sparse product over the merged rows' transforms T (Zm), into Z
// (nd x d_{l+1}): GCN Â T; SAGE the chunk rows' own T_self plus the mean of their neighbors'
// T_neigh (T = [X W_self | X W_neigh]).
void Schedule::Impl::aggregate_transformed(DeviceState& s, const DeviceChunk& ch,
                                           const LayerSpec& layer, Mat Z) {
  Device& d = *s.device;
  const Mat T = rows_of(s.Zm, s.merged_rows, layer.transform_width);
  if (model.kind == ModelKind::kGcn) {
    d.spmm(chunk_csr(ch, layer), nullptr, T, Z);
    return;
  }
  const std::int64_t F = layer.out_width;
  d.spmm(chunk_csr(ch, layer), nullptr, T.col_block(F, F), Z);
  d.copy_rows(T.col_block(0, F), ch.self_columns, s.chunk_iota.slice(0, ch.num_dst), Z,
              RowCopy::kAdd);
}

// Backward of aggregate_transformed() into dZm, which accumulates while its rows stay, as GAT's:
// GCN Â^T dZ; SAGE dZ into the self half of the chunk's rows and the mean's transpose into the
// neighbor half.
void Schedule::Impl::aggregate_transformed_backward(DeviceState& s, const DeviceChunk& ch,
                                                    const LayerSpec& layer, Mat dZ) {
  Device& d = *s.device;
  const Mat dT = rows_of(s.dZm, s.merged_rows, layer.transform_width);
  if (model.kind == ModelKind::kGcn) {
    gcn_input_gradients(s, ch, layer, dZ, dT);
    return;
  }
  const std::int64_t F = layer.out_width;
  transposed_product_remote_first(s, ch, layer, dZ, dT.col_block(F, F), RowCopy::kAdd);
  d.scatter_add_rows(dZ, ch.self_columns, dT.col_block(0, F));
}

// Whether the merged rows' source scores el are current for this pass (kKept: the loads and
// pulls scored the rows they wrote), marking them current: the caller computes every row's
// otherwise (kCompute).
SourceScores Schedule::Impl::take_source_scores(DeviceState& s) {
  const bool ready = s.scores_pass == pass_serial && !s.scores_stale;
  s.scores_pass = pass_serial;
  s.scores_stale = false;
  return ready ? SourceScores::kKept : SourceScores::kCompute;
}

// GAT layer up to the concatenated head outputs: attention over Zm (X W of the owned rows from
// the load phase, remote rows pulled from their owners) into O (nd x K*F), which it returns.
Mat Schedule::Impl::gat_layer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                              Mat O) {
  if (attends_inputs(layer)) return gat_input_layer(s, ch, layer, O);
  Device& d = *s.device;
  const std::int64_t M = s.merged_rows, KF = layer.transform_width;
  const SourceScores scores = take_source_scores(s);
  const Csr& csr = chunk_csr(ch, layer);
  d.gat_forward(csr, rows_of(s.Zm, M, KF), s.params.data + layer.att_src_offset,
                s.params.data + layer.att_dst_offset, layer.heads, ch.dst_keys,
                attention_key(layer.index), rows_of(s.el, M, layer.heads),
                rows_of(s.er, ch.num_dst, layer.heads), rows_of(s.alpha, csr.nnz, layer.heads), O,
                scores);
  return O;
}

// The backward pass of a GAT layer that kept its head outputs: the attention coefficients again
// (no weighted sums), the forward's bits.
void Schedule::Impl::gat_coefficients_again(DeviceState& s, const DeviceChunk& ch,
                                            const LayerSpec& layer) {
  if (attends_inputs(layer)) {
    // The weighted sums too: the weight gradient reads them.
    gat_input_layer(s, ch, layer, Mat{});
    return;
  }
  Device& d = *s.device;
  const std::int64_t M = s.merged_rows, KF = layer.transform_width;
  const SourceScores scores = take_source_scores(s);
  const Csr& csr = chunk_csr(ch, layer);
  d.gat_coefficients(csr, rows_of(s.Zm, M, KF), s.params.data + layer.att_src_offset,
                     s.params.data + layer.att_dst_offset, layer.heads,
                     rows_of(s.el, M, layer.heads), rows_of(s.er, ch.num_dst, layer.heads),
                     rows_of(s.alpha, csr.nnz, layer.heads), scores);
}

// GAT's layer 0 attending over its input rows: the scores of the merged rows and the chunk's rows
// from X, through the attention vectors folded into W (el_u^h = x_u (W^h a_src^h), er likewise
// with a_dst and the row's self column): D x 2K products instead of a transform of every row.
void Schedule::Impl::gat_input_scores(DeviceState& s, const DeviceChunk& ch,
                                      const LayerSpec& layer) {
  Device& d = *s.device;
  const int K = layer.heads;
  const std::int64_t D = layer.in_width, F = layer.head_width, nd = ch.num_dst;
  const Mat W = param(s, layer.w_offset, D, K * F);
  const Mat folded{s.input_attention.data, D, 2 * K, 2 * K};
  for (int h = 0; h < K; ++h) {
    const Mat Wh = W.col_block(h * F, F);
    multiply(d, Wh, param(s, layer.att_src_offset + h * F, F, 1), folded.col_block(h, 1));
    multiply(d, Wh, param(s, layer.att_dst_offset + h * F, F, 1), folded.col_block(K + h, 1));
  }
  const Mat X = rows_of(s.X, s.merged_rows, D);
  const Mat el = rows_of(s.el, s.merged_rows, K), er = rows_of(s.er, nd, K);
  if (ch.self_columns_in_order) {  // the chunk's own rows are X's first rows: one read of X
    d.gat_input_scores(X, folded, K, el, er);
    return;
  }
  multiply(d, X, folded.col_block(0, K), el);
  // The chunk rows' own input rows, for a moment where their weighted sums go next.
  const Mat self = rows_of(s.input_sums, nd, D);
  d.gather_rows(X, ch.self_columns, self);
  multiply(d, self, folded.col_block(K, K), er);
}

// GAT's layer 0 attending over its input rows: per head the weighted sums agg^h of the chunk
// rows' X rows (in s.input_sums), and O^h = agg^h W^h into O (nd x K F) unless O is empty (the
// backward's recomputation of the coefficients, which needs agg too). Returns O.
Mat Schedule::Impl::gat_input_layer(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                    Mat O) {
  Device& d = *s.device;
  const int K = layer.heads;
  const std::int64_t D = layer.in_width, F = layer.head_width, nd = ch.num_dst;
  gat_input_scores(s, ch, layer);
  const Mat agg = rows_of(s.input_sums, nd, K * D);
  const Csr& csr = chunk_csr(ch, layer);
  d.gat_input_forward(csr, rows_of(s.X, s.merged_rows, D), K, ch.dst_keys,
                      attention_key(layer.index), rows_of(s.el, s.merged_rows, K),
                      rows_of(s.er, nd, K), rows_of(s.alpha, csr.nnz, K), agg);
  if (O.empty()) return O;
  const Mat W = param(s, layer.w_offset, D, K * F);
  for (int h = 0; h < K; ++h)
    multiply(d, agg.col_block(h * D, D), W.col_block(h * F, F), O.col_block(h * F, F));
  return O;
}

// Backward of gat_input_layer() from dO (nd x K F), with the weighted sums, scores and
// coefficients of the chunk's forward current: dW^h += agg^hT dO^h; then g^h = dO^h W^hT in
// agg's place, gat_input_backward()'s score sums s (2K x D), and from them the attention-vector
// gradients s_h W^h and their share of dW^h, s_h^T a^h. head_dots: dO^h . O^h, taken by the
// activation backward, or empty (then computed here). Layer 0: no input gradient.
void Schedule::Impl::gat_input_layer_backward(DeviceState& s, const DeviceChunk& ch,
                                              const LayerSpec& layer, Mat dO, Mat O,
                                              Mat head_dots) {
  Device& d = *s.device;
  const int K = layer.heads;
  const std::int64_t D = layer.in_width, F = layer.head_width, nd = ch.num_dst;
  if (head_dots.empty()) {
    head_dots = input_head_dots(s, layer, nd);
    d.head_dots(dO, O, head_dots);
  }
  const Mat W = param(s, layer.w_offset, D, K * F);
  const Mat dW = grad(s, layer.w_offset, D, K * F);
  const Mat agg = rows_of(s.input_sums, nd, K * D);
  for (int h = 0; h < K; ++h)
    add_transposed_product(d, agg.col_block(h * D, D), dO.col_block(h * F, F),
                           dW.col_block(h * F, F));
  for (int h = 0; h < K; ++h)
    multiply_by_transpose(d, dO.col_block(h * F, F), W.col_block(h * F, F),
                          agg.col_block(h * D, D));
  const Mat sums{s.input_attention.data + 2 * K * D, 2 * K, D, D};
  const Csr& csr = chunk_csr(ch, layer);
  d.gat_input_backward(csr, rows_of(s.X, s.merged_rows, D), K, ch.dst_keys,
                       attention_key(layer.index), rows_of(s.el, s.merged_rows, K),
                       rows_of(s.er, nd, K), rows_of(s.alpha, csr.nnz, K), head_dots, agg, sums);
  for (int h = 0; h < K; ++h) {
    const Mat Wh = W.col_block(h * F, F), dWh = dW.col_block(h * F, F);
    for (const auto& [row, offset] :
         {std::pair{h, layer.att_src_offset}, std::pair{K + h, layer.att_dst_offset}}) {
      const Mat sum = sums.row_block(row, 1);
      d.gemm(Transpose::kNo, Transpose::kNo, 1.f, sum, Wh, 1.f, grad(s, offset + h * F, 1, F));
      add_transposed_product(d, sum, param(s, offset + h * F, 1, F), dWh);
    }
  }
}

// The layer's pre-activation for the chunk, `applied` to it (kNone: Z itself, for a backward
// pass; the layer's activation: its output rows, for a forward pass), and then `dropout` (row i
// keyed by the chunk's destination i), into Z (nd x out_width), which it returns. The bias, the
// activation and the dropout are one pass over the rows.
Mat Schedule::Impl::layer_preactivation(DeviceState& s, const DeviceChunk& ch,
                                        const LayerSpec& layer, Mat A, Activation applied, Mat Z,
                                        const DropoutKey& dropout) {
  Device& d = *s.device;
  const float* bias = s.params.data + layer.b_offset;
  const auto bias_activation = [&](Mat in) {
    if (dropout.rate > 0) {
      d.bias_activation_dropout(in, bias, applied, Z, ch.dst_keys, dropout);
    } else {
      d.bias_activation(in, bias, applied, Z);
    }
  };
  if (model.kind == ModelKind::kGat) {
    // A, when given, is where the forward keeps the head outputs (keeps_head_outputs()).
    Mat O = gat_layer(s, ch, layer, A.data ? A : rows_of(s.gat, ch.num_dst, layer.transform_width));
    if (layer.last && layer.heads > 1) {
      d.head_mean(O, layer.heads, Z);
      bias_activation(Z);
    } else {  // a hidden layer, or one output head, whose mean is the head itself
      bias_activation(O);
    }
  } else if (layer.transform_first) {
    aggregate_transformed(s, ch, layer, Z);
    bias_activation(Z);
  } else {
    multiply(d, A, param(s, layer.w_offset, layer.w_rows, layer.w_cols), Z);
    bias_activation(Z);
  }
  return Z;
}

// The next layer's inputs for the chunk's rows, transformed (pretransformed()), from the layer's
// output rows H = dropout(act(Z)) (the dropout keyed as the next layer's loads would apply it;
// evaluations have none): T = H W_{l+1} into `out` (the set's output rows for store_blocks(),
// forward_output_block()). H and out may hold the chunk's rows from `first_row` on.
void Schedule::Impl::transform_outputs(DeviceState& s, const DeviceChunk& ch,
                                       const LayerSpec& layer, Mat H, Mat out,
                                       std::int64_t first_row) {
  Device& d = *s.device;
  const LayerSpec& next = *above(layer);
  if (!training && next.last && captured_hidden.data)
    d.store_block(H, captured_hidden, ch.dst_begin + first_row);
  transform(d, transform_blocks(s, next, Weights::kParameters), H,
            out.col_block(0, next.transform_width));
}

// Backward of transform_outputs() from the chunk's dT block (in the set's output rows) and
// `rows`: dZ = act'(Z) * dropout(dT W^T), and dW_{l+1} += H^T dT. kPreactivation: rows is the
// recomputed Z, turned into H in place; kKeptOutputs: rows is the H the forward kept (a ReLU
// layer's); kHeadOutputs: rows is GAT's kept O, Z = O + b, H goes to s.Z, and the activation
// backward writes head_dots (dZ^h . O^h) where it is not empty (the other kinds take none).
// Each vertex's dT row is complete here: the layer above flushed every stay's share into G[l+1].
void Schedule::Impl::transform_outputs_backward(DeviceState& s, const DeviceChunk& ch,
                                                const LayerSpec& layer, BlockSet& set, Mat rows,
                                                OutputRows kind, Mat dZ, Mat head_dots) {
  SLUICE_EXPECTS(kind == OutputRows::kHeadOutputs || head_dots.empty(),
                 "head dots of an activation backward that takes none");
  Device& d = *s.device;
  const LayerSpec& next = *above(layer);
  const Mat dT = gradient_block(s, ch, layer, set).col_block(0, next.transform_width);
  const DropoutKey key = feature_key(next.index);
  transform_input_gradient(d, transform_blocks(s, next, Weights::kParameters), dT, dZ);
  Mat H = rows;
  if (kind == OutputRows::kHeadOutputs) {
    H = rows_of(s.Z, ch.num_dst, layer.out_width);
    d.dropout_bias_activation_backward(dZ, rows, s.params.data + layer.b_offset, layer.activation,
                                       ch.dst_keys, key, H, head_dots);
  } else {
    // Row by row, so a row group's rows go by member chunk with each chunk's keys.
    for (const KeyedRows& k : keyed_rows(s, ch)) {
      const Mat dz = dZ.row_block(k.first, k.rows), z = rows.row_block(k.first, k.rows);
      if (kind == OutputRows::kKeptOutputs)
        d.dropout_relu_backward_from_output(dz, z, k.keys, key);
      else
        d.dropout_activation_backward(dz, z, layer.activation, k.keys, key);
    }
  }
  add_transform_gradient(d, transform_blocks(s, next, Weights::kGradients), H, dT);
}

// Layer 0 of a transforming model: Zm rows of the batch's arrivals = their X rows W. Rows that
// stay keep their transforms (X and W are fixed within a pass), so each row is transformed once
// per stay, not once per batch. When at least half the transform region arrives, one GEMM over
// it is cheaper than gathering; otherwise slices of arrivals are gathered, multiplied and
// scattered.
void Schedule::Impl::transform_arrivals(DeviceState& s, const DeviceChunk& ch,
                                        const LayerSpec& layer) {
  Device& d = *s.device;
  const std::int64_t n = ch.load_rows.size, R = s.transform_region;
  const TransformBlocks W = transform_blocks(s, layer, Weights::kParameters);
  const Mat X = s.X.col_block(0, layer.in_width);
  const Mat Zm = s.Zm.col_block(0, layer.transform_width);
  if (2 * n >= R) {
    transform(d, W, X.row_block(0, R), Zm.row_block(0, R));
    s.scores_stale = true;  // the rows that stayed may round differently in this product
    return;
  }
  for (std::int64_t b = 0; b < n; b += s.slice_x.rows) {
    const std::int64_t e = std::min(n, b + s.slice_x.rows);
    const Idx rows = ch.load_rows.slice(b, e);
    const Mat x = rows_of(s.slice_x, e - b, layer.in_width);
    const Mat z = rows_of(s.slice_z, e - b, layer.transform_width);
    d.gather_rows(X, rows, x);
    transform(d, W, x, z);
    d.scatter_rows(z, rows, Zm);
  }
}

// Arrivals of a layer that keeps no input rows (reloads_inputs()): slices of the batch's
// loads, from the stage or gathered from host memory into slice_x, get their dropout and
// transform, and their Zm rows are scattered into place.
void Schedule::Impl::transform_reloaded_arrivals(DeviceState& s, const DeviceChunk& ch,
                                                 const LayerSpec& layer, int c) {
  Device& d = *s.device;
  const std::int64_t n = ch.load_rows.size, in = layer.in_width, KF = layer.transform_width;
  const TransformBlocks W = transform_blocks(s, layer, Weights::kParameters);
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
      d.load_rows(s.vertex.H[std::size_t(layer.index)], ch.load_vertices.slice(b, e), Idx{}, x);
      d.phase_end(Phase::kLoad);
    }
    d.phase_begin(Phase::kCompute, tag(c));
    if (key.rate > 0) d.dropout_rows(x, s.slice_iota.slice(0, len), ch.load_keys.slice(b, e), key);
    const Mat z = rows_of(s.slice_z, len, KF);
    transform(d, W, x, z);
    d.scatter_rows(z, ch.load_rows.slice(b, e), Zm);
    d.phase_end(Phase::kCompute);
  }
  if (staged) d.mark(kStageFree);
}

// GAT: the source scores of merged rows whose Zm the batch wrote (arrivals, pulled rows), once
// the pass's scores are current (the first chunk's gat_layer() computes every row's).
void Schedule::Impl::update_source_scores(DeviceState& s, const LayerSpec& layer, Idx rows, int c) {
  if (!gat() || attends_inputs(layer) || rows.size == 0 || s.scores_pass != pass_serial ||
      s.scores_stale)
    return;
  Device& d = *s.device;
  d.phase_begin(Phase::kCompute, tag(c));
  d.gat_source_scores(rows_of(s.Zm, s.merged_rows, layer.transform_width), rows,
                      s.params.data + layer.att_src_offset, layer.heads,
                      rows_of(s.el, s.merged_rows, layer.heads));
  d.phase_end(Phase::kCompute);
}

// Layer 0 of a transforming model, leaving rows: the dZm they accumulated while they stayed
// (this device's batches and its peers' pushes) gives the weight gradient of Zm = X W once per
// stay, dW += X^T dZm, in slices of leaving rows gathered on the compute lane, or in one product
// when every row of the transform region leaves (layer 0 has no input gradient).
void Schedule::Impl::transform_flush(DeviceState& s, const DeviceChunk& ch, const LayerSpec& layer,
                                     int c) {
  SLUICE_EXPECTS(layer.index == 0, "only layer 0 transforms its rows on arrival");
  Device& d = *s.device;
  const std::int64_t n = ch.leave_rows.size;
  const std::int64_t in = layer.in_width, KF = layer.transform_width;
  const TransformBlocks dW = transform_blocks(s, layer, Weights::kGradients);
  const Mat X = reloads_inputs(layer) ? Mat{} : s.X.col_block(0, in);
  const Mat dZm = s.dZm.col_block(0, KF);
  const DropoutKey key = feature_key(layer.index);
  d.phase_begin(Phase::kCompute, tag(c));
  if (!reloads_inputs(layer) && n == s.transform_region) {
    // Every row of the region leaves (unique rows: all of them, as in a one-chunk plan): one
    // product over the region instead of gathered slices.
    add_transform_gradient(d, dW, X.row_block(0, n), dZm.row_block(0, n));
    d.phase_end(Phase::kCompute);
    return;
  }
  for (std::int64_t b = 0; b < n; b += s.slice_x.rows) {
    const std::int64_t e = std::min(n, b + s.slice_x.rows), len = e - b;
    const Idx rows = ch.leave_rows.slice(b, e), positions = s.slice_iota.slice(0, len);
    const Mat x = rows_of(s.slice_x, len, in), z = rows_of(s.slice_z, len, KF);
    if (reloads_inputs(layer)) {
      // The input rows again, from host memory, with the dropout they had on arrival.
      d.phase_end(Phase::kCompute);
      d.phase_begin(Phase::kLoad, tag(c));
      d.load_rows(s.vertex.H[std::size_t(layer.index)], ch.leave_vertices.slice(b, e), Idx{}, x);
      d.phase_end(Phase::kLoad);
      d.phase_begin(Phase::kCompute, tag(c));
      if (key.rate > 0) d.dropout_rows(x, positions, ch.leave_keys.slice(b, e), key);
    } else {
      d.gather_rows(X, rows, x);
    }
    d.gather_rows(dZm, rows, z);
    add_transform_gradient(d, dW, x, z);
  }
  d.phase_end(Phase::kCompute);
}

}  // namespace sluice
