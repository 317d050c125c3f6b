// The multilevel level-1 partitioner (preprocess/multilevel_partition.hpp, `--partitioner
// metis`): both balance constraints held, the same parts at any thread count, host-link volume
// within 10 % of whole-graph METIS (`metis-direct`), exact edge cuts, and plans that verify.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "preprocess/generate.hpp"
#include "preprocess/multilevel_partition.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/partition_memory.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "preprocess/plan_verify.hpp"
#include "tests/support/cora.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

// An RMAT graph (symmetrized, no duplicates or self-loops) with about half of its vertices
// without neighbors, as RMAT leaves them.
Dataset rmat(int scale, int edge_factor, std::uint64_t seed) {
  GenerateOptions options;
  options.scale = scale;
  options.edge_factor = edge_factor;
  options.features = 1;
  options.seed = seed;
  options.labels = "random";
  return generate_dataset(options);
}

// A directed multigraph (not symmetrized): skewed sources, duplicate edges, self-loops, and
// vertices v % 10 == 3 without any edge.
Dataset directed_graph(vertex_t n, edge_t m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<vertex_t>> in(n);
  auto draw = [&] {
    vertex_t v = static_cast<vertex_t>((rng() % n) * (rng() % n) / n);
    while (v % 10 == 3) v = (v + 1) % n;
    return v;
  };
  for (edge_t e = 0; e < m; ++e) {
    const vertex_t u = draw();
    vertex_t v = static_cast<vertex_t>(rng() % n);
    while (v % 10 == 3) v = (v + 1) % n;
    in[v].push_back(u);
  }
  Dataset d;
  d.name = "directed";
  d.num_nodes = n;
  d.indptr.assign(std::size_t(n) + 1, 0);
  for (vertex_t v = 0; v < n; ++v) {
    d.indptr[v + 1] = d.indptr[v] + static_cast<edge_t>(in[v].size());
    d.indices.insert(d.indices.end(), in[v].begin(), in[v].end());
  }
  return d;
}

// The largest part's weight over the mean, for vertices and for work (in-edges without
// self-loops, plus one: what the partitioner balances).
struct Balances {
  double vertices = 0;
  double work = 0;
};
Balances balances(const Dataset& d, const std::vector<std::int32_t>& part, int parts) {
  std::vector<double> vertices(parts, 0), work(parts, 0);
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    EXPECT_GE(part[v], 0);
    EXPECT_LT(part[v], parts);
    vertices[part[v]] += 1;
    work[part[v]] += 1;
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) work[part[v]] += d.indices[e] != v;
  }
  auto ratio = [&](const std::vector<double>& sizes) {
    double total = 0;
    for (double s : sizes) total += s;
    return *std::max_element(sizes.begin(), sizes.end()) * parts / total;
  };
  return {ratio(vertices), ratio(work)};
}

// METIS's objective computed independently: edges of the symmetrized simple graph cut.
std::int64_t cut_of(const Dataset& d, const std::vector<std::int32_t>& part) {
  const SymmetricGraph graph = symmetrize(d);
  std::int64_t twice = 0;
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    for (edge_t e = graph.indptr[v]; e < graph.indptr[v + 1]; ++e)
      twice += part[v] != part[graph.indices[e]];
  return twice / 2;
}

// The per-constraint limit with tolerance ub: ub times the mean, at least the rounded-up mean.
double allowed(double ub, double total, int parts) {
  return std::max(std::ceil(total / parts), std::floor(ub * total / parts)) * parts / total;
}

MultilevelOptions coarsening(int parts, std::uint64_t seed) {
  MultilevelOptions options;
  options.parts = parts;
  options.seed = seed;
  options.coarsest_vertices = 256;  // several levels even on these small graphs
  return options;
}

TEST(MultilevelPartition, HoldsBothBalanceConstraints) {
  const Dataset d = rmat(13, 16, 3);
  for (int parts : {2, 3, 4, 8}) {
    SCOPED_TRACE(cat("P=", parts));
    const MultilevelResult result = multilevel_partition(d, coarsening(parts, 1));
    EXPECT_GE(result.levels, 3);
    EXPECT_LT(result.coarsest_vertices, d.num_nodes / 4);
    const Balances b = balances(d, result.part, parts);
    EXPECT_LE(b.vertices, allowed(1.01, d.num_nodes, parts) + 1e-12);
    EXPECT_LE(b.work, allowed(1.01, double(d.num_edges() + d.num_nodes), parts) + 1e-12);
    EXPECT_EQ(result.edge_cut, cut_of(d, result.part));
    EXPECT_GT(result.edge_cut, 0);
  }
}

TEST(MultilevelPartition, BalanceModesAndTolerances) {
  const Dataset d = rmat(12, 16, 5);
  const double work_total = double(d.num_edges() + d.num_nodes);
  MultilevelOptions options = coarsening(4, 2);
  options.balance = Balance::kEdges;  // METIS's default tolerance for one constraint: 1.03
  Balances b = balances(d, multilevel_partition(d, options).part, 4);
  EXPECT_LE(b.work, allowed(1.03, work_total, 4) + 1e-12);
  options.balance = Balance::kVertices;
  b = balances(d, multilevel_partition(d, options).part, 4);
  EXPECT_LE(b.vertices, allowed(1.03, d.num_nodes, 4) + 1e-12);
  options.balance = Balance::kBoth;
  options.imbalance = {1.05, 1.002};
  b = balances(d, multilevel_partition(d, options).part, 4);
  EXPECT_LE(b.work, allowed(1.05, work_total, 4) + 1e-12);
  EXPECT_LE(b.vertices, allowed(1.002, d.num_nodes, 4) + 1e-12);
}

// Fixed seed: the same parts whatever the thread count; another seed gives other parts.
TEST(MultilevelPartition, DeterministicAtAnyThreadCount) {
  // Large enough that every parallel loop runs with a team.
  const Dataset d = rmat(15, 16, 7);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<std::int32_t>> results;
  for (int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    MultilevelOptions options = coarsening(4, 11);
    options.coarsest_vertices = 2048;
    results.push_back(multilevel_partition(d, options).part);
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  MultilevelOptions other = coarsening(4, 12);
  other.coarsest_vertices = 2048;
  EXPECT_NE(multilevel_partition(d, other).part, results[0]);
}

// A directed dataset: level 0 reads the out-edges from its own transpose; the cut counts the
// symmetrized simple graph (reciprocal pairs and duplicates once).
TEST(MultilevelPartition, DirectedMultigraph) {
  const Dataset d = directed_graph(6000, 40000, 9);
  ASSERT_FALSE(d.symmetrized);
  for (int parts : {2, 5}) {
    const MultilevelResult result = multilevel_partition(d, coarsening(parts, 4));
    const Balances b = balances(d, result.part, parts);
    EXPECT_LE(b.vertices, allowed(1.01, d.num_nodes, parts) + 1e-12);
    EXPECT_LE(b.work, allowed(1.01, double(d.num_edges() + d.num_nodes), parts) + 1e-12);
    EXPECT_EQ(result.edge_cut, cut_of(d, result.part));
  }
}

// No edges at all, and fewer connected vertices than parts: balance still holds.
TEST(MultilevelPartition, GraphsWithoutMuchToCut) {
  Dataset empty;
  empty.num_nodes = 1000;
  empty.indptr.assign(1001, 0);
  MultilevelResult result = multilevel_partition(empty, coarsening(3, 0));
  EXPECT_EQ(result.edge_cut, 0);
  EXPECT_LE(balances(empty, result.part, 3).vertices, allowed(1.01, 1000, 3) + 1e-12);

  // 0 <- 1 and 1 <- 0, every other vertex alone (self-loops on some).
  Dataset pair;
  pair.num_nodes = 10;
  pair.indptr = {0, 1, 2, 3, 3, 4, 4, 4, 4, 4, 4};
  pair.indices = {1, 0, 2, 4};
  result = multilevel_partition(pair, coarsening(4, 0));
  EXPECT_EQ(result.edge_cut, cut_of(pair, result.part));
  EXPECT_LE(balances(pair, result.part, 4).vertices, 3.0 * 4 / 10);
}

// Host-link volume (the plan's deduplicated rows, volume_reuse_rows) within 10 % of serial
// whole-graph METIS, on RMAT graphs coarsened several levels deep and on Cora.
void expect_volume_near_metis(const Dataset& d, const std::string& name) {
  for (int parts : {2, 4, 8}) {
    SCOPED_TRACE(cat(name, " P=", parts));
    PlanOptions options;
    options.partitions = parts;
    options.chunks = 8;
    options.reorganize = false;
    options.cost_feature_dim = 16;
    options.partitioner = "metis-direct";
    const Plan direct = build_plan(d, options, "x");
    options.partitioner = "metis";
    const Plan standard = build_plan(d, options, "x");
    EXPECT_EQ(standard.partitioner, "metis");
    MultilevelOptions deep = coarsening(parts, 0);
    deep.coarsest_vertices = std::max<vertex_t>(256, d.num_nodes / 32);
    VertexPartition partition;
    partition.part = multilevel_partition(d, deep).part;
    partition.method = "metis";
    const Plan coarsened = build_plan_from_partition(d, partition, options, "x");
    const double reference = double(direct.stats.volume_reuse_rows);
    EXPECT_LE(double(standard.stats.volume_reuse_rows), 1.10 * reference);
    EXPECT_LE(double(coarsened.stats.volume_reuse_rows), 1.10 * reference);
    EXPECT_EQ(find_plan_violation(d, coarsened), "");
  }
}

TEST(MultilevelPartition, HostLinkVolumeNearMetisOnRmat) {
  expect_volume_near_metis(rmat(13, 16, 1), "rmat13");
}

TEST(MultilevelPartition, HostLinkVolumeNearMetisOnCora) {
  if (!test::cora_available()) GTEST_SKIP() << "Cora is missing at " << test::cora_dir();
  expect_volume_near_metis(test::cora_dataset(), "cora");
}

// Plans on the new partitions pass the independent verifier, symmetric or directed, with or
// without reorganization.
TEST(MultilevelPartition, PlansVerify) {
  const Dataset graphs[] = {rmat(11, 8, 2), directed_graph(3000, 15000, 4)};
  for (const Dataset& d : graphs) {
    for (int parts : {2, 3}) {
      for (bool reorganize : {false, true}) {
        PlanOptions options;
        options.partitions = parts;
        options.chunks = 4;
        options.partitioner = "metis";
        options.reorganize = reorganize;
        options.cost_feature_dim = 8;
        const Plan plan = build_plan(d, options, "x");
        EXPECT_EQ(find_plan_violation(d, plan), "") << d.name << " P=" << parts;
      }
    }
  }
}

TEST(MultilevelPartition, PartitionerNames) {
  const Dataset d = rmat(10, 8, 1);
  for (const char* name : {"metis", "metis-direct", "range", "random"}) {
    EXPECT_TRUE(is_partitioner(name));
    const VertexPartition p = partition_vertices(d, 2, name, 0);
    EXPECT_EQ(p.method, name);
    EXPECT_EQ(p.part.size(), std::size_t(d.num_nodes));
    const bool measured = std::string(name).rfind("metis", 0) == 0;
    EXPECT_EQ(p.edge_cut >= 0, measured) << name;
    if (measured) {
      EXPECT_EQ(p.edge_cut, cut_of(d, p.part)) << name;
    }
  }
  EXPECT_FALSE(is_partitioner("kahip"));
  EXPECT_THROW(partition_vertices(d, 2, "kahip", 0), InputError);
}

// A job larger than the machine stops with an InputError saying so, before allocating.
TEST(MultilevelPartition, MemoryCheckNamesTheShortfall) {
  EXPECT_GT(available_host_memory_bytes(), 0);
  try {
    require_host_memory(std::int64_t(1) << 60, "a test job");
    FAIL() << "no error for 1 EiB";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("a test job needs about"), std::string::npos) << message;
    EXPECT_NE(message.find("available"), std::string::npos) << message;
  }
  EXPECT_NO_THROW(require_host_memory(1 << 20, "a small job"));
  // Whole-graph METIS at a billion edges needs more than 100 GiB; the multilevel base far less.
  const std::int64_t n = std::int64_t(1) << 25, m = std::int64_t(1) << 30;
  EXPECT_GT(metis_direct_bytes(n, m, true), std::int64_t(100) << 30);
  EXPECT_LT(multilevel_base_bytes(n, m, true), std::int64_t(4) << 30);
}

// The command line: --partitioner metis-direct is accepted, the default metis builds a plan that
// verifies, and an unknown name is refused with the list.
TEST(MultilevelPartition, CommandLine) {
  test::ScratchDir dir;
  const std::string data = dir.file("data.h5");
  const std::string preprocess = test::bin("sluice-preprocess");
  auto run = [&](const std::string& args) {
    return test::run_command(preprocess + " " + args + " 2>&1");
  };
  ASSERT_EQ(
      run(cat("generate --scale 10 --edge-factor 8 --features 2 --output ", data, " -q")).exit_code,
      0);
  for (const char* partitioner : {"metis", "metis-direct"}) {
    const auto result =
        run(cat("partition --dataset ", data, " --partitions 3 --chunks 2 ", "--partitioner ",
                partitioner, " --verify --output ", dir.file("plan.h5")));
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("verify: plan is consistent"), std::string::npos) << result.output;
  }
  const auto bad = run(cat("partition --dataset ", data, " --partitions 2 --partitioner kahip ",
                           "--output ", dir.file("plan.h5")));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("metis-direct"), std::string::npos) << bad.output;
  const auto help = run("partition --help");
  EXPECT_NE(help.output.find("metis-direct"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace sluice
