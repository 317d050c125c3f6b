// The order in which the host issues the devices' compute (Schedule::compute_order()): the
// device whose compute took longest in the last training step first, evaluations leaving it as
// it is. (That the order changes no result, the equivalence tests of several partitions against
// one check: tests/test_train_equivalence.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

ModelSpec gcn(const Dataset& d) {
  return test::model_spec(
      test::model_shape("gcn", 2).in_dim(d.feature_dim).hidden(16).classes(d.num_classes));
}

TEST(ComputeOrder, LongestComputeOfTheLastStepGoesFirst) {
  const Dataset d = test::random_dataset(3000, 8, 12, 5, 7, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(3, 2));
  const ModelSpec spec = gcn(d);
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  ScheduleOptions options;
  options.seed = 3;
  Schedule schedule(*backend, d, plan, spec, options);
  schedule.set_parameters(init_parameters(spec, 5));
  std::vector<int> order(3);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(schedule.compute_order(), order) << "by index before the first step";
  for (int epoch = 0; epoch < 4; ++epoch) {
    SCOPED_TRACE(cat("epoch ", epoch));
    schedule.reset_times();
    schedule.forward_backward(epoch);
    schedule.adam_step(0.01f, 0.f, epoch + 1);
    const std::vector<PhaseTimes>& times = schedule.device_times();
    ASSERT_EQ(times.size(), 3u);
    for (const PhaseTimes& t : times) EXPECT_GT(t.compute, 0.0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return times[std::size_t(a)].compute > times[std::size_t(b)].compute;
    });
    EXPECT_EQ(schedule.compute_order(), order);
    schedule.evaluate();
    EXPECT_EQ(schedule.compute_order(), order) << "an evaluation changed the order";
  }
}

}  // namespace
}  // namespace sluice
