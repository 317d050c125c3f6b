// Accuracy bars on Cora (public Planetoid split, ../shared/datasets/cora through the OGB
// importer, symmetrized: 10556 directed edges). Features are row-normalized (--feature-norm
// row) as in Kipf & Welling and Velickovic et al. Each seed 0-4 must reach >= 80.5% test
// accuracy with the best-validation model, GAT >= 81.5% on average; a P = 2, C = 4 plan must
// reach the same bar. The mean and spread are printed for docs/benchmarks.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "tests/support/cora.hpp"
#include "tests/support/paths.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

class CoraAccuracy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cora_available())
      GTEST_FAIL() << "Cora is not at " << test::cora_dir()
                   << " (set SLUICE_SHARED_DATASETS); the accuracy bars cannot be checked";
  }
  static const Dataset& cora() { return test::cora_dataset(); }
};

TEST_F(CoraAccuracy, ImportGivesThePublicSplit) {
  EXPECT_EQ(cora().num_nodes, 2708);
  EXPECT_EQ(cora().num_edges(), 10556);
  EXPECT_EQ(cora().feature_dim, 1433);
  EXPECT_EQ(cora().num_classes, 7);
  EXPECT_EQ(cora().train.size(), 140u);
  EXPECT_EQ(cora().valid.size(), 500u);
  EXPECT_EQ(cora().test.size(), 1000u);
}

TEST_F(CoraAccuracy, GcnFiveSeeds) {
  const auto acc = test::cora_five_seeds(test::cora_plan(1, 1), test::cora_gcn_config, "GCN 1x1");
  for (std::size_t s = 0; s < acc.size(); ++s) EXPECT_GE(acc[s], 0.805) << "seed " << s;
}

TEST_F(CoraAccuracy, GatFiveSeeds) {
  const auto acc = test::cora_five_seeds(test::cora_plan(1, 1), test::cora_gat_config, "GAT 1x1");
  for (std::size_t s = 0; s < acc.size(); ++s) EXPECT_GE(acc[s], 0.805) << "seed " << s;
  EXPECT_GE(std::accumulate(acc.begin(), acc.end(), 0.0) / double(acc.size()), 0.815);
}

TEST_F(CoraAccuracy, ChunkedPlanReachesTheSameAccuracy) {
  const Plan p = test::cora_plan(2, 4);
  ASSERT_EQ(p.partitions, 2);
  ASSERT_EQ(p.chunks, 4);
  const TrainResult gcn = train(cora(), p, test::cora_gcn_config(0));
  std::printf("[cora] GCN 2x4 seed 0: test %.1f%%\n", 100 * gcn.test_accuracy);
  EXPECT_GE(gcn.test_accuracy, 0.805);
  const TrainResult gat = train(cora(), p, test::cora_gat_config(0));
  std::printf("[cora] GAT 2x4 seed 0: test %.1f%%\n", 100 * gat.test_accuracy);
  EXPECT_GE(gat.test_accuracy, 0.805);
}

}  // namespace
}  // namespace sluice
