// Implementation of formats/checkpoint.hpp.
#include "formats/checkpoint.hpp"

#include <cstdio>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "formats/hdf5.hpp"

namespace sluice {
namespace {

void add_string(Fingerprint& hash, const std::string& text) {
  hash.add_u64(text.size());
  hash.add(text.data(), text.size());
}

template <typename T>
void add_scalar(Fingerprint& hash, T value) {
  hash.add(&value, sizeof value);
}

template <typename T>
void add_array(Fingerprint& hash, const std::vector<T>& values) {
  hash.add_u64(values.size());
  hash.add(values.data(), values.size() * sizeof(T));
}

// Hash of every stored field in a fixed order; each string and array is preceded by its length
// so that bytes cannot move between neighbouring fields without changing the value.
std::uint64_t checkpoint_checksum(const Checkpoint& ck) {
  Fingerprint hash;
  add_scalar<std::int32_t>(hash, kCheckpointFormatVersion);
  add_string(hash, ck.config_fingerprint);
  add_string(hash, ck.description);
  add_scalar(hash, ck.seed);
  add_scalar(hash, ck.epochs_done);
  add_scalar(hash, ck.optimizer_step);
  add_scalar(hash, ck.best_epoch);
  add_scalar(hash, ck.best_valid_accuracy);
  add_scalar(hash, ck.best_test_accuracy);
  add_scalar(hash, ck.best_train_accuracy);
  add_scalar(hash, ck.train_seconds);
  add_array(hash, ck.parameters);
  add_array(hash, ck.adam_m);
  add_array(hash, ck.adam_v);
  add_array(hash, ck.losses);
  add_array(hash, ck.best_parameters);
  return hash.value();
}

std::string hex64(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& ck) {
  h5::write_file(path, "checkpoint", [&](hid_t file) {
    h5::write_string_attr(file, "format", "sluice-checkpoint");
    h5::write_attr<std::int32_t>(file, "format_version", kCheckpointFormatVersion);
    h5::write_string_attr(file, "config_fingerprint", ck.config_fingerprint);
    h5::write_string_attr(file, "description", ck.description);
    h5::write_attr<std::uint64_t>(file, "seed", ck.seed);
    h5::write_attr<std::int64_t>(file, "epochs_done", ck.epochs_done);
    h5::write_attr<std::int64_t>(file, "optimizer_step", ck.optimizer_step);
    h5::write_attr<std::int64_t>(file, "best_epoch", ck.best_epoch);
    h5::write_attr<double>(file, "best_valid_accuracy", ck.best_valid_accuracy);
    h5::write_attr<double>(file, "best_test_accuracy", ck.best_test_accuracy);
    h5::write_attr<double>(file, "best_train_accuracy", ck.best_train_accuracy);
    h5::write_attr<double>(file, "train_seconds", ck.train_seconds);
    h5::write_vector(file, "parameters", ck.parameters);
    h5::write_vector(file, "adam_m", ck.adam_m);
    h5::write_vector(file, "adam_v", ck.adam_v);
    h5::write_vector(file, "losses", ck.losses);
    h5::write_vector(file, "best_parameters", ck.best_parameters);
    h5::write_attr<std::uint64_t>(file, "checksum", checkpoint_checksum(ck));
  });
}

void write_model(const std::string& path, const ModelFile& model) {
  h5::write_file(path, "model", [&](hid_t file) {
    h5::write_string_attr(file, "format", "sluice-model");
    h5::write_attr<std::int32_t>(file, "format_version", kModelFormatVersion);
    h5::write_string_attr(file, "description", model.description);
    h5::write_attr<std::int64_t>(file, "epoch", model.epoch);
    h5::Handle group = h5::create_group(file, "parameters");
    for (const auto& t : model.tensors) {
      SLUICE_EXPECTS(std::int64_t(t.values.size()) == t.rows * t.cols, "tensor ", t.name);
      h5::write_matrix(group, t.name, t.values.data(), std::uint64_t(t.rows),
                       std::uint64_t(t.cols));
    }
  });
}

void write_embeddings(const std::string& path, const EmbeddingsFile& e) {
  const std::uint64_t rows = e.original_ids.size();
  SLUICE_EXPECTS(e.hidden.size() == rows * std::uint64_t(e.hidden_width) &&
                     e.logits.size() == rows * std::uint64_t(e.classes),
                 "embeddings: ", e.hidden.size(), " hidden and ", e.logits.size(),
                 " logit values for ", rows, " rows");
  AtomicOutput output(path);
  {
    h5::Handle file = h5::create_file(output.temporary_path());
    h5::write_string_attr(file, "format", "sluice-embeddings");
    h5::write_attr<std::int32_t>(file, "format_version", kEmbeddingsFormatVersion);
    h5::write_string_attr(file, "description", e.description);
    h5::write_attr<std::int64_t>(file, "epoch", e.epoch);
    h5::write_vector(file, "original_ids", e.original_ids);
    h5::write_matrix(file, "hidden", e.hidden.data(), rows, std::uint64_t(e.hidden_width));
    h5::write_matrix(file, "logits", e.logits.data(), rows, std::uint64_t(e.classes));
    SLUICE_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  }
  output.commit();
}

ModelFile read_model(const std::string& path) {
  require_readable(path, "model");
  SLUICE_INPUT_CHECK(h5::is_hdf5(path), path, ": not an HDF5 file (expected a model)");
  h5::Handle file = h5::open_file(path);
  SLUICE_INPUT_CHECK(
      h5::has_attr(file, "format") && h5::read_string_attr(file, "format") == "sluice-model", path,
      ": not a Sluice model file (missing format attribute)");
  ModelFile model;
  model.description = h5::read_string_attr(file, "description");
  model.epoch = h5::read_attr<std::int64_t>(file, "epoch");
  h5::Handle group = h5::open_group(file, "parameters");
  hsize_t count = 0;
  SLUICE_H5(H5Gget_num_objs(group, &count));
  for (hsize_t i = 0; i < count; ++i) {
    char name[256] = {0};
    SLUICE_H5(H5Gget_objname_by_idx(group, i, name, sizeof name));
    ModelTensor t;
    t.name = name;
    const auto dims = h5::shape(group, t.name);
    SLUICE_INPUT_CHECK(dims.size() == 2, path, ": parameter ", t.name, " is not a matrix");
    t.rows = std::int64_t(dims[0]);
    t.cols = std::int64_t(dims[1]);
    t.values = h5::read_vector<float>(group, t.name);
    model.tensors.push_back(std::move(t));
  }
  return model;
}

Checkpoint read_checkpoint(const std::string& path) {
  require_readable(path, "checkpoint");
  SLUICE_INPUT_CHECK(h5::is_hdf5(path), path, ": not an HDF5 file (expected a checkpoint)");
  h5::Handle file = h5::open_file(path);
  SLUICE_INPUT_CHECK(
      h5::has_attr(file, "format") && h5::read_string_attr(file, "format") == "sluice-checkpoint",
      path, ": not a Sluice checkpoint (missing format attribute)");
  const auto version = h5::read_attr<std::int32_t>(file, "format_version");
  SLUICE_INPUT_CHECK(version != 1, "checkpoint ", path,
                     " has no checksum (format version 1, written by an older sluice-train), so "
                     "its contents cannot be verified; start the run again without --resume");
  SLUICE_INPUT_CHECK(version == kCheckpointFormatVersion, path, ": checkpoint format version ",
                     version, " is not supported (expected ", kCheckpointFormatVersion, ")");
  Checkpoint ck;
  ck.config_fingerprint = h5::read_string_attr(file, "config_fingerprint");
  ck.description = h5::read_string_attr(file, "description");
  ck.seed = h5::read_attr<std::uint64_t>(file, "seed");
  ck.epochs_done = h5::read_attr<std::int64_t>(file, "epochs_done");
  ck.optimizer_step = h5::read_attr<std::int64_t>(file, "optimizer_step");
  ck.best_epoch = h5::read_attr<std::int64_t>(file, "best_epoch");
  ck.best_valid_accuracy = h5::read_attr<double>(file, "best_valid_accuracy");
  ck.best_test_accuracy = h5::read_attr<double>(file, "best_test_accuracy");
  ck.best_train_accuracy = h5::read_attr<double>(file, "best_train_accuracy");
  ck.train_seconds = h5::read_attr<double>(file, "train_seconds");
  ck.parameters = h5::read_vector<float>(file, "parameters");
  ck.adam_m = h5::read_vector<float>(file, "adam_m");
  ck.adam_v = h5::read_vector<float>(file, "adam_v");
  ck.losses = h5::read_vector<double>(file, "losses");
  ck.best_parameters = h5::read_vector<float>(file, "best_parameters");
  SLUICE_INPUT_CHECK(h5::has_attr(file, "checksum"), "checkpoint ", path,
                     " is corrupt: the checksum attribute is missing");
  const auto stored = h5::read_attr<std::uint64_t>(file, "checksum");
  const std::uint64_t computed = checkpoint_checksum(ck);
  SLUICE_INPUT_CHECK(stored == computed, "checkpoint ", path,
                     " is corrupt: checksum mismatch (stored ", hex64(stored), ", computed ",
                     hex64(computed), ")");
  SLUICE_INPUT_CHECK(
      ck.epochs_done >= 0 && std::int64_t(ck.losses.size()) == ck.epochs_done &&
          (ck.adam_m.empty() || ck.adam_m.size() == ck.parameters.size()) &&
          ck.adam_m.size() == ck.adam_v.size() &&
          (ck.best_parameters.empty() || ck.best_parameters.size() == ck.parameters.size()),
      path, ": checkpoint arrays have inconsistent sizes");
  return ck;
}

}  // namespace sluice
