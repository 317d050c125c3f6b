// Checkpoints: the HDF5 file round-trips every field; a run stopped after k epochs and resumed
// from its checkpoint gives bit-identical losses and parameters to an uninterrupted run (all
// randomness is keyed by seed and epoch); a resume with another configuration is refused; a
// checkpoint whose contents no longer match its checksum is refused; a resume rewrites the
// metrics file so that each epoch appears once.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/checkpoint.hpp"
#include "formats/dataset.hpp"
#include "formats/hdf5.hpp"
#include "formats/plan.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

// 120 vertices, symmetric, 10 features in [-0.5, 0.5), 4 classes, half of the vertices train.
Dataset resume_dataset() {
  Dataset d = test::random_symmetric_graph(120, 3, 9);
  d.name = "resume";
  test::add_hashed_features(d, 10, 9, -0.5f, 0.5f);
  test::add_hashed_labels(d, 4, 9);
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    (v % 2 == 0 ? d.train : v % 4 == 1 ? d.valid : d.test).push_back(v);
  return d;
}

Checkpoint sample_checkpoint() {
  Checkpoint ck;
  ck.config_fingerprint = "abc123";
  ck.description = "model=gcn";
  ck.seed = 42;
  ck.epochs_done = 3;
  ck.optimizer_step = 3;
  ck.parameters = {1.f, -2.f, 3.5f};
  ck.adam_m = {0.1f, 0.2f, 0.3f};
  ck.adam_v = {0.01f, 0.02f, 0.03f};
  ck.losses = {1.5, 1.25, 1.125};
  ck.best_epoch = 1;
  ck.best_valid_accuracy = 0.5;
  ck.best_test_accuracy = 0.25;
  ck.best_train_accuracy = 0.75;
  ck.best_parameters = {4.f, 5.f, 6.f};
  ck.train_seconds = 2.5;
  return ck;
}

// Flips one bit of element `index` of the float dataset `name`, leaving the checksum as it was.
void flip_float_bit(const std::string& path, const std::string& name, std::size_t index) {
  h5::Handle file = h5::open_file(path, true);
  std::vector<float> values = h5::read_vector<float>(file, name);
  ASSERT_LT(index, values.size());
  std::uint32_t bits = 0;
  std::memcpy(&bits, &values[index], sizeof bits);
  bits ^= 1u << 20;
  std::memcpy(&values[index], &bits, sizeof bits);
  h5::Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
}

// The message of the InputError that `read` throws ("" when it throws none).
template <typename Read>
std::string input_error_of(Read read) {
  try {
    read();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(Checkpoint, RoundTripsEveryField) {
  test::ScratchDir dir;
  const Checkpoint ck = sample_checkpoint();
  write_checkpoint(dir.file("ck.h5"), ck);
  const Checkpoint back = read_checkpoint(dir.file("ck.h5"));
  EXPECT_EQ(back.config_fingerprint, ck.config_fingerprint);
  EXPECT_EQ(back.description, ck.description);
  EXPECT_EQ(back.seed, ck.seed);
  EXPECT_EQ(back.epochs_done, ck.epochs_done);
  EXPECT_EQ(back.optimizer_step, ck.optimizer_step);
  EXPECT_EQ(back.parameters, ck.parameters);
  EXPECT_EQ(back.adam_m, ck.adam_m);
  EXPECT_EQ(back.adam_v, ck.adam_v);
  EXPECT_EQ(back.losses, ck.losses);
  EXPECT_EQ(back.best_epoch, ck.best_epoch);
  EXPECT_EQ(back.best_valid_accuracy, ck.best_valid_accuracy);
  EXPECT_EQ(back.best_test_accuracy, ck.best_test_accuracy);
  EXPECT_EQ(back.best_train_accuracy, ck.best_train_accuracy);
  EXPECT_EQ(back.best_parameters, ck.best_parameters);
  EXPECT_EQ(back.train_seconds, ck.train_seconds);
  // No temporary file is left behind.
  EXPECT_EQ(test::list_dir(dir.path()).size(), 1u);
}

TEST(Checkpoint, RejectsMissingAndForeignFiles) {
  test::ScratchDir dir;
  EXPECT_THROW(read_checkpoint(dir.file("missing.h5")), InputError);
  test::write_text(dir.file("text.h5"), "not hdf5\n");
  EXPECT_THROW(read_checkpoint(dir.file("text.h5")), InputError);
}

TEST(Checkpoint, RefusesAFileWhoseContentsDoNotMatchItsChecksum) {
  test::ScratchDir dir;
  const std::string path = dir.file("ck.h5");
  for (const char* array : {"parameters", "adam_v", "best_parameters"}) {
    write_checkpoint(path, sample_checkpoint());
    ASSERT_NO_THROW(read_checkpoint(path));
    flip_float_bit(path, array, 1);
    const std::string message = input_error_of([&] { read_checkpoint(path); });
    EXPECT_NE(message.find(path), std::string::npos) << array << ": " << message;
    EXPECT_NE(message.find("checksum mismatch"), std::string::npos) << array << ": " << message;
  }
  // A scalar stored as an attribute is covered too.
  write_checkpoint(path, sample_checkpoint());
  {
    h5::Handle file = h5::open_file(path, true);
    h5::Handle attribute(H5Aopen(file, "epochs_done", H5P_DEFAULT));
    const std::int64_t epochs_done = 2;
    ASSERT_GE(H5Awrite(attribute, H5T_NATIVE_INT64, &epochs_done), 0);
  }
  EXPECT_NE(input_error_of([&] { read_checkpoint(path); }).find("checksum mismatch"),
            std::string::npos);
}

// An array whose shape declares far more than the file stores (HDF5 reads unwritten chunks as
// the fill value) is refused by its shape before anything is allocated, naming the file, the
// array and the sizes.
TEST(Checkpoint, RefusesAnArrayShapedBeyondMemoryBeforeReadingIt) {
  test::ScratchDir dir;
  const std::string path = dir.file("ck.h5");
  for (const char* array : {"parameters", "adam_m", "losses"}) {
    write_checkpoint(path, sample_checkpoint());
    {
      h5::Handle file = h5::open_file(path, true);
      ASSERT_GE(H5Ldelete(file, array, H5P_DEFAULT), 0);
      const hsize_t dims[1] = {hsize_t(1) << 45}, chunk[1] = {1024};  // 128 TiB of floats
      h5::Handle space(H5Screate_simple(1, dims, nullptr));
      h5::Handle layout(H5Pcreate(H5P_DATASET_CREATE));
      ASSERT_GE(H5Pset_chunk(layout, 1, chunk), 0);
      h5::Handle forged(
          H5Dcreate2(file, array, H5T_NATIVE_FLOAT, space, H5P_DEFAULT, layout, H5P_DEFAULT));
      ASSERT_GE(forged.get(), 0);
    }
    const std::string message = input_error_of([&] { read_checkpoint(path); });
    EXPECT_NE(message.find(path + ": /" + array +
                           " of shape [35184372088832]: reading it needs "
                           "about"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("of host memory, but only"), std::string::npos) << message;
  }
}

TEST(Checkpoint, RefusesAFileWithoutAChecksum) {
  test::ScratchDir dir;
  const std::string path = dir.file("ck.h5");
  write_checkpoint(path, sample_checkpoint());
  {
    // What an older build wrote: format version 1 and no checksum attribute.
    h5::Handle file = h5::open_file(path, true);
    ASSERT_GE(H5Adelete(file, "checksum"), 0);
    h5::Handle attribute(H5Aopen(file, "format_version", H5P_DEFAULT));
    const std::int32_t version = 1;
    ASSERT_GE(H5Awrite(attribute, H5T_NATIVE_INT32, &version), 0);
  }
  const std::string message = input_error_of([&] { read_checkpoint(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("has no checksum"), std::string::npos) << message;
}

TEST(Checkpoint, CorruptCheckpointFailsTheResumeOfSluiceTrain) {
  const Dataset d = resume_dataset();
  test::ScratchDir dir;
  write_dataset(dir.file("data.h5"), d);
  write_plan(dir.file("plan.h5"), test::make_plan(d, test::plan_options(2, 3)));
  const std::string ck = dir.file("ck.h5");
  const std::string command = test::bin("sluice-train") + " --dataset " + dir.file("data.h5") +
                              " --plan " + dir.file("plan.h5") +
                              " --threads 1 --no-progress --optimizer adam --checkpoint " + ck;
  const auto first = test::run_command(command + " --epochs 2");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  flip_float_bit(ck, "parameters", 3);
  const auto resumed = test::run_command(command + " --epochs 4 --resume");
  EXPECT_NE(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find(ck), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("checksum"), std::string::npos) << resumed.output;
}

TEST(ResumeMetrics, HoldEachEpochOnceAsInAnUninterruptedRun) {
  const Dataset d = resume_dataset();
  const Plan plan = test::make_plan(d, test::plan_options(2, 3).partitioner("metis"));
  test::ScratchDir dir;
  TrainConfig config =
      test::train_config().optimizer("adam").lr(0.02).dropout(0.5).seed(5).epochs(8).eval_every(2);
  config.metrics = dir.file("full.jsonl");
  train(d, plan, config);
  const auto full = read_metrics(config.metrics);
  ASSERT_EQ(full.size(), 8u);

  // A run that checkpointed after epoch 4 and stopped after epoch 6: the metrics file holds six
  // records plus the start of a seventh cut off mid-write, the checkpoint four epochs.
  const std::string metrics = dir.file("metrics.jsonl");
  TrainConfig checkpointed = test::train_config(config).epochs(4).checkpoint(dir.file("ck.h5"), 2);
  checkpointed.metrics.clear();
  train(d, plan, checkpointed);
  TrainConfig stopped = test::train_config(config).epochs(6);
  stopped.metrics = metrics;
  train(d, plan, stopped);
  {
    std::ofstream partial(metrics, std::ios::app);
    partial << R"({"epoch": 6, "lo)";
  }
  ASSERT_EQ(read_checkpoint(dir.file("ck.h5")).epochs_done, 4);

  TrainConfig resumed = test::train_config(config).resume_from(dir.file("ck.h5"));
  resumed.metrics = metrics;
  train(d, plan, resumed);
  const auto records = read_metrics(metrics);
  ASSERT_EQ(records.size(), full.size());
  for (std::size_t e = 0; e < full.size(); ++e) {
    EXPECT_EQ(records[e]["epoch"], std::int64_t(e));
    EXPECT_EQ(records[e]["loss"], full[e]["loss"]) << "epoch " << e;
    EXPECT_EQ(records[e]["valid_accuracy"], full[e]["valid_accuracy"]) << "epoch " << e;
  }
}

TEST(ResumeMetrics, RefusesAMetricsFileThatIsNotJsonLines) {
  const Dataset d = resume_dataset();
  const Plan plan = test::make_plan(d, test::plan_options(2, 3));
  test::ScratchDir dir;
  TrainConfig config = test::train_config().epochs(2).checkpoint(dir.file("ck.h5"), 1);
  train(d, plan, config);
  config = test::train_config(config).epochs(3).resume_from(dir.file("ck.h5"));
  config.metrics = dir.file("metrics.jsonl");
  test::write_text(config.metrics, "{\"epoch\": 0, \"loss\": 1.5}\nnot json\n");
  const std::string message = input_error_of([&] { train(d, plan, config); });
  EXPECT_NE(message.find(config.metrics), std::string::npos) << message;
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;
  // The failed resume leaves the file as it was and the checkpoint untouched.
  std::ifstream in(config.metrics);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "{\"epoch\": 0, \"loss\": 1.5}\nnot json\n");
  EXPECT_EQ(read_checkpoint(dir.file("ck.h5")).epochs_done, 2);
}

class Resume : public ::testing::TestWithParam<std::string> {};

TEST_P(Resume, IsBitIdenticalToAnUninterruptedRun) {
  const Dataset d = resume_dataset();
  const Plan plan = test::make_plan(d, test::plan_options(2, 3).partitioner("metis"));
  test::ScratchDir dir;
  const TrainConfig config = test::train_config()
                                 .model(GetParam())
                                 .heads(2)
                                 .hidden(6)
                                 .optimizer("adam")
                                 .lr(0.02)
                                 .dropout(0.5)
                                 .seed(5)
                                 .epochs(7)
                                 .eval_every(2)
                                 .predictions("predictions.csv");
  const TrainResult full = train(d, plan, config);

  train(d, plan, test::train_config(config).epochs(4).checkpoint(dir.file("ck.h5"), 2));
  const TrainConfig second = test::train_config(config).resume_from(dir.file("ck.h5"));
  const TrainResult resumed = train(d, plan, second);

  ASSERT_EQ(resumed.losses.size(), full.losses.size());
  for (std::size_t e = 0; e < full.losses.size(); ++e)
    EXPECT_EQ(resumed.losses[e], full.losses[e]) << "epoch " << e;
  ASSERT_EQ(resumed.flat_parameters.size(), full.flat_parameters.size());
  EXPECT_EQ(std::memcmp(resumed.flat_parameters.data(), full.flat_parameters.data(),
                        full.flat_parameters.size() * sizeof(float)),
            0);
  EXPECT_EQ(resumed.best_epoch, full.best_epoch);
  EXPECT_EQ(resumed.test_accuracy, full.test_accuracy);
  ASSERT_EQ(full.best_predictions.size(), std::size_t(d.num_nodes));
  EXPECT_EQ(resumed.best_predictions, full.best_predictions);

  // The checkpoint after the resumed run holds all 7 epochs; other settings are refused.
  EXPECT_EQ(read_checkpoint(dir.file("ck.h5")).epochs_done, 7);
  TrainConfig other = second;
  other.epochs = 8;
  other.dropout = 0.25;
  EXPECT_THROW(train(d, plan, other), InputError);
  other = second;
  other.epochs = 5;  // fewer epochs than the checkpoint already holds
  EXPECT_THROW(train(d, plan, other), InputError);
}

INSTANTIATE_TEST_SUITE_P(Models, Resume, ::testing::Values("gcn", "sage", "gat"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace sluice
