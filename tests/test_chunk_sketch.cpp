// The chunk sketch (train/layout/chunk_sketch.hpp) against built plans: for every graph shape,
// partition count, partitioner, chunk count and transfer scheme, its partition profiles equal
// partition_profile() of the plan built with the natural layout field by field, so the memory
// estimate of every model, depth and width is the same to the byte (relative error 0, within
// the 3 % the search is allowed), and the chunk-count search over sketches picks the C and budget
// rule that a search over built plans picks.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "preprocess/chunk_search.hpp"
#include "preprocess/chunking.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/plans.hpp"
#include "train/layout/chunk_search.hpp"
#include "train/layout/chunk_sketch.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {
namespace {

// The smallest fitting chunk count, as the search finds it.
const ChunkChoiceOptions kSmallest{ChunkChoice::kSmallest, {}, {}, {}};

struct Graph {
  std::string name;
  Dataset dataset;
};

// Labels and a train split where a graph has none, so that its chunks keep loss-row CSRs: every
// fifth vertex unlabeled, a third of the others in the train split.
Dataset with_loss_rows(Dataset d) {
  if (!d.labels.empty()) return d;
  d.num_classes = 3;
  d.labels.assign(std::size_t(d.num_nodes), -1);
  d.train.clear();
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    if (v % 5 != 4) d.labels[std::size_t(v)] = v % 3;
    if (v % 3 == 1) d.train.push_back(v);
  }
  return d;
}

// Symmetric random, skewed multigraph (self loops, duplicates, isolated vertices), hubs, local
// structure, and a directed random graph without reverse edges.
const std::vector<Graph>& graphs() {
  static const std::vector<Graph> all = [] {
    std::vector<Graph> g;
    g.push_back({"symmetric", test::random_symmetric_graph(700, 5, 3)});
    g.push_back({"skewed", test::skewed_multigraph(600, 5000, 7)});
    g.push_back({"hubs", test::hub_graph(500, 4)});
    g.push_back({"local", test::local_multigraph(650, 4000, 5)});
    g.push_back(
        {"directed", test::random_dataset(550, 7, 4, 3, 9, test::ReverseEdgesIntoSources::kSkip)});
    for (Graph& graph : g) graph.dataset = with_loss_rows(std::move(graph.dataset));
    return g;
  }();
  return all;
}

void expect_same_profile(const PartitionProfile& built, const PartitionProfile& sketched) {
  EXPECT_EQ(sketched.partition, built.partition);
  EXPECT_EQ(sketched.transition_rows, built.transition_rows);
  EXPECT_EQ(sketched.remote_rows, built.remote_rows);
  EXPECT_EQ(sketched.head_rows, built.head_rows);
  ASSERT_EQ(sketched.lists.size(), built.lists.size());
  ASSERT_EQ(sketched.csr.size(), built.csr.size());
  ASSERT_EQ(sketched.loss_csr.size(), built.csr.size());
  ASSERT_EQ(built.loss_csr.size(), built.csr.size());
  for (std::size_t c = 0; c < built.lists.size(); ++c) {
    SCOPED_TRACE(cat("batch ", c));
    const ChunkListSizes &a = built.lists[c], &b = sketched.lists[c];
    EXPECT_EQ(b.rows, a.rows);
    EXPECT_EQ(b.nnz, a.nnz);
    EXPECT_EQ(b.loads, a.loads);
    EXPECT_EQ(b.leaves, a.leaves);
    EXPECT_EQ(b.remote, a.remote);
    EXPECT_EQ(b.pulls, a.pulls);
    EXPECT_EQ(b.pushes, a.pushes);
    EXPECT_EQ(b.tail, a.tail);
    EXPECT_EQ(b.received, a.received);
    for (const bool loss : {false, true}) {
      SCOPED_TRACE(loss ? "loss-row CSR" : "CSR");
      const CsrShape &x = loss ? built.loss_csr[c] : built.csr[c],
                     &y = loss ? sketched.loss_csr[c] : sketched.csr[c];
      EXPECT_EQ(y.rows, x.rows);
      EXPECT_EQ(y.cols, x.cols);
      EXPECT_EQ(y.nnz, x.nnz);
      EXPECT_EQ(y.long_rows, x.long_rows);
      EXPECT_EQ(y.long_columns, x.long_columns);
    }
  }
}

ChunkSketch sketch_of(const Dataset& d, const VertexPartition& partition, int P) {
  const Renumbering r = renumber_by_partition(partition.part, P);
  return ChunkSketch(d, r.new_to_old, r.old_to_new, r.partition_offsets);
}

// Every graph, P in 1..4 by three partitioners, C from 1 to beyond the smallest partition
// (empty ranges), every transfer scheme: the profiles of the built plan, exactly.
TEST(ChunkSketch, ProfilesEqualThoseOfBuiltPlans) {
  int compared = 0;
  for (const Graph& graph : graphs()) {
    const Dataset& d = graph.dataset;
    for (const int P : {1, 2, 3, 4}) {
      for (const std::string partitioner : {"metis", "range", "random"}) {
        if (P == 1 && partitioner != "range") continue;
        const VertexPartition partition = partition_vertices(d, P, partitioner, 1);
        const ChunkSketch sketch = sketch_of(d, partition, P);
        const vertex_t smallest = sketch.smallest_partition();
        for (const int C : {1, 2, 3, 5, 8, 17, 64, int(smallest), int(smallest) + 3}) {
          SCOPED_TRACE(cat(graph.name, " P=", P, " ", partitioner, " C=", C));
          const Plan plan = build_plan_from_partition(
              d, partition, test::plan_options(P, C).reorganize(test::Reorganize::kOff),
              compute_fingerprint(d));
          for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2p, CommMode::kP2pReuse}) {
            const std::vector<PartitionProfile> sketched = sketch.profiles(C, comm);
            ASSERT_EQ(sketched.size(), std::size_t(P));
            for (int p = 0; p < P; ++p)
              expect_same_profile(
                  partition_profile(plan, p, comm, loss_row_flags(d, plan.old_to_new)),
                  sketched[std::size_t(p)]);
            ++compared;
          }
          if (HasFatalFailure()) return;
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 10 * 9 * 3);
}

// A graph large enough for the sketch's parallel passes (the graphs above run on one thread):
// at 1, 2 and 5 threads its profiles equal the built plan's.
TEST(ChunkSketch, ParallelPassesGiveTheProfilesOfBuiltPlansAtAnyThreadCount) {
  const Dataset d = with_loss_rows(test::skewed_multigraph(30000, 120000, 11));
  const VertexPartition partition = partition_vertices(d, 3, "random", 4);
  const int threads = omp_get_max_threads();
  for (const int C : {1, 7, 40}) {
    const Plan plan = build_plan_from_partition(
        d, partition, test::plan_options(3, C).reorganize(test::Reorganize::kOff),
        compute_fingerprint(d));
    for (const int t : {1, 2, 5}) {
      SCOPED_TRACE(cat("C=", C, ", ", t, " threads"));
      omp_set_num_threads(t);
      const ChunkSketch sketch = sketch_of(d, partition, 3);
      const std::vector<PartitionProfile> sketched = sketch.profiles(C, CommMode::kP2pReuse);
      omp_set_num_threads(threads);
      for (int p = 0; p < 3; ++p)
        expect_same_profile(
            partition_profile(plan, p, CommMode::kP2pReuse, loss_row_flags(d, plan.old_to_new)),
            sketched[std::size_t(p)]);
      if (HasFatalFailure()) return;
    }
  }
}

// Reorganized plans (chunks of different partitions grouped into batches, batches reordered):
// the sketch given the plan's batch layout gives its profiles exactly.
TEST(ChunkSketch, ProfilesOfReorganizedLayoutsEqualThoseOfBuiltPlans) {
  int reorganized = 0;
  for (const Graph& graph : graphs()) {
    const Dataset& d = graph.dataset;
    for (const int P : {1, 2, 3}) {
      const VertexPartition partition = partition_vertices(d, P, P == 1 ? "range" : "metis", 1);
      const ChunkSketch sketch = sketch_of(d, partition, P);
      for (const int C : {2, 3, 6, 11}) {
        SCOPED_TRACE(cat(graph.name, " P=", P, " C=", C));
        const Plan plan = build_plan_from_partition(
            d, partition, test::plan_options(P, C).reorganize(test::Reorganize::kOn),
            compute_fingerprint(d));
        std::vector<std::int32_t> order(std::size_t(P) * C);
        for (int c = 0; c < C; ++c)
          for (int p = 0; p < P; ++p) order[std::size_t(c) * P + p] = plan.chunk(c, p).range;
        reorganized += plan.reorganized;
        for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2p, CommMode::kP2pReuse}) {
          const std::vector<PartitionProfile> sketched = sketch.profiles(C, comm, order);
          for (int p = 0; p < P; ++p)
            expect_same_profile(
                partition_profile(plan, p, comm, loss_row_flags(d, plan.old_to_new)),
                sketched[std::size_t(p)]);
        }
        if (HasFatalFailure()) return;
      }
    }
  }
  // Most of these plans are reorganized (the case this test is for).
  EXPECT_GE(reorganized, 30);
}

// PlanOptions::layout_fits decides whether a reorganized layout is kept: refused, the plan is the
// natural-layout one; accepted, the reorganized one; asked once, with that layout.
TEST(ChunkSketch, LayoutFitsDecidesWhetherTheReorganizedLayoutIsKept) {
  const Dataset& d = graphs()[3].dataset;
  const VertexPartition partition = partition_vertices(d, 3, "metis", 1);
  const std::string fingerprint = compute_fingerprint(d);
  const Plan reorganized = build_plan_from_partition(
      d, partition, test::plan_options(3, 6).reorganize(test::Reorganize::kOn), fingerprint);
  ASSERT_TRUE(reorganized.reorganized);
  const Plan natural = build_plan_from_partition(
      d, partition, test::plan_options(3, 6).reorganize(test::Reorganize::kOff), fingerprint);
  for (const bool fits : {false, true}) {
    PlanOptions options = test::plan_options(3, 6).reorganize(test::Reorganize::kOn);
    int asked = 0;
    options.layout_fits = [&](const std::vector<std::int32_t>& order) {
      ++asked;
      for (int c = 0; c < 6; ++c)
        for (int p = 0; p < 3; ++p)
          EXPECT_EQ(order[std::size_t(c) * 3 + p], reorganized.chunk(c, p).range);
      return fits;
    };
    const Plan plan = build_plan_from_partition(d, partition, options, fingerprint);
    EXPECT_EQ(asked, 1);
    const Plan& expected = fits ? reorganized : natural;
    EXPECT_EQ(plan.reorganized, expected.reorganized);
    for (int c = 0; c < 6; ++c)
      for (int p = 0; p < 3; ++p) {
        EXPECT_EQ(plan.chunk(c, p).range, expected.chunk(c, p).range);
        EXPECT_EQ(plan.chunk(c, p).load_vertices, expected.chunk(c, p).load_vertices);
      }
    EXPECT_EQ(plan.stats.cost_after, expected.stats.cost_after);
  }
}

// A batch layout that is not a permutation of every partition's ranges is refused.
TEST(ChunkSketch, RefusesABatchLayoutThatIsNotAPermutation) {
  const Dataset& d = graphs()[0].dataset;
  const VertexPartition partition = partition_vertices(d, 2, "range", 1);
  const ChunkSketch sketch = sketch_of(d, partition, 2);
  EXPECT_THROW(sketch.profiles(2, CommMode::kP2pReuse, {0, 0, 0, 1}), Error);
  EXPECT_THROW(sketch.profiles(2, CommMode::kP2pReuse, {0, 1, 1}), Error);
  EXPECT_NO_THROW(sketch.profiles(2, CommMode::kP2pReuse, {1, 0, 0, 1}));
}

// The bounds the plan builder cuts chunks by are the sketch's (one function).
TEST(ChunkSketch, PlanChunkRangesAreEdgeBalancedBounds) {
  const Dataset& d = graphs()[1].dataset;
  const VertexPartition partition = partition_vertices(d, 3, "random", 2);
  const Renumbering r = renumber_by_partition(partition.part, 3);
  const ChunkGraph graph = build_chunk_graph(d, r);
  for (const int C : {1, 4, 9, 30}) {
    const std::vector<vertex_t> bounds = edge_balanced_bounds(graph.indptr, r.partition_offsets, C);
    const Plan plan = build_plan_from_partition(
        d, partition, test::plan_options(3, C).reorganize(test::Reorganize::kOff),
        compute_fingerprint(d));
    for (int p = 0; p < 3; ++p)
      for (int c = 0; c < C; ++c) {
        EXPECT_EQ(plan.chunk(c, p).dst_begin, bounds[std::size_t(p) * (C + 1) + c]);
        EXPECT_EQ(plan.chunk(c, p).dst_end, bounds[std::size_t(p) * (C + 1) + c + 1]);
      }
  }
}

ModelShape shape_of(const std::string& model, int layers, std::int64_t in_dim, std::int64_t hidden,
                    std::int64_t classes, int heads) {
  ModelShape shape;
  shape.model = model;
  shape.layers = layers;
  shape.in_dim = in_dim;
  shape.hidden = hidden;
  shape.classes = classes;
  shape.heads = heads;
  return shape;
}

const std::vector<ModelShape>& shapes() {
  static const std::vector<ModelShape> all = {
      shape_of("gcn", 2, 37, 10, 3, 1),    shape_of("gcn", 3, 6, 22, 7, 1),
      shape_of("sage", 2, 64, 128, 5, 1),  shape_of("sage", 1, 13, 8, 2, 1),
      shape_of("gat", 2, 40, 16, 5, 4),    shape_of("gat", 3, 128, 32, 10, 2),
      shape_of("gcn", 1, 500, 256, 40, 1),
  };
  return all;
}

// Estimates of every model under every budget rule: the sketch's equal the built plan's (the
// relative error, asserted, is 0). The search serves runs under a budget, which push the loss
// rows' sums to their owners (LossRowExchange::kPushSums; trainer.cpp): a built one-chunk plan's
// profile also holds the owners' loss-row CSR, which the sketch does not count.
TEST(ChunkSketch, EstimatesEqualThoseOfBuiltPlans) {
  double worst = 0;
  for (const Graph& graph : graphs()) {
    const Dataset& d = graph.dataset;
    for (const int P : {1, 3}) {
      const VertexPartition partition = partition_vertices(d, P, P == 1 ? "range" : "metis", 0);
      const ChunkSketch sketch = sketch_of(d, partition, P);
      for (const int C : {1, 4, 13, 50}) {
        const Plan plan = build_plan_from_partition(
            d, partition, test::plan_options(P, C).reorganize(test::Reorganize::kOff),
            compute_fingerprint(d));
        for (const ModelShape& shape : shapes()) {
          SCOPED_TRACE(
              cat(graph.name, " P=", P, " C=", C, " ", shape.model, " ", shape.layers, " layers"));
          for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2pReuse}) {
            LayoutOptions options;
            options.comm = comm;
            options.loss_row_exchange = LossRowExchange::kPushSums;
            const std::vector<BudgetRule> rules = budget_rules(shape, options, true);
            const std::vector<std::int64_t> built =
                rules_bytes(plan, loss_row_flags(d, plan.old_to_new), shape, options, rules);
            const std::vector<std::int64_t> sketched =
                rules_bytes(sketch.profiles(C, comm), shape, options, rules);
            ASSERT_EQ(built.size(), sketched.size());
            for (std::size_t r = 0; r < rules.size(); ++r) {
              const double error = std::abs(double(sketched[r] - built[r])) /
                                   double(std::max<std::int64_t>(1, built[r]));
              worst = std::max(worst, error);
              EXPECT_EQ(sketched[r], built[r]) << budget_rule_name(rules[r]);
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(worst, 0.0);
}

// The search over sketches picks what the search over built plans (the estimator the sketch
// replaces) picks, for budgets between the needs of neighboring chunk counts.
TEST(ChunkSketch, SearchPicksTheChunkCountOfBuiltPlans) {
  int searches = 0;
  for (const Graph& graph : graphs()) {
    const Dataset& d = graph.dataset;
    const int P = graph.name == "hubs" ? 1 : 2;
    const VertexPartition partition = partition_vertices(d, P, P == 1 ? "range" : "metis", 0);
    const PlanOptions options = test::plan_options(P, 1).reorganize(test::Reorganize::kOff);
    const std::string fingerprint = compute_fingerprint(d);
    for (const ModelShape& shape : {shapes()[0], shapes()[4], shapes()[5]}) {
      LayoutOptions layout;
      layout.loss_row_exchange = LossRowExchange::kPushSums;  // as under a budget
      const std::vector<BudgetRule> rules = budget_rules(shape, layout, true);
      std::vector<vertex_t> sizes(std::size_t(P), 0);
      for (const std::int32_t p : partition.part) ++sizes[std::size_t(p)];
      const int max_chunks =
          std::min<vertex_t>(*std::min_element(sizes.begin(), sizes.end()), 1 << 16);
      const ChunkEstimator built = [&](int chunks) {
        PlanOptions o = options;
        o.chunks = chunks;
        const Plan plan = build_plan_from_partition(d, partition, o, fingerprint);
        return rules_bytes(plan, loss_row_flags(d, plan.old_to_new), shape, layout, rules);
      };
      // Budgets at and just below the first rule's need at a few chunk counts, and below
      // everything.
      std::vector<std::int64_t> budgets = {1};
      for (const int C : {1, 3, 8, 40}) {
        const std::int64_t need = built(std::min(C, max_chunks)).front();
        budgets.push_back(need);
        budgets.push_back(need - 1);
        budgets.push_back(need + need / 50);
      }
      for (const std::int64_t budget : budgets) {
        SCOPED_TRACE(cat(graph.name, " ", shape.model, " budget ", budget));
        const FittingChunks expected = search_fitting_chunks(max_chunks, budget, rules, built);
        const ChunkSearchResult found =
            choose_fitting_chunks(d, partition, options, budget, shape, layout, true, kSmallest);
        EXPECT_EQ(found.fits, expected.fits);
        EXPECT_EQ(found.chunks, expected.chunks);
        EXPECT_EQ(found.bytes, expected.bytes);
        EXPECT_EQ(found.rule.reload_inputs, expected.rule.reload_inputs);
        EXPECT_EQ(found.rule.all_overlap, expected.rule.all_overlap);
        ++searches;
      }
    }
  }
  EXPECT_EQ(searches, 5 * 3 * 13);
}

}  // namespace
}  // namespace sluice
