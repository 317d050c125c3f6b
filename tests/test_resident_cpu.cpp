// The schedule's paths for vertex data in device memory, run on the CPU backend with resident
// copies (CpuResidence::kResidentCopies): the rows of layers above 0 pulled from the owners'
// resident matrices, layer 1's T rows sent into the peers' slots range by range (one chunk a
// device), the next step's input rows queued in place, the remote feature rows copied on each
// device, and the evaluations between steps. They train and predict what the vertex data in host
// memory do, for every model, on one and several partitions of one and several chunks, in both
// p2p modes, with fp32 and bf16 vertex data, remote feature rows copied or pulled, aggregations
// kept or recomputed; the baseline mode keeps the vertex data in host memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

struct Trained {
  std::vector<double> losses;
  std::vector<float> parameters;
  std::vector<std::vector<std::int32_t>> predictions;  // an evaluation after each step
  std::int64_t resident_bytes = 0;                     // over the devices, after setup
  std::int64_t p2p_rows = 0;
};

// Schedule settings the resident paths depend on.
struct Variant {
  const char* name;
  CommMode comm;
  HostPrecision precision;
  RemoteFeatures remote_features;
  bool cache_intermediates;
};
const Variant kVariants[] = {
    {"p2p+reuse", CommMode::kP2pReuse, HostPrecision::kFp32, RemoteFeatures::kDeviceCopyWhereItFits,
     true},
    {"p2p", CommMode::kP2p, HostPrecision::kFp32, RemoteFeatures::kDeviceCopyWhereItFits, true},
    {"bf16 vertex data", CommMode::kP2pReuse, HostPrecision::kBf16,
     RemoteFeatures::kDeviceCopyWhereItFits, true},
    {"remote features pulled", CommMode::kP2pReuse, HostPrecision::kFp32, RemoteFeatures::kPulled,
     true},
    {"aggregations recomputed", CommMode::kP2p, HostPrecision::kFp32,
     RemoteFeatures::kDeviceCopyWhereItFits, false},
    // The vertex data stay in host memory: every device reads other partitions' rows.
    {"baseline", CommMode::kBaseline, HostPrecision::kFp32, RemoteFeatures::kDeviceCopyWhereItFits,
     true},
};

Trained train(const Dataset& d, const Plan& plan, const ModelSpec& spec, const Variant& variant,
              CpuResidence residence) {
  std::unique_ptr<Backend> backend =
      make_cpu_backend(test::backend_options(plan.partitions).cpu_residence(residence));
  ScheduleOptions options;
  options.dropout = 0.5f;
  options.seed = 5;
  options.vertex_data = VertexData::kDeviceWhereItFits;
  options.comm = variant.comm;
  options.host_precision = variant.precision;
  options.remote_features = variant.remote_features;
  options.cache_intermediates = variant.cache_intermediates;
  Schedule schedule(*backend, d, plan, spec, options);
  Trained out;
  for (int p = 0; p < plan.partitions; ++p) out.resident_bytes += backend->device(p).bytes_in_use();
  schedule.set_parameters(init_parameters(spec, 3));
  for (int step = 1; step <= 3; ++step) {
    out.losses.push_back(schedule.forward_backward(step - 1));
    schedule.adam_step(0.05f, 5e-4f, step);
    out.predictions.push_back(
        schedule.evaluate(step < 3 ? EvaluationsAhead::kMore : EvaluationsAhead::kNone));
  }
  out.parameters = schedule.parameters();
  for (int p = 0; p < plan.partitions; ++p) out.p2p_rows += backend->device(p).counters().p2p_rows;
  return out;
}

TEST(ResidentCpu, ResidentVertexDataTrainTheSameAsHostRows) {
  const Dataset d = test::random_dataset(900, 6, 12, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const Variant& variant : kVariants)
    for (const std::string model : {"gcn", "sage", "gat"})
      for (const int layers : {2, 3})
        for (const auto& [partitions, chunks] :
             {std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 3}}) {
          SCOPED_TRACE(std::string(variant.name) + ", " + model + " " + std::to_string(layers) +
                       " layers, " + std::to_string(partitions) + " x " + std::to_string(chunks));
          const Plan plan = test::make_plan(d, test::plan_options(partitions, chunks));
          const ModelSpec spec = test::model_spec(test::model_shape(model, layers)
                                                      .in_dim(d.feature_dim)
                                                      .hidden(8)
                                                      .heads(2)
                                                      .classes(d.num_classes));
          const Trained host = train(d, plan, spec, variant, CpuResidence::kHostOnly);
          const Trained resident = train(d, plan, spec, variant, CpuResidence::kResidentCopies);
          EXPECT_NE(host.parameters, init_parameters(spec, 3));  // the steps trained
          if (variant.comm == CommMode::kBaseline && partitions > 1)
            EXPECT_EQ(resident.resident_bytes, host.resident_bytes);
          else
            EXPECT_GT(resident.resident_bytes, host.resident_bytes) << "nothing was made resident";
          EXPECT_EQ(resident.losses, host.losses);
          EXPECT_EQ(resident.parameters, host.parameters);
          EXPECT_EQ(resident.predictions, host.predictions);
          if (partitions > 1 && variant.comm != CommMode::kBaseline) {
            EXPECT_GT(resident.p2p_rows, 0);
          }
        }
}

}  // namespace
}  // namespace sluice
