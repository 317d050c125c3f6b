// The out-of-core schedule of docs/design.md ("One epoch"; HongTu Algorithm 1), written
// once against the operator interface of kernels/ops.hpp. Host memory holds H^l, G^l and the
// aggregation caches A^l in renumbered row order; each device (partition p) keeps one merged
// transition buffer X_p (transition slots, then remote slots) and its gradient twin dX_p (GAT,
// and GCN's last layer when it narrows: transformed rows Zm_p = X_p W and their gradients dZm_p,
// exchanged with peers instead). Such layers above layer 0 get their inputs transformed by the
// forward pass below (host memory holds T^l = dropout(H^l) W^l and its gradient dT^l in place of
// H^l and G^l), so their rows load straight into Zm_p.
// Per batch: load L_c^p from host (reused rows stay in place), pull remote rows from owners,
// compute the chunk, write its output block; backward mirrors it with pushes of remote-row
// gradients into the owners' dX and flushes of leaving rows into G^l. Training runs the last
// layer's forward and backward as one pass, and layer 1's last batch keeps its gradient rows on
// the device for layer 0 (docs/model-math.md). Each device works on three lanes
// (kernels/ops.hpp): the next batch's loads and blocks prefetch on the transfer lane and results
// go back to host memory on the store lane while the compute lane computes.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "kernels/ops.hpp"
#include "train/layout/buffer_layout.hpp"
#include "train/layout/comm_mode.hpp"
#include "train/layout/vertex_data.hpp"
#include "train/model.hpp"

namespace sluice {

// CommMode (train/layout/comm_mode.hpp) by its --comm name.
CommMode parse_comm_mode(const std::string& name);
std::string comm_mode_name(CommMode mode);

enum class HostSetup { kAfterLists, kBesideLists };

// Where the vertex matrices (H^l or T^l, G^l or dT^l, A^l) live: all in host memory, streamed
// over the host link every epoch (the out-of-core schedule), or, on one device, moved into its
// memory while they fit beside everything else the device holds, in order of the link rows they
// save per row (vertex_data_priorities()), so that a budget which fits them all moves no vertex
// data over the link.
enum class VertexData { kHost, kDeviceWhereItFits };

// Whether evaluations keep layer 0's aggregation of the features. An evaluation has no dropout,
// so Â H^0 (GCN; SAGE: the self rows beside the neighbor mean) is the same in every one: with
// kWhereItFits the first evaluation keeps each partition's rows in its device's memory where
// they fit beside everything else on every device, else (fp32 host data, room in host memory)
// in host memory, and later evaluations take layer 0's aggregation from there (in place, or one
// block a chunk over the link) instead of loading and aggregating the features. GAT aggregates
// transformed rows and keeps nothing.
enum class EvaluationCache { kNone, kWhereItFits };

// Whether more of the run follows the evaluation asked for (Schedule::evaluate()): another
// evaluation, and the training steps before it (a trainer evaluates after its last step). With
// kNone the evaluation prepares nothing for later work:
// - a host-memory cache of layer 0's aggregation pays off only in later evaluations, so an
//   evaluation that would allocate one (the first, under a budget) neither allocates nor fills
//   it; a cache that exists is used as always;
// - its last pass does not load the next training step's first batch (a step that follows anyway
//   loads it itself).
enum class EvaluationsAhead { kNone, kMore };

// Where an evaluation keeps the layer outputs one of its passes writes and the next reads (H^l or
// T^l, l >= 1, in fp32 host matrices): in host memory, as a training step does, or, with
// kTrainingBuffersWhereTheyFit, in device buffers that only training steps use (the block sets'
// output gradients dZ), each device its partition's rows, narrowest matrix first, where one such
// buffer holds them. The passes then write and read those rows in device memory: an evaluation
// moves neither its stores nor those loads over the host link (an RMAT graph's 8-wide T^1: 32-byte
// rows, which the link gathers slowly). The results are the same bits either way; training
// writes every row of those matrices again before it reads any.
enum class EvaluationOutputs { kHost, kTrainingBuffersWhereTheyFit };

// Whether an evaluation of several layers copies a chunk's CSR from host memory for every pass
// that reads it (kStagedEachPass, as a training step does), or, with kKeptWhereTheyFit, copies
// it once in its first pass, while room remains, into the device buffers only a backward pass
// uses (what the layer outputs leave of dZ, EvaluationOutputs; dX, dA, dZm, the flush and
// receive buffers), where its later passes read it. Only CSRs that the GPU memory budget leaves
// in host memory are copied at all; the results are the same bits.
enum class EvaluationCsrs { kStagedEachPass, kKeptWhereTheyFit };

// Whether an evaluation brings every vertex's argmax prediction back to the host
// (Schedule::evaluate()). The devices count each split's labeled and correctly predicted vertices
// either way (Schedule::accuracies()); the predictions themselves are one index a vertex, copied
// over the link and then on the host, so an evaluation that only reports accuracies keeps them
// on the devices.
enum class Predictions { kOnDevices, kToHost };

// Whether training keeps the output rows H = dropout(relu(Z)) of a GCN or SAGE layer whose
// outputs the next layer transforms (the forward pass turns them into the next layer's T = H W
// right away, so they are in no host matrix). With kDeviceWhereItFits each device keeps its
// partition's rows in its memory where they fit after the vertex data and the evaluation cache,
// and the backward pass reads them instead of computing Z = A W + b, its activation and its
// dropout again (a GEMM and two passes over the rows per chunk). The results are the same bits
// either way.
enum class LayerOutputs { kRecomputed, kDeviceWhereItFits };

// How a device gets the feature rows of other partitions' vertices that layer 0 reads (GCN,
// SAGE on several partitions): pulled from their owners' transition buffers in every pass that
// loads layer 0's inputs, or, with kDeviceCopyWhereItFits, copied from the device's own copy of
// those rows, made at setup where it fits after everything else (the features never change;
// dropout applies on the device with the same keys the owner's load uses). The copy runs in the
// device's memory, neither waits for the owner's load nor takes the peer link; the results are
// the same bits either way. Each device decides for itself.
enum class RemoteFeatures { kPulled, kDeviceCopyWhereItFits };

struct ScheduleOptions {
  CommMode comm = CommMode::kP2pReuse;
  bool cache_intermediates = true;  // keep A^l for the backward pass (keeps_intermediates())
  float dropout = 0.f;
  float attention_dropout = 0.f;
  std::uint64_t seed = 0;
  // Divide every feature row by its L1 norm when filling H^0 (Kipf & Welling's preprocessing
  // of the Planetoid bag-of-words features); rows of norm 0 stay 0.
  bool row_normalize_features = false;
  // Block the host at every phase boundary instead of ordering the devices' compute lanes
  // pairwise (events only on CUDA). For debugging; phase times come from device timers either
  // way.
  bool synchronize_phases = false;
  // Overlap transfers with compute where memory allows (Schedule's optional buffers): prefetch
  // the next batch's loads and backward blocks on the transfer lane (and across passes: the
  // next pass's first batch during the running pass's last), store forward results and flush
  // leaving gradients on the store lane.
  bool overlap = true;
  // Layers that transform their input rows on arrival (GAT's layer 0, and the only layer of a
  // one-layer GCN that narrows) keep no input rows on the device: arrivals go from the load
  // stage (or host memory, in slices) through the transform straight into Zm, and the weight
  // gradient of leaving rows reads their input rows from host memory again (dW += X^T dZm).
  // Saves the transition buffer X (reddit GAT: 602 floats per merged row) for one more read of
  // the leaving rows in the backward pass: for budgets the kept rows do not fit
  // (sluice-train --input-rows).
  bool reload_inputs = false;
  // Element type of the vertex data in host memory (H^l or T^l, G^l or dT^l, A^l): kBf16 halves
  // their host memory and host-link bytes; the devices compute in fp32, widening rows on load
  // and rounding them (to nearest even) where they go back to host memory, and rows handed over
  // on the device in place of that round trip (the next pass's first rows, the kept tail) are
  // rounded the same way, so every layout of the plan reads the same values.
  HostPrecision host_precision = HostPrecision::kFp32;
  // When setup allocates and fills the host matrices: after the index lists are derived and
  // before the device constants (the lower peak: the dataset's graph is released first, the
  // index lists as their constants go up), or on a second thread beside both (a faster start;
  // HostMemoryPlan::peak_beside_lists says what it costs).
  HostSetup host_setup = HostSetup::kAfterLists;
  VertexData vertex_data = VertexData::kDeviceWhereItFits;
  EvaluationCache evaluation_cache = EvaluationCache::kWhereItFits;
  EvaluationOutputs evaluation_outputs = EvaluationOutputs::kTrainingBuffersWhereTheyFit;
  EvaluationCsrs evaluation_csrs = EvaluationCsrs::kKeptWhereTheyFit;
  LayerOutputs layer_outputs = LayerOutputs::kDeviceWhereItFits;
  RemoteFeatures remote_features = RemoteFeatures::kDeviceCopyWhereItFits;
  // GAT's layer 0: transform first, or attend over its input rows first (GatLayerZero,
  // train/layout/buffer_layout.hpp: input rows kept, a layer below the last).
  GatLayerZero gat_layer_zero = GatLayerZero::kTransformFirst;
  // Which rows the last layer's training passes compute (LastLayerRows,
  // train/layout/buffer_layout.hpp): the loss rows through a second CSR per chunk, or all.
  LastLayerRows last_layer_rows = LastLayerRows::kLoss;
  // Where a one-chunk plan on several partitions has the fused pass's transposed product reach
  // the other partitions' vertices (LossRowExchange; kSendGradients where the layout gives it).
  LossRowExchange loss_row_exchange = LossRowExchange::kSendGradients;
  // A backward batch that pushes at least this many bytes of gradient rows to their owners
  // computes its transposed product's remote rows first, so that they go on the peer lane
  // beside the rest of the product (Schedule::Impl::transposed_product_remote_first()). The
  // product in two launches costs about 0.1 ms more than in one on the products-like and
  // reddit-like graphs (two H200s): it pays where the copy it hides is longer, as products-like's
  // 77 MB a device (0.2 ms), not reddit-like's 15 MB (0.05 ms). 0: every batch that pushes.
  std::int64_t remote_first_push_bytes = std::int64_t(32) << 20;
  // The plan's partition profiles under `comm` (partition_profile(), with loss_row_flags() of
  // the dataset where last_layer_rows is kLoss), when the caller has them
  // already: each is a pass over every chunk's entries. Null: setup computes them. Read during
  // the constructor only.
  const std::vector<PartitionProfile>* profiles = nullptr;
};

// Device time per phase, seconds (accumulated until reset): the sum of the phase's work on
// every lane of a device (device timers: CUDA events), the slowest device's. Phases on
// different lanes overlap, so the sum exceeds the wall time when overlap works.
struct PhaseTimes {
  double load = 0;       // host -> device: transition loads, dropout, backward blocks (the
                         // compute lane's share includes waiting for the prefetch)
  double p2p = 0;        // device <-> device: pulls and gradient pushes
  double compute = 0;    // chunk compute
  double store = 0;      // device -> host: forward results (H^{l+1} or T^{l+1}, A^l)
  double flush = 0;      // leaving gradient rows into G^l (GPU stores, CPU additions)
  double optimizer = 0;  // optimizer step (host wall time; the all-reduce of the weight
                         // gradients runs behind the last pass, in no phase)
  double total() const { return load + p2p + compute + store + flush + optimizer; }
};

// One entry of the device timeline (Schedule::set_timeline): a phase's work on one lane of one
// device in one batch of one pass, in seconds since the pass sequence's start (the time origin
// set at the start of forward_backward() or evaluate()).
// kFused: training's last layer, forward and backward in one pass.
enum class PassKind { kForward, kBackward, kEvaluate, kFused };
struct TimelineRange {
  int device = 0;
  PassKind pass = PassKind::kForward;
  int layer = 0;
  std::int64_t batch = 0;
  Phase phase = Phase::kLoad;
  Lane lane = Lane::kCompute;
  double begin = 0, end = 0;
  const char* operation = nullptr;  // as PhaseRange::operation
};
const char* pass_kind_name(PassKind kind);  // "forward", "backward", "evaluate", "fused"
// One batch's issue on the host (Schedule::set_timeline): from the start of its load phase to
// the end of its compute phase's calls, in host seconds (now_seconds()). A batch whose compute
// starts on the device right after `end` waited for the host.
struct HostIssueRange {
  PassKind pass = PassKind::kForward;
  int layer = 0;
  std::int64_t batch = 0;
  double begin = 0, end = 0;
};

// What setup may release of the inputs it was handed mutable: kDatasetAndPlanLists frees the
// dataset's features once H^0 holds them (renumbered) and its graph (indptr, indices) once the
// index lists are derived, and each chunk's CSR columns and transfer lists of the plan once the
// chunk's constants went up, so that host memory holds none of them twice. The dataset's
// labels, splits and ids stay, and so do the plan's renumbering, chunk ranges and CSR offsets.
enum class InputRelease { kKeep, kDatasetAndPlanLists };

// The schedule's forms of the host-matrix rules of train/layout/vertex_data.hpp (HostMatrixRole,
// HostMatrixShape and the functions below are defined there, over the layout library's model).
HostDataOptions host_data_options(const ScheduleOptions& options);
bool keeps_intermediates(const ModelSpec& model, const ScheduleOptions& options,
                         const LayerSpec& layer);
bool backward_reads_inputs(const ModelSpec& model, const ScheduleOptions& options,
                           const LayerSpec& layer);
bool keeps_a_block(const ModelSpec& model, const ScheduleOptions& options, const LayerSpec& layer,
                   int chunks);
// The buffer layout's options (train/layout/buffer_layout.hpp) of a schedule with `options`.
LayoutOptions layout_options(const ScheduleOptions& options);
std::vector<HostMatrixShape> host_matrix_shapes(const ModelSpec& model,
                                                const ScheduleOptions& options,
                                                std::int64_t num_nodes, int chunks);
std::vector<double> vertex_data_priorities(const ModelSpec& model, const ScheduleOptions& options,
                                           std::int64_t num_nodes, std::int64_t gathered_rows,
                                           int chunks);

class Schedule {
 public:
  // Checks the plan against the dataset (every index: slots, loads, remote owners, leave
  // lists, CSR columns) and throws InputError naming the inconsistency; allocates every host
  // and device buffer and uploads the per-chunk indices once.
  Schedule(Backend& backend, const Dataset& dataset, const Plan& plan, const ModelSpec& model,
           const ScheduleOptions& options);
  // The same, releasing what `release` names of the dataset and plan during setup.
  Schedule(Backend& backend, Dataset& dataset, Plan& plan, const ModelSpec& model,
           const ScheduleOptions& options, InputRelease release);
  ~Schedule();
  Schedule(const Schedule&) = delete;
  Schedule& operator=(const Schedule&) = delete;

  // Parameters (flat, ModelSpec layout) replicated on every device.
  void set_parameters(const std::vector<float>& flat);
  std::vector<float> parameters();
  // Adam moments (flat, same layout), replicated on every device.
  void set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v);
  void optimizer_state(std::vector<float>& m, std::vector<float>& v);

  // Training pass of `epoch`: forward with dropout, loss, backward; the weight gradients are
  // summed over devices (on every device). Returns the mean training loss.
  double forward_backward(std::int64_t epoch);
  void sgd_step(float lr, float weight_decay);
  void adam_step(float lr, float weight_decay, std::int64_t step);

  // Forward without dropout. With Predictions::kToHost returns the argmax predictions indexed by
  // RENUMBERED vertex id (valid until the next evaluate()); with kOnDevices an empty vector.
  const std::vector<std::int32_t>& evaluate(EvaluationsAhead ahead = EvaluationsAhead::kMore,
                                            Predictions predictions = Predictions::kToHost);
  // Of the last evaluate(), per split (train, valid, test): the fraction of its labeled vertices
  // predicted right (0 for a split without labeled vertices), counted on the devices.
  std::array<double, 3> accuracies() const;
  // The same pass, returning every vertex's input of the last layer, its logits and its
  // prediction.
  struct VertexOutputs {
    std::int64_t hidden_width = 0, classes = 0;
    std::vector<float> hidden;              // n x hidden_width, H^{L-1} (H^0 for one layer)
    std::vector<float> logits;              // n x classes
    std::vector<std::int32_t> predictions;  // n, the logits' argmax
  };
  // Rows by RENUMBERED vertex id.
  VertexOutputs evaluate_outputs();

  PhaseTimes& times() { return times_; }
  // The same per device (phase times above are the slowest device's); optimizer unused.
  const std::vector<PhaseTimes>& device_times() const { return device_times_; }
  void reset_times() {
    times_ = PhaseTimes{};
    device_times_.assign(device_times_.size(), PhaseTimes{});
  }
  // The order in which the host issues the devices' compute: by their compute time in the last
  // training step, longest first (by index before the first step and for equal times).
  const std::vector<int>& compute_order() const;
  // With the timeline on, forward_backward() and evaluate() each record the timed ranges of
  // every device (timeline()), starting from an idle point (a host synchronize) whose host
  // time is timeline_origin() (now_seconds()).
  void set_timeline(bool on);
  const std::vector<TimelineRange>& timeline() const { return timeline_; }
  const std::vector<HostIssueRange>& host_issues() const { return host_issues_; }
  double timeline_origin() const { return timeline_origin_; }
  TransferCounters counters() const;  // summed over devices
  void reset_counters();
  std::int64_t peak_device_bytes() const;  // max over devices
  // How the fused pass's transposed product reaches other partitions' vertices in this run:
  // ScheduleOptions::loss_row_exchange where the plan allows it (buffer_layout.hpp), else
  // kPushSums (also with one partition, which exchanges nothing).
  LossRowExchange loss_row_exchange() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PhaseTimes times_;
  std::vector<PhaseTimes> device_times_;
  bool timeline_on_ = false;
  std::vector<TimelineRange> timeline_;
  std::vector<HostIssueRange> host_issues_;
  double timeline_origin_ = 0;
  // Starts the timeline of one forward_backward() or evaluate() (no-op when off).
  void start_timeline();
};

}  // namespace sluice
