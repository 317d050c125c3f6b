// The fused pass's exchange between partitions on a plan of one chunk a partition
// (LossRowExchange): with kSendGradients each device sends its loss gradients into its peers'
// slots and each owner's transposed product walks its own vertices alone, over the owners'
// loss-row CSR (owners_loss_rows_csr(): a row per remote loss vertex, its entries into the
// partition). That CSR against the graph itself; a cut that does not mirror itself keeping
// kPushSums; and the training of both exchanges (the same sums, reassociated), GCN of two and
// three layers, on two and three partitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_memory_rules.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/sgd_epochs.hpp"
#include "train/layout/buffer_layout.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

const Dataset& symmetric() {
  static const Dataset d = test::symmetrized(
      test::random_dataset(1800, 6, 12, 5, 41, test::ReverseEdgesIntoSources::kAdd));
  return d;
}

// Each remote loss vertex's row holds its self entry, then an entry per edge of the graph from
// a vertex of the partition into it (in-edges of the loss vertex, duplicates and self loops
// aside), by the vertex's slot; the chunk's own rows are its loss rows' rows.
TEST(LossRowExchange, OwnersCsrHoldsEveryLossEntryIntoThePartition) {
  const Dataset& d = symmetric();
  for (const int P : {2, 3}) {
    SCOPED_TRACE(cat("P = ", P));
    const Plan plan = test::make_plan(d, test::plan_options(P, 1));
    const LossRowFlags loss = loss_row_flags(d, plan.old_to_new);
    ASSERT_TRUE(loss_cut_mirrors(plan, loss));
    for (int p = 0; p < P; ++p) {
      const ChunkPlan& chunk = plan.chunk(0, p);
      const std::int64_t rows = chunk.num_dst(), transition = plan.transition_rows[std::size_t(p)];
      const std::int64_t merged = transition + plan.remote_rows[std::size_t(p)];
      const CsrArrays owners = owners_loss_rows_csr(plan, p, loss);
      ASSERT_EQ(std::int64_t(owners.indptr.size()), merged + 1);
      std::vector<vertex_t> slot_vertex(std::size_t(merged), -1);  // the vertex in each slot
      for (std::int64_t r = 0; r < rows; ++r)
        slot_vertex[std::size_t(chunk.columns[std::size_t(chunk.indptr[std::size_t(r)])])] =
            chunk.dst_begin + vertex_t(r);
      for (std::size_t i = 0; i < chunk.remote_vertices.size(); ++i)
        slot_vertex[std::size_t(transition + chunk.remote_slots[i])] = chunk.remote_vertices[i];
      for (std::int64_t r = 0; r < transition; ++r) {
        const std::vector<vertex_t> got(owners.columns.begin() + owners.indptr[std::size_t(r)],
                                        owners.columns.begin() + owners.indptr[std::size_t(r) + 1]);
        std::vector<vertex_t> want;
        if (r < rows && loss[std::size_t(chunk.dst_begin + r)])
          want.assign(chunk.columns.begin() + chunk.indptr[std::size_t(r)],
                      chunk.columns.begin() + chunk.indptr[std::size_t(r) + 1]);
        EXPECT_EQ(got, want) << "row " << r;
      }
      // (loss vertex, partition vertex) per entry of the remote rows, and per edge of the graph.
      std::vector<std::pair<vertex_t, vertex_t>> got, want;
      for (std::int64_t s = transition; s < merged; ++s) {
        const edge_t begin = owners.indptr[std::size_t(s)], end = owners.indptr[std::size_t(s) + 1];
        if (begin == end) continue;
        EXPECT_EQ(owners.columns[std::size_t(begin)], vertex_t(s)) << "self entry of slot " << s;
        // The readers in the order of their rows (the sums' order, whichever threads built it).
        EXPECT_TRUE(
            std::is_sorted(owners.columns.begin() + begin + 1, owners.columns.begin() + end))
            << "slot " << s;
        for (edge_t e = begin + 1; e < end; ++e)
          got.emplace_back(slot_vertex[std::size_t(s)],
                           slot_vertex[std::size_t(owners.columns[std::size_t(e)])]);
      }
      const vertex_t own_begin = plan.partition_offsets[std::size_t(p)];
      const vertex_t own_end = plan.partition_offsets[std::size_t(p) + 1];
      for (vertex_t old = 0; old < d.num_nodes; ++old) {
        const vertex_t v = plan.old_to_new[std::size_t(old)];
        if (!loss[std::size_t(v)] || (v >= own_begin && v < own_end)) continue;
        for (edge_t e = d.indptr[std::size_t(old)]; e < d.indptr[std::size_t(old) + 1]; ++e) {
          const vertex_t u = plan.old_to_new[std::size_t(d.indices[std::size_t(e)])];
          if (u >= own_begin && u < own_end) want.emplace_back(v, u);
        }
      }
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      EXPECT_FALSE(want.empty()) << "partition " << p << ": no loss row reads its vertices";
      EXPECT_EQ(got, want) << "partition " << p;
    }
  }
}

// The profile counts the owners' CSR without building it (owners_loss_csr_shape()): the same
// entries, long rows and long columns (more entries than cuda::long_degree_for(nnz)) as the
// built CSR, on the graph above and on one with hubs whose rows and columns are long.
TEST(LossRowExchange, OwnersCsrShapeCountsTheBuiltCsr) {
  static const Dataset hubs = test::symmetrized(test::with_dense_start(
      test::random_dataset(1800, 6, 12, 5, 43, test::ReverseEdgesIntoSources::kAdd), 16, 600));
  std::int64_t long_rows = 0, long_columns = 0;
  for (const Dataset* d : {&symmetric(), &hubs})
    for (const int P : {2, 3}) {
      SCOPED_TRACE(cat(d == &hubs ? "hubs" : "random graph", ", P = ", P));
      const Plan plan = test::make_plan(*d, test::plan_options(P, 1));
      const LossRowFlags loss = loss_row_flags(*d, plan.old_to_new);
      for (int p = 0; p < P; ++p) {
        const CsrArrays owners = owners_loss_rows_csr(plan, p, loss);
        const std::int64_t rows = std::int64_t(owners.indptr.size()) - 1;
        const std::int64_t nnz = std::int64_t(owners.columns.size());
        const std::int64_t threshold = cuda::long_degree_for(nnz);
        CsrShape want;
        want.rows = want.cols = rows;
        want.nnz = nnz;
        std::vector<std::int64_t> count(std::size_t(rows), 0);
        for (std::int64_t r = 0; r < rows; ++r)
          want.long_rows +=
              owners.indptr[std::size_t(r) + 1] - owners.indptr[std::size_t(r)] > threshold;
        for (const vertex_t c : owners.columns) ++count[std::size_t(c)];
        for (const std::int64_t n : count) want.long_columns += n > threshold;
        const CsrShape got = owners_loss_csr_shape(plan, p, loss);
        EXPECT_EQ(got.rows, want.rows) << "partition " << p;
        EXPECT_EQ(got.cols, want.cols) << "partition " << p;
        EXPECT_EQ(got.nnz, want.nnz) << "partition " << p;
        EXPECT_EQ(got.long_rows, want.long_rows) << "partition " << p;
        EXPECT_EQ(got.long_columns, want.long_columns) << "partition " << p;
        if (d == &hubs) {
          long_rows += want.long_rows;
          long_columns += want.long_columns;
        }
      }
    }
  EXPECT_GT(long_rows, 0) << "the hubs' graph has no long rows to count";
  EXPECT_GT(long_columns, 0) << "the hubs' graph has no long columns to count";
}

struct Trained {
  test::SgdEpochs run;
  LossRowExchange exchange = LossRowExchange::kPushSums;
};

Trained train(const Dataset& d, const Plan& plan, int layers, LossRowExchange exchange) {
  const ModelSpec spec = test::model_spec(
      test::model_shape("gcn", layers).in_dim(d.feature_dim).hidden(16).classes(d.num_classes));
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 5;
  options.loss_row_exchange = exchange;
  Schedule schedule(*backend, d, plan, spec, options);
  return {test::sgd_epochs(schedule, spec, 8, 3), schedule.loss_row_exchange()};
}

void expect_same_training(const test::SgdEpochs& a, const test::SgdEpochs& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t e = 0; e < a.losses.size(); ++e)
    EXPECT_NEAR(a.losses[e], b.losses[e], 1e-6 * std::abs(b.losses[e])) << "epoch " << e;
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    worst = std::max(worst, double(std::abs(a.parameters[i] - b.parameters[i])) /
                                std::max(1.0, double(std::abs(b.parameters[i]))));
  EXPECT_LT(worst, 1e-5);
}

// Sent gradients train as pushed sums do, and as one partition does; the run reports the
// exchange it took.
TEST(LossRowExchange, SentGradientsTrainAsPushedSums) {
  const Dataset& d = symmetric();
  for (const int layers : {2, 3}) {
    const Trained alone = train(d, test::make_plan(d, test::plan_options(1, 1)), layers,
                                LossRowExchange::kSendGradients);
    EXPECT_EQ(alone.exchange, LossRowExchange::kPushSums) << "one partition exchanges nothing";
    for (const int P : {2, 3}) {
      SCOPED_TRACE(cat(layers, " layers, P = ", P));
      const Plan plan = test::make_plan(d, test::plan_options(P, 1));
      const Trained sent = train(d, plan, layers, LossRowExchange::kSendGradients);
      const Trained pushed = train(d, plan, layers, LossRowExchange::kPushSums);
      EXPECT_EQ(sent.exchange, LossRowExchange::kSendGradients);
      EXPECT_EQ(pushed.exchange, LossRowExchange::kPushSums);
      EXPECT_TRUE(sent.run.moved);
      expect_same_training(sent.run, pushed.run);
      expect_same_training(sent.run, alone.run);
    }
  }
}

// A cut whose entries do not all have their mirror (a directed graph), or a plan of several
// chunks a partition, keeps pushing the sums: no owners' loss-row CSR in its profile.
TEST(LossRowExchange, OtherCutsAndPlansPushTheSums) {
  const Dataset directed =
      test::random_dataset(1800, 6, 12, 5, 41, test::ReverseEdgesIntoSources::kSkip);
  const Plan one_chunk = test::make_plan(directed, test::plan_options(2, 1));
  const LossRowFlags loss = loss_row_flags(directed, one_chunk.old_to_new);
  EXPECT_FALSE(loss_cut_mirrors(one_chunk, loss));
  EXPECT_TRUE(partition_profile(one_chunk, 0, CommMode::kP2pReuse, loss).owners_loss_csr.empty());
  EXPECT_EQ(train(directed, one_chunk, 2, LossRowExchange::kSendGradients).exchange,
            LossRowExchange::kPushSums);
  const Dataset& d = symmetric();
  const Plan chunks = test::make_plan(d, test::plan_options(2, 3));
  EXPECT_FALSE(loss_cut_mirrors(chunks, loss_row_flags(d, chunks.old_to_new)));
  EXPECT_EQ(train(d, chunks, 2, LossRowExchange::kSendGradients).exchange,
            LossRowExchange::kPushSums);
}

}  // namespace
}  // namespace sluice
