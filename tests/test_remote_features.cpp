// Devices that keep their own copy of the feature rows layer 0 reads from other partitions
// (ScheduleOptions::remote_features): each pass that loads layer 0's inputs scatters the copy,
// with the owners' dropout, where it pulled the rows from their owners before. Every loss,
// weight and prediction is the same bits as pulling; the peer link moves exactly layer 0's
// pulled rows fewer; a device without room pulls; GAT (which exchanges transformed rows) and one
// partition copy nothing.
#include <gtest/gtest.h>

#include <algorithm>
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
  std::vector<std::int32_t> predictions;
  std::int64_t p2p_bytes = 0;
  std::vector<std::int64_t> bytes_in_use;  // per device, after setup
};

struct Setting {
  CommMode comm = CommMode::kP2pReuse;
  HostPrecision precision = HostPrecision::kFp32;
  std::int64_t memory_budget = 0;
};

// Three Adam steps with dropout, then an evaluation (no evaluation cache: it pulls too).
Training train_three_steps(const Dataset& d, const Plan& plan, const ModelSpec& spec,
                           RemoteFeatures remote, const Setting& setting) {
  std::unique_ptr<Backend> backend =
      make_cpu_backend(test::backend_options(plan.partitions).memory_budget(setting.memory_budget));
  ScheduleOptions options;
  options.comm = setting.comm;
  options.host_precision = setting.precision;
  options.dropout = 0.5f;
  options.seed = 7;
  options.evaluation_cache = EvaluationCache::kNone;
  options.remote_features = remote;
  Schedule schedule(*backend, d, plan, spec, options);
  Training out;
  for (int p = 0; p < plan.partitions; ++p)
    out.bytes_in_use.push_back(backend->device(p).bytes_in_use());
  schedule.set_parameters(init_parameters(spec, 5));
  for (int step = 1; step <= 3; ++step) {
    out.losses.push_back(schedule.forward_backward(step - 1));
    schedule.adam_step(0.05f, 5e-4f, step);
  }
  out.predictions = schedule.evaluate();
  out.parameters = schedule.parameters();
  out.p2p_bytes = schedule.counters().p2p_bytes;
  return out;
}

// Rows partition p pulls in one pass over its chunks: the remote rows not kept from the batch
// before (p2p+reuse), or every remote row (p2p).
std::int64_t pulled_rows(const Plan& plan, int p, CommMode comm) {
  std::int64_t rows = 0;
  for (int c = 0; c < plan.chunks; ++c) {
    const ChunkPlan& ch = plan.chunk(c, p);
    rows += comm == CommMode::kP2p
                ? std::int64_t(ch.remote_vertices.size())
                : std::int64_t(std::count(ch.remote_pull.begin(), ch.remote_pull.end(), 1));
  }
  return rows;
}

void expect_same_bits(const Training& a, const Training& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_EQ(a.predictions, b.predictions);
}

class RemoteFeaturesTest : public ::testing::Test {
 protected:
  const Dataset d_ = test::random_dataset(600, 5, 12, 5, 31, test::ReverseEdgesIntoSources::kAdd);
  ModelSpec spec(const std::string& model, int layers) const {
    return test::model_spec(test::model_shape(model, layers)
                                .in_dim(d_.feature_dim)
                                .hidden(16)
                                .classes(d_.num_classes)
                                .heads(2));
  }
};

// GCN and SAGE, two and three layers, 2 x 1, 2 x 3 and 3 x 2 plans, p2p+reuse and p2p, fp32 and
// bf16 vertex data: the same bits as pulling. The copy holds each pulled row once with its key,
// and the peer link moves layer 0's pulls fewer: one pass per step (forward 0; the backward pass
// reads the kept aggregation) and the evaluation's.
TEST_F(RemoteFeaturesTest, CopiesTrainAndPredictTheSameBitsAsPulls) {
  for (const std::string model : {"gcn", "sage"})
    for (const int layers : {2, 3})
      for (const auto& [partitions, chunks] : {std::pair{2, 1}, std::pair{2, 3}, std::pair{3, 2}})
        for (const CommMode comm : {CommMode::kP2pReuse, CommMode::kP2p})
          for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16}) {
            SCOPED_TRACE(model + " " + std::to_string(layers) + " layers, " +
                         std::to_string(partitions) + " x " + std::to_string(chunks) + " " +
                         comm_mode_name(comm) + " " + host_precision_name(precision));
            const Plan plan = test::make_plan(d_, test::plan_options(partitions, chunks));
            Setting setting;
            setting.comm = comm;
            setting.precision = precision;
            const Training pulled =
                train_three_steps(d_, plan, spec(model, layers), RemoteFeatures::kPulled, setting);
            const Training copied = train_three_steps(
                d_, plan, spec(model, layers), RemoteFeatures::kDeviceCopyWhereItFits, setting);
            expect_same_bits(copied, pulled);
            std::int64_t rows = 0;
            for (int p = 0; p < partitions; ++p) {
              const std::int64_t mine = pulled_rows(plan, p, comm);
              ASSERT_GT(mine, 0) << "partition " << p << " pulls nothing";
              rows += mine;
              EXPECT_EQ(copied.bytes_in_use[std::size_t(p)] - pulled.bytes_in_use[std::size_t(p)],
                        mine * (d_.feature_dim * std::int64_t(sizeof(float)) +
                                std::int64_t(sizeof(vertex_t))))
                  << "device " << p;
            }
            const std::int64_t passes = 3 + 1;  // forward 0 of each step, the evaluation
            EXPECT_EQ(pulled.p2p_bytes - copied.p2p_bytes,
                      passes * rows * d_.feature_dim * std::int64_t(sizeof(float)));
          }
}

// Each device copies where its copy fits: under a budget one device's copy does not fit, that
// device pulls, the others copy, and training gives the same bits.
TEST_F(RemoteFeaturesTest, EachDeviceCopiesWhereItFits) {
  const Plan plan = test::make_plan(d_, test::plan_options(2, 2));
  const ModelSpec gcn = spec("gcn", 2);
  const Training pulled = train_three_steps(d_, plan, gcn, RemoteFeatures::kPulled, Setting{});
  std::int64_t need[2];
  for (int p = 0; p < 2; ++p)
    need[p] = pulled.bytes_in_use[std::size_t(p)] + pulled_rows(plan, p, CommMode::kP2pReuse) *
                                                        d_.feature_dim *
                                                        std::int64_t(sizeof(float));
  ASSERT_NE(need[0], need[1]);
  const int refused = need[0] > need[1] ? 0 : 1, copies = 1 - refused;
  Setting capped;
  capped.memory_budget = need[refused] - 4;
  const Training got =
      train_three_steps(d_, plan, gcn, RemoteFeatures::kDeviceCopyWhereItFits, capped);
  expect_same_bits(got, pulled);
  EXPECT_EQ(got.bytes_in_use[std::size_t(refused)], pulled.bytes_in_use[std::size_t(refused)]);
  EXPECT_GE(got.bytes_in_use[std::size_t(copies)], need[copies]);
  EXPECT_LT(got.p2p_bytes, pulled.p2p_bytes);
}

// GAT exchanges transformed rows (no feature row crosses), and one partition pulls nothing:
// neither keeps a copy.
TEST_F(RemoteFeaturesTest, NoCopyForGatOrOnePartition) {
  const Plan two = test::make_plan(d_, test::plan_options(2, 2));
  const Training gat_pulled =
      train_three_steps(d_, two, spec("gat", 2), RemoteFeatures::kPulled, Setting{});
  const Training gat_auto =
      train_three_steps(d_, two, spec("gat", 2), RemoteFeatures::kDeviceCopyWhereItFits, Setting{});
  EXPECT_EQ(gat_auto.bytes_in_use, gat_pulled.bytes_in_use);
  EXPECT_EQ(gat_auto.p2p_bytes, gat_pulled.p2p_bytes);
  expect_same_bits(gat_auto, gat_pulled);
  const Plan one = test::make_plan(d_, test::plan_options(1, 3));
  EXPECT_EQ(
      train_three_steps(d_, one, spec("gcn", 2), RemoteFeatures::kDeviceCopyWhereItFits, Setting{})
          .bytes_in_use,
      train_three_steps(d_, one, spec("gcn", 2), RemoteFeatures::kPulled, Setting{}).bytes_in_use);
}

}  // namespace
}  // namespace sluice
