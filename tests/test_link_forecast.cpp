// The host-link forecast of a plan under a GPU memory budget (forecast_link(),
// train/layout/vertex_data.hpp) and the chunk choice built on it (ChunkChoice,
// preprocess/chunk_search.hpp): which vertex matrices a budget holds beside the plan's buffers,
// what the others move, and that `partition --gpu-memory` takes a larger C only where its
// forecast is shorter. The CUDA placement it models is checked on a GPU
// (tests/gpu/test_cuda_memory_estimate.cpp, CudaLinkForecast).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kernels/cuda_memory_rules.hpp"
#include "preprocess/chunk_search.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/layout/vertex_data.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

const Dataset& dataset() {
  static const Dataset d =
      test::random_dataset(1200, 6, 40, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  return d;
}

ModelShape gcn_shape() {
  return test::model_shape("gcn", 2).in_dim(40).hidden(24).classes(5);
}

struct Forecastable {
  Plan plan;
  std::vector<PartitionProfile> profiles;
  ModelLayers model;
  LayoutOptions layout;
  std::int64_t setup = 0;  // partition 0's cuda_setup
  std::vector<HostMatrixShape> matrices;
  std::vector<double> priorities;
};

Forecastable forecastable(int chunks) {
  Forecastable f;
  f.plan = test::make_plan(dataset(), test::plan_options(1, chunks).seed(3));
  f.profiles = plan_profiles(f.plan, loss_row_flags(dataset(), f.plan.old_to_new), f.layout.comm);
  f.model = model_layers(gcn_shape());
  f.setup = estimate_layout_memory(partition_layout(f.profiles[0], f.model, f.layout)).cuda_setup;
  std::int64_t gathered = 0;
  for (const ChunkListSizes& list : f.profiles[0].lists) gathered += list.loads;
  f.matrices = host_matrix_shapes(f.model, f.layout, {}, dataset().num_nodes, chunks);
  f.priorities =
      vertex_data_priorities(f.model, f.layout, {}, dataset().num_nodes, gathered, chunks);
  return f;
}

// The least budget whose room (less its eighth) is `room`.
std::int64_t budget_for_room(std::int64_t room) {
  std::int64_t budget = room + room / 7;
  while (budget - budget / cuda::kBudgetHeadroomDivisor < room) ++budget;
  return budget;
}

std::int64_t moved(const Forecastable& f, std::size_t i) {
  return static_cast<std::int64_t>(f.priorities[i] * double(f.matrices[i].bytes()));
}

// With no room beside the setup every matrix moves its priority times its bytes; room for the
// matrix of highest priority keeps that one, and the rest move; room for all moves nothing.
TEST(LinkForecast, EachMatrixMovesItsPriorityTimesItsBytesUnlessItFits) {
  const Forecastable f = forecastable(4);
  ASSERT_EQ(f.matrices.size(), 4u);  // H^0, G^1 or dT^1, A^0, H^1 or T^1
  const HostDataOptions host;
  const auto forecast = [&](std::int64_t room) {
    return forecast_link(f.profiles, f.model, f.layout, host, IntermediatesChoice::kAsGiven,
                         budget_for_room(f.setup + room));
  };
  std::int64_t everything = 0;
  for (std::size_t i = 0; i < f.matrices.size(); ++i) everything += moved(f, i);
  const LinkForecast none = forecast(0);
  EXPECT_EQ(none.chunks, 4);
  EXPECT_EQ(none.link_bytes, everything);
  EXPECT_EQ(none.resident, "none");
  EXPECT_EQ(none.resident_bytes, 0);

  const std::size_t top = std::size_t(std::max_element(f.priorities.begin(), f.priorities.end()) -
                                      f.priorities.begin());
  const LinkForecast one = forecast(cuda::rounded(f.matrices[top].bytes()));
  EXPECT_EQ(one.resident, f.matrices[top].name);
  EXPECT_EQ(one.resident_bytes, f.matrices[top].bytes());
  EXPECT_EQ(one.link_bytes, everything - moved(f, top));

  std::int64_t all = 0;
  for (const HostMatrixShape& m : f.matrices) all += cuda::rounded(m.bytes());
  const GpuMemoryEstimate e =
      estimate_layout_memory(partition_layout(f.profiles[0], f.model, f.layout));
  const LinkForecast every = forecast(all + e.cuda_scratch);
  EXPECT_EQ(every.link_bytes, 0);
  EXPECT_EQ(every.resident, "every matrix");
  EXPECT_DOUBLE_EQ(every.seconds, 4 * LinkModel{}.seconds_per_chunk);
  EXPECT_DOUBLE_EQ(none.seconds, double(everything) / LinkModel{}.bytes_per_second +
                                     4 * LinkModel{}.seconds_per_chunk);
}

// Constants the room cannot hold cross the link once a pass; the forecast never rises as the
// budget grows.
TEST(LinkForecast, FallsAsTheBudgetGrows) {
  const Forecastable f = forecastable(3);
  const HostDataOptions host;
  std::int64_t everything = 0;
  for (std::size_t i = 0; i < f.matrices.size(); ++i) everything += moved(f, i);
  const std::int64_t short_by = 1000;
  const LinkForecast tight =
      forecast_link(f.profiles, f.model, f.layout, host, IntermediatesChoice::kAsGiven,
                    budget_for_room(f.setup - short_by));
  EXPECT_EQ(tight.link_bytes, everything + 4 * short_by);  // 2 layers: 4 passes an epoch
  std::int64_t before = tight.link_bytes;
  int steps = 0;
  for (std::int64_t room = 0; room < 4 * f.setup; room += f.setup / 16, ++steps) {
    const LinkForecast now = forecast_link(f.profiles, f.model, f.layout, host,
                                           IntermediatesChoice::kRecomputeWhereEverythingFits,
                                           budget_for_room(f.setup + room));
    EXPECT_LE(now.link_bytes, before) << "room " << room;
    before = now.link_bytes;
  }
  EXPECT_EQ(before, 0) << steps << " steps";
}

// Giving up the cached aggregation lets every matrix fit a room that holds all but A^0: the
// forecast follows sluice-train there with --intermediates auto, not with cache. (Without
// overlap buffers, so that giving those up is no way to fit.)
TEST(LinkForecast, RecomputesWhereThatHoldsEverything) {
  const Forecastable f = forecastable(4);
  LayoutOptions layout = f.layout;
  layout.overlap = false;
  HostDataOptions recompute;
  recompute.cache_intermediates = false;
  const GpuMemoryEstimate e =
      estimate_layout_memory(partition_layout(f.profiles[0], f.model, layout));
  std::int64_t need = 0;
  for (const HostMatrixShape& m :
       host_matrix_shapes(f.model, layout, recompute, dataset().num_nodes, 4))
    need += m.bytes();
  const std::int64_t budget = budget_for_room(e.cuda_setup + e.cuda_scratch + need);
  const LinkForecast automatic = forecast_link(
      f.profiles, f.model, layout, {}, IntermediatesChoice::kRecomputeWhereEverythingFits, budget);
  EXPECT_EQ(automatic.link_bytes, 0);
  EXPECT_EQ(automatic.resident, "every matrix");
  EXPECT_EQ(automatic.resident_bytes, need);
  // The backward pass of layer 0 aggregates its entries' feature rows again.
  std::int64_t entries = 0;
  for (const ChunkListSizes& list : f.profiles[0].lists) entries += list.nnz;
  const double again = double(entries) * double(f.model.layers[0].aggregate_width) *
                       double(sizeof(float)) / LinkModel{}.in_place_bytes_per_second;
  EXPECT_GT(f.model.layers[0].aggregate_width, 0);
  EXPECT_DOUBLE_EQ(automatic.recompute_seconds, again);
  EXPECT_DOUBLE_EQ(automatic.seconds, again + 4 * LinkModel{}.seconds_per_chunk);
  EXPECT_NE(recompute_note(automatic).find("intermediates recomputed"), std::string::npos);
  const LinkForecast cached =
      forecast_link(f.profiles, f.model, layout, {}, IntermediatesChoice::kAsGiven, budget);
  EXPECT_GT(cached.link_bytes, 0);
  EXPECT_NE(cached.resident, "every matrix");
  EXPECT_EQ(cached.recompute_seconds, 0);
  EXPECT_EQ(recompute_note(cached), "");
  // A room for every matrix with A^0 recomputes nothing.
  const std::int64_t all = need + f.matrices[2].bytes();  // H^0, dT^1, A^0, T^1
  ASSERT_EQ(f.matrices[2].role, HostMatrixRole::kAggregation);
  const LinkForecast roomy = forecast_link(f.profiles, f.model, layout, {},
                                           IntermediatesChoice::kRecomputeWhereEverythingFits,
                                           budget_for_room(e.cuda_setup + e.cuda_scratch + all));
  EXPECT_EQ(roomy.link_bytes, 0);
  EXPECT_EQ(roomy.resident_bytes, all);
  EXPECT_EQ(roomy.recompute_seconds, 0);
}

// The chunk search's inputs over one level-1 partition of the test graph.
struct SearchInputs {
  const Dataset& d = dataset();
  const Plan whole = test::make_plan(d, test::plan_options(1, 1).seed(3));
  const VertexPartition partition = partition_of_plan(whole);
  const PlanOptions options = test::plan_options(1, 1).reorganize(test::Reorganize::kOff);
  const ModelShape shape = gcn_shape();
  const LayoutOptions layout;

  // The first budget rule's need of the plan with `chunks` chunks.
  std::int64_t need(int chunks) const {
    const Plan plan = test::make_plan(d, test::plan_options(1, chunks).seed(3));
    return rules_bytes(plan_profiles(plan, loss_row_flags(d, whole.old_to_new), layout.comm), shape,
                       layout, budget_rules(shape, layout, true))
        .front();
  }
  ChunkSearchResult search(std::int64_t budget, const ChunkChoiceOptions& choice) const {
    return choose_fitting_chunks(d, partition, options, budget, shape, layout, true, choice);
  }
};

// The forecast against the traffic the schedule counts: with nothing resident and nothing
// spilled, its bytes for GCN, SAGE and GAT on plans of 4 and 12 chunks lie between 0.9 and 1.6
// times the host-link bytes (gathers, blocks, stores and flushes) of a training step and its
// evaluation on the CPU backend, which counts every transfer as the CUDA backend does for a
// host matrix. The forecast runs high: it takes every layer's gathers as the plan's loads
// (layer 1 loads fewer: the kept rows) and layer 0's evaluation from host memory (here the cache
// of its aggregation stays on the device).
TEST(LinkForecast, TracksTheScheduleTrafficOfChunkedPlans) {
  const Dataset d = test::random_dataset(3000, 8, 40, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int chunks : {4, 12}) {
      SCOPED_TRACE(cat(model, " C=", chunks));
      const Plan plan = test::make_plan(d, test::plan_options(1, chunks).seed(3));
      const test::TrainConfigBuilder config =
          test::train_config().model(model).hidden(24).heads(2).epochs(3).eval_every(1).threads(2);
      const ModelLayers layers = model_layers(memory_shape(d, config));
      const LayoutOptions layout;
      const std::vector<PartitionProfile> profiles =
          plan_profiles(plan, loss_row_flags(d, plan.old_to_new), layout.comm);
      const std::int64_t setup =
          estimate_layout_memory(partition_layout(profiles[0], layers, layout)).cuda_setup;
      const LinkForecast forecast = forecast_link(
          profiles, layers, layout, {}, IntermediatesChoice::kAsGiven, budget_for_room(setup));
      ASSERT_EQ(forecast.resident, "none");
      const EpochRecord last = train(d, plan, config).records.back();
      const auto link = [](const TransferCounters& t) {
        return t.h2d_gather_bytes + t.h2d_block_bytes + t.d2h_bytes;
      };
      const double ratio =
          double(forecast.link_bytes) / double(link(last.transfers) + link(last.eval_transfers));
      EXPECT_GE(ratio, 0.9);
      EXPECT_LE(ratio, 1.6);
    }
}

// partition --gpu-memory: on a slow link with free chunks the forecast takes a larger C than the
// smallest that fits, one that holds vertex matrices, and the plan built for it trains under
// the budget; where each chunk costs more than the link saves it keeps the smallest.
TEST(ChunkChoice, LargerCountWhereTheForecastIsShorter) {
  const SearchInputs in;
  const Dataset& d = in.d;
  const std::int64_t budget = in.need(2);
  ChunkChoiceOptions slow_link{ChunkChoice::kShortestForecast, {}, {}, {1e6, 0.}};
  const ChunkSearchResult found = in.search(budget, slow_link);
  ASSERT_TRUE(found.fits);
  EXPECT_EQ(found.smallest_fitting, 2);
  ASSERT_GE(found.forecasts.size(), 2u);
  EXPECT_EQ(found.forecasts.front().chunks, 2);
  EXPECT_NE(found.forecasts.front().resident, "every matrix");
  const auto chosen = std::find_if(found.forecasts.begin(), found.forecasts.end(),
                                   [&](const LinkForecast& f) { return f.chunks == found.chunks; });
  ASSERT_NE(chosen, found.forecasts.end());
  EXPECT_GT(found.chunks, 2);
  EXPECT_LT(chosen->link_bytes, found.forecasts.front().link_bytes);
  EXPECT_NE(chosen->resident, "none");
  for (const LinkForecast& f : found.forecasts) {
    EXPECT_GE(f.seconds, chosen->seconds) << "C=" << f.chunks;
    EXPECT_LE(f.chunks, 8 * 2);
  }
  for (std::size_t i = 1; i < found.forecasts.size(); ++i)
    EXPECT_GT(found.forecasts[i].chunks, found.forecasts[i - 1].chunks);
  EXPECT_LE(found.bytes, budget);

  // The plan with the chosen C fits the budget (the CPU backend refuses any excess).
  PlanOptions chosen_options = in.options;
  chosen_options.chunks = found.chunks;
  const Plan plan =
      build_plan_from_partition(d, in.partition, chosen_options, compute_fingerprint(d));
  EXPECT_NO_THROW(
      train(d, plan, test::train_config().hidden(24).epochs(1).threads(2).gpu_memory(budget)));

  ChunkChoiceOptions costly_chunks{ChunkChoice::kShortestForecast, {}, {}, {1e6, 10.}};
  const ChunkSearchResult kept = in.search(budget, costly_chunks);
  EXPECT_EQ(kept.chunks, 2);
  const ChunkSearchResult smallest = in.search(budget, {ChunkChoice::kSmallest, {}, {}, {}});
  EXPECT_EQ(smallest.chunks, 2);
  EXPECT_TRUE(smallest.forecasts.empty());
}

// The comparison forecasts the largest count (8 C0) right after C0: where it holds no more
// vertex data, no count between is tried and C0 stays; otherwise every count between is, in
// ascending order, and the choice holds more vertex data than C0 or is C0.
TEST(ChunkChoice, ProbesTheLargestCountFirst) {
  const SearchInputs in;
  int skipped = 0, compared = 0;
  for (const int C : {1, 2, 3, 5, 8, 13, 21, 34, 55}) {
    const std::int64_t budget = in.need(C);
    SCOPED_TRACE(cat("budget ", budget, " (C=", C, "'s need)"));
    const ChunkSearchResult found = in.search(budget, {ChunkChoice::kShortestForecast, {}, {}, {}});
    ASSERT_TRUE(found.fits);
    const int first = found.smallest_fitting;
    ASSERT_FALSE(found.forecasts.empty());
    EXPECT_EQ(found.forecasts.front().chunks, first);
    for (std::size_t i = 1; i < found.forecasts.size(); ++i)
      EXPECT_GT(found.forecasts[i].chunks, found.forecasts[i - 1].chunks);
    const LinkForecast& c0 = found.forecasts.front();
    if (found.forecasts.size() == 2 && found.forecasts.back().resident_bytes <= c0.resident_bytes) {
      ++skipped;
      EXPECT_EQ(found.forecasts.back().chunks, std::min(8 * first, int(in.d.num_nodes)));
      EXPECT_EQ(found.chunks, first);
    } else if (found.forecasts.size() > 1) {
      ++compared;
      for (const LinkForecast& f : found.forecasts)
        if (f.chunks == found.chunks && f.chunks != first) {
          EXPECT_GT(f.resident_bytes, c0.resident_bytes);
          EXPECT_LT(f.seconds, c0.seconds);
        }
    }
  }
  EXPECT_GT(skipped, 0);
  EXPECT_GT(compared, 0);
}

// Where the smallest fitting C0 holds every matrix only by recomputing the cached aggregation,
// the comparison goes on to larger counts, and one whose smaller buffers leave room to cache it
// wins where recomputing costs more than its chunks (here: free chunks, a slow device memory).
TEST(ChunkChoice, LargerCountWhereC0HoldsEverythingOnlyByRecomputing) {
  const SearchInputs in;
  const ChunkChoiceOptions slow_memory{ChunkChoice::kShortestForecast,
                                       {},
                                       IntermediatesChoice::kRecomputeWhereEverythingFits,
                                       {50e9, 0., 1e6}};
  int recomputing = 0, cached = 0;
  const std::int64_t low = in.need(13), high = 2 * in.need(1);
  for (std::int64_t budget = low; budget < high;
       budget += std::max<std::int64_t>(1, budget / 256)) {
    const ChunkSearchResult found = in.search(budget, slow_memory);
    ASSERT_TRUE(found.fits);
    const LinkForecast& c0 = found.forecasts.front();
    if (c0.link_bytes > 0 || c0.recompute_seconds == 0) continue;
    SCOPED_TRACE(cat("budget ", budget, ", C0 = ", c0.chunks));
    ++recomputing;
    ASSERT_GE(found.forecasts.size(), 2u);  // larger counts compared
    const auto whole = std::find_if(
        found.forecasts.begin(), found.forecasts.end(),
        [](const LinkForecast& f) { return f.link_bytes == 0 && f.recompute_seconds == 0; });
    if (whole == found.forecasts.end()) {
      EXPECT_EQ(found.chunks, c0.chunks);
      continue;
    }
    ++cached;
    EXPECT_EQ(found.chunks, whole->chunks);  // the first such count, with chunks free
    EXPECT_GT(whole->resident_bytes, c0.resident_bytes);
    EXPECT_LT(whole->seconds, c0.seconds);
  }
  EXPECT_GT(recomputing, 0);
  EXPECT_GT(cached, 0);
}

}  // namespace
}  // namespace sluice
