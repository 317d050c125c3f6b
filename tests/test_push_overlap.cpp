// The transposed products of a backward batch that pushes gradient rows to their owners: in one
// launch, or the remote region's rows first (ScheduleOptions::remote_first_push_bytes = 0; the
// default does so for batches that push at least 32 MiB) so that the pushes go on the peer lane
// beside the rest of the product. Every row gets the same sum either way: the same training
// (SGD steps between the epochs, so that the gradients count), bit for bit, for GCN (input
// gradients stored on one chunk, added on three; a 3-layer GCN's aggregate-first middle layer)
// and GraphSAGE, on two and three partitions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/sgd_epochs.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

struct Trained {
  std::vector<double> losses;
  std::vector<float> parameters;
  std::int64_t p2p_rows = 0;
  bool moved = false;  // the SGD steps changed the parameters
};

Trained train(const Dataset& d, const Plan& plan, const std::string& model, int layers,
              std::int64_t remote_first_push_bytes) {
  const ModelSpec spec = test::model_spec(
      test::model_shape(model, layers).in_dim(d.feature_dim).hidden(16).classes(d.num_classes));
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 11;
  options.remote_first_push_bytes = remote_first_push_bytes;
  options.loss_row_exchange = LossRowExchange::kPushSums;  // the fused pass pushes too
  Schedule schedule(*backend, d, plan, spec, options);
  const test::SgdEpochs run = test::sgd_epochs(schedule, spec, 4, 3);
  Trained out{run.losses, run.parameters, 0, run.moved};
  for (int p = 0; p < plan.partitions; ++p) out.p2p_rows += backend->device(p).counters().p2p_rows;
  return out;
}

TEST(PushOverlap, RemoteRowsFirstTrainTheSame) {
  const Dataset d = test::random_dataset(2400, 8, 12, 5, 31, test::ReverseEdgesIntoSources::kAdd);
  for (const int partitions : {2, 3})
    for (const int chunks : {1, 3}) {
      const Plan plan = test::make_plan(d, test::plan_options(partitions, chunks));
      for (const auto& [model, layers] :
           {std::pair{std::string("gcn"), 2}, {std::string("gcn"), 3}, {std::string("sage"), 2}}) {
        SCOPED_TRACE(cat(model, " ", layers, " layers, P = ", partitions, ", C = ", chunks));
        const Trained whole = train(d, plan, model, layers, std::int64_t(1) << 40);
        const Trained split = train(d, plan, model, layers, 0);
        EXPECT_GT(whole.p2p_rows, 0) << "no rows went between the partitions";
        EXPECT_TRUE(whole.moved);
        EXPECT_EQ(split.p2p_rows, whole.p2p_rows);
        EXPECT_EQ(split.losses, whole.losses);
        EXPECT_EQ(split.parameters, whole.parameters);
      }
    }
}

}  // namespace
}  // namespace sluice
