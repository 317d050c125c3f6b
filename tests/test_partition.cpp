// Plan building (preprocess/plan_builder.hpp) checked by the independent verifier on many random
// graphs, plus exact values on small hand-drawn graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "formats/dataset.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_verify.hpp"
#include "preprocess/reorganize.hpp"

namespace sluice {
namespace {

// A random directed multigraph with self-loops, duplicate edges and isolated vertices.
Dataset random_dataset(std::uint64_t seed, vertex_t n, edge_t m) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<vertex_t>> in(n);
  for (edge_t e = 0; e < m; ++e) {
    // Skewed sources so that some vertices are hubs.
    const vertex_t u = static_cast<vertex_t>(
        std::min<std::uint64_t>(n - 1, (rng() % n) * (rng() % n) / std::max<vertex_t>(1, n - 1) +
                                           (rng() % 3 == 0 ? rng() % n : 0)) %
        n);
    const vertex_t v = static_cast<vertex_t>(rng() % n);
    in[v].push_back(u);
  }
  Dataset d;
  d.name = "random";
  d.num_nodes = n;
  d.indptr.assign(n + 1, 0);
  for (vertex_t v = 0; v < n; ++v) {
    d.indptr[v + 1] = d.indptr[v] + static_cast<edge_t>(in[v].size());
    d.indices.insert(d.indices.end(), in[v].begin(), in[v].end());
  }
  return d;
}

PlanOptions options(int P, int C, const std::string& partitioner, bool reorganize) {
  PlanOptions o;
  o.partitions = P;
  o.chunks = C;
  o.partitioner = partitioner;
  o.reorganize = reorganize;
  o.seed = 7;
  o.cost_feature_dim = 16;
  return o;
}

TEST(PlanBuilder, RandomGraphsVerify) {
  int built = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const vertex_t n = 30 + static_cast<vertex_t>(mix64(seed) % 150);
    const Dataset d = random_dataset(seed, n, 4 * n);
    for (int P : {1, 2, 3, 4}) {
      for (int C : {1, 2, 5, 8}) {
        for (const char* partitioner : {"range", "random", "metis"}) {
          if (P == 1 && std::string(partitioner) != "range") continue;
          for (bool reorganize : {false, true}) {
            SCOPED_TRACE(cat("seed ", seed, " n ", n, " P ", P, " C ", C, " ", partitioner,
                             reorganize ? " reorganized" : ""));
            const Plan plan = build_plan(d, options(P, C, partitioner, reorganize), "fp");
            EXPECT_EQ(find_plan_violation(d, plan), "");
            EXPECT_LE(plan.stats.cost_after, plan.stats.cost_before);
            EXPECT_LE(plan.stats.volume_reuse_rows, plan.stats.volume_p2p_rows);
            EXPECT_LE(plan.stats.volume_p2p_rows, plan.stats.volume_baseline_rows);
            if (!reorganize) {
              EXPECT_EQ(plan.stats.cost_after, plan.stats.cost_before);
            }
            ++built;
          }
        }
      }
    }
  }
  EXPECT_EQ(built, 6 * 4 * (2 + 3 * 3 * 2));
}

TEST(PlanBuilder, DeterministicForFixedSeed) {
  const Dataset d = random_dataset(11, 300, 1500);
  const Plan a = build_plan(d, options(3, 4, "metis", true), "fp");
  const Plan b = build_plan(d, options(3, 4, "metis", true), "fp");
  EXPECT_EQ(a.new_to_old, b.new_to_old);
  for (std::size_t k = 0; k < a.chunk_plans.size(); ++k) {
    EXPECT_EQ(a.chunk_plans[k].columns, b.chunk_plans[k].columns);
    EXPECT_EQ(a.chunk_plans[k].load_slots, b.chunk_plans[k].load_slots);
  }
}

// Each corruption of one index must be reported by the verifier.
TEST(PlanVerify, DetectsEveryKindOfCorruption) {
  const Dataset d = random_dataset(5, 120, 600);
  const Plan good = build_plan(d, options(3, 4, "metis", true), "fp");
  ASSERT_EQ(find_plan_violation(d, good), "");
  int tried = 0;
  auto expect_caught = [&](const char* what, auto mutate) {
    Plan bad = good;
    mutate(bad);
    const std::string message = find_plan_violation(d, bad);
    EXPECT_NE(message, "") << what;
    ++tried;
  };
  // Find a chunk with remote entries, reuse, loads and leaves.
  std::size_t k = 0;
  while (k + 1 < good.chunk_plans.size() &&
         (good.chunk_plans[k].remote_vertices.empty() || good.chunk_plans[k].reuse_count == 0 ||
          good.chunk_plans[k].load_vertices.size() < 2 ||
          good.chunk_plans[k].leave_vertices.empty()))
    ++k;
  const ChunkPlan& chunk = good.chunk_plans[k];
  ASSERT_FALSE(chunk.remote_vertices.empty());
  ASSERT_GT(chunk.reuse_count, 0);
  expect_caught("column", [&](Plan& p) {
    auto& col = p.chunk_plans[k].columns[1];
    col = (col + 1) % (p.transition_rows[chunk.partition] + p.remote_rows[chunk.partition]);
  });
  expect_caught("self column", [&](Plan& p) {
    std::swap(p.chunk_plans[k].columns[0], p.chunk_plans[k].columns.back());
  });
  expect_caught("load slot", [&](Plan& p) {
    std::swap(p.chunk_plans[k].load_slots[0], p.chunk_plans[k].load_slots[1]);
  });
  expect_caught("load vertex dropped", [&](Plan& p) {
    p.chunk_plans[k].load_vertices.pop_back();
    p.chunk_plans[k].load_slots.pop_back();
  });
  expect_caught("reuse count", [&](Plan& p) { p.chunk_plans[k].reuse_count += 1; });
  expect_caught("leave slot", [&](Plan& p) { p.chunk_plans[k].leave_slots[0] += 1; });
  expect_caught("leave vertex dropped", [&](Plan& p) {
    p.chunk_plans[k].leave_vertices.pop_back();
    p.chunk_plans[k].leave_slots.pop_back();
  });
  expect_caught("remote owner slot", [&](Plan& p) { p.chunk_plans[k].remote_owner_slots[0] += 1; });
  expect_caught("remote slot", [&](Plan& p) {
    auto& slots = p.chunk_plans[k].remote_slots;
    slots[0] = slots.size() > 1 ? slots[1] : slots[0] + 1;
  });
  expect_caught("remote pull", [&](Plan& p) { p.chunk_plans[k].remote_pull[0] ^= 1; });
  expect_caught("remote owner", [&](Plan& p) {
    auto& owner = p.chunk_plans[k].remote_owner[0];
    owner = (owner + 1) % p.partitions == chunk.partition ? (owner + 2) % p.partitions
                                                          : (owner + 1) % p.partitions;
  });
  expect_caught("permutation", [&](Plan& p) { std::swap(p.new_to_old[0], p.new_to_old[1]); });
  expect_caught("range", [&](Plan& p) { p.chunk_plans[k].dst_end -= 1; });
  expect_caught("transition rows", [&](Plan& p) { p.transition_rows[0] += 1; });
  expect_caught("stats", [&](Plan& p) { p.stats.volume_reuse_rows += 1; });
  expect_caught("cost", [&](Plan& p) { p.stats.cost_after *= 1.01; });
  EXPECT_EQ(tried, 16);
}

}  // namespace
}  // namespace sluice
