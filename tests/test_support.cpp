// The test builders of tests/support/ give what their comments draw and promise: exact CSRs of
// the named graphs, valid random graphs, and the documented defaults of the plan options,
// training configurations, model shapes and backend options.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/plans.hpp"

namespace sluice {
namespace {

using Indptr = std::vector<edge_t>;
using Indices = std::vector<vertex_t>;

TEST(SupportGraphs, EdgesGoToTheirDestinationsRowInEdgeOrder) {
  const Dataset d = test::graph_from_edges(4, {{3, 1}, {0, 1}, {2, 0}, {1, 1}, {0, 3}});
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(d.indptr, (Indptr{0, 1, 4, 4, 5}));
  EXPECT_EQ(d.indices, (Indices{2, 3, 0, 1, 0}));
}

TEST(SupportGraphs, PathAndStar) {
  const Dataset path = test::path_graph(4);  // 0 - 1 - 2 - 3
  EXPECT_EQ(path.indptr, (Indptr{0, 1, 3, 5, 6}));
  EXPECT_EQ(path.indices, (Indices{1, 0, 2, 1, 3, 2}));
  const Dataset star = test::star_graph(3);  // 0 in the middle of 1, 2, 3
  EXPECT_EQ(star.num_nodes, 4);
  EXPECT_EQ(star.indptr, (Indptr{0, 3, 4, 5, 6}));
  EXPECT_EQ(star.indices, (Indices{1, 2, 3, 0, 0, 0}));
}

TEST(SupportGraphs, DrawnGraphHasTheDrawnRows) {
  const Dataset d = test::drawn_graph();
  EXPECT_EQ(d.num_nodes, 6);
  EXPECT_EQ(d.indptr, (Indptr{0, 2, 5, 5, 8, 9, 11}));
  EXPECT_EQ(d.indices, (Indices{1, 2, 0, 1, 3, 4, 5, 0, 3, 2, 4}));
}

TEST(SupportGraphs, RandomGraphsAreValidAndDeterministic) {
  Dataset symmetric = test::random_symmetric_graph(50, 3, 4);
  test::add_hashed_features(symmetric, 5, 4, -1.f, 1.f);
  test::add_hashed_labels(symmetric, 3, 4);
  EXPECT_NO_THROW(validate_dataset(symmetric, "symmetric"));
  for (vertex_t v = 0; v < symmetric.num_nodes; ++v)
    for (edge_t e = symmetric.indptr[v]; e < symmetric.indptr[v + 1]; ++e) {
      const vertex_t u = symmetric.indices[e];
      EXPECT_NE(u, v);
      const auto row_begin = symmetric.indices.begin() + symmetric.indptr[u];
      const auto row_end = symmetric.indices.begin() + symmetric.indptr[u + 1];
      EXPECT_NE(std::find(row_begin, row_end, v), row_end) << u << " -> " << v << " only";
    }
  for (float x : symmetric.features) {
    EXPECT_GE(x, -1.f);
    EXPECT_LT(x, 1.f);
  }
  EXPECT_EQ(test::skewed_multigraph(100, 400, 3).indices,
            test::skewed_multigraph(100, 400, 3).indices);
  EXPECT_NE(test::skewed_multigraph(100, 400, 3).indices,
            test::skewed_multigraph(100, 400, 4).indices);
  EXPECT_EQ(test::local_multigraph(100, 400, 3).num_edges(), 400);
  EXPECT_EQ(test::hub_graph(10, 1).indptr[1], 201);  // vertex 0: 200 / 1 + 1 in-edges
  const test::ChunkCsr chunk = [] {
    std::mt19937 rng(1);
    return test::random_chunk_csr(40, 60, 5, test::EmptyRows::kSome, rng);
  }();
  EXPECT_EQ(chunk.indptr[6], chunk.indptr[5]);                // row 5 is empty
  EXPECT_EQ(chunk.columns[std::size_t(chunk.indptr[7])], 7);  // self entry first
}

TEST(SupportPlans, DefaultsAndSetters) {
  const PlanOptions one = test::plan_options(1, 4);
  EXPECT_EQ(one.partitions, 1);
  EXPECT_EQ(one.chunks, 4);
  EXPECT_EQ(one.partitioner, "range");
  EXPECT_TRUE(one.reorganize);
  const PlanOptions two =
      test::plan_options(2, 3).reorganize(test::Reorganize::kOff).seed(9).cost_feature_dim(7);
  EXPECT_EQ(two.partitioner, "metis");
  EXPECT_FALSE(two.reorganize);
  EXPECT_EQ(two.seed, 9u);
  EXPECT_EQ(two.cost_feature_dim, 7);
  const Dataset d = test::path_graph(12);
  const Plan plan = test::make_plan(d, test::plan_options(2, 2).partitioner("range"));
  EXPECT_EQ(plan.partitions, 2);
  EXPECT_EQ(plan.chunks, 2);
  EXPECT_EQ(plan.dataset_fingerprint, compute_fingerprint(d));
}

TEST(SupportConfigs, TestDefaultsAndSetters) {
  const TrainConfig library;
  const TrainConfig quiet = test::train_config();
  EXPECT_FALSE(quiet.progress);
  EXPECT_TRUE(quiet.quiet);
  EXPECT_EQ(quiet.threads, 2);
  EXPECT_EQ(quiet.model, library.model);
  EXPECT_EQ(quiet.epochs, library.epochs);
  const TrainConfig gat = test::train_config().model("gat").heads(2).epochs(3).no_overlap(true);
  EXPECT_EQ(gat.model, "gat");
  EXPECT_EQ(gat.heads, 2);
  EXPECT_EQ(gat.epochs, 3);
  EXPECT_TRUE(gat.no_overlap);
  const TrainConfig resumed = test::train_config(gat).resume_from("ck.h5");
  EXPECT_EQ(resumed.model, "gat");
  EXPECT_EQ(resumed.checkpoint, "ck.h5");
  EXPECT_TRUE(resumed.resume);
}

TEST(SupportConfigs, ModelShapeAndItsModel) {
  const ModelShape library;
  const ModelShape gcn = test::model_shape("gcn", 3).in_dim(12).hidden(8).classes(4);
  EXPECT_EQ(gcn.model, "gcn");
  EXPECT_EQ(gcn.layers, 3);
  EXPECT_EQ(gcn.in_dim, 12);
  EXPECT_EQ(gcn.hidden, 8);
  EXPECT_EQ(gcn.classes, 4);
  EXPECT_EQ(gcn.heads, library.heads);
  EXPECT_EQ(gcn.output_heads, library.output_heads);
  // 12 -> 8 -> 8 -> 4: the narrowing last layer transforms first with the same 8 x 4 weight.
  const ModelSpec spec = test::model_spec(gcn);
  ASSERT_EQ(spec.layers.size(), 3u);
  EXPECT_EQ(spec.layers[0].in_width, 12);
  EXPECT_EQ(spec.layers[1].out_width, 8);
  EXPECT_TRUE(spec.layers[2].transform_first);
  EXPECT_EQ(spec.layers[2].w_rows, 8);
  EXPECT_EQ(spec.layers[2].w_cols, 4);
  const ModelShape gat = test::model_shape("gat", 2).hidden(5).heads(3).output_heads(2);
  EXPECT_EQ(gat.heads, 3);
  EXPECT_EQ(gat.output_heads, 2);
  EXPECT_EQ(gat.hidden, 5);
  EXPECT_EQ(gat.in_dim, library.in_dim);
}

TEST(SupportConfigs, BackendOptionsDefaultsAndSetters) {
  const BackendOptions library;
  const BackendOptions two = test::backend_options(2);
  EXPECT_EQ(two.partitions, 2);
  EXPECT_EQ(two.gpus, library.gpus);
  EXPECT_EQ(two.memory_budget, library.memory_budget);
  EXPECT_EQ(two.threads, library.threads);
  EXPECT_EQ(two.peer_access, library.peer_access);
  EXPECT_EQ(two.op_times, library.op_times);
  const BackendOptions set = test::backend_options(3)
                                 .gpus(2)
                                 .memory_budget(1 << 20)
                                 .threads(4)
                                 .peer_access(PeerAccess::kOff)
                                 .op_times(true);
  EXPECT_EQ(set.partitions, 3);
  EXPECT_EQ(set.gpus, 2);
  EXPECT_EQ(set.memory_budget, 1 << 20);
  EXPECT_EQ(set.threads, 4);
  EXPECT_EQ(set.peer_access, PeerAccess::kOff);
  EXPECT_TRUE(set.op_times);
}

}  // namespace
}  // namespace sluice
