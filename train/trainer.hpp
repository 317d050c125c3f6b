// Training driver: epochs (forward/backward over the schedule, optimizer step), evaluation
// every --eval-every epochs with the best-validation model kept, per-epoch metrics, checkpoints
// and resume, the final report and prediction export. train() is the in-process library API
// (tests call it); run_train() is sluice-train behind the command line.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "train/config.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/schedule.hpp"

namespace sluice {

struct EpochRecord {
  std::int64_t epoch = 0;  // 0-based
  double loss = 0;
  bool evaluated = false;
  double train_accuracy = -1, valid_accuracy = -1, test_accuracy = -1;
  double seconds = 0;                     // training step (forward, backward, optimizer)
  double eval_seconds = 0;                // evaluation pass
  PhaseTimes phases;                      // the slowest device's per phase
  std::vector<PhaseTimes> device_phases;  // per device (P entries)
  TransferCounters transfers;             // of the training step
  TransferCounters eval_transfers;        // of the evaluation (zero when none ran)
  std::uint64_t peak_host_bytes = 0;
  std::int64_t peak_device_bytes = 0;
};

using NamedTensors = std::vector<std::pair<std::string, std::vector<float>>>;

struct TrainResult {
  std::vector<double> losses;        // every finished epoch (also those before a resume)
  std::vector<EpochRecord> records;  // epochs run by this call
  NamedTensors parameters;           // final parameters ("layer{l}.W", ...)
  std::vector<float> flat_parameters;
  std::vector<float> best_flat_parameters;  // best-valid model (final ones if none evaluated)
  std::int64_t epochs = 0;
  std::int64_t best_epoch = -1;  // epoch of the best validation accuracy (-1: none evaluated)
  double best_valid_accuracy = -1, test_accuracy = -1, train_accuracy = -1;  // best-valid model
  double final_loss = 0;
  double seconds_per_epoch = 0;
  // Predictions of the best-valid model by dataset vertex id: with config.predictions or
  // config.embeddings_out non-empty (empty when none evaluated).
  std::vector<std::int32_t> best_predictions;
  // With config.embeddings_out: the best-valid model's evaluation outputs (Schedule::
  // evaluate_outputs()), rows by dataset vertex id.
  Schedule::VertexOutputs best_outputs;
};

// Trains `dataset` over `plan` as configured (the path fields of config other than metrics
// and checkpoint are ignored but for asking for results: a non-empty predictions fills
// TrainResult::best_predictions, a non-empty embeddings_out best_outputs and best_predictions,
// from one evaluation after the epochs that serves both). Throws InputError for inconsistent
// inputs.
TrainResult train(const Dataset& dataset, const Plan& plan, const TrainConfig& config);
// The same, releasing what `release` names of the dataset and plan during setup (sluice-train:
// the dataset's features and graph and the plan's chunk lists, once the schedule holds its own
// copies).
TrainResult train(Dataset& dataset, Plan& plan, const TrainConfig& config, InputRelease release);

// Empty when training setup's host memory (train/host_memory.hpp) fits `available` bytes (or
// available < 0: unknown); else the message naming the need, what is available and the options
// of --intermediates, --hidden and --layers that would fit. train() stops with it before
// allocating.
std::string host_memory_refusal(const Dataset& dataset, const Plan& plan, const TrainConfig& config,
                                InputRelease release, std::int64_t available);

// The model a training configuration describes on `dataset` (its feature width and class count):
// what make_model() builds.
ModelShape model_shape(const Dataset& dataset, const TrainConfig& config);
// The model shape and the schedule options the memory estimate (train/layout/memory_estimate.hpp)
// takes for a training configuration on `dataset`: model_shape() with at least one class.
ModelShape memory_shape(const Dataset& dataset, const TrainConfig& config);

// The layer-0 order a configuration trains with: --layer-zero-order, where `auto` keeps the width
// rule on the GPU (transform_first_pays()) and aggregates first on the CPU backend, where
// multiplying first measured no faster (docs/benchmarks.md, "Schedule").
LayerZeroOrder layer_zero_order(const TrainConfig& config);
LayoutOptions memory_layout_options(const TrainConfig& config);

// sluice-train: reads the files named in config, trains, writes report/predictions.
void run_train(const TrainConfig& config);

// Fingerprint of everything a checkpoint must agree with (model, optimization, dataset, plan).
std::string config_fingerprint(const TrainConfig& config, const Plan& plan);

}  // namespace sluice
