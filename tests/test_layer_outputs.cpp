// Training that keeps layer outputs for the backward pass (ScheduleOptions::layer_outputs): a
// GCN or SAGE ReLU layer whose outputs the next layer transforms keeps H = dropout(relu(Z)) of
// its partition's rows on each device, the backward pass reads it instead of computing Z again,
// and every loss and weight is the same bits as with the outputs recomputed. (A layer whose
// outputs go to a device-resident H^{l+1} reads them there; the CPU backend keeps no resident
// copies, so CudaLayerOutputs in tests/gpu/test_cuda_train.cpp checks that path.)
#include <gtest/gtest.h>

#include <memory>
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

struct Training {
  std::vector<double> losses;
  std::vector<float> parameters;
  std::vector<std::int64_t> bytes_in_use;  // per device, after setup
};

Training train_three_steps(const Dataset& d, const Plan& plan, const ModelSpec& spec,
                           LayerOutputs outputs, VertexData vertex_data,
                           std::int64_t memory_budget = 0) {
  std::unique_ptr<Backend> backend =
      make_cpu_backend(test::backend_options(plan.partitions).memory_budget(memory_budget));
  ScheduleOptions options;
  options.dropout = 0.5f;
  options.seed = 11;
  options.layer_outputs = outputs;
  options.vertex_data = vertex_data;
  Schedule schedule(*backend, d, plan, spec, options);
  Training out;
  for (int p = 0; p < plan.partitions; ++p)
    out.bytes_in_use.push_back(backend->device(p).bytes_in_use());
  schedule.set_parameters(init_parameters(spec, 3));
  for (int step = 1; step <= 3; ++step) {
    out.losses.push_back(schedule.forward_backward(step - 1));
    schedule.adam_step(0.05f, 5e-4f, step);
  }
  out.parameters = schedule.parameters();
  return out;
}

// GCN and SAGE, two and three layers, one partition of one chunk and two of three chunks, both
// --vertex-data settings: the same losses and weights bit for bit as recomputing everything
// with the vertex data in host memory, and each device holds its partition's rows of the kept
// outputs (hidden wide) beyond what the recomputing run holds.
TEST(LayerOutputs, KeptOutputsTrainTheSameBits) {
  const Dataset d = test::random_dataset(700, 5, 12, 5, 29, test::ReverseEdgesIntoSources::kAdd);
  const std::int64_t hidden = 16;
  for (const std::string model : {"gcn", "sage"})
    for (const int layers : {2, 3})
      for (const auto& [partitions, chunks] : {std::pair{1, 1}, std::pair{2, 3}}) {
        SCOPED_TRACE(model + " " + std::to_string(layers) + " layers, " +
                     std::to_string(partitions) + " x " + std::to_string(chunks));
        const Plan plan = test::make_plan(d, test::plan_options(partitions, chunks));
        const ModelSpec spec = test::model_spec(test::model_shape(model, layers)
                                                    .in_dim(d.feature_dim)
                                                    .hidden(hidden)
                                                    .classes(d.num_classes));
        const Training reference =
            train_three_steps(d, plan, spec, LayerOutputs::kRecomputed, VertexData::kHost);
        EXPECT_NE(reference.parameters, init_parameters(spec, 3));  // the steps trained
        for (const VertexData vertex_data : {VertexData::kHost, VertexData::kDeviceWhereItFits}) {
          SCOPED_TRACE(vertex_data == VertexData::kHost ? "vertex data in host memory"
                                                        : "vertex data on the devices");
          const Training recomputed =
              train_three_steps(d, plan, spec, LayerOutputs::kRecomputed, vertex_data);
          const Training kept =
              train_three_steps(d, plan, spec, LayerOutputs::kDeviceWhereItFits, vertex_data);
          EXPECT_EQ(recomputed.losses, reference.losses);
          EXPECT_EQ(recomputed.parameters, reference.parameters);
          EXPECT_EQ(kept.losses, reference.losses);
          EXPECT_EQ(kept.parameters, reference.parameters);
          // One layer keeps its outputs: the one below the narrowing last layer.
          for (int p = 0; p < partitions; ++p) {
            const std::int64_t rows =
                plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
            EXPECT_EQ(kept.bytes_in_use[std::size_t(p)] - recomputed.bytes_in_use[std::size_t(p)],
                      rows * hidden * std::int64_t(sizeof(float)))
                << "device " << p;
          }
        }
      }
}

// Kept only where they fit: under a budget without room for them, no device keeps them, and
// training gives the same bits. GAT (ELU, attention recomputed with its outputs) keeps none.
TEST(LayerOutputs, KeptOnlyWhereTheyFitAndNeverForGat) {
  const Dataset d = test::random_dataset(700, 5, 12, 5, 29, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(2, 2));
  const ModelSpec gcn = test::model_spec(
      test::model_shape("gcn", 2).in_dim(d.feature_dim).hidden(16).classes(d.num_classes));
  const Training recomputed =
      train_three_steps(d, plan, gcn, LayerOutputs::kRecomputed, VertexData::kDeviceWhereItFits);
  const std::int64_t budget = std::max(recomputed.bytes_in_use[0], recomputed.bytes_in_use[1]) + 64;
  const Training capped = train_three_steps(d, plan, gcn, LayerOutputs::kDeviceWhereItFits,
                                            VertexData::kDeviceWhereItFits, budget);
  EXPECT_EQ(capped.bytes_in_use, recomputed.bytes_in_use);
  EXPECT_EQ(capped.losses, recomputed.losses);
  EXPECT_EQ(capped.parameters, recomputed.parameters);

  const ModelSpec gat = test::model_spec(
      test::model_shape("gat", 2).in_dim(d.feature_dim).hidden(8).classes(d.num_classes).heads(2));
  EXPECT_EQ(
      train_three_steps(d, plan, gat, LayerOutputs::kDeviceWhereItFits,
                        VertexData::kDeviceWhereItFits)
          .bytes_in_use,
      train_three_steps(d, plan, gat, LayerOutputs::kRecomputed, VertexData::kDeviceWhereItFits)
          .bytes_in_use);
}

}  // namespace
}  // namespace sluice
