// Evaluations that keep layer 0's aggregation of the features (ScheduleOptions::evaluation_cache):
// the first evaluation writes it, later ones take layer 0's aggregation from it and load no
// features, and every evaluation predicts exactly what it predicts without the cache, between
// training steps too (the features never change, and an evaluation has no dropout).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

struct Evaluations {
  std::vector<std::vector<std::int32_t>> predictions;  // per evaluation
  std::vector<TransferCounters> transfers;             // per evaluation
};

// Three evaluations, a training step before the third.
Evaluations evaluate_three_times(const Dataset& d, const Plan& plan, const std::string& model,
                                 HostPrecision precision, EvaluationCache cache) {
  const ModelSpec spec = test::model_spec(
      test::model_shape(model, 2).in_dim(d.feature_dim).hidden(8).classes(d.num_classes).heads(2));
  BackendOptions backend_options;
  backend_options.partitions = plan.partitions;
  std::unique_ptr<Backend> backend = make_cpu_backend(backend_options);
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 5;
  options.host_precision = precision;
  options.evaluation_cache = cache;
  Schedule schedule(*backend, d, plan, spec, options);
  schedule.set_parameters(init_parameters(spec, 3));
  Evaluations out;
  for (int i = 0; i < 3; ++i) {
    if (i == 2) {
      schedule.forward_backward(0);
      schedule.adam_step(0.05f, 0.f, 1);
    }
    schedule.reset_counters();
    out.predictions.push_back(schedule.evaluate());
    out.transfers.push_back(schedule.counters());
  }
  return out;
}

TEST(EvaluationCache, LaterEvaluationsLoadNoFeaturesAndPredictTheSame) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const int chunks : {1, 3, 4}) {
    const Plan plan = test::make_plan(d, test::plan_options(1, chunks));
    for (const std::string model : {"gcn", "sage"})
      for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16}) {
        SCOPED_TRACE(model + ", " + host_precision_name(precision) +
                     ", C = " + std::to_string(chunks));
        const Evaluations kept =
            evaluate_three_times(d, plan, model, precision, EvaluationCache::kDeviceWhereItFits);
        const Evaluations plain =
            evaluate_three_times(d, plan, model, precision, EvaluationCache::kNone);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(kept.predictions[i], plain.predictions[i]) << i;
        EXPECT_NE(plain.predictions[0], plain.predictions[2]);  // the step changed the model
        // The first evaluation loads what it loads without the cache; later ones load less:
        // layer 0 loads no features (with one chunk, layer 1's rows come from layer 0's output
        // block on the device and the rest is in place, so both may load nothing).
        EXPECT_EQ(kept.transfers[0].h2d_gather_rows, plain.transfers[0].h2d_gather_rows);
        for (const int i : {1, 2}) {
          if (chunks > 1)
            EXPECT_LT(kept.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
          else
            EXPECT_LE(kept.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
        }
      }
  }
}

// GAT aggregates transformed rows and keeps nothing; several partitions keep nothing either.
TEST(EvaluationCache, GatAndSeveralPartitionsLoadEveryTime) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan one = test::make_plan(d, test::plan_options(1, 3));
  const Plan two = test::make_plan(d, test::plan_options(2, 2));
  for (const auto& [model, plan] :
       {std::make_pair(std::string("gat"), &one), std::make_pair(std::string("gcn"), &two)}) {
    SCOPED_TRACE(model);
    const Evaluations kept = evaluate_three_times(d, *plan, model, HostPrecision::kFp32,
                                                  EvaluationCache::kDeviceWhereItFits);
    EXPECT_EQ(kept.transfers[1].h2d_gather_rows, kept.transfers[0].h2d_gather_rows);
    EXPECT_GT(kept.transfers[1].h2d_gather_rows, 0);
  }
}

}  // namespace
}  // namespace sluice
