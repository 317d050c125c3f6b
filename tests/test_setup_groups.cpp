// The schedule sets up its devices by the backend's setup groups (Backend::setup_groups(): a GPU
// each on CUDA), the groups side by side on threads of their own. Here a CPU backend whose
// groups are given: every grouping trains the same bits as one group (the devices in turn),
// groups that miss a device or hold one twice are refused, and a device's failure in a group's
// thread reaches the caller as the serial setup's would.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/sgd_epochs.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

// A CPU backend that reports `groups` as its setup groups.
class GroupedBackend final : public Backend {
 public:
  GroupedBackend(const BackendOptions& options, std::vector<std::vector<int>> groups)
      : inner_(make_cpu_backend(options)), groups_(std::move(groups)) {}
  std::string name() const override { return inner_->name(); }
  int num_devices() const override { return inner_->num_devices(); }
  Device& device(int index) override { return inner_->device(index); }
  HostMat alloc_host(std::int64_t rows, std::int64_t cols, HostPrecision precision,
                     const std::string& what) override {
    return inner_->alloc_host(rows, cols, precision, what);
  }
  void release_host(const HostMat& m) override { inner_->release_host(m); }
  void all_reduce_sum(const std::vector<float*>& buffers, std::int64_t n) override {
    inner_->all_reduce_sum(buffers, n);
  }
  void synchronize_all() override { inner_->synchronize_all(); }
  void barrier() override { inner_->barrier(); }
  std::vector<std::vector<int>> setup_groups() const override { return groups_; }

 private:
  std::unique_ptr<Backend> inner_;
  std::vector<std::vector<int>> groups_;
};

const Dataset& dataset() {
  static const Dataset d =
      test::random_dataset(900, 6, 12, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  return d;
}

ModelSpec spec(const std::string& model) {
  const Dataset& d = dataset();
  return test::model_spec(
      test::model_shape(model, 2).in_dim(d.feature_dim).hidden(16).heads(2).classes(d.num_classes));
}

test::SgdEpochs train(const Plan& plan, const std::string& model,
                      std::vector<std::vector<int>> groups) {
  GroupedBackend backend(test::backend_options(plan.partitions).threads(2), std::move(groups));
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 4;
  Schedule schedule(backend, dataset(), plan, spec(model), options);
  return test::sgd_epochs(schedule, spec(model), 6, 3);
}

TEST(SetupGroups, EveryGroupingTrainsTheSameBits) {
  for (const int chunks : {1, 3}) {
    const Plan plan = test::make_plan(dataset(), test::plan_options(3, chunks));
    for (const std::string model : {"gcn", "sage", "gat"}) {
      SCOPED_TRACE(cat(model, ", C = ", chunks));
      const test::SgdEpochs serial = train(plan, model, {{0, 1, 2}});
      EXPECT_TRUE(serial.moved);
      for (const std::vector<std::vector<int>>& groups :
           {std::vector<std::vector<int>>{{0}, {1}, {2}},
            std::vector<std::vector<int>>{{2, 0}, {1}}}) {
        const test::SgdEpochs grouped = train(plan, model, groups);
        EXPECT_EQ(grouped.losses, serial.losses);
        EXPECT_EQ(grouped.parameters, serial.parameters);
      }
    }
  }
}

// Each device in exactly one group: one left out, or set up twice (by two threads at once), is
// refused before any setup.
TEST(SetupGroups, GroupsHoldEveryDeviceOnce) {
  const Plan plan = test::make_plan(dataset(), test::plan_options(3, 1));
  const auto refusal = [&](std::vector<std::vector<int>> groups) -> std::string {
    try {
      train(plan, "gcn", std::move(groups));
    } catch (const std::exception& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal({{0}, {1}}).find("setup groups hold device 2 0 times"), std::string::npos)
      << refusal({{0}, {1}});
  EXPECT_NE(refusal({{0}, {0}, {2}}).find("setup groups hold device 0 2 times"), std::string::npos)
      << refusal({{0}, {0}, {2}});
  EXPECT_NE(refusal({{0, 1}, {3}}).find("setup groups name device 3 of 3"), std::string::npos)
      << refusal({{0, 1}, {3}});
}

// A budget too small for any device: each group's first device fails in its own thread, and
// the caller gets the first group's error, as the devices in turn give it.
TEST(SetupGroups, ADevicesFailureReachesTheCaller) {
  const Plan plan = test::make_plan(dataset(), test::plan_options(3, 1));
  const auto failure = [&](std::vector<std::vector<int>> groups) -> std::string {
    GroupedBackend backend(test::backend_options(3).memory_budget(4096), std::move(groups));
    try {
      Schedule schedule(backend, dataset(), plan, spec("gcn"), ScheduleOptions{});
    } catch (const OutOfDeviceMemory& e) {
      return e.what();
    }
    return "no failure";
  };
  const std::string serial = failure({{0, 1, 2}});
  EXPECT_NE(serial.find("out of memory"), std::string::npos) << serial;
  EXPECT_EQ(failure({{0}, {1}, {2}}), serial);
}

}  // namespace
}  // namespace sluice
