// Plan building (preprocess/plan_builder.hpp) checked by the independent verifier on many random
// graphs, plus exact values on small hand-drawn graphs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>
#include <set>

#include <metis.h>
#include <omp.h>
#include <zlib.h>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "formats/dataset.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_verify.hpp"
#include "preprocess/reorganize.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {
namespace {

using test::Reorganize;

// The plans of these tests: P x C with the given partitioner, seed 7, byte statistics for
// 16-wide rows.
test::PlanOptionsBuilder options(int P, int C, const std::string& partitioner,
                                 Reorganize reorganize) {
  return test::plan_options(P, C)
      .partitioner(partitioner)
      .reorganize(reorganize)
      .seed(7)
      .cost_feature_dim(16);
}

TEST(PlanBuilder, RandomGraphsVerify) {
  int built = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const vertex_t n = 30 + static_cast<vertex_t>(mix64(seed) % 150);
    const Dataset d = test::skewed_multigraph(n, 4 * n, seed);
    for (int P : {1, 2, 3, 4}) {
      for (int C : {1, 2, 5, 8}) {
        for (const char* partitioner : {"range", "random", "metis"}) {
          if (P == 1 && std::string(partitioner) != "range") continue;
          for (Reorganize reorganize : {Reorganize::kOff, Reorganize::kOn}) {
            SCOPED_TRACE(cat("seed ", seed, " n ", n, " P ", P, " C ", C, " ", partitioner,
                             reorganize == Reorganize::kOn ? " reorganized" : ""));
            const Plan plan = test::make_plan(d, options(P, C, partitioner, reorganize));
            EXPECT_EQ(find_plan_violation(d, plan), "");
            EXPECT_LE(plan.stats.cost_after, plan.stats.cost_before);
            EXPECT_LE(plan.stats.volume_reuse_rows, plan.stats.volume_p2p_rows);
            EXPECT_LE(plan.stats.volume_p2p_rows, plan.stats.volume_baseline_rows);
            if (reorganize == Reorganize::kOff) {
              EXPECT_EQ(plan.stats.cost_after, plan.stats.cost_before);
            }
            ++built;
          }
        }
      }
    }
  }
  EXPECT_EQ(built, 12 * 4 * (2 + 3 * 3 * 2));
}

TEST(PlanBuilder, DeterministicForFixedSeed) {
  const Dataset d = test::skewed_multigraph(300, 1500, 11);
  const Plan a = test::make_plan(d, options(3, 4, "metis", Reorganize::kOn));
  const Plan b = test::make_plan(d, options(3, 4, "metis", Reorganize::kOn));
  EXPECT_EQ(a.new_to_old, b.new_to_old);
  for (std::size_t k = 0; k < a.chunk_plans.size(); ++k) {
    EXPECT_EQ(a.chunk_plans[k].columns, b.chunk_plans[k].columns);
    EXPECT_EQ(a.chunk_plans[k].load_slots, b.chunk_plans[k].load_slots);
  }
}

// Each corruption of one index must be reported by the verifier.
TEST(PlanVerify, DetectsEveryKindOfCorruption) {
  const Dataset d = test::skewed_multigraph(120, 600, 5);
  const Plan good = test::make_plan(d, options(3, 4, "metis", Reorganize::kOn));
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

// In the spirit of the HongTu paper's Figure 6: 8 vertices, 2 GPUs, 2 batches. Every vertex has
// two in-edges, so the range partitioner puts 0-3 on GPU 0 and 4-7 on GPU 1, and the chunks are
// {0,1} {2,3} | {4,5} {6,7}. Natural order: batch 0 = {0,1} + {4,5}, batch 1 = {2,3} + {6,7}.
//
//   in-edges: 0<-4,2  1<-4,5  2<-4,5  3<-0,5  4<-0,2  5<-2,6  6<-2,5  7<-3,4
//
//   N(0,0) = {0,1} + {4,2} + {4,5}    = {0,1,2,4,5}    5
//   N(1,0) = {4,5} + {0,2} + {2,6}    = {0,2,4,5,6}    5
//   N(0,1) = {2,3} + {4,5} + {0,5}    = {0,2,3,4,5}    5
//   N(1,1) = {6,7} + {2,5} + {3,4}    = {2,3,4,5,6,7}  6      baseline = 21 rows
//   T_0 = {0,1,2 | 4,5,6} (6), T_1 = {0,2,3 | 4,5,6,7} (7)      +P2P     = 13 rows
//   R_1^0 = {0,2}, L_1^0 = {3}; R_1^1 = {4,5,6}, L_1^1 = {7}     +reuse   = 3+3+1+1 = 8 rows
//   remote: (0,0) {4,5} pulled, (1,0) {0,2} pulled, (0,1) {4,5} kept, (1,1) {2,3}: 3 pulled
//                                                               P2P pulls = 5 rows
TEST(PlanBuilder, HandExampleTransferCounts) {
  const Dataset d = test::graph_from_in_neighbors(
      {{4, 2}, {4, 5}, {4, 5}, {0, 5}, {0, 2}, {2, 6}, {2, 5}, {3, 4}});
  const Plan plan =
      test::make_plan(d, options(2, 2, "range", Reorganize::kOff).cost_feature_dim(100));
  ASSERT_EQ(find_plan_violation(d, plan), "");
  EXPECT_EQ(plan.partition_offsets, (std::vector<vertex_t>{0, 4, 8}));
  EXPECT_EQ(plan.new_to_old, (std::vector<vertex_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(plan.chunk(0, 0).dst_begin, 0);
  EXPECT_EQ(plan.chunk(0, 0).dst_end, 2);
  EXPECT_EQ(plan.chunk(1, 1).dst_begin, 6);
  EXPECT_EQ(plan.stats.volume_baseline_rows, 21);
  EXPECT_EQ(plan.stats.volume_p2p_rows, 13);
  EXPECT_EQ(plan.stats.volume_reuse_rows, 8);
  EXPECT_EQ(plan.stats.p2p_rows, 5);
  EXPECT_EQ(plan.stats.reused_rows, 5);
  EXPECT_DOUBLE_EQ(plan.stats.replication_factor, 21.0 / 8.0);
  const double expected_cost = 400.0 * (8 / 50e9 + 5 / 350e9 + 5 / 3.9e12);
  EXPECT_NEAR(plan.stats.cost_after, expected_cost, 1e-18);
  // Buffers: GPU 0 holds max(3, 3) transition rows and 2 remote rows; GPU 1 max(3, 4) and 2.
  EXPECT_EQ(plan.transition_rows, (std::vector<vertex_t>{3, 4}));
  EXPECT_EQ(plan.remote_rows, (std::vector<vertex_t>{2, 2}));
  // GPU 0: batch 0 loads 0,1,2 into slots 0,1,2; vertex 1 leaves; batch 1 loads 3 into slot 1.
  const ChunkPlan& a = plan.chunk(0, 0);
  EXPECT_EQ(a.load_vertices, (std::vector<vertex_t>{0, 1, 2}));
  EXPECT_EQ(a.load_slots, (std::vector<vertex_t>{0, 1, 2}));
  EXPECT_EQ(a.leave_vertices, (std::vector<vertex_t>{1}));
  EXPECT_EQ(a.leave_slots, (std::vector<vertex_t>{1}));
  EXPECT_EQ(a.remote_vertices, (std::vector<vertex_t>{4, 5}));
  EXPECT_EQ(a.remote_owner, (std::vector<std::int32_t>{1, 1}));
  EXPECT_EQ(a.remote_owner_slots, (std::vector<vertex_t>{0, 1}));
  EXPECT_EQ(a.remote_slots, (std::vector<vertex_t>{0, 1}));
  // Rows: 0 -> [0 (self, slot 0), 4 (remote slot 0 -> 3 + 0), 2 (slot 2)],
  //       1 -> [1 (slot 1), 4 (3), 5 (remote slot 1 -> 4)].
  EXPECT_EQ(a.indptr, (std::vector<edge_t>{0, 3, 6}));
  EXPECT_EQ(a.columns, (std::vector<vertex_t>{0, 3, 2, 1, 3, 4}));
  const ChunkPlan& b = plan.chunk(1, 0);
  EXPECT_EQ(b.reuse_count, 2);
  EXPECT_EQ(b.load_vertices, (std::vector<vertex_t>{3}));
  EXPECT_EQ(b.load_slots, (std::vector<vertex_t>{1}));
  EXPECT_EQ(b.remote_pull, (std::vector<std::uint8_t>{0, 0}));
  EXPECT_EQ(b.leave_vertices, (std::vector<vertex_t>{0, 2, 3}));
  EXPECT_EQ(b.leave_slots, (std::vector<vertex_t>{0, 2, 1}));
  // GPU 1, batch 1: remote {2, 3}: 2 keeps remote slot 1, 3 takes slot 0 freed by vertex 0.
  const ChunkPlan& c = plan.chunk(1, 1);
  EXPECT_EQ(c.remote_vertices, (std::vector<vertex_t>{2, 3}));
  EXPECT_EQ(c.remote_slots, (std::vector<vertex_t>{1, 0}));
  EXPECT_EQ(c.remote_pull, (std::vector<std::uint8_t>{0, 1}));
  EXPECT_EQ(c.remote_owner_slots, (std::vector<vertex_t>{2, 1}));  // on GPU 0 in batch 1
  EXPECT_EQ(c.load_vertices, (std::vector<vertex_t>{7}));
  EXPECT_EQ(c.load_slots, (std::vector<vertex_t>{3}));
  EXPECT_EQ(c.reuse_count, 3);

  // GPU memory estimate of GPU 0 (M = 3 + 2 = 5 merged rows; chunks of 2 rows and 6 entries; at
  // most 3 loads and 3 leaving rows per batch) for a 2-layer GCN 4 -> 8 -> 2. Its last layer
  // narrows, so it transforms first and is pretransformed: loads of layer 1 land in Zm (2
  // floats, padded to 4), there is no dX, and layer 0's output block holds T rows (4 wide).
  //   buffers (floats): X 5x4 + A 2x4 + Z 2x8 + out 2x4 + dZ 2x8 + Zm 5x4 + dZm 5x4 = 108
  //     (no dA: layer 0 computes no input gradient, layer 1 aggregates nothing); parameters
  //     (4*8+8 + 8*2+2 = 58) x 4 (weights, gradients, Adam m, v) = 232; the rows GPU 1 pushes
  //     in a batch (2, as dT^1 rows padded to 4) = 8; 348 floats = 1392 B.
  //   overlap: stage 3x4 + flush buffer 3x2 + second set (out 2x4, dZ 2x8, A 2x4) = 50 floats
  //     = 200 B.
  //   constants, 4 B per entry: chunk row positions 2 = 8 B; batch 0: CSR (2+1)x8 + 6x4 = 48 B
  //     with the column degrees of the 5 merged rows 20 B, self columns 2 + loads 3x3 + pulls
  //     2x2 + pushes 2 (local slots; the owner holds where they land) + remote slots 2 + leaves
  //     3x1 + destination keys, labels, mask 3x2 + received slots 2 = 30 entries, 188 B;
  //     batch 1: 68 B + (2 + 3x1 + 0 + 2 + 2 + 3x3 + 3x2 + 2 = 26) x 4 = 172 B; flush
  //     positions 3 = 12 B; the kept tail (vertex 0 | vertices 2, 3: source and block positions
  //     per chunk) 2x3 = 24 B; batch 0's load of vertex 2 as a row of the last chunk's block
  //     (early next pass) 4 B; 408 B.
  //   CUDA: 64 allocations, each under 256 B, one 256-byte granule each = 16384 B: 12 buffers,
  //     5 overlap buffers, 35 uploaded lists besides the CSRs, 2 x 6 CSR arrays in the CUDA
  //     layout (offsets, columns, self entries, transposed offsets and rows, column degrees: GCN
  //     derives its entry weights, so no values and no transpose permutation). Scratch: the
  //     loss, the chunk's predictions and the column sums' partial sums (one slice of 8 floats),
  //     3 x 256 = 768 B.
  //   all_constants = max(ceil(16384 x 8 / 7), 16384 + 768) = 18725.
  //   With constants spilling to host memory, seven eighths of the budget hold the setup with
  //   only the largest chunk's constants (batch 0's 21 granules: 6 CSR arrays, 15 lists; batch
  //   1's take 19, no pulls): 64 - 40 + 21 = 45 granules = 11520 B, ceil(11520 x 8 / 7) =
  //   13166; but the constants fill the device up to seven eighths first, so the free eighth
  //   must hold the scratch: first use 768 B, two slots for a chunk's CSR arrays staged before
  //   use, 6 granules each = 3072 B: 8 x 3840 = 30720. total = min(18725, 30720) = 18725.
  //   minimum, without the overlap buffers (5 buffers, the flush positions and the early next
  //   pass's list: 7 granules; the kept tail lives in dZm and stays): 38 granules, ceil(9728 x
  //   8 / 7) = 11118, again below the free eighth's 30720: minimum = total = 18725.
  //   No loss-row CSRs (empty flags: as --last-layer-rows all).
  ModelShape shape = test::model_shape("gcn", 2).in_dim(4).hidden(8).classes(2);
  const LossRowFlags all_rows;
  const GpuMemoryEstimate gpu0 = estimate_gpu_memory(plan, all_rows, 0, shape);
  EXPECT_EQ(gpu0.buffers, 1392);
  EXPECT_EQ(gpu0.overlap, 200);
  EXPECT_EQ(gpu0.constants, 408);
  EXPECT_EQ(gpu0.device_bytes(), 2000);
  EXPECT_EQ(gpu0.cuda_setup, 16384);
  EXPECT_EQ(gpu0.cuda_scratch, 768);
  EXPECT_EQ(gpu0.cuda_chunk_constants, 40 * 256);
  EXPECT_EQ(gpu0.cuda_largest_chunk, 21 * 256);
  EXPECT_EQ(gpu0.all_constants, 18725);
  EXPECT_EQ(gpu0.cuda_staging, 2 * 6 * 256);
  EXPECT_EQ(gpu0.total, 18725);
  EXPECT_EQ(estimate_gpu_bytes(plan, all_rows, 0, shape), 18725);
  EXPECT_EQ(gpu0.cuda_overlap, 7 * 256);
  EXPECT_EQ(gpu0.minimum, 18725);
  // GPU 1 holds one more transition row, and 4 rows leave its last batch.
  EXPECT_GT(estimate_gpu_memory(plan, all_rows, 1, shape).device_bytes(), gpu0.device_bytes());
  shape.model = "gat";
  shape.heads = 2;
  EXPECT_GT(estimate_gpu_bytes(plan, all_rows, 0, shape), 18725);
  shape.model = "gin";  // sluice-train has no GIN
  EXPECT_THROW(estimate_gpu_bytes(plan, all_rows, 0, shape), InputError);
}

// With one chunk a partition, each partition numbers the vertices that rows of other partitions
// read before its others (BoundaryVertices::kFirst), each group in dataset order, so that the
// rows its peers read are one run at its start; with more chunks the dataset order stays.
TEST(PlanBuilder, OneChunkPartitionsNumberBoundaryVerticesFirst) {
  const Dataset d = test::graph_from_in_neighbors(
      {{4, 2}, {4, 5}, {4, 5}, {0, 5}, {0, 2}, {2, 6}, {2, 5}, {3, 4}});
  // Rows 4-7 read 0, 2 and 3 of partition 0 (not 1); rows 0-3 read 4 and 5 (not 6, 7).
  const Plan one = test::make_plan(d, options(2, 1, "range", Reorganize::kOff));
  ASSERT_EQ(find_plan_violation(d, one), "");
  EXPECT_EQ(one.new_to_old, (std::vector<vertex_t>{0, 2, 3, 1, 4, 5, 6, 7}));
  // Partition 1's only chunk reads partition 0's vertices 0, 2, 3: its remote rows are
  // partition 0's first three, in the same order.
  EXPECT_EQ(one.chunk(0, 1).remote_vertices, (std::vector<vertex_t>{0, 1, 2}));
  const Plan two = test::make_plan(d, options(2, 2, "range", Reorganize::kOff));
  EXPECT_EQ(two.new_to_old, (std::vector<vertex_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Random graphs: every partition's boundary vertices before its others, both in dataset order.
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const vertex_t n = 40 + static_cast<vertex_t>(mix64(seed) % 100);
    const Dataset g = test::skewed_multigraph(n, 4 * n, seed);
    for (int P : {2, 3}) {
      SCOPED_TRACE(cat("seed ", seed, " P ", P));
      const Plan plan = test::make_plan(g, options(P, 1, "metis", Reorganize::kOff));
      ASSERT_EQ(find_plan_violation(g, plan), "");
      std::vector<std::uint8_t> read_outside(std::size_t(n), 0);
      for (vertex_t u = 0; u < n; ++u)
        for (edge_t e = g.indptr[std::size_t(u)]; e < g.indptr[std::size_t(u) + 1]; ++e) {
          const vertex_t v = g.indices[std::size_t(e)];
          if (plan.owner(plan.old_to_new[std::size_t(v)]) !=
              plan.owner(plan.old_to_new[std::size_t(u)]))
            read_outside[std::size_t(v)] = 1;
        }
      int boundary = 0;
      for (int p = 0; p < P; ++p)
        for (vertex_t v = plan.partition_offsets[std::size_t(p)] + 1;
             v < plan.partition_offsets[std::size_t(p) + 1]; ++v) {
          const vertex_t a = plan.new_to_old[std::size_t(v) - 1],
                         b = plan.new_to_old[std::size_t(v)];
          boundary += read_outside[std::size_t(a)];
          // Boundary before interior; within a group, dataset order.
          EXPECT_GE(read_outside[std::size_t(a)], read_outside[std::size_t(b)]) << "row " << v;
          if (read_outside[std::size_t(a)] == read_outside[std::size_t(b)]) {
            EXPECT_LT(a, b) << "row " << v;
          }
        }
      EXPECT_GT(boundary, 0);
    }
  }
}

// Partition 0's range r and partition 1's range 3 - r draw their in-neighbors from the same
// pool, so the natural pairing (r with r) is the worst and phase 1 must find the pairs.
TEST(Reorganize, FindsMatchingChunks) {
  std::mt19937_64 rng(3);
  std::vector<std::vector<vertex_t>> in(400);
  for (vertex_t v = 0; v < 400; ++v) {
    const int r = (v % 200) / 50;
    const int pool = v < 200 ? r : 3 - r;
    for (int e = 0; e < 8; ++e) {
      const vertex_t base = (rng() % 2 ? 200 : 0) + pool * 50;
      in[v].push_back(base + static_cast<vertex_t>(rng() % 40));
    }
  }
  const Dataset d = test::graph_from_in_neighbors(in);
  const Plan natural = test::make_plan(d, options(2, 4, "range", Reorganize::kOff));
  const Plan reorganized = test::make_plan(d, options(2, 4, "range", Reorganize::kOn));
  EXPECT_EQ(find_plan_violation(d, reorganized), "");
  EXPECT_TRUE(reorganized.reorganized);
  EXPECT_DOUBLE_EQ(reorganized.stats.cost_before, natural.stats.cost_after);
  EXPECT_LT(reorganized.stats.cost_after, 0.9 * reorganized.stats.cost_before);
  EXPECT_LT(reorganized.stats.volume_p2p_rows, natural.stats.volume_p2p_rows);
  for (int c = 0; c < 4; ++c)
    EXPECT_EQ(reorganized.chunk(c, 1).range, 3 - reorganized.chunk(c, 0).range);
}

TEST(Reorganize, NeverRaisesTheCost) {
  for (std::uint64_t seed = 20; seed < 40; ++seed) {
    const Dataset d = test::skewed_multigraph(200 + static_cast<vertex_t>(seed), 1000, seed);
    for (int P : {1, 2, 4}) {
      for (int C : {2, 5, 8}) {
        const Plan off = test::make_plan(d, options(P, C, "random", Reorganize::kOff));
        const Plan on = test::make_plan(d, options(P, C, "random", Reorganize::kOn));
        EXPECT_DOUBLE_EQ(on.stats.cost_before, off.stats.cost_after);
        EXPECT_LE(on.stats.cost_after, off.stats.cost_after) << seed << " " << P << " " << C;
        if (!on.reorganized) {
          EXPECT_EQ(on.stats.cost_after, on.stats.cost_before);
        }
      }
    }
  }
}

// Cora (OGB raw layout, read here with zlib so the test does not depend on the importer),
// symmetrized, METIS into 2 partitions of 4 chunks.
TEST(PlanBuilder, CoraTwoPartitionsFourChunks) {
  const std::string path = test::cora_dir() + "/raw/edge.csv.gz";
  gzFile file = gzopen(path.c_str(), "rb");
  ASSERT_NE(file, nullptr) << "Cora is missing at " << path;
  std::vector<std::pair<vertex_t, vertex_t>> edges;
  char line[256];
  while (gzgets(file, line, sizeof line)) {
    long a = 0, b = 0;
    if (std::sscanf(line, "%ld,%ld", &a, &b) == 2) edges.emplace_back(a, b);
  }
  gzclose(file);
  ASSERT_EQ(edges.size(), 5278u);
  const vertex_t n = 2708;
  std::vector<std::set<vertex_t>> in(n);
  for (auto [a, b] : edges) {
    in[b].insert(a);
    in[a].insert(b);
  }
  std::vector<std::vector<vertex_t>> lists(n);
  for (vertex_t v = 0; v < n; ++v) lists[v].assign(in[v].begin(), in[v].end());
  const Dataset d = test::graph_from_in_neighbors(lists);
  EXPECT_EQ(d.num_edges(), 10556);
  const Plan plan =
      test::make_plan(d, options(2, 4, "metis", Reorganize::kOn).cost_feature_dim(1433));
  EXPECT_EQ(plan.partitioner, "metis");
  EXPECT_EQ(find_plan_violation(d, plan), "");
  // Both partitions hold about half of the work; every chunk is non-empty.
  for (int p = 0; p < 2; ++p) {
    const vertex_t size = plan.partition_offsets[p + 1] - plan.partition_offsets[p];
    EXPECT_GT(size, n / 4);
    for (int c = 0; c < 4; ++c) EXPECT_GT(plan.chunk(c, p).num_dst(), 0);
  }
  EXPECT_GT(plan.stats.replication_factor, 1.0);
  EXPECT_LT(plan.stats.replication_factor, 4.0);
  EXPECT_LT(plan.stats.volume_reuse_rows, plan.stats.volume_p2p_rows);
  EXPECT_LT(plan.stats.volume_p2p_rows, plan.stats.volume_baseline_rows);
  EXPECT_GE(plan.stats.volume_p2p_rows, n);  // every vertex is its own neighbor at least once
  EXPECT_LE(plan.stats.cost_after, plan.stats.cost_before);
}

// Large enough for every OpenMP loop to run in parallel: the plan must verify and must not
// depend on the thread count.
TEST(PlanBuilder, ParallelBuildMatchesSerialBuild) {
  const Dataset d = test::skewed_multigraph(20000, 100000, 77);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Plan serial = test::make_plan(d, options(3, 5, "metis", Reorganize::kOn));
  omp_set_num_threads(std::max(2, threads));
  const Plan parallel = test::make_plan(d, options(3, 5, "metis", Reorganize::kOn));
  omp_set_num_threads(threads);
  EXPECT_EQ(find_plan_violation(d, parallel), "");
  EXPECT_EQ(serial.new_to_old, parallel.new_to_old);
  EXPECT_EQ(serial.transition_rows, parallel.transition_rows);
  EXPECT_EQ(serial.stats.volume_reuse_rows, parallel.stats.volume_reuse_rows);
  ASSERT_EQ(serial.chunk_plans.size(), parallel.chunk_plans.size());
  for (std::size_t k = 0; k < serial.chunk_plans.size(); ++k) {
    EXPECT_EQ(serial.chunk_plans[k].range, parallel.chunk_plans[k].range);
    EXPECT_EQ(serial.chunk_plans[k].columns, parallel.chunk_plans[k].columns);
    EXPECT_EQ(serial.chunk_plans[k].load_slots, parallel.chunk_plans[k].load_slots);
    EXPECT_EQ(serial.chunk_plans[k].remote_owner_slots, parallel.chunk_plans[k].remote_owner_slots);
  }
}

// A graph whose low ids are hubs (vertex v has 200 / (v + 1) + 1 in-edges): an edge-balanced
// range split gives partition 0 few vertices, a vertex-balanced one half of them, "both" lands in
// between; METIS with two constraints balances vertices and edges at once.
TEST(Partition, BalanceChoosesWhatPartsEqualize) {
  const Dataset d = test::hub_graph(2000, 5);
  auto shares = [&](const VertexPartition& partition) {
    double vertices = 0, edges = 0;
    for (vertex_t v = 0; v < d.num_nodes; ++v)
      if (partition.part[std::size_t(v)] == 0) {
        vertices += 1;
        edges += double(d.indptr[std::size_t(v) + 1] - d.indptr[std::size_t(v)]) + 1;
      }
    return std::make_pair(vertices / d.num_nodes, edges / double(d.num_edges() + d.num_nodes));
  };
  const auto by_edges = shares(partition_vertices(d, 2, "range", 0, Balance::kEdges));
  const auto by_vertices = shares(partition_vertices(d, 2, "range", 0, Balance::kVertices));
  const auto by_both = shares(partition_vertices(d, 2, "range", 0, Balance::kBoth));
  EXPECT_NEAR(by_edges.second, 0.5, 0.01);
  EXPECT_LT(by_edges.first, 0.45);
  EXPECT_NEAR(by_vertices.first, 0.5, 0.001);
  EXPECT_GT(by_vertices.second, 0.55);
  EXPECT_GT(by_both.first, by_edges.first);
  EXPECT_LT(by_both.first, by_vertices.first);
  const auto metis = shares(partition_vertices(d, 2, "metis", 0, Balance::kBoth));
  EXPECT_NEAR(metis.first, 0.5, 0.04);
  EXPECT_NEAR(metis.second, 0.5, 0.04);
  EXPECT_EQ(parse_balance("vertices"), Balance::kVertices);
  EXPECT_EQ(balance_name(parse_balance("both")), "both");
  EXPECT_THROW(parse_balance("degrees"), InputError);
}

// --imbalance: METIS's load-imbalance tolerance per constraint (ubvec). A tight vertex
// tolerance evens the vertex counts of the hub graph; bad lists are input errors.
TEST(Partition, MetisImbalanceToleranceBoundsTheParts) {
  const Dataset d = test::hub_graph(2000, 5);
  auto largest_part = [&](const VertexPartition& partition) {
    std::int64_t zero = 0;
    for (vertex_t v = 0; v < d.num_nodes; ++v) zero += partition.part[std::size_t(v)] == 0;
    return std::max(zero, std::int64_t(d.num_nodes) - zero);
  };
  const auto loose = partition_vertices(d, 2, "metis", 0, Balance::kBoth, {1.3, 1.3});
  const auto tight = partition_vertices(d, 2, "metis", 0, Balance::kBoth, {1.3, 1.002});
  EXPECT_LE(largest_part(tight), 1002);
  EXPECT_GT(largest_part(loose), largest_part(tight));
  // The default for two constraints is 1.01 each (METIS's own, 1.03, with one).
  const auto standard = partition_vertices(d, 2, "metis", 0, Balance::kBoth);
  EXPECT_LE(largest_part(standard), 1010);
  EXPECT_GT(largest_part(loose), largest_part(standard));
  EXPECT_EQ(parse_imbalance("1.03", 2, "--imbalance"), std::vector<double>({1.03}));
  EXPECT_EQ(parse_imbalance("1.03,1.01", 2, "--imbalance"), std::vector<double>({1.03, 1.01}));
  for (const char* bad : {"", "1", "0.9", "abc", "1.03,", "1.1,1.1,1.1", "1.05x"})
    EXPECT_THROW(parse_imbalance(bad, 2, "--imbalance"), InputError) << bad;
  EXPECT_THROW(parse_imbalance("1.03,1.01", 1, "--imbalance"), InputError);
}

TEST(Partition, MetisIndexWidthIsChecked) {
  const std::int64_t max = std::numeric_limits<std::int32_t>::max();
  std::string why;
  EXPECT_TRUE(fits_metis_index(1000, 5000, &why));
  EXPECT_TRUE(why.empty());
  if (sizeof(idx_t) == 4) {
    EXPECT_FALSE(fits_metis_index(1000, max / 2 + 1, &why));  // 2m overflows
    EXPECT_NE(why.find("32-bit idx_t"), std::string::npos) << why;
    EXPECT_FALSE(fits_metis_index(max / 2 + 100, max / 2 - 10, &why));  // m + n overflows
  }
  EXPECT_TRUE(fits_metis_index(100, max / 4));
}

}  // namespace
}  // namespace sluice
