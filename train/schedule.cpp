// Implementation of train/schedule.hpp: the pass driver. An epoch runs a forward pass per layer
// below the last, the last layer's forward and backward as one pass, then a backward pass per
// layer down to layer 0; each pass runs, batch by batch, the phases of every device: load the
// batch's rows, pull remote rows, compute the chunk (forward results go back to host memory on
// the store lane), and in the backward direction push remote-row gradients and flush leaving
// rows. A device waits only for the peers it reads from or writes into (pulls after the owner's
// load, the owner's next load after the pulls, pushes after the owner's compute, flushes after
// the pushes); transfers that need no cross-device order run on the transfer and store lanes,
// ordered by markers. The phases themselves: schedule_transfers.cpp and schedule_compute.cpp;
// setup: schedule_setup.cpp (train/schedule_impl.hpp maps the files).
#include "train/schedule.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "common/parallel.hpp"
#include "kernels/bfloat16.hpp"
#include "train/schedule_impl.hpp"

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

// One layer's forward over all batches (training below the last layer, or evaluation): per
// batch, load the rows of L_c^p, pull the remote rows, compute the chunk and store its outputs.
// Drained at the end (H^{l+1}, the loss and predictions complete), unless it may end early.
void Schedule::Impl::forward_layer(const LayerSpec& layer) {
  const PassKind kind = training ? PassKind::kForward : PassKind::kEvaluate;
  if (layer.last) {
    // Evaluation: its last pass prefetches the next training step's first batch (features are
    // constant), as layer 0's backward pass does for the next forward pass or evaluation, unless
    // the run ends (EvaluationsAhead::kNone); an evaluation that follows instead leaves it unused.
    const bool step_ahead = training || evaluations_ahead == EvaluationsAhead::kMore;
    set_next_head(step_ahead ? &model.layers[0] : nullptr, PassKind::kForward,
                  NextInputs::kComplete);
  } else {
    const LayerSpec& next = *above(layer);
    set_next_head(&next, fuses(next) ? PassKind::kFused : kind, NextInputs::kWrittenByThisPass);
  }
  begin_pass(kind, layer.index);
  // An evaluation that has layer 0's aggregation kept loads and pulls nothing for layer 0.
  const bool cached = reads_evaluation_aggregation(layer);
  const bool caches = writes_evaluation_aggregation(layer);
  BatchSteps steps;
  steps.load_inputs = !cached;
  steps.products = products_read(layer, kind);
  prefetch(layer, 0, steps);
  for (int c = 0; c < C; ++c) {
    const double issued = host_issues ? now_seconds() : 0;
    load_phase(layer, c, steps);
    if (!cached) pull_phase(layer, c);
    compute_phase(layer, c, kind);
    if (host_issues) host_issues->push_back({kind, layer.index, c, issued, now_seconds()});
  }
  // The copies into the cache precede every later use on the compute lane.
  if (caches) evaluation_aggregation_ready = true;
  if (ends_early(layer))
    end_forward_early();
  else if (layer.last)  // evaluation's last pass: the loss and predictions complete
    drain();
  else
    end_pass();
}

void Schedule::Impl::lay_weights_side_by_side() {
  const LayerSpec& layer = model.layers.back();
  const std::int64_t d = layer.in_width, f = layer.out_width;
  for (DeviceState& s : dev) {
    if (s.side_by_side_w.empty()) continue;
    const Mat side{s.side_by_side_w.data, d, 2 * f, aligned_width(2 * f)};
    float* stacked = s.params.data + layer.w_offset;
    s.device->copy(Mat{stacked, d, f, f}, side.col_block(0, f));
    s.device->copy(Mat{stacked + d * f, d, f, f}, side.col_block(f, f));
  }
}

// A forward pass that ends without waiting for its last stores (ends_early(), never in baseline
// mode): the next pass orders its host reads after the stores on the devices (prefetch()). Each
// device joins its compute and transfer lanes without the host, as at any pass boundary where
// passes run through; the next pass's first loads wait for the peers' pulls of the last batch
// (load_phase()).
void Schedule::Impl::end_forward_early() {
  SLUICE_EXPECTS(runs_through_passes(), "a forward pass ends early only where passes run through");
  join_lanes(SideLanes::kTransfer);
  for (DeviceState& s : dev) s.stores_running = true;
}

// One layer's backward pass, or with kFused the last layer's forward and backward in one pass
// (loads and pulls as a forward pass, no blocks from host memory): per batch, load the rows
// (when the pass recomputes the layer), pull the remote ones, compute the chunk, push the
// remote rows' gradients to their owners and flush the leaving rows. Ends as end_pass() (G^l
// complete before the next layer prefetches its blocks).
void Schedule::Impl::backward_layer(const LayerSpec& layer, PassKind kind) {
  const bool fused = kind == PassKind::kFused;
  // Layer 0's backward pass prefetches the next epoch's first batch: features are constant (their
  // dropout is applied after the load), so forward 0 (or an evaluation) starts without a load.
  if (layer.index > 0) {
    const LayerSpec& below = model.layers[std::size_t(layer.index) - 1];
    set_next_head(backward_loads_inputs(below) && !keeps_attention(below) ? &below : nullptr,
                  PassKind::kBackward, NextInputs::kComplete);
  } else {
    set_next_head(&model.layers[0], PassKind::kForward, NextInputs::kComplete);
  }
  if (fused && gat()) swap_last_layer_attention();
  begin_pass(kind, layer.index);
  BatchSteps steps;
  steps.load_inputs = fused || (backward_loads_inputs(layer) && !keeps_attention(layer));
  steps.load_blocks = !fused;
  // Transforming layers flush at every layer: leaving rows carry the weight gradient too.
  // (Not GAT's layer 0 attending over its inputs: its weight gradient comes from its chunks.)
  steps.flush_gradients = layer.index > 0 || (transforms(layer) && !attends_inputs(layer));
  steps.products = products_read(layer, kind);
  by_rows = !fused && runs_by_rows(layer);
  prefetch(layer, 0, steps);
  for (int c = 0; c < batches(); ++c) {
    const double issued = host_issues ? now_seconds() : 0;
    load_phase(layer, c, steps);
    if (fused && c == 0) preload_aggregation_blocks(layer);
    if (fused && c + 1 == C) preload_next_blocks(layer);
    if (steps.load_inputs) pull_phase(layer, c);
    compute_phase(layer, c, kind);
    if (host_issues) host_issues->push_back({kind, layer.index, c, issued, now_seconds()});
    if (steps.flush_gradients) {
      push_phase(layer, c);
      flush_phase(layer, c);
    }
  }
  by_rows = false;
  // The step's last pass too: Schedule::forward_backward() queues the weight gradients' all-reduce
  // behind it and drains after that, so the devices add them without a trip through the host.
  end_pass();
  if (fused && gat()) swap_last_layer_attention();
  if (!fused)
    for (auto& s : dev) {
      s.first_blocks_preloaded = false;
      s.aggregation_preloaded = 0;
    }
}

// Adds each phase's device time to `per_device` and the slowest device's to `times`, and the
// timed ranges to *timeline when given (after a drain).
void Schedule::Impl::take_times(PhaseTimes& times, std::vector<PhaseTimes>& per_device,
                                std::vector<TimelineRange>* timeline) {
  per_device.resize(dev.size());
  double slowest[kPhases] = {};
  std::vector<double> compute_busy(dev.size());
  std::vector<PhaseRange> ranges;
  for (std::size_t p = 0; p < dev.size(); ++p) {
    double seconds[kPhases] = {};
    ranges.clear();
    dev[p].device->take_phase_times(seconds, timeline ? &ranges : nullptr);
    for (const PhaseRange& r : ranges) {
      const std::int32_t pass = r.tag / kTagBatches;
      timeline->push_back(TimelineRange{int(p), PassKind(pass / kTagLayers), pass % kTagLayers,
                                        r.tag % kTagBatches, r.phase, r.lane, r.begin, r.end,
                                        r.operation});
    }
    for (int k = 0; k < kPhases; ++k) slowest[k] = std::max(slowest[k], seconds[k]);
    compute_busy[p] = seconds[int(Phase::kCompute)];
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
  if (training)
    std::stable_sort(compute_order.begin(), compute_order.end(), [&](int a, int b) {
      return compute_busy[std::size_t(a)] > compute_busy[std::size_t(b)];
    });
}

Schedule::Schedule(Backend& backend, const Dataset& dataset, const Plan& plan,
                   const ModelSpec& model, const ScheduleOptions& options)
    : impl_(std::make_unique<Impl>(backend, plan, model, options)) {
  impl_->setup(dataset, nullptr, nullptr);
}

Schedule::Schedule(Backend& backend, Dataset& dataset, Plan& plan, const ModelSpec& model,
                   const ScheduleOptions& options, InputRelease release)
    : impl_(std::make_unique<Impl>(backend, plan, model, options)) {
  const bool releases = release == InputRelease::kDatasetAndPlanLists;
  impl_->setup(dataset, releases ? &dataset : nullptr, releases ? &plan : nullptr);
}

Schedule::~Schedule() = default;

const std::vector<int>& Schedule::compute_order() const {
  return impl_->compute_order;
}

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
  host_issues_.clear();
  impl_->host_issues = on ? &host_issues_ : nullptr;
}

void Schedule::start_timeline() {
  timeline_.clear();
  host_issues_.clear();
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
  m.lay_weights_side_by_side();
  // Forward below the last layer, the last layer's forward and backward, backward to layer 0.
  for (int l = 0; l + 1 < L; ++l) m.forward_layer(m.model.layers[std::size_t(l)]);
  m.backward_layer(m.model.layers.back(), PassKind::kFused);
  for (int l = L - 2; l >= 0; --l)
    m.backward_layer(m.model.layers[std::size_t(l)], PassKind::kBackward);
  // Queued behind the last pass, which ended without a drain: the devices add the weight
  // gradients as soon as their passes end.
  std::vector<float*> grads;
  for (auto& s : m.dev) grads.push_back(s.grads.data);
  m.backend.all_reduce_sum(grads, m.model.num_parameters);
  m.drain();
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

void Schedule::Impl::lend_training_buffers() {
  const bool lends_outputs =
      options.evaluation_outputs == EvaluationOutputs::kTrainingBuffersWhereTheyFit &&
      reads_own_rows_only();
  const bool lends_csrs =
      options.evaluation_csrs == EvaluationCsrs::kKeptWhereTheyFit && model.num_layers() > 1;
  if (!lends_outputs && !lends_csrs) return;
  // The matrices' names, for the one log line.
  const std::vector<HostMatrixShape> shapes = training_buffers_logged || !lends_outputs
                                                  ? std::vector<HostMatrixShape>{}
                                                  : host_matrix_shapes(model, options, n, C);
  std::string lent;
  for (DeviceState& s : dev) {
    std::vector<Mat> idle;
    for (const BlockSet& set : s.sets)
      if (!set.dZ.empty()) idle.push_back(set.dZ);
    const auto floats = [](const Mat& m) { return m.rows * m.ld; };
    std::sort(idle.begin(), idle.end(),
              [&](const Mat& a, const Mat& b) { return floats(a) < floats(b); });
    std::vector<int> layers;
    for (int l = 1; l < model.num_layers() && lends_outputs; ++l) layers.push_back(l);
    std::stable_sort(layers.begin(), layers.end(), [&](int a, int b) {
      return s.vertex.H[std::size_t(a)].cols < s.vertex.H[std::size_t(b)].cols;
    });
    s.views_lent.assign(model.layers.size(), HostMat{});
    // What the outputs leave of each buffer goes to the chunk CSRs.
    std::vector<Mat> left;
    for (const int l : layers) {
      HostMat& view = s.vertex.H[std::size_t(l)];
      if (view.empty() || view.residence != Residence::kHost ||
          view.precision != HostPrecision::kFp32)
        continue;
      const auto buffer = std::find_if(idle.begin(), idle.end(), [&](const Mat& m) {
        return floats(m) >= view.rows * view.cols;
      });
      if (buffer == idle.end()) continue;
      const Mat rows{buffer->data, view.rows, view.cols, view.cols};
      s.device->fill(rows, 0.f);
      s.views_lent[std::size_t(l)] = view;
      view.data = rows.data;
      view.ld = rows.ld;
      view.residence = Residence::kDevice;
      const std::int64_t used = view.rows * view.cols;
      left.push_back(Mat{buffer->data + used, floats(*buffer) - used, 1, 1});
      idle.erase(buffer);
      if (!training_buffers_logged) {
        const auto shape = std::find_if(shapes.begin(), shapes.end(), [&](const auto& m) {
          return m.role == HostMatrixRole::kInput && m.layer == l;
        });
        lent += cat(lent.empty() ? "" : "; ", shape == shapes.end() ? cat("H^", l) : shape->name,
                    " rows (",
                    format_bytes(double(view.rows * view.cols * std::int64_t(sizeof(float)))),
                    ") on ", s.device->name());
      }
    }
    if (lends_csrs) {
      left.insert(left.end(), idle.begin(), idle.end());
      // The other buffers only a backward pass uses: gradients and what carries them.
      for (const Mat* m : {&s.dX, &s.dA, &s.dZm, &s.leave, &s.received})
        if (!m->empty()) left.push_back(*m);
      s.device->lend_csr_space(left);
      s.csr_space_lent = true;
    }
  }
  if (!training_buffers_logged && lends_outputs)
    log_info("evaluation: ",
             lent.empty() ? std::string("its layer outputs in host memory (no training buffer "
                                        "holds them)")
                          : cat("its layer outputs in training buffers: ", lent));
  training_buffers_logged = true;
}

void Schedule::Impl::return_training_buffers() {
  for (DeviceState& s : dev) {
    for (std::size_t l = 0; l < s.views_lent.size(); ++l)
      if (!s.views_lent[l].empty()) s.vertex.H[l] = s.views_lent[l];
    s.views_lent.clear();
    if (s.csr_space_lent) s.device->release_csr_space();
    s.csr_space_lent = false;
  }
}

const std::vector<std::int32_t>& Schedule::evaluate(EvaluationsAhead ahead,
                                                    Predictions predictions) {
  static const std::vector<std::int32_t> kKeptOnDevices;
  start_timeline();
  Impl& m = *impl_;
  m.training = false;
  m.predictions_to_host = predictions == Predictions::kToHost;
  m.evaluations_ahead = ahead;
  if (ahead == EvaluationsAhead::kMore) m.allocate_evaluation_host_cache();
  for (auto& s : m.dev) s.split_counts = SplitCounts{};
  m.lay_weights_side_by_side();
  try {
    m.lend_training_buffers();
    for (const LayerSpec& layer : m.model.layers) m.forward_layer(layer);
  } catch (...) {
    m.return_training_buffers();
    throw;
  }
  m.return_training_buffers();  // the last pass drained every lane
  // Predictions and split counts are host-visible after forward_layer's drain.
  m.take_times(times_, device_times_, timeline_on_ ? &timeline_ : nullptr);
  return m.predictions_to_host ? m.predictions : kKeptOnDevices;
}

std::array<double, 3> Schedule::accuracies() const {
  SplitCounts total;
  for (const auto& s : impl_->dev)
    for (int k = 0; k < 3; ++k) {
      total.labeled[k] += s.split_counts.labeled[k];
      total.correct[k] += s.split_counts.correct[k];
    }
  std::array<double, 3> out{};
  for (int k = 0; k < 3; ++k)
    out[std::size_t(k)] =
        total.labeled[k] > 0 ? double(total.correct[k]) / double(total.labeled[k]) : 0.0;
  return out;
}

Schedule::VertexOutputs Schedule::evaluate_outputs() {
  Impl& m = *impl_;
  const LayerSpec& last = m.model.layers.back();
  VertexOutputs out;
  out.classes = last.out_width;
  out.hidden_width = last.in_width;
  out.logits.assign(std::size_t(m.n * out.classes), 0.f);
  out.hidden.assign(std::size_t(m.n * out.hidden_width), 0.f);
  const bool hidden_transformed = m.pretransformed(last);
  m.captured_logits = HostMat{out.logits.data(), m.n, out.classes, out.classes};
  if (hidden_transformed)
    m.captured_hidden = HostMat{out.hidden.data(), m.n, out.hidden_width, out.hidden_width};
  try {
    out.predictions = evaluate(EvaluationsAhead::kNone);  // the outputs are asked for once
    m.backend.synchronize_all();
  } catch (...) {
    m.captured_logits = HostMat{};
    m.captured_hidden = HostMat{};
    throw;
  }
  m.captured_logits = HostMat{};
  m.captured_hidden = HostMat{};
  if (!hidden_transformed) {
    // Each device's rows of H^{L-1} (every device's view is the whole matrix in baseline mode).
    const std::size_t l = m.H.size() - 1;
    const std::int64_t width = out.hidden_width;
    std::vector<bf16_t> rows;
    for (const schedule_detail::DeviceState& s : m.dev) {
      const HostMat& h = s.vertex.H[l];
      SLUICE_EXPECTS(h.cols == width, "H^", l, " has ", h.cols, " columns, the last layer takes ",
                     width);
      float* hidden = out.hidden.data() + s.vertex.first_row * width;
      if (h.precision == HostPrecision::kFp32) {
        s.device->read_matrix(h, hidden);
      } else {
        rows.resize(std::size_t(h.rows * width));
        s.device->read_matrix(h, rows.data());
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(rows.size())))
        for (std::int64_t i = 0; i < std::int64_t(rows.size()); ++i)
          hidden[i] = float_from_bf16(rows[std::size_t(i)]);
      }
      if (h.rows == m.n) break;  // a whole-matrix view
    }
  }
  return out;
}

LossRowExchange Schedule::loss_row_exchange() const {
  return impl_->loss_gradients_sent ? LossRowExchange::kSendGradients : LossRowExchange::kPushSums;
}

TransferCounters Schedule::counters() const {
  TransferCounters total;
  for (const auto& s : impl_->dev) {
    const TransferCounters& c = s.device->counters();
    total.h2d_gather_rows += c.h2d_gather_rows;
    total.h2d_gather_bytes += c.h2d_gather_bytes;
    total.h2d_block_bytes += c.h2d_block_bytes;
    total.h2d_csr_bytes += c.h2d_csr_bytes;
    total.h2d_csr_in_line_bytes += c.h2d_csr_in_line_bytes;
    total.d2h_bytes += c.d2h_bytes;
    total.d2h_index_bytes += c.d2h_index_bytes;
    total.p2p_rows += c.p2p_rows;
    total.p2p_bytes += c.p2p_bytes;
    total.resident_bytes += c.resident_bytes;
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
