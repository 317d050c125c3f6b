// Implementation of tests/support/configs.hpp.
#include "tests/support/configs.hpp"

namespace sluice::test {

TrainConfigBuilder::TrainConfigBuilder() {
  config_.progress = false;
  config_.quiet = true;
  config_.threads = 2;
}

TrainConfigBuilder::TrainConfigBuilder(const TrainConfig& start) : config_(start) {}

TrainConfigBuilder& TrainConfigBuilder::model(const std::string& name) {
  config_.model = name;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::layers(int count) {
  config_.layers = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::hidden(std::int64_t width) {
  config_.hidden = width;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::heads(int count) {
  config_.heads = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::output_heads(int count) {
  config_.output_heads = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::epochs(int count) {
  config_.epochs = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::eval_every(int epochs) {
  config_.eval_every = epochs;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::optimizer(const std::string& name) {
  config_.optimizer = name;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::lr(double rate) {
  config_.lr = rate;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::weight_decay(double decay) {
  config_.weight_decay = decay;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::dropout(double rate) {
  config_.dropout = rate;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::attention_dropout(double rate) {
  config_.attention_dropout = rate;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::seed(std::uint64_t value) {
  config_.seed = value;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::feature_norm(const std::string& norm) {
  config_.feature_norm = norm;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::comm(const std::string& mode) {
  config_.comm = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::intermediates(const std::string& mode) {
  config_.intermediates = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::input_rows(const std::string& mode) {
  config_.input_rows = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::layer_outputs(const std::string& mode) {
  config_.layer_outputs = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::evaluation_cache(const std::string& mode) {
  config_.evaluation_cache = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::evaluation_outputs(const std::string& place) {
  config_.evaluation_outputs = place;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::evaluation_csrs(const std::string& copies) {
  config_.evaluation_csrs = copies;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::layer_zero_order(const std::string& order) {
  config_.layer_zero_order = order;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::gat_layer_zero(const std::string& mode) {
  config_.gat_layer_zero = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::last_layer_rows(const std::string& rows) {
  config_.last_layer_rows = rows;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::remote_features(const std::string& mode) {
  config_.remote_features = mode;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::vertex_data(const std::string& place) {
  config_.vertex_data = place;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::host_precision(const std::string& name) {
  config_.host_precision = name;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::no_overlap(bool transfers_in_line) {
  config_.no_overlap = transfers_in_line;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::device(const std::string& name) {
  config_.device = name;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::threads(int count) {
  config_.threads = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::gpus(int count) {
  config_.gpus = count;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::gpu_memory(std::int64_t bytes) {
  config_.gpu_memory = bytes;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::tf32(bool allowed) {
  config_.tf32 = allowed;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::checkpoint(const std::string& path, int every_epochs) {
  config_.checkpoint = path;
  config_.checkpoint_every = every_epochs;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::resume_from(const std::string& checkpoint_path) {
  config_.checkpoint = checkpoint_path;
  config_.resume = true;
  return *this;
}

TrainConfigBuilder& TrainConfigBuilder::predictions(const std::string& path) {
  config_.predictions = path;
  return *this;
}

ModelShapeBuilder::ModelShapeBuilder(const std::string& model, int layers) {
  shape_.model = model;
  shape_.layers = layers;
}

ModelShapeBuilder& ModelShapeBuilder::in_dim(std::int64_t width) {
  shape_.in_dim = width;
  return *this;
}

ModelShapeBuilder& ModelShapeBuilder::hidden(std::int64_t width) {
  shape_.hidden = width;
  return *this;
}

ModelShapeBuilder& ModelShapeBuilder::classes(std::int64_t count) {
  shape_.classes = count;
  return *this;
}

ModelShapeBuilder& ModelShapeBuilder::heads(int count) {
  shape_.heads = count;
  return *this;
}

ModelShapeBuilder& ModelShapeBuilder::output_heads(int count) {
  shape_.output_heads = count;
  return *this;
}

ModelShapeBuilder& ModelShapeBuilder::layer_zero_order(LayerZeroOrder order) {
  shape_.layer_zero_order = order;
  return *this;
}

ModelSpec model_spec(const ModelShape& shape) {
  return make_model(shape);
}

BackendOptionsBuilder::BackendOptionsBuilder(int partitions) {
  options_.partitions = partitions;
}

BackendOptionsBuilder& BackendOptionsBuilder::gpus(int count) {
  options_.gpus = count;
  return *this;
}

BackendOptionsBuilder& BackendOptionsBuilder::memory_budget(std::int64_t bytes_per_device) {
  options_.memory_budget = bytes_per_device;
  return *this;
}

BackendOptionsBuilder& BackendOptionsBuilder::threads(int count) {
  options_.threads = count;
  return *this;
}

BackendOptionsBuilder& BackendOptionsBuilder::peer_access(PeerAccess access) {
  options_.peer_access = access;
  return *this;
}

BackendOptionsBuilder& BackendOptionsBuilder::op_times(bool timed) {
  options_.op_times = timed;
  return *this;
}

BackendOptionsBuilder& BackendOptionsBuilder::cpu_residence(CpuResidence residence) {
  options_.cpu_residence = residence;
  return *this;
}

}  // namespace sluice::test
