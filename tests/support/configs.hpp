// TrainConfig for tests: the library's defaults except that a test run draws no progress bar,
// logs errors only and uses two CPU threads (runs stay contention-free beside other tests under
// ctest -j); chainable setters name every field a test changes. Converts to the TrainConfig it
// holds, so it goes wherever TrainConfig does:
//   train(d, plan, test::train_config().model("gat").heads(2).epochs(5));
#pragma once

#include <cstdint>
#include <string>

#include "train/config.hpp"

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
  TrainConfigBuilder& comm(const std::string& mode);           // baseline | p2p | p2p+reuse
  TrainConfigBuilder& intermediates(const std::string& mode);  // auto | cache | recompute
  TrainConfigBuilder& input_rows(const std::string& mode);     // auto | keep | reload
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

}  // namespace sluice::test
