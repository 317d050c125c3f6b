// Setup's two orders of the host matrices (ScheduleOptions::host_setup): after the index lists,
// or on a second thread beside them while the dataset's graph is released. Both give the same
// schedule: the same losses, bit for bit, and the same predictions, here with the features left
// in the dataset file (read into H^0 in slabs, as sluice-train does) and the dataset and plan
// released during setup.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/sgd_epochs.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<std::int32_t> predictions;
};

Outcome run(const std::string& dataset_path, const Plan& built, const std::string& model,
            HostSetup host_setup) {
  DatasetReadOptions without;
  without.features = false;
  Dataset d = read_dataset(dataset_path, without);
  Plan plan = built;
  const ModelSpec spec = test::model_spec(
      test::model_shape(model, 2).in_dim(d.feature_dim).hidden(8).classes(d.num_classes).heads(2));
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 5;
  options.host_setup = host_setup;
  Schedule schedule(*backend, d, plan, spec, options, InputRelease::kDatasetAndPlanLists);
  EXPECT_TRUE(d.indices.empty()) << "the graph was not released";
  Outcome out;
  out.losses = test::sgd_epochs(schedule, spec, 3, 2).losses;  // the second reads the gradients
  out.predictions = schedule.evaluate();
  return out;
}

TEST(HostSetup, BesideTheIndexListsEqualsAfterThem) {
  test::ScratchDir dir;
  const Dataset d = test::random_dataset(3000, 6, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  write_dataset(dir.file("d.h5"), d);
  const Plan plan = test::make_plan(d, test::plan_options(2, 3));
  for (const std::string model : {"gcn", "gat"}) {
    SCOPED_TRACE(model);
    const Outcome after = run(dir.file("d.h5"), plan, model, HostSetup::kAfterLists);
    const Outcome beside = run(dir.file("d.h5"), plan, model, HostSetup::kBesideLists);
    ASSERT_EQ(after.losses.size(), 2u);
    EXPECT_GT(after.losses[0], 0.0);
    EXPECT_EQ(beside.losses, after.losses);
    EXPECT_EQ(beside.predictions, after.predictions);
  }
}

// The message of the InputError that setting up a schedule on `plan` throws ("" when none).
std::string setup_error(const Dataset& d, const Plan& plan) {
  const ModelSpec spec = test::model_spec(
      test::model_shape("gcn", 2).in_dim(d.feature_dim).hidden(8).classes(d.num_classes));
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  try {
    Schedule schedule(*backend, d, plan, spec, ScheduleOptions{});
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

// The transition lists are checked and applied in parallel; a slot listed twice is reported at
// the entry that meets it second, as a check in list order reports it.
TEST(HostSetup, TransitionListsAtFaultAreNamed) {
  const Dataset d = test::random_dataset(3000, 6, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan good = test::make_plan(d, test::plan_options(2, 3));
  ASSERT_EQ(setup_error(d, good), "");
  // A chunk after the first batch with two loads or more, and its predecessor's leaves.
  std::size_t k = std::size_t(good.partitions);
  while (k < good.chunk_plans.size() &&
         (good.chunk_plans[k].load_slots.size() < 2 ||
          good.chunk_plans[k - good.partitions].leave_slots.size() < 2))
    ++k;
  ASSERT_LT(k, good.chunk_plans.size());
  const ChunkPlan& chunk = good.chunk_plans[k];
  const std::string at = "plan chunk (batch " + std::to_string(chunk.batch) + ", partition " +
                         std::to_string(chunk.partition) + "): ";
  {
    Plan bad = good;
    bad.chunk_plans[k].load_slots[1] = bad.chunk_plans[k].load_slots[0];
    EXPECT_NE(setup_error(d, bad).find(at + "load entry 1 (vertex " +
                                       std::to_string(chunk.load_vertices[1]) + ", slot " +
                                       std::to_string(chunk.load_slots[0]) + ") is out of range"),
              std::string::npos)
        << setup_error(d, bad);
  }
  {
    Plan bad = good;
    bad.chunk_plans[k].load_slots[0] = good.transition_rows[std::size_t(chunk.partition)];
    EXPECT_NE(setup_error(d, bad).find(at + "load entry 0 "), std::string::npos);
  }
  {
    Plan bad = good;
    ChunkPlan& previous = bad.chunk_plans[k - good.partitions];
    previous.leave_slots[1] = previous.leave_slots[0];
    previous.leave_vertices[1] = previous.leave_vertices[0];
    EXPECT_NE(setup_error(d, bad).find(at + "leave entry 1 of the previous batch"),
              std::string::npos)
        << setup_error(d, bad);
  }
  {
    Plan bad = good;
    ChunkPlan& previous = bad.chunk_plans[k - good.partitions];
    std::swap(previous.leave_slots[0], previous.leave_slots[1]);
    EXPECT_NE(setup_error(d, bad).find(at + "leave entry 0 of the previous batch"),
              std::string::npos)
        << setup_error(d, bad);
  }
}

}  // namespace
}  // namespace sluice
