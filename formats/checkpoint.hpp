// Training checkpoints (HDF5): parameters, optimizer state, the epoch counter (all randomness
// is keyed by (seed, epoch, ...), so seed + epoch is the whole RNG state), the best-valid model
// and the loss history, plus a fingerprint of the configuration, dataset and plan so that a
// resume with different settings is refused. Written atomically, with a checksum over every
// stored field that reading verifies, so a damaged file is refused rather than resumed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

// Version 2 adds the checksum; version 1 files (no checksum) are refused on read.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kModelFormatVersion = 1;

struct Checkpoint {
  std::string config_fingerprint;  // model config + dataset + plan (see train/trainer.cpp)
  std::string description;         // human-readable configuration, for error messages
  std::uint64_t seed = 0;
  std::int64_t epochs_done = 0;     // next epoch to run
  std::int64_t optimizer_step = 0;  // Adam step count so far
  std::vector<float> parameters;
  std::vector<float> adam_m, adam_v;  // empty for SGD
  std::vector<double> losses;         // one per finished epoch
  // Best validation accuracy so far (best_epoch = -1 when none was evaluated).
  std::int64_t best_epoch = -1;
  double best_valid_accuracy = -1, best_test_accuracy = -1, best_train_accuracy = -1;
  std::vector<float> best_parameters;
  double train_seconds = 0;  // accumulated training wall time
};

void write_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// A trained model for use outside sluice-train: one 2-D dataset per parameter tensor, named as
// in the trainer ("layer0.W" -> /parameters/layer0.W), plus the configuration as attributes.
struct ModelTensor {
  std::string name;
  std::int64_t rows = 0, cols = 0;
  std::vector<float> values;  // rows * cols, row-major
};
struct ModelFile {
  std::string description;  // resolved configuration
  std::int64_t epoch = -1;  // epoch the parameters come from
  std::vector<ModelTensor> tensors;
};
void write_model(const std::string& path, const ModelFile& model);

// Every vertex's input of the model's last layer (H^{L-1}) and its logits, rows in dataset
// vertex order, for use outside sluice-train (sluice-train --embeddings-out; docs/formats.md).
inline constexpr int kEmbeddingsFormatVersion = 1;
struct EmbeddingsFile {
  std::string description;  // resolved configuration
  std::int64_t epoch = -1;  // epoch the parameters come from
  std::int64_t hidden_width = 0, classes = 0;
  std::vector<std::int64_t> original_ids;  // per row: the vertex's id in the raw input
  std::vector<float> hidden;               // rows x hidden_width
  std::vector<float> logits;               // rows x classes
};
void write_embeddings(const std::string& path, const EmbeddingsFile& embeddings);
ModelFile read_model(const std::string& path);
// Throws InputError naming the file when it is missing, not a checkpoint, malformed, has no
// checksum, or its contents do not match the stored checksum.
Checkpoint read_checkpoint(const std::string& path);

}  // namespace sluice
