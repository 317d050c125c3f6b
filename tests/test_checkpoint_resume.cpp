// Checkpoints: the HDF5 file round-trips every field; a run stopped after k epochs and resumed
// from its checkpoint gives bit-identical losses and parameters to an uninterrupted run (all
// randomness is keyed by seed and epoch); a resume with another configuration is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "common/hash.hpp"
#include "formats/checkpoint.hpp"
#include "preprocess/plan_builder.hpp"
#include "tests/support/paths.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

Dataset resume_dataset() {
  Dataset d;
  d.name = "resume";
  const vertex_t n = 120;
  d.num_nodes = n;
  d.feature_dim = 10;
  d.num_classes = 4;
  std::vector<std::set<vertex_t>> in(std::size_t(n), std::set<vertex_t>{});
  for (vertex_t v = 0; v < n; ++v)
    for (int k = 0; k < 3; ++k) {
      const auto u = vertex_t(key_hash(9, 1, std::uint64_t(v), std::uint64_t(k)) % n);
      if (u != v) in[std::size_t(u)].insert(v), in[std::size_t(v)].insert(u);
    }
  d.indptr.push_back(0);
  for (vertex_t v = 0; v < n; ++v) {
    for (vertex_t u : in[std::size_t(v)]) d.indices.push_back(u);
    d.indptr.push_back(edge_t(d.indices.size()));
  }
  for (std::int64_t i = 0; i < std::int64_t(n) * d.feature_dim; ++i)
    d.features.push_back(hash_to_unit(key_hash(9, 2, std::uint64_t(i))) - 0.5f);
  for (vertex_t v = 0; v < n; ++v) {
    d.labels.push_back(std::int32_t(key_hash(9, 3, std::uint64_t(v)) % 4));
    (v % 2 == 0 ? d.train : v % 4 == 1 ? d.valid : d.test).push_back(v);
  }
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
  PlanOptions po;
  po.partitions = 2;
  po.chunks = 3;
  po.partitioner = "metis";
  const Plan plan = build_plan(d, po, compute_fingerprint(d));
  test::ScratchDir dir;
  TrainConfig config;
  config.model = GetParam();
  config.heads = 2;
  config.hidden = 6;
  config.optimizer = "adam";
  config.lr = 0.02;
  config.dropout = 0.5;
  config.seed = 5;
  config.epochs = 7;
  config.eval_every = 2;
  config.progress = false;
  config.threads = 2;
  const TrainResult full = train(d, plan, config);

  TrainConfig first = config;
  first.epochs = 4;
  first.checkpoint = dir.file("ck.h5");
  first.checkpoint_every = 2;
  train(d, plan, first);
  TrainConfig second = config;
  second.checkpoint = dir.file("ck.h5");
  second.resume = true;
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

INSTANTIATE_TEST_SUITE_P(Models, Resume, ::testing::Values("gcn", "sage", "gat"));

}  // namespace
}  // namespace sluice
