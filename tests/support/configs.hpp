// Configurations for tests, each with chainable setters that name every field a test changes
// and converting to the struct it holds, so it goes wherever that struct does:
//   train(d, plan, test::train_config().model("gat").heads(2).epochs(5));
// TrainConfig: the library's defaults except that a test run draws no progress bar, logs errors
// only and uses two CPU threads (runs stay contention-free beside other tests under ctest -j).
// ModelShape and BackendOptions: the library's defaults.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/ops.hpp"
#include "train/config.hpp"
#include "train/layout/model_layers.hpp"
#include "train/model.hpp"

namespace sluice::test {

class TrainConfigBuilder {
 public:
  TrainConfigBuilder();                                   // the test defaults
  explicit TrainConfigBuilder(const TrainConfig& start);  // changes to an existing config

  // Model.
  TrainConfigBuilder& model(const std::string& name);  // gcn | sage | gat
  TrainConfigBuilder& layers(int count);
  TrainConfigBuilder& hidden(std::int64_t width);
  TrainConfigBuilder& heads(int count);
  TrainConfigBuilder& output_heads(int count);

  // Optimization.
  TrainConfigBuilder& epochs(int count);
  TrainConfigBuilder& eval_every(int epochs);
  TrainConfigBuilder& optimizer(const std::string& name);  // adam | sgd
  TrainConfigBuilder& lr(double rate);
  TrainConfigBuilder& weight_decay(double decay);
  TrainConfigBuilder& dropout(double rate);
  TrainConfigBuilder& attention_dropout(double rate);
  TrainConfigBuilder& seed(std::uint64_t value);
  TrainConfigBuilder& feature_norm(const std::string& norm);  // none | row

  // Schedule.
  TrainConfigBuilder& comm(const std::string& mode);                 // baseline | p2p | p2p+reuse
  TrainConfigBuilder& intermediates(const std::string& mode);        // auto | cache | recompute
  TrainConfigBuilder& input_rows(const std::string& mode);           // auto | keep | reload
  TrainConfigBuilder& host_precision(const std::string& name);       // fp32 | bf16
  TrainConfigBuilder& vertex_data(const std::string& place);         // auto | host
  TrainConfigBuilder& evaluation_cache(const std::string& mode);     // auto | off
  TrainConfigBuilder& evaluation_outputs(const std::string& place);  // auto | host
  TrainConfigBuilder& evaluation_csrs(const std::string& copies);    // auto | each-pass
  TrainConfigBuilder& layer_outputs(const std::string& mode);        // auto | recompute
  TrainConfigBuilder& remote_features(const std::string& mode);      // auto | pull
  TrainConfigBuilder& gat_layer_zero(const std::string& mode);       // auto | transform | attend
  TrainConfigBuilder& last_layer_rows(const std::string& rows);      // loss | all
  TrainConfigBuilder& layer_zero_order(const std::string& order);    // auto | aggregate | transform
  TrainConfigBuilder& no_overlap(bool transfers_in_line);

  // Device.
  TrainConfigBuilder& device(const std::string& name);  // cpu | cuda
  TrainConfigBuilder& threads(int count);
  TrainConfigBuilder& gpus(int count);
  TrainConfigBuilder& gpu_memory(std::int64_t bytes);
  TrainConfigBuilder& tf32(bool allowed);

  // Checkpoints.
  TrainConfigBuilder& checkpoint(const std::string& path, int every_epochs);
  TrainConfigBuilder& resume_from(const std::string& checkpoint_path);

  // Outputs: train() writes no file, but a path asks it for TrainResult::best_predictions.
  TrainConfigBuilder& predictions(const std::string& path);

  TrainConfig config() const { return config_; }
  operator TrainConfig() const { return config_; }

 private:
  TrainConfig config_;
};

inline TrainConfigBuilder train_config() {
  return TrainConfigBuilder();
}
inline TrainConfigBuilder train_config(const TrainConfig& start) {
  return TrainConfigBuilder(start);
}

// A model as the memory estimate takes it (train/layout/model_layers.hpp).
class ModelShapeBuilder {
 public:
  ModelShapeBuilder(const std::string& model, int layers);  // gcn | sage | gat
  ModelShapeBuilder& in_dim(std::int64_t width);
  ModelShapeBuilder& hidden(std::int64_t width);
  ModelShapeBuilder& classes(std::int64_t count);
  ModelShapeBuilder& heads(int count);
  ModelShapeBuilder& output_heads(int count);
  ModelShapeBuilder& layer_zero_order(LayerZeroOrder order);
  ModelShape shape() const { return shape_; }
  operator ModelShape() const { return shape_; }

 private:
  ModelShape shape_;
};

inline ModelShapeBuilder model_shape(const std::string& model, int layers) {
  return ModelShapeBuilder(model, layers);
}

// The trainer's model (make_model) of the same description.
ModelSpec model_spec(const ModelShape& shape);

// A backend over `partitions` logical devices.
class BackendOptionsBuilder {
 public:
  explicit BackendOptionsBuilder(int partitions);
  BackendOptionsBuilder& gpus(int count);
  BackendOptionsBuilder& memory_budget(std::int64_t bytes_per_device);  // 0: unlimited
  BackendOptionsBuilder& threads(int count);
  BackendOptionsBuilder& peer_access(PeerAccess access);
  BackendOptionsBuilder& op_times(bool timed);
  BackendOptionsBuilder& cpu_residence(CpuResidence residence);
  BackendOptions options() const { return options_; }
  operator BackendOptions() const { return options_; }

 private:
  BackendOptions options_;
};

inline BackendOptionsBuilder backend_options(int partitions) {
  return BackendOptionsBuilder(partitions);
}

}  // namespace sluice::test
