// GPU tests of the memory estimate's CUDA figures (train/layout/memory_estimate.hpp) against
// what the CUDA backend charges: after the schedule's setup without a budget each device's
// charged bytes are cuda_setup to the byte (every allocation in 256-byte granules, CSRs in the
// CUDA layout, the transposed-SpMM values); after a training epoch and an evaluation they exceed
// cuda_setup + cuda_scratch by cuSPARSE's SpMM workspace alone, which the estimate leaves to the
// budget's free eighth; and under --gpu-memory = total (or minimum) the run fits. Without a GPU
// every test skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "kernels/ops.hpp"
#include "preprocess/plan_builder.hpp"
#include "tests/support/random_graph.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

// cuSPARSE's SpMM workspace on these small chunks (measured 0.1-0.6 MB for 2-layer GCNs on
// products-sized chunks on an H200); the estimate does not count it.
constexpr std::int64_t kSpmmWorkspaceBound = std::int64_t(4) << 20;

struct Case {
  std::string model;
  int layers;
  int partitions;
  int chunks;
  CommMode comm;
  bool reload_inputs = false;
};

std::string case_name(const Case& c) {
  return cat(c.model, "_", c.layers, "layers_P", c.partitions, "xC", c.chunks, "_",
             c.comm == CommMode::kBaseline ? "baseline"
             : c.comm == CommMode::kP2p    ? "p2p"
                                           : "p2p_reuse",
             c.reload_inputs ? "_reload" : "");
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
  if (it == plans.end()) {
    PlanOptions options;
    options.partitions = P;
    options.chunks = C;
    options.partitioner = P == 1 ? "range" : "metis";
    options.seed = 3;
    it = plans
             .emplace(std::make_pair(P, C),
                      build_plan(dataset(), options, compute_fingerprint(dataset())))
             .first;
  }
  return it->second;
}

ModelShape shape_of(const Case& c) {
  ModelShape shape;
  shape.model = c.model;
  shape.layers = c.layers;
  shape.in_dim = dataset().feature_dim;
  shape.hidden = 10;
  shape.classes = dataset().num_classes;
  shape.heads = 3;
  shape.output_heads = 1;
  return shape;
}

ModelSpec model_of(const ModelShape& shape) {
  ModelConfig config;
  config.kind = parse_model_kind(shape.model);
  config.layers = shape.layers;
  config.in_dim = shape.in_dim;
  config.hidden = shape.hidden;
  config.classes = std::int32_t(shape.classes);
  config.heads = shape.heads;
  config.output_heads = shape.output_heads;
  return make_model(config);
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
  BackendOptions options;
  options.partitions = partitions;
  options.gpus = 1;
  options.memory_budget = budget;
  return make_cuda_backend(options);
}

ScheduleOptions schedule_options(const LayoutOptions& layout) {
  ScheduleOptions options;
  options.comm = layout.comm;
  options.overlap = layout.overlap;
  options.reload_inputs = layout.reload_inputs;
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
  const ModelSpec model = model_of(shape);
  LayoutOptions layout;
  layout.comm = c.comm;
  layout.reload_inputs = c.reload_inputs;
  std::vector<GpuMemoryEstimate> estimates;
  for (int p = 0; p < plan.partitions; ++p)
    estimates.push_back(estimate_gpu_memory(plan, p, shape, layout));

  // Without a budget: setup charges cuda_setup, the epoch adds the first-use scratch and the
  // SpMM workspace.
  {
    std::unique_ptr<Backend> backend = cuda_backend(plan.partitions, 0);
    Schedule schedule(*backend, dataset(), plan, model, schedule_options(layout));
    for (int p = 0; p < plan.partitions; ++p)
      EXPECT_EQ(backend->device(p).bytes_in_use(), estimates[std::size_t(p)].cuda_setup)
          << "partition " << p;
    run_epoch(schedule, model);
    for (int p = 0; p < plan.partitions; ++p) {
      const GpuMemoryEstimate& e = estimates[std::size_t(p)];
      const std::int64_t workspace =
          backend->device(p).bytes_in_use() - (e.cuda_setup + e.cuda_scratch);
      EXPECT_GE(workspace, 0) << "partition " << p;
      EXPECT_LE(workspace, kSpmmWorkspaceBound) << "partition " << p;
      EXPECT_EQ(workspace % kCudaGranule, 0) << "partition " << p;
      std::printf("%s partition %d: setup %lld B, scratch %lld B, SpMM workspace %lld B\n",
                  case_name(c).c_str(), p, static_cast<long long>(e.cuda_setup),
                  static_cast<long long>(e.cuda_scratch), static_cast<long long>(workspace));
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

INSTANTIATE_TEST_SUITE_P(Grid, CudaMemoryEstimate,
                         ::testing::Values(Case{"gcn", 2, 1, 1, CommMode::kP2pReuse},
                                           Case{"gcn", 2, 2, 3, CommMode::kP2pReuse},
                                           Case{"gcn", 1, 1, 3, CommMode::kP2pReuse},
                                           Case{"gcn", 3, 2, 2, CommMode::kBaseline},
                                           Case{"sage", 2, 2, 3, CommMode::kP2p},
                                           Case{"sage", 3, 1, 4, CommMode::kP2pReuse},
                                           Case{"gat", 2, 1, 3, CommMode::kP2pReuse},
                                           Case{"gat", 2, 2, 3, CommMode::kP2pReuse, true},
                                           Case{"gat", 3, 2, 2, CommMode::kP2p}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return case_name(info.param);
                         });

}  // namespace
}  // namespace sluice
