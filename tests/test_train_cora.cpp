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

#include "formats/importers.hpp"
#include "preprocess/plan_builder.hpp"
#include "tests/support/paths.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

class CoraAccuracy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::file_exists(test::cora_dir() + "/raw/edge.csv.gz"))
      GTEST_FAIL() << "Cora is not at " << test::cora_dir()
                   << " (set SLUICE_SHARED_DATASETS); the accuracy bars cannot be checked";
  }
  static const Dataset& cora() {
    static const Dataset d = [] {
      ImportOptions options;
      options.format = "ogb";
      options.input = test::cora_dir();
      options.graph.symmetrize = true;
      ImportReport report;
      return import_ogb(options, report);
    }();
    return d;
  }
  static Plan plan(int P, int C) {
    PlanOptions options;
    options.partitions = P;
    options.chunks = C;
    options.partitioner = P == 1 ? "range" : "metis";
    return build_plan(cora(), options, compute_fingerprint(cora()));
  }
  static TrainConfig gcn_config(std::uint64_t seed) {
    TrainConfig c;
    c.model = "gcn";
    c.layers = 2;
    c.hidden = 16;
    c.dropout = 0.5;
    c.lr = 0.01;
    c.weight_decay = 5e-4;
    c.epochs = 200;
    c.optimizer = "adam";
    c.feature_norm = "row";
    c.seed = seed;
    c.progress = false;
    c.threads = 1;  // contention-free next to other tests (ctest -j)
    return c;
  }
  static TrainConfig gat_config(std::uint64_t seed) {
    TrainConfig c = gcn_config(seed);
    c.model = "gat";
    c.heads = 8;
    c.hidden = 8;
    c.output_heads = 1;
    c.dropout = 0.6;
    c.lr = 0.005;
    return c;
  }
  // Trains seeds 0-4; returns the test accuracies and prints mean and spread.
  static std::vector<double> five_seeds(const Plan& p, TrainConfig (*config)(std::uint64_t),
                                        const char* name) {
    std::vector<double> acc;
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      const TrainResult r = train(cora(), p, config(seed));
      acc.push_back(r.test_accuracy);
      std::printf("[cora] %s seed %llu: test %.1f%% (valid %.1f%% at epoch %lld), %.3f s/epoch\n",
                  name, static_cast<unsigned long long>(seed), 100 * r.test_accuracy,
                  100 * r.best_valid_accuracy, static_cast<long long>(r.best_epoch),
                  r.seconds_per_epoch);
    }
    const double mean = std::accumulate(acc.begin(), acc.end(), 0.0) / double(acc.size());
    double var = 0;
    for (double a : acc) var += (a - mean) * (a - mean);
    const double sd = std::sqrt(var / double(acc.size() - 1));
    std::printf("[cora] %s: mean %.2f%% +- %.2f%% (sd), min %.1f%%, max %.1f%%\n", name, 100 * mean,
                100 * sd, 100 * *std::min_element(acc.begin(), acc.end()),
                100 * *std::max_element(acc.begin(), acc.end()));
    return acc;
  }
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
  const auto acc = five_seeds(plan(1, 1), &CoraAccuracy::gcn_config, "GCN 1x1");
  for (std::size_t s = 0; s < acc.size(); ++s) EXPECT_GE(acc[s], 0.805) << "seed " << s;
}

TEST_F(CoraAccuracy, GatFiveSeeds) {
  const auto acc = five_seeds(plan(1, 1), &CoraAccuracy::gat_config, "GAT 1x1");
  for (std::size_t s = 0; s < acc.size(); ++s) EXPECT_GE(acc[s], 0.805) << "seed " << s;
  EXPECT_GE(std::accumulate(acc.begin(), acc.end(), 0.0) / double(acc.size()), 0.815);
}

TEST_F(CoraAccuracy, ChunkedPlanReachesTheSameAccuracy) {
  const Plan p = plan(2, 4);
  ASSERT_EQ(p.partitions, 2);
  ASSERT_EQ(p.chunks, 4);
  const TrainResult gcn = train(cora(), p, gcn_config(0));
  std::printf("[cora] GCN 2x4 seed 0: test %.1f%%\n", 100 * gcn.test_accuracy);
  EXPECT_GE(gcn.test_accuracy, 0.805);
  const TrainResult gat = train(cora(), p, gat_config(0));
  std::printf("[cora] GAT 2x4 seed 0: test %.1f%%\n", 100 * gat.test_accuracy);
  EXPECT_GE(gat.test_accuracy, 0.805);
}

}  // namespace
}  // namespace sluice
