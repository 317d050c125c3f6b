// What evaluations keep and where. Layer 0's aggregation of the features
// (ScheduleOptions::evaluation_cache): the first evaluation writes it, later ones take layer 0's
// aggregation from it and load no features, and every evaluation predicts exactly what it
// predicts without the cache, between training steps too (the features never change, and an
// evaluation has no dropout). The layer outputs an evaluation's next pass reads
// (ScheduleOptions::evaluation_outputs), in training buffers: the same predictions, and the
// training steps after them the same losses, with none of those rows on the host link. The chunk
// CSRs its later passes read again (ScheduleOptions::evaluation_csrs), copied once into training
// buffers: the same numbers, fewer copies. What an evaluation prepares for the run ahead
// (EvaluationsAhead), and its predictions (Predictions).
#include <gtest/gtest.h>

#include <array>
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

// A two-layer GCN over `d`'s features and classes.
ModelSpec gcn_spec(const Dataset& d, std::int64_t hidden) {
  return test::model_spec(
      test::model_shape("gcn", 2).in_dim(d.feature_dim).hidden(hidden).classes(d.num_classes));
}

// A model and a plan's shape, for the tests that loop over several.
struct ModelCase {
  std::string model;
  int layers, partitions, chunks;
  std::string name() const {
    return model + " " + std::to_string(layers) + " layers, P = " + std::to_string(partitions) +
           ", C = " + std::to_string(chunks);
  }
};

// `model` of `layers` layers over `d`'s features and classes (GAT: one head).
ModelSpec spec_for(const Dataset& d, const std::string& model, int layers, std::int64_t hidden) {
  return test::model_spec(test::model_shape(model, layers)
                              .in_dim(d.feature_dim)
                              .hidden(hidden)
                              .classes(d.num_classes)
                              .heads(1));
}

struct Evaluations {
  std::vector<std::vector<std::int32_t>> predictions;  // per evaluation
  std::vector<TransferCounters> transfers;             // per evaluation
};

// Three evaluations, a training step before the third; memory_budget > 0 caps each device;
// `ahead` is what each evaluation is told of the ones after it.
Evaluations evaluate_three_times(
    const Dataset& d, const Plan& plan, const std::string& model, HostPrecision precision,
    EvaluationCache cache, CommMode comm = CommMode::kP2pReuse, std::int64_t memory_budget = 0,
    std::array<EvaluationsAhead, 3> ahead = {EvaluationsAhead::kMore, EvaluationsAhead::kMore,
                                             EvaluationsAhead::kMore}) {
  const ModelSpec spec = test::model_spec(
      test::model_shape(model, 2).in_dim(d.feature_dim).hidden(8).classes(d.num_classes).heads(2));
  BackendOptions backend_options = test::backend_options(plan.partitions);
  if (memory_budget > 0) backend_options.memory_budget = memory_budget;
  std::unique_ptr<Backend> backend = make_cpu_backend(backend_options);
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 5;
  options.host_precision = precision;
  options.evaluation_cache = cache;
  options.comm = comm;
  Schedule schedule(*backend, d, plan, spec, options);
  schedule.set_parameters(init_parameters(spec, 3));
  Evaluations out;
  for (int i = 0; i < 3; ++i) {
    if (i == 2) {
      schedule.forward_backward(0);
      schedule.adam_step(0.05f, 0.f, 1);
    }
    schedule.reset_counters();
    out.predictions.push_back(schedule.evaluate(ahead[std::size_t(i)]));
    out.transfers.push_back(schedule.counters());
  }
  return out;
}

// On one partition and on several (each device keeps its partition's rows), in every --comm mode.
TEST(EvaluationCache, LaterEvaluationsLoadNoFeaturesAndPredictTheSame) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  struct Layout {
    int partitions, chunks;
    CommMode comm;
  };
  for (const Layout layout : {Layout{1, 1, CommMode::kP2pReuse}, Layout{1, 3, CommMode::kP2pReuse},
                              Layout{1, 4, CommMode::kP2pReuse}, Layout{2, 1, CommMode::kP2pReuse},
                              Layout{3, 2, CommMode::kP2p}, Layout{2, 3, CommMode::kBaseline}}) {
    const int chunks = layout.chunks;
    const Plan plan = test::make_plan(d, test::plan_options(layout.partitions, chunks));
    for (const std::string model : {"gcn", "sage"})
      for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16}) {
        SCOPED_TRACE(model + ", " + host_precision_name(precision) +
                     ", P = " + std::to_string(layout.partitions) +
                     ", C = " + std::to_string(chunks) + ", " + comm_mode_name(layout.comm));
        const Evaluations kept = evaluate_three_times(d, plan, model, precision,
                                                      EvaluationCache::kWhereItFits, layout.comm);
        const Evaluations plain =
            evaluate_three_times(d, plan, model, precision, EvaluationCache::kNone, layout.comm);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(kept.predictions[i], plain.predictions[i]) << i;
        EXPECT_NE(plain.predictions[0], plain.predictions[2]);  // the step changed the model
        // The first evaluation loads what it loads without the cache; later ones load less:
        // layer 0 loads no features (with one chunk, layer 1's rows come from layer 0's output
        // block on the device and the rest is in place, so both may load nothing).
        EXPECT_EQ(kept.transfers[0].h2d_gather_rows, plain.transfers[0].h2d_gather_rows);
        for (const int i : {1, 2}) {
          if (chunks > 1)
            EXPECT_LT(kept.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
          else
            EXPECT_LE(kept.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
        }
      }
  }
}

// GAT aggregates transformed rows and keeps nothing: every evaluation loads as much as the one
// before. (Each one ends by prefetching the next step's first batch, which the next evaluation
// finds: the first evaluation loads those rows twice, the later ones once.)
TEST(EvaluationCache, GatLoadsEveryTime) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const int partitions : {1, 2}) {
    const Plan plan = test::make_plan(d, test::plan_options(partitions, 3));
    const Evaluations kept =
        evaluate_three_times(d, plan, "gat", HostPrecision::kFp32, EvaluationCache::kWhereItFits);
    EXPECT_EQ(kept.transfers[2].h2d_gather_rows, kept.transfers[1].h2d_gather_rows) << partitions;
    EXPECT_GT(kept.transfers[0].h2d_gather_rows, kept.transfers[1].h2d_gather_rows) << partitions;
    EXPECT_GT(kept.transfers[1].h2d_gather_rows, 0) << partitions;
  }
}

// Several devices keep the cache all or none: one device without room frees the others'. The
// cache then goes to host memory (fp32 host data): later evaluations predict the same, gather no
// features and load the partitions' cache rows as blocks instead; bf16 host data keep none.
TEST(EvaluationCache, KeptOnEveryDeviceOrInHostMemory) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(2, 2));
  const ModelSpec spec = gcn_spec(d, 8);
  // Bytes in use per device without and with the cache.
  std::int64_t base[2] = {0, 0}, full[2] = {0, 0};
  for (const EvaluationCache cache : {EvaluationCache::kNone, EvaluationCache::kWhereItFits}) {
    std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(2));
    ScheduleOptions options;
    options.evaluation_cache = cache;
    options.layer_outputs = LayerOutputs::kRecomputed;  // the cache's bytes alone
    options.remote_features = RemoteFeatures::kPulled;
    Schedule schedule(*backend, d, plan, spec, options);
    for (int p = 0; p < 2; ++p)
      (cache == EvaluationCache::kNone ? base : full)[p] = backend->device(p).bytes_in_use();
  }
  for (int p = 0; p < 2; ++p) {
    const std::int64_t rows =
        plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
    ASSERT_EQ(full[p] - base[p], rows * d.feature_dim * std::int64_t(sizeof(float))) << p;
  }
  // A budget one float short of the smaller device total with the cache: one device has no room
  // for its share, and neither keeps one.
  BackendOptions backend_options;
  backend_options.partitions = 2;
  backend_options.memory_budget = std::min(full[0], full[1]) - 4;
  ASSERT_GE(backend_options.memory_budget, std::max(base[0], base[1]));
  std::unique_ptr<Backend> backend = make_cpu_backend(backend_options);
  ScheduleOptions options;
  options.evaluation_cache = EvaluationCache::kWhereItFits;
  options.layer_outputs = LayerOutputs::kRecomputed;
  options.remote_features = RemoteFeatures::kPulled;
  Schedule schedule(*backend, d, plan, spec, options);
  for (int p = 0; p < 2; ++p) EXPECT_EQ(backend->device(p).bytes_in_use(), base[p]) << p;
  for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16}) {
    SCOPED_TRACE(host_precision_name(precision));
    const Evaluations host =
        evaluate_three_times(d, plan, "gcn", precision, EvaluationCache::kWhereItFits,
                             CommMode::kP2pReuse, backend_options.memory_budget);
    const Evaluations plain =
        evaluate_three_times(d, plan, "gcn", precision, EvaluationCache::kNone, CommMode::kP2pReuse,
                             backend_options.memory_budget);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(host.predictions[i], plain.predictions[i]) << i;
    EXPECT_EQ(host.transfers[0].h2d_gather_rows, plain.transfers[0].h2d_gather_rows);
    // The first evaluation writes every vertex's row of the cache, later ones read them back.
    const std::int64_t cache_bytes = std::int64_t(d.num_nodes) * d.feature_dim * 4;
    for (const int i : {1, 2}) {
      if (precision == HostPrecision::kFp32) {
        EXPECT_LT(host.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
        EXPECT_EQ(host.transfers[i].h2d_block_bytes,
                  plain.transfers[i].h2d_block_bytes + cache_bytes)
            << i;
      } else {
        EXPECT_EQ(host.transfers[i].h2d_gather_rows, plain.transfers[i].h2d_gather_rows) << i;
        EXPECT_EQ(host.transfers[i].h2d_block_bytes, plain.transfers[i].h2d_block_bytes) << i;
      }
    }
    if (precision == HostPrecision::kFp32) {
      EXPECT_EQ(host.transfers[0].d2h_bytes, plain.transfers[0].d2h_bytes + cache_bytes);
    }
  }
}

// A host-memory cache pays off only in later evaluations: an evaluation told that none follows
// allocates and fills none (it stores and loads what the run without a cache does), the next one
// told otherwise allocates and fills it, and the one after reads it.
TEST(EvaluationCache, HostCacheWaitsForAnEvaluationAhead) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(1, 2));
  const ModelSpec spec = gcn_spec(d, 8);
  // A budget without room for the device cache: it goes to host memory.
  std::int64_t base = 0;
  {
    std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(1));
    ScheduleOptions options;
    options.evaluation_cache = EvaluationCache::kNone;
    options.layer_outputs = LayerOutputs::kRecomputed;
    Schedule schedule(*backend, d, plan, spec, options);
    base = backend->device(0).bytes_in_use();
  }
  const std::int64_t budget = base + 4;
  const std::array<EvaluationsAhead, 3> ahead = {EvaluationsAhead::kNone, EvaluationsAhead::kMore,
                                                 EvaluationsAhead::kNone};
  const Evaluations host =
      evaluate_three_times(d, plan, "gcn", HostPrecision::kFp32, EvaluationCache::kWhereItFits,
                           CommMode::kP2pReuse, budget, ahead);
  const Evaluations plain =
      evaluate_three_times(d, plan, "gcn", HostPrecision::kFp32, EvaluationCache::kNone,
                           CommMode::kP2pReuse, budget, ahead);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(host.predictions[i], plain.predictions[i]) << i;
  const std::int64_t cache_bytes = std::int64_t(d.num_nodes) * d.feature_dim * 4;
  // The first: no cache at all.
  EXPECT_EQ(host.transfers[0].d2h_bytes, plain.transfers[0].d2h_bytes);
  EXPECT_EQ(host.transfers[0].h2d_gather_rows, plain.transfers[0].h2d_gather_rows);
  // The second allocates and fills it, still aggregating the features.
  EXPECT_EQ(host.transfers[1].d2h_bytes, plain.transfers[1].d2h_bytes + cache_bytes);
  EXPECT_EQ(host.transfers[1].h2d_gather_rows, plain.transfers[1].h2d_gather_rows);
  // The third reads it back (told that none follows, it uses the cache that exists).
  EXPECT_LT(host.transfers[2].h2d_gather_rows, plain.transfers[2].h2d_gather_rows);
  EXPECT_EQ(host.transfers[2].h2d_block_bytes, plain.transfers[2].h2d_block_bytes + cache_bytes);
}

struct EvaluationsAndSteps {
  std::vector<std::vector<std::int32_t>> predictions;  // per evaluation
  std::vector<TransferCounters> transfers;             // per evaluation
  std::vector<double> losses;                          // per training step
  std::vector<TransferCounters> step_transfers;        // per training step
};

// Evaluation, step, evaluation, step, evaluation (dropout on, so that the steps differ).
EvaluationsAndSteps evaluate_between_steps(
    const Dataset& d, const Plan& plan, const ModelSpec& spec, EvaluationOutputs outputs,
    HostPrecision precision = HostPrecision::kFp32,
    EvaluationCsrs csrs = EvaluationCsrs::kKeptWhereTheyFit) {
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  ScheduleOptions options;
  options.dropout = 0.3f;
  options.seed = 5;
  options.host_precision = precision;
  options.comm = plan.partitions > 1 ? CommMode::kP2p : CommMode::kP2pReuse;
  options.evaluation_outputs = outputs;
  options.evaluation_csrs = csrs;
  Schedule schedule(*backend, d, plan, spec, options);
  schedule.set_parameters(init_parameters(spec, 3));
  EvaluationsAndSteps out;
  for (int i = 0; i < 3; ++i) {
    schedule.reset_counters();
    out.predictions.push_back(schedule.evaluate());
    out.transfers.push_back(schedule.counters());
    if (i == 2) break;
    schedule.reset_counters();
    out.losses.push_back(schedule.forward_backward(i));
    out.step_transfers.push_back(schedule.counters());
    schedule.adam_step(0.05f, 0.f, i + 1);
  }
  return out;
}

// Where a block set's dZ holds a partition's rows of T^l (hidden 32 against T rows of 8 floats,
// SAGE's 12; chunks of a third of a partition or more, half for SAGE), an evaluation writes and
// reads them there: the same predictions and, after it, the same training steps (which write dZ
// again) as with the rows in host memory; the loads of those rows move from the link to device
// memory, byte for byte, and their stores disappear. GCN of three layers: H^1 (32 wide) fits no
// dZ, T^2 does. On one chunk a partition the last layer's pulls read the owners' lent rows in
// place (Schedule::Impl::pulls_resident_rows()).
TEST(EvaluationOutputs, InTrainingBuffersPredictTheSameOffTheLink) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const ModelCase& c :
       {ModelCase{"gcn", 2, 1, 2}, ModelCase{"gcn", 2, 1, 3}, ModelCase{"gcn", 2, 2, 2},
        ModelCase{"gcn", 2, 2, 1}, ModelCase{"sage", 2, 1, 2}, ModelCase{"sage", 2, 2, 1},
        ModelCase{"gat", 2, 1, 2}, ModelCase{"gat", 2, 2, 2}, ModelCase{"gcn", 3, 1, 2}}) {
    SCOPED_TRACE(c.name());
    const Plan plan = test::make_plan(d, test::plan_options(c.partitions, c.chunks));
    const ModelSpec spec = spec_for(d, c.model, c.layers, 32);
    const EvaluationsAndSteps lent =
        evaluate_between_steps(d, plan, spec, EvaluationOutputs::kTrainingBuffersWhereTheyFit);
    const EvaluationsAndSteps host =
        evaluate_between_steps(d, plan, spec, EvaluationOutputs::kHost);
    EXPECT_EQ(lent.predictions, host.predictions);
    EXPECT_EQ(lent.losses, host.losses);
    EXPECT_NE(host.predictions[0], host.predictions[2]);  // the steps changed the model
    for (std::size_t i = 0; i < 3; ++i) {
      const TransferCounters &a = lent.transfers[i], &b = host.transfers[i];
      EXPECT_EQ(b.resident_bytes, 0) << i;
      // (One chunk loads no T rows either way: the next pass finds them in place.)
      if (c.chunks > 1) {
        EXPECT_GT(a.resident_bytes, 0) << i;
      }
      EXPECT_EQ(a.h2d_gather_bytes + a.resident_bytes, b.h2d_gather_bytes) << i;
      EXPECT_LT(a.d2h_bytes, b.d2h_bytes) << i;
      EXPECT_EQ(a.h2d_block_bytes, b.h2d_block_bytes) << i;
    }
    for (std::size_t i = 0; i < 2; ++i) {
      const TransferCounters &a = lent.step_transfers[i], &b = host.step_transfers[i];
      EXPECT_EQ(a.h2d_gather_bytes, b.h2d_gather_bytes) << i;
      EXPECT_EQ(a.d2h_bytes, b.d2h_bytes) << i;
      EXPECT_EQ(a.resident_bytes, 0) << i;
    }
  }
}

// Where no dZ holds them (hidden 8: dZ has 8 floats a chunk row, as many as a T row, and four
// chunks), or the host matrices are bf16 (fp32 rows in device memory would skip the rounding a
// store gives them), the rows stay in host memory: the same transfers as kHost.
TEST(EvaluationOutputs, InHostMemoryWhereNoTrainingBufferHoldsThem) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  struct Case {
    std::int64_t hidden;
    int chunks;
    HostPrecision precision;
  };
  for (const Case& c : {Case{8, 4, HostPrecision::kFp32}, Case{32, 2, HostPrecision::kBf16}}) {
    SCOPED_TRACE("hidden " + std::to_string(c.hidden) + ", " + host_precision_name(c.precision));
    const Plan plan = test::make_plan(d, test::plan_options(1, c.chunks));
    const ModelSpec spec = gcn_spec(d, c.hidden);
    const EvaluationsAndSteps lent = evaluate_between_steps(
        d, plan, spec, EvaluationOutputs::kTrainingBuffersWhereTheyFit, c.precision);
    const EvaluationsAndSteps host =
        evaluate_between_steps(d, plan, spec, EvaluationOutputs::kHost, c.precision);
    EXPECT_EQ(lent.predictions, host.predictions);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(lent.transfers[i].resident_bytes, 0) << i;
      EXPECT_EQ(lent.transfers[i].h2d_gather_bytes, host.transfers[i].h2d_gather_bytes) << i;
      EXPECT_EQ(lent.transfers[i].d2h_bytes, host.transfers[i].d2h_bytes) << i;
    }
  }
}

struct CsrRuns {
  EvaluationsAndSteps kept, each;  // EvaluationCsrs::kKeptWhereTheyFit, kStagedEachPass
};

// evaluate_between_steps() with the chunk CSRs kept for later passes and copied every pass: the
// same predictions and losses.
CsrRuns kept_and_each_pass(const Dataset& d, const Plan& plan, const ModelSpec& spec) {
  const auto run = [&](EvaluationCsrs csrs) {
    return evaluate_between_steps(d, plan, spec, EvaluationOutputs::kTrainingBuffersWhereTheyFit,
                                  HostPrecision::kFp32, csrs);
  };
  CsrRuns r{run(EvaluationCsrs::kKeptWhereTheyFit), run(EvaluationCsrs::kStagedEachPass)};
  EXPECT_EQ(r.kept.predictions, r.each.predictions);
  EXPECT_EQ(r.kept.losses, r.each.losses);
  return r;
}

// An evaluation of several layers copies each chunk CSR once, in its first pass, into the
// buffers only training uses (dZ first), where its later passes read it (the CPU backend counts
// what the CUDA backend would copy, and overwrites the lent memory with NaNs as the copies
// would): the same predictions, and after it the same training steps, as when every pass copies
// its CSRs. Three chunks or more a device, so that the two staging slots do not hold them all.
// Every pass reads the same CSRs; GCN and GraphSAGE evaluations after the first take layer 0's
// aggregation from the evaluation cache, so one pass fewer reads them.
TEST(EvaluationCsrs, KeptFromTheFirstPassForTheNext) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const ModelCase& c :
       {ModelCase{"gcn", 2, 1, 3}, ModelCase{"gcn", 2, 1, 4}, ModelCase{"gcn", 2, 2, 3},
        ModelCase{"sage", 2, 1, 3}, ModelCase{"gat", 2, 1, 3}, ModelCase{"gcn", 3, 1, 3}}) {
    SCOPED_TRACE(c.name());
    const Plan plan = test::make_plan(d, test::plan_options(c.partitions, c.chunks));
    const ModelSpec spec = spec_for(d, c.model, c.layers, 32);
    const auto [kept, each] = kept_and_each_pass(d, plan, spec);
    EXPECT_NE(each.predictions[0], each.predictions[2]);  // the steps changed the model
    for (std::size_t i = 0; i < 3; ++i) {
      const TransferCounters &a = kept.transfers[i], &b = each.transfers[i];
      const int passes = i == 0 || c.model == "gat" ? c.layers : c.layers - 1;
      EXPECT_GT(a.h2d_csr_bytes, 0) << i;
      EXPECT_EQ(b.h2d_csr_bytes, passes * a.h2d_csr_bytes) << i;
      EXPECT_EQ(a.h2d_csr_in_line_bytes, 0) << i;
      EXPECT_EQ(b.h2d_csr_in_line_bytes, 0) << i;
    }
    for (std::size_t i = 0; i < 2; ++i)
      EXPECT_EQ(kept.step_transfers[i].h2d_csr_bytes, each.step_transfers[i].h2d_csr_bytes) << i;
  }
}

// Where the buffers only training uses hold some chunk CSRs but not all (24 out-edges a vertex,
// five chunks on one device), the first evaluation copies the others again in its second pass;
// on two devices they all fit. The lent memory spans every such buffer (dZ, dX, dA, dZm, the
// flush and receive buffers): the same numbers, in the evaluation and the steps after it.
TEST(EvaluationCsrs, CopiedEachPassWhereNoRoomIsLeft) {
  const Dataset d = test::random_dataset(900, 24, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  for (const char* model : {"gcn", "sage", "gat"}) {
    for (const int partitions : {1, 2}) {
      SCOPED_TRACE(std::string(model) + ", P = " + std::to_string(partitions));
      const Plan plan = test::make_plan(d, test::plan_options(partitions, 5));
      const ModelSpec spec = spec_for(d, model, 2, 16);
      const auto [kept, each] = kept_and_each_pass(d, plan, spec);
      const std::int64_t once = each.transfers[0].h2d_csr_bytes / 2;
      EXPECT_LT(kept.transfers[0].h2d_csr_bytes, 2 * once);
      if (partitions == 1) {
        EXPECT_GT(kept.transfers[0].h2d_csr_bytes, once);  // (two devices' halves all fit)
      } else {
        EXPECT_EQ(kept.transfers[0].h2d_csr_bytes, once);
      }
    }
  }
}

// An evaluation told that nothing follows (EvaluationsAhead::kNone) does not load the next
// training step's first batch; a step that follows anyway loads it itself: the same loss, and
// the rows one pair loads are the rows the other does.
TEST(EvaluationsAhead, TheLastEvaluationLoadsNothingForTheNextStep) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(1, 3));
  const ModelSpec spec = gcn_spec(d, 8);
  std::int64_t eval_rows[2] = {0, 0}, step_rows[2] = {0, 0};
  double losses[2] = {0, 0};
  std::vector<std::int32_t> predictions[2];
  for (const EvaluationsAhead ahead : {EvaluationsAhead::kMore, EvaluationsAhead::kNone}) {
    const int k = ahead == EvaluationsAhead::kNone;
    std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(1));
    ScheduleOptions options;
    options.dropout = 0.3f;
    options.evaluation_cache = EvaluationCache::kNone;
    Schedule schedule(*backend, d, plan, spec, options);
    schedule.set_parameters(init_parameters(spec, 3));
    predictions[k] = schedule.evaluate(ahead);
    eval_rows[k] = schedule.counters().h2d_gather_rows;
    schedule.reset_counters();
    losses[k] = schedule.forward_backward(0);
    step_rows[k] = schedule.counters().h2d_gather_rows;
  }
  EXPECT_EQ(predictions[0], predictions[1]);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_LT(eval_rows[1], eval_rows[0]);
  EXPECT_GT(step_rows[1], step_rows[0]);
  EXPECT_EQ(eval_rows[0] + step_rows[0], eval_rows[1] + step_rows[1]);
}

// An evaluation that keeps its predictions on the devices returns none and reports the
// accuracies of one that brings them back, which are its predictions counted over each split.
TEST(EvaluationPredictions, KeptOnTheDevicesCountTheSameAccuracies) {
  const Dataset d = test::random_dataset(900, 5, 24, 5, 17, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(2, 3));
  const ModelSpec spec = gcn_spec(d, 8);
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(plan.partitions));
  Schedule schedule(*backend, d, plan, spec, ScheduleOptions{});
  schedule.set_parameters(init_parameters(spec, 3));
  const std::vector<std::int32_t> predictions =
      schedule.evaluate(EvaluationsAhead::kMore, Predictions::kToHost);
  const std::array<double, 3> brought = schedule.accuracies();
  ASSERT_EQ(predictions.size(), std::size_t(d.num_nodes));
  const std::array<const std::vector<vertex_t>*, 3> splits{&d.train, &d.valid, &d.test};
  for (std::size_t k = 0; k < 3; ++k) {
    std::int64_t correct = 0, labeled = 0;
    for (const vertex_t v : *splits[k]) {
      const std::int32_t label = d.labels[std::size_t(v)];
      if (label < 0) continue;
      ++labeled;
      correct += predictions[std::size_t(plan.old_to_new[std::size_t(v)])] == label;
    }
    ASSERT_GT(labeled, 0) << k;
    EXPECT_DOUBLE_EQ(brought[k], double(correct) / double(labeled)) << k;
  }
  EXPECT_TRUE(schedule.evaluate(EvaluationsAhead::kMore, Predictions::kOnDevices).empty());
  EXPECT_EQ(schedule.accuracies(), brought);
}

}  // namespace
}  // namespace sluice
