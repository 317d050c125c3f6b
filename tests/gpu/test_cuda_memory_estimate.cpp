// GPU tests of the memory estimate's CUDA figures (train/layout/memory_estimate.hpp) against
// what the CUDA backend charges: after the schedule's setup without a budget each device's
// charged bytes are cuda_setup to the byte (every allocation in 256-byte granules, CSRs in the
// CUDA layout); after a training epoch and an evaluation they are cuda_setup + cuda_scratch to
// the byte; and under --gpu-memory = total (or minimum) the run fits. Without a GPU every test
// skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "kernels/cuda_memory_rules.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/layout/vertex_data.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

enum class InputRows { kKeep, kReload };  // LayoutOptions::reload_inputs

struct Case {
  std::string model;
  int layers;
  int partitions;
  int chunks;
  CommMode comm;
  InputRows input_rows = InputRows::kKeep;
  LayerZeroOrder layer_zero_order = LayerZeroOrder::kAuto;  // GCN, SAGE
};

std::string case_name(const Case& c) {
  return cat(c.model, "_", c.layers, "layers_P", c.partitions, "xC", c.chunks, "_",
             c.comm == CommMode::kBaseline ? "baseline"
             : c.comm == CommMode::kP2p    ? "p2p"
                                           : "p2p_reuse",
             c.input_rows == InputRows::kReload ? "_reload" : "",
             c.layer_zero_order == LayerZeroOrder::kTransformFirst ? "_layer_zero_transform" : "");
}

// GoogleTest prints a case by its name (failure messages, --gtest_list_tests).
void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name(c);
}

const Dataset& dataset() {
  // 37 features, hidden 10, 3 classes: GCN's last layer narrows and transforms first.
  static const Dataset d =
      test::random_dataset(2000, 6, 37, 3, 21, test::ReverseEdgesIntoSources::kAdd);
  return d;
}

const Plan& plan_of(int P, int C) {
  static std::map<std::pair<int, int>, Plan> plans;
  auto it = plans.find({P, C});
  if (it == plans.end())
    it = plans
             .emplace(std::make_pair(P, C),
                      test::make_plan(dataset(), test::plan_options(P, C).seed(3)))
             .first;
  return it->second;
}

ModelShape shape_of(const Case& c) {
  return test::model_shape(c.model, c.layers)
      .in_dim(dataset().feature_dim)
      .hidden(10)
      .classes(dataset().num_classes)
      .heads(3)
      .output_heads(1)
      .layer_zero_order(c.layer_zero_order);
}

class CudaMemoryEstimate : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cuda_backend_available())
      GTEST_SKIP() << "no CUDA GPU on this machine: the CUDA backend tests run on the GPU "
                      "machine (scripts/device-test.sh)";
  }
};

std::unique_ptr<Backend> cuda_backend(int partitions, std::int64_t budget) {
  return make_cuda_backend(test::backend_options(partitions).gpus(1).memory_budget(budget));
}

// The schedule options of a layout, with every vertex matrix in host memory unless asked.
ScheduleOptions schedule_options(const LayoutOptions& layout,
                                 VertexData vertex_data = VertexData::kHost) {
  ScheduleOptions options;
  options.comm = layout.comm;
  options.overlap = layout.overlap;
  options.reload_inputs = layout.reload_inputs;
  options.vertex_data = vertex_data;
  options.evaluation_cache = EvaluationCache::kNone;  // optional buffers beyond the estimate
  options.remote_features = RemoteFeatures::kPulled;  // the same
  options.layer_outputs = LayerOutputs::kRecomputed;
  return options;
}

// One training pass and one evaluation: every first-use scratch buffer gets its final size.
void run_epoch(Schedule& schedule, const ModelSpec& model) {
  schedule.set_parameters(init_parameters(model, 1));
  schedule.forward_backward(0);
  schedule.sgd_step(0.01f, 0.f);
  schedule.evaluate();
}

TEST_P(CudaMemoryEstimate, ChargedBytesAreTheEstimate) {
  const Case& c = GetParam();
  const Plan& plan = plan_of(c.partitions, c.chunks);
  const ModelShape shape = shape_of(c);
  const ModelSpec model = test::model_spec(shape);
  LayoutOptions layout;
  layout.comm = c.comm;
  layout.reload_inputs = c.input_rows == InputRows::kReload;
  std::vector<GpuMemoryEstimate> estimates;
  for (int p = 0; p < plan.partitions; ++p)
    estimates.push_back(
        estimate_gpu_memory(plan, loss_row_flags(dataset(), plan.old_to_new), p, shape, layout));

  // Without a budget: setup charges cuda_setup, the epoch adds the first-use scratch.
  {
    std::unique_ptr<Backend> backend = cuda_backend(plan.partitions, 0);
    Schedule schedule(*backend, dataset(), plan, model, schedule_options(layout));
    for (int p = 0; p < plan.partitions; ++p)
      EXPECT_EQ(backend->device(p).bytes_in_use(), estimates[std::size_t(p)].cuda_setup)
          << "partition " << p;
    run_epoch(schedule, model);
    for (int p = 0; p < plan.partitions; ++p) {
      const GpuMemoryEstimate& e = estimates[std::size_t(p)];
      EXPECT_EQ(backend->device(p).bytes_in_use(), e.cuda_setup + e.cuda_scratch)
          << "partition " << p;
      std::printf("%s partition %d: setup %lld B, scratch %lld B\n", case_name(c).c_str(), p,
                  static_cast<long long>(e.cuda_setup), static_cast<long long>(e.cuda_scratch));
    }
  }
  // Devices without a budget hold every vertex matrix beside what the estimate counts, each
  // charged in granules: one device all rows, several (p2p modes) their own partition's rows.
  if (plan.partitions == 1 || c.comm != CommMode::kBaseline) {
    std::unique_ptr<Backend> backend = cuda_backend(plan.partitions, 0);
    const ScheduleOptions options = schedule_options(layout, VertexData::kDeviceWhereItFits);
    Schedule schedule(*backend, dataset(), plan, model, options);
    for (int p = 0; p < plan.partitions; ++p) {
      const std::int64_t rows =
          plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
      std::int64_t vertex_data = 0;
      for (const HostMatrixShape& m :
           host_matrix_shapes(model, options, dataset().num_nodes, plan.chunks))
        vertex_data += cuda::rounded(rows * m.cols * element_bytes(m.precision));
      EXPECT_EQ(backend->device(p).bytes_in_use(),
                estimates[std::size_t(p)].cuda_setup + vertex_data)
          << "partition " << p;
    }
  }
  // Under the budgets the estimate names the run fits (constants beyond them go to host memory,
  // overlap buffers only where they fit).
  std::int64_t total = 0, minimum = 0;
  for (const GpuMemoryEstimate& e : estimates) {
    total = std::max(total, e.total);
    minimum = std::max(minimum, e.minimum);
  }
  for (const std::int64_t budget : {total, minimum}) {
    SCOPED_TRACE(cat("budget ", budget));
    std::unique_ptr<Backend> backend = cuda_backend(plan.partitions, budget);
    EXPECT_NO_THROW({
      Schedule schedule(*backend, dataset(), plan, model, schedule_options(layout));
      run_epoch(schedule, model);
    });
  }
}

// The placement forecast_link() (train/layout/vertex_data.hpp) models is the CUDA backend's: under
// budgets from no room beside the setup to room for every vertex matrix, the device holds,
// beside its setup, exactly the matrices the forecast names, in their granules
// (VertexData::kDeviceWhereItFits; the schedule as configured, as the forecast with
// IntermediatesChoice::kAsGiven).
TEST(CudaLinkForecast, DeviceHoldsTheMatricesTheForecastPlaces) {
  if (!cuda_backend_available())
    GTEST_SKIP() << "no CUDA GPU on this machine: the CUDA backend tests run on the GPU machine "
                    "(scripts/device-test.sh)";
  for (const Case& c :
       {Case{"gcn", 2, 1, 3, CommMode::kP2pReuse}, Case{"sage", 2, 1, 3, CommMode::kP2pReuse},
        Case{"gat", 2, 1, 3, CommMode::kP2pReuse}})
    for (const bool overlap : {true, false}) {
      SCOPED_TRACE(cat(case_name(c), overlap ? ", overlap buffers" : ", no overlap buffers"));
      const Plan& plan = plan_of(c.partitions, c.chunks);
      const ModelShape shape = shape_of(c);
      const ModelSpec model = test::model_spec(shape);
      LayoutOptions layout;
      layout.overlap = overlap;
      const ScheduleOptions options = schedule_options(layout, VertexData::kDeviceWhereItFits);
      const std::vector<PartitionProfile> profiles =
          plan_profiles(plan, loss_row_flags(dataset(), plan.old_to_new), layout.comm);
      const ModelLayers layers = model_layers(shape);
      const GpuMemoryEstimate e =
          estimate_layout_memory(partition_layout(profiles[0], layers, layout));
      const std::vector<HostMatrixShape> matrices =
          host_matrix_shapes(model, options, dataset().num_nodes, plan.chunks);
      std::int64_t all = 0;
      for (const HostMatrixShape& m : matrices) all += cuda::rounded(m.bytes());
      std::set<std::string> seen;
      for (std::int64_t room = 0; room <= all + e.cuda_scratch; room += all / 8 + 1) {
        std::int64_t budget = e.cuda_setup + room;
        budget += budget / 7;
        while (budget - budget / cuda::kBudgetHeadroomDivisor < e.cuda_setup + room) ++budget;
        SCOPED_TRACE(cat("budget ", budget));
        const LinkForecast forecast = forecast_link(profiles, layers, layout, HostDataOptions{},
                                                    IntermediatesChoice::kAsGiven, budget);
        seen.insert(forecast.resident);
        // There the trainer gives up the overlap buffers (prefer_residency()), as the forecast
        // does; the schedule alone keeps them.
        if (overlap && forecast.resident == "every matrix" && room < all + e.cuda_scratch) continue;
        std::int64_t expected = 0;
        for (const HostMatrixShape& m : matrices)
          if (forecast.resident == "every matrix" ||
              (", " + forecast.resident + ",").find(", " + m.name + ",") != std::string::npos)
            expected += cuda::rounded(m.bytes());
        std::unique_ptr<Backend> backend = cuda_backend(1, budget);
        Schedule schedule(*backend, dataset(), plan, model, options);
        EXPECT_EQ(backend->device(0).bytes_in_use() - e.cuda_setup, expected) << forecast.resident;
      }
      EXPECT_GE(seen.size(), 3u);  // none, some, every matrix
    }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, CudaMemoryEstimate,
    ::testing::Values(
        Case{"gcn", 2, 1, 1, CommMode::kP2pReuse}, Case{"gcn", 2, 2, 3, CommMode::kP2pReuse},
        Case{"gcn", 1, 1, 3, CommMode::kP2pReuse}, Case{"gcn", 3, 2, 2, CommMode::kBaseline},
        Case{"sage", 2, 2, 3, CommMode::kP2p}, Case{"sage", 3, 1, 4, CommMode::kP2pReuse},
        Case{"gat", 2, 1, 3, CommMode::kP2pReuse},
        Case{"gat", 2, 2, 3, CommMode::kP2pReuse, InputRows::kReload},
        Case{"gat", 3, 2, 2, CommMode::kP2p},
        // GCN's and SAGE's layer 0 multiplying first (37 features into 10 columns).
        Case{"gcn", 2, 1, 3, CommMode::kP2pReuse, InputRows::kKeep,
             LayerZeroOrder::kTransformFirst},
        Case{"sage", 2, 2, 3, CommMode::kP2p, InputRows::kReload, LayerZeroOrder::kTransformFirst},
        Case{"gcn", 3, 2, 2, CommMode::kBaseline, InputRows::kKeep,
             LayerZeroOrder::kTransformFirst}),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

}  // namespace
}  // namespace sluice
