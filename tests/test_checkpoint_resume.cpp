// Checkpoints: the HDF5 file round-trips every field; a run stopped after k epochs and resumed
// from its checkpoint gives bit-identical losses and parameters to an uninterrupted run (all
// randomness is keyed by seed and epoch); a resume with another configuration is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "formats/checkpoint.hpp"
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

TEST(Checkpoint, RoundTripsEveryField) {
  test::ScratchDir dir;
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
                                 .eval_every(2);
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
