// The central invariant (docs/design.md): a chunked out-of-core run equals a plain full-graph run.
// sluice-train's schedule (CPU backend, P logical devices) against the double-precision
// reference of tests/support/reference_model.hpp on small random graphs: per-epoch losses and
// final weights (norm-wise relative error <= 1e-5 per tensor) for GCN, SAGE and GAT over
// P x C in {1x1, 2x3, 4x8}, with and without reorganization, cache and recompute modes,
// dropout on; the three transfer schemes give the same numbers; Adam chunked == unchunked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "common/log.hpp"

#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/reference_model.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/model.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

// The shared random graph (tests/support/random_graph.hpp) with its source-only vertices kept
// free of reverse edges, checked for the cases the models must handle: vertices without
// in-edges (SAGE's empty mean) and dataset self loops (skipped: every model adds exactly one).
Dataset random_dataset_with_edge_cases(vertex_t n, int out_degree, std::int64_t dim,
                                       std::int32_t classes, std::uint64_t seed) {
  Dataset d =
      test::random_dataset(n, out_degree, dim, classes, seed, test::ReverseEdgesIntoSources::kSkip);
  std::int64_t no_in_edges = 0, self_loops = 0;
  for (vertex_t v = 0; v < n; ++v) {
    no_in_edges += d.indptr[v + 1] == d.indptr[v];
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e) self_loops += d.indices[e] == v;
  }
  EXPECT_GT(no_in_edges, 0);
  EXPECT_GT(self_loops, 0);
  return d;
}

// The plans of these tests: P x C, seed 3, reorganized unless set kOff.
test::PlanOptionsBuilder plan_options(int P, int C) {
  return test::plan_options(P, C).seed(3);
}

struct RunSetup {
  std::string model = "gcn";
  int layers = 2;
  int hidden = 8;
  int heads = 2;
  int output_heads = 1;  // GAT
  double dropout = 0.5;
  double lr = 0.2;
  double weight_decay = 5e-4;
  std::string optimizer = "sgd";
  std::uint64_t seed = 11;
  std::string layer_zero_order = "auto";  // GCN, SAGE
};

test::TrainConfigBuilder train_config(const RunSetup& s, int epochs) {
  return test::train_config()
      .model(s.model)
      .layers(s.layers)
      .hidden(s.hidden)
      .heads(s.heads)
      .output_heads(s.output_heads)
      .dropout(s.dropout)
      .lr(s.lr)
      .weight_decay(s.weight_decay)
      .optimizer(s.optimizer)
      .seed(s.seed)
      .layer_zero_order(s.layer_zero_order)
      .epochs(epochs)
      .eval_every(epochs);  // evaluation does not change the numbers; keep tests fast
}

test::ReferenceConfig reference_config(const RunSetup& s) {
  test::ReferenceConfig r;
  r.model = s.model;
  r.layers = s.layers;
  r.hidden = s.hidden;
  r.heads = s.heads;
  r.output_heads = s.output_heads;
  r.dropout = s.dropout;
  r.seed = s.seed;
  r.lr = s.lr;
  r.weight_decay = s.weight_decay;
  r.optimizer = s.optimizer;
  return r;
}

double relative_error(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double relative_error(const std::vector<float>& x, const std::vector<float>& y) {
  return relative_error(x, std::vector<double>(y.begin(), y.end()));
}

void expect_matches_reference(const TrainResult& got, const test::ReferenceResult& ref,
                              const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  for (std::size_t e = 0; e < ref.losses.size(); ++e)
    EXPECT_LE(std::abs(got.losses[e] - ref.losses[e]) / std::abs(ref.losses[e]), 1e-5)
        << what << ": epoch " << e << " loss " << got.losses[e] << " vs reference "
        << ref.losses[e];
  ASSERT_EQ(got.parameters.size(), ref.final_parameters.names.size()) << what;
  for (const auto& [name, values] : got.parameters) {
    const auto& expected = ref.final_parameters.get(name);
    ASSERT_EQ(values.size(), expected.size()) << what << ": " << name;
    EXPECT_LE(relative_error(values, expected), 1e-5) << what << ": parameter " << name;
  }
}

// Bit-identical losses and parameters.
void expect_identical(const TrainResult& a, const TrainResult& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  ASSERT_EQ(a.parameters.size(), b.parameters.size()) << what;
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    EXPECT_EQ(a.parameters[i].second, b.parameters[i].second)
        << what << " " << a.parameters[i].first;
}

// Rows of chunk 0's load lists that a forward pass whose outputs the next pass reads hands over
// on the device (Schedule: a forward pass ends early): per partition, the vertices of its last
// chunk (p2p+reuse lists; p2p loads the same rows in batch 0, where no row is kept yet).
std::int64_t rows_handed_over(const Plan& plan) {
  std::int64_t rows = 0;
  for (int p = 0; p < plan.partitions; ++p) {
    const ChunkPlan& last = plan.chunk(plan.chunks - 1, p);
    for (vertex_t v : plan.chunk(0, p).load_vertices)
      rows += v >= last.dst_begin && v < last.dst_begin + last.num_dst();
  }
  return rows;
}

class TrainEquivalence : public ::testing::Test {
 protected:
  static const Dataset& dataset() {
    static const Dataset d = random_dataset_with_edge_cases(150, 3, 12, 4, 7);
    return d;
  }
};

void run_matrix(const Dataset& d, const RunSetup& setup, const std::vector<std::string>& modes) {
  constexpr int kEpochs = 5;
  const test::ReferenceResult ref = test::train_reference(d, reference_config(setup), kEpochs);
  const int shapes[][2] = {{1, 1}, {2, 3}, {4, 8}};
  for (const auto& shape : shapes)
    for (const test::Reorganize reorganize : {test::Reorganize::kOff, test::Reorganize::kOn}) {
      const Plan plan = test::make_plan(d, plan_options(shape[0], shape[1]).reorganize(reorganize));
      // The cost model keeps the reorganized layout on this graph, so both layouts are covered.
      if (shape[0] > 1) {
        EXPECT_EQ(plan.reorganized, reorganize == test::Reorganize::kOn);
      }
      for (const auto& mode : modes) {
        const std::string what =
            cat(setup.model, " ", setup.layers, " layers, P=", shape[0], " C=", shape[1],
                reorganize == test::Reorganize::kOn ? " reorganized" : "", " ", mode);
        SCOPED_TRACE(what);
        expect_matches_reference(train(d, plan, train_config(setup, kEpochs).intermediates(mode)),
                                 ref, what);
      }
    }
}

TEST_F(TrainEquivalence, GcnMatchesReference) {
  RunSetup s;
  s.model = "gcn";
  run_matrix(dataset(), s, {"cache", "recompute"});
}

TEST_F(TrainEquivalence, SageMatchesReference) {
  RunSetup s;
  s.model = "sage";
  run_matrix(dataset(), s, {"cache", "recompute"});
}

TEST_F(TrainEquivalence, GatTwoHeadsMatchesReference) {
  RunSetup s;
  s.model = "gat";
  s.heads = 2;
  s.hidden = 6;
  run_matrix(dataset(), s, {"auto", "recompute"});
}

// GAT's output layer averages its heads (one head: the head itself, no averaging pass).
TEST_F(TrainEquivalence, GatOutputHeadsAveragedMatchReference) {
  for (const int output_heads : {1, 3}) {
    RunSetup s;
    s.model = "gat";
    s.hidden = 6;
    s.output_heads = output_heads;
    const auto ref = test::train_reference(dataset(), reference_config(s), 4);
    for (const auto& shape : {std::pair{1, 1}, std::pair{2, 3}}) {
      const Plan plan = test::make_plan(dataset(), plan_options(shape.first, shape.second));
      const std::string what =
          cat(output_heads, " output heads, P=", shape.first, " C=", shape.second);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 4)), ref, what);
    }
  }
}

// One layer: the fused pass is the whole epoch, and GCN's only layer (12 -> 4) transforms first
// with no input gradient (its leaving rows give the weight gradient only).
TEST_F(TrainEquivalence, OneLayerMatchesReference) {
  for (const std::string model : {"gcn", "sage", "gat"}) {
    RunSetup s;
    s.model = model;
    s.layers = 1;
    const auto ref = test::train_reference(dataset(), reference_config(s), 5);
    for (const auto& shape : {std::pair{1, 1}, std::pair{4, 8}}) {
      const Plan plan = test::make_plan(dataset(), plan_options(shape.first, shape.second));
      const std::string what = cat(model, " 1 layer, P=", shape.first, " C=", shape.second);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 5)), ref, what);
    }
  }
}

// GCN's and SAGE's layer 0 multiplying first (Â (X W), SAGE [X W_self | X W_neigh]): its
// arrivals are transformed, its backward runs the transposed product into dZm and turns the
// leaving rows into dW, as GAT's transforming layer 0. 2 and 3 layers, every plan shape of
// run_matrix, the aggregation cached and recomputed; and every order on a shape where the
// width rule takes it (12 features, hidden 3: GCN's 3 columns, not SAGE's 6).
TEST_F(TrainEquivalence, LayerZeroTransformingFirstMatchesReference) {
  for (const std::string model : {"gcn", "sage"})
    for (const int layers : {2, 3}) {
      RunSetup s;
      s.model = model;
      s.layers = layers;
      s.hidden = 6;
      s.layer_zero_order = "transform";
      run_matrix(dataset(), s, {"cache", "recompute"});
    }
  for (const std::string model : {"gcn", "sage"}) {
    RunSetup s;
    s.model = model;
    s.hidden = 3;
    const ModelSpec spec =
        test::model_spec(test::model_shape(model, 2).in_dim(12).hidden(3).classes(4));
    EXPECT_EQ(spec.layers[0].transform_first, model == "gcn") << model;
    const auto ref = test::train_reference(dataset(), reference_config(s), 4);
    const Plan plan = test::make_plan(dataset(), plan_options(2, 3));
    for (const char* order : {"auto", "aggregate", "transform"}) {
      s.layer_zero_order = order;
      const std::string what = cat(model, " hidden 3, P=2 C=3, --layer-zero-order ", order);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 4)), ref, what);
    }
  }
}

// Input rows reloaded (--input-rows reload) and transfers in line (--no-overlap) with GCN's and
// SAGE's layer 0 transforming first: the arrivals' transforms from reloaded rows, and the
// leaving rows' weight gradients from host rows read again.
TEST_F(TrainEquivalence, LayerZeroTransformingFirstReloadsItsInputRows) {
  for (const std::string model : {"gcn", "sage"}) {
    RunSetup s;
    s.model = model;
    s.hidden = 6;
    s.layer_zero_order = "transform";
    const auto ref = test::train_reference(dataset(), reference_config(s), 4);
    for (const auto& shape : {std::pair{1, 3}, std::pair{2, 3}})
      for (const bool overlap : {true, false}) {
        const Plan plan = test::make_plan(dataset(), plan_options(shape.first, shape.second));
        const std::string what = cat(model, " P=", shape.first, " C=", shape.second,
                                     overlap ? "" : " no overlap", ", input rows reloaded");
        SCOPED_TRACE(what);
        const TrainResult reloaded =
            train(dataset(), plan, train_config(s, 4).input_rows("reload").no_overlap(!overlap));
        expect_matches_reference(reloaded, ref, what);
        // The backward pass reads the feature rows again: more rows over the link than keeping.
        const TrainResult kept =
            train(dataset(), plan, train_config(s, 4).input_rows("keep").no_overlap(!overlap));
        EXPECT_GT(reloaded.records.back().transfers.h2d_gather_rows,
                  kept.records.back().transfers.h2d_gather_rows);
      }
  }
}

TEST_F(TrainEquivalence, ThreeLayersMatchReference) {
  for (const std::string model : {"gcn", "sage", "gat"}) {
    RunSetup s;
    s.model = model;
    s.layers = 3;
    s.hidden = 6;
    s.heads = 2;
    const auto ref = test::train_reference(dataset(), reference_config(s), 5);
    for (const auto& shape : {std::pair{1, 1}, std::pair{4, 8}}) {
      const Plan plan = test::make_plan(dataset(), plan_options(shape.first, shape.second));
      const std::string what = cat(model, " 3 layers, P=", shape.first, " C=", shape.second);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 5)), ref, what);
    }
  }
}

// Two and three layers: the third covers a hidden layer whose inputs are stored transformed
// (GAT's layer 1) and a layer between two others (its gradient rows both flushed and loaded).
TEST_F(TrainEquivalence, ThreeTransferSchemesGiveTheSameNumbers) {
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int layers : {2, 3}) {
      RunSetup s;
      s.model = model;
      s.layers = layers;
      test::TrainConfigBuilder config = train_config(s, 4).comm("p2p+reuse");
      const TrainResult reuse = train(dataset(), plan, config);
      for (const std::string comm : {"p2p", "baseline"}) {
        config.comm(comm);
        const std::string what = cat(model, " ", layers, " layers ", comm);
        const TrainResult other = train(dataset(), plan, config);
        for (std::size_t e = 0; e < reuse.losses.size(); ++e)
          EXPECT_NEAR(other.losses[e], reuse.losses[e], 1e-6 * std::abs(reuse.losses[e]))
              << what << " epoch " << e;
        for (std::size_t i = 0; i < reuse.parameters.size(); ++i)
          EXPECT_LE(relative_error(other.parameters[i].second, reuse.parameters[i].second), 1e-6)
              << what << " " << reuse.parameters[i].first;
      }
    }
}

// The overlap path (prefetched loads through the stage, backward blocks in a second buffer set,
// flushes from a compact buffer) must compute exactly what the in-line path computes, also when a
// memory budget leaves no room for its optional buffers.
TEST_F(TrainEquivalence, OverlapOnAndOffGiveIdenticalNumbers) {
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const std::string comm : {"p2p+reuse", "baseline"}) {
      RunSetup s;
      s.model = model;
      test::TrainConfigBuilder config = train_config(s, 3).comm(comm);
      const std::string what = model + " " + comm;
      const TrainResult overlapped = train(dataset(), plan, config);
      // Device time per phase for every device; the record's phase is the slowest device's.
      const EpochRecord& last = overlapped.records.back();
      ASSERT_EQ(last.device_phases.size(), 4u) << what;
      double slowest = 0;
      for (const PhaseTimes& t : last.device_phases) {
        EXPECT_GT(t.compute, 0.0) << what;
        slowest = std::max(slowest, t.compute);
      }
      EXPECT_EQ(last.phases.compute, slowest) << what;
      config.no_overlap(true);
      const TrainResult in_line = train(dataset(), plan, config);
      expect_identical(overlapped, in_line, what);
      // The overlap buffers cost device memory; under a budget that fits only the in-line run's
      // peak they take what the constants leave or the constants spill (no error), and the
      // numbers stay the same.
      const std::int64_t in_line_peak = in_line.records.back().peak_device_bytes;
      EXPECT_GT(overlapped.records.back().peak_device_bytes, in_line_peak) << what;
      config.no_overlap(false).gpu_memory(in_line_peak);
      config.input_rows("keep");  // auto would reload GAT's input rows under this budget
      const TrainResult capped = train(dataset(), plan, config);
      EXPECT_LE(capped.records.back().peak_device_bytes, in_line_peak) << what;
      EXPECT_GT(capped.records.back().peak_device_bytes, in_line_peak * 9 / 10) << what;
      EXPECT_EQ(capped.losses, in_line.losses) << what;
    }
}

// The last layer's training passes over the loss rows alone (--last-layer-rows loss, the
// default, through each chunk's loss-row CSR) give the numbers of passes over every row, bit for
// bit: the other rows' gradients are zero, and the sums over the kept rows add the same terms in
// the same order. Evaluations read every row either way.
TEST_F(TrainEquivalence, LastLayerOverItsLossRowsGivesTheNumbersOfAllRows) {
  struct Variant {
    std::string model;
    int layers, output_heads;
  };
  for (const Variant& v : {Variant{"gcn", 2, 1}, Variant{"sage", 2, 1}, Variant{"gat", 2, 1},
                           Variant{"gcn", 3, 1}, Variant{"gat", 3, 2}})
    for (const auto& shape : {std::pair{1, 1}, std::pair{2, 3}, std::pair{4, 8}}) {
      const Plan plan = test::make_plan(dataset(), plan_options(shape.first, shape.second));
      if (shape.second == 8) {
        // Some chunk of 4 x 8 has no loss row: it reads its own CSR (no CSR of no entries).
        const LossRowFlags flags = loss_row_flags(dataset(), plan.old_to_new);
        int without = 0;
        for (const ChunkPlan& chunk : plan.chunk_plans)
          without += std::none_of(flags.begin() + chunk.dst_begin,
                                  flags.begin() + chunk.dst_begin + chunk.num_dst(),
                                  [](std::uint8_t f) { return f != 0; });
        ASSERT_GT(without, 0);
      }
      RunSetup s;
      s.model = v.model;
      s.layers = v.layers;
      s.output_heads = v.output_heads;
      s.optimizer = "adam";
      const std::string what =
          cat(v.model, " ", v.layers, " layers, P=", shape.first, " C=", shape.second);
      const test::TrainConfigBuilder config = train_config(s, 3).eval_every(1);
      const TrainResult loss = train(dataset(), plan, config);
      const TrainResult all =
          train(dataset(), plan, test::TrainConfigBuilder(config).last_layer_rows("all"));
      expect_identical(loss, all, what);
      ASSERT_EQ(loss.records.size(), all.records.size()) << what;
      for (std::size_t e = 0; e < all.records.size(); ++e) {
        EXPECT_GE(all.records[e].valid_accuracy, 0.0) << what;
        EXPECT_EQ(loss.records[e].valid_accuracy, all.records[e].valid_accuracy) << what;
        EXPECT_EQ(loss.records[e].test_accuracy, all.records[e].test_accuracy) << what;
      }
      // The loss-row CSRs take device memory of their own (GPU tests: and fewer staged bytes).
      EXPECT_GT(loss.records.back().peak_device_bytes, all.records.back().peak_device_bytes)
          << what;
    }
}

// --last-layer-rows auto keeps the loss-row CSRs where, under --gpu-memory, every chunk
// structure fits in device memory with them (the estimate's all_constants): at that budget it
// trains the loss rows (the peak of a `loss` run), a byte below it every row (that of `all`).
TEST_F(TrainEquivalence, LastLayerRowsAutoKeepsTheLossRowsWhereTheStructuresFit) {
  const Plan plan = test::make_plan(dataset(), plan_options(1, 3));
  RunSetup s;
  const TrainConfig base = train_config(s, 2);
  LayoutOptions options =
      memory_layout_options(test::TrainConfigBuilder(base).last_layer_rows("loss"));
  const std::int64_t fits = estimate_gpu_memory(plan, loss_row_flags(dataset(), plan.old_to_new), 0,
                                                memory_shape(dataset(), base), options)
                                .all_constants;
  for (const std::int64_t budget : {fits, fits - 1}) {
    const std::string chosen = budget == fits ? "loss" : "all";
    SCOPED_TRACE(cat("budget ", budget, ": ", chosen));
    const TrainResult automatic =
        train(dataset(), plan, test::TrainConfigBuilder(base).gpu_memory(budget));
    const TrainResult fixed = train(
        dataset(), plan, test::TrainConfigBuilder(base).gpu_memory(budget).last_layer_rows(chosen));
    expect_identical(automatic, fixed, "auto");
    EXPECT_EQ(automatic.records.back().peak_device_bytes, fixed.records.back().peak_device_bytes);
    const TrainResult other =
        train(dataset(), plan,
              test::TrainConfigBuilder(base).gpu_memory(budget).last_layer_rows(
                  chosen == "loss" ? "all" : "loss"));
    EXPECT_NE(automatic.records.back().peak_device_bytes, other.records.back().peak_device_bytes);
  }
}

// One chunk per partition: the blocks of the backward passes load on the transfer lane into the
// only block set (and layer 0's first ones during the fused pass), with no second set to
// alternate with. The numbers are those of the in-line path.
TEST_F(TrainEquivalence, OneChunkPlansPrefetchBlocksIntoTheirOnlySet) {
  const Plan plan = test::make_plan(dataset(), plan_options(2, 1));
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int layers : {2, 3}) {
      RunSetup s;
      s.model = model;
      s.layers = layers;
      const std::string what = cat(model, " ", layers, " layers");
      test::TrainConfigBuilder config = train_config(s, 3);
      const TrainResult overlapped = train(dataset(), plan, config);
      const TrainResult in_line = train(dataset(), plan, config.no_overlap(true));
      expect_identical(overlapped, in_line, what);
      EXPECT_GT(overlapped.records.back().peak_device_bytes,
                in_line.records.back().peak_device_bytes)
          << what;  // the load stage and the flush buffer
    }
}

// Layer 0's backward pass of GCN and SAGE (kept aggregation) runs by rows: consecutive small
// chunks merge into one batch up to the largest chunk's rows, which sluice-train's debug log
// reports. The numbers stay the reference's, with dropout keyed by each merged destination and
// layer 1's kept tail rows copied into each member chunk's rows of the merged block.
TEST_F(TrainEquivalence, LayerZeroBackwardMergesSmallChunksIntoRowGroups) {
  const Dataset d = test::with_dense_start(
      test::random_dataset(200, 3, 12, 4, 7, test::ReverseEdgesIntoSources::kSkip), 30, 60);
  constexpr int kEpochs = 4;
  const std::regex groups_line("backward pass by rows: ([0-9]+) batches for ([0-9]+) chunks");
  for (const std::string model : {"gcn", "sage"}) {
    RunSetup s;
    s.model = model;
    const test::ReferenceResult ref = test::train_reference(d, reference_config(s), kEpochs);
    for (const int P : {1, 2}) {
      const Plan plan = test::make_plan(d, plan_options(P, 8).reorganize(test::Reorganize::kOff));
      for (const bool overlap : {true, false}) {
        const std::string what = cat(model, " P=", P, overlap ? "" : " without overlap");
        SCOPED_TRACE(what);
        const LogLevel level = log_level();
        set_log_level(LogLevel::kDebug);
        ::testing::internal::CaptureStderr();
        const TrainResult got = train(d, plan, train_config(s, kEpochs).no_overlap(!overlap));
        const std::string log = ::testing::internal::GetCapturedStderr();
        set_log_level(level);
        std::smatch m;
        ASSERT_TRUE(std::regex_search(log, m, groups_line)) << log;
        EXPECT_EQ(std::stoi(m[2].str()), 8);
        EXPECT_LT(std::stoi(m[1].str()), 6) << m[0].str();
        expect_matches_reference(got, ref, what);
      }
    }
  }
}

// A one-chunk plan keeps layer L-2's A block (GCN's and SAGE's aggregation, GAT's head outputs)
// in its block set from the forward pass to the backward pass when the last layer transforms:
// with two layers, keeping A^0 then moves exactly the host bytes of recomputing (none for A^0);
// with three, A^1 is kept on the device and A^0 crosses the link. The numbers are the
// reference's either way (run_matrix's 1 x 1 plans, and ThreeLayersMatchReference).
TEST_F(TrainEquivalence, OneChunkPlansKeepTheirLastABlockOnTheDevice) {
  const Plan plan = test::make_plan(dataset(), plan_options(2, 1));
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int layers : {2, 3}) {
      RunSetup s;
      s.model = model;
      s.layers = layers;
      const std::string what = cat(model, " ", layers, " layers");
      const TrainResult kept = train(dataset(), plan, train_config(s, 2).intermediates("auto"));
      const TrainResult recomputed =
          train(dataset(), plan, train_config(s, 2).intermediates("recompute"));
      const TransferCounters& k = kept.records.back().transfers;
      const TransferCounters& r = recomputed.records.back().transfers;
      if (layers == 2) {
        EXPECT_EQ(k.h2d_block_bytes, r.h2d_block_bytes) << what;
        EXPECT_EQ(k.d2h_bytes, r.d2h_bytes) << what;
      } else {
        EXPECT_GT(k.h2d_block_bytes, r.h2d_block_bytes) << what;  // A^0
        EXPECT_GT(k.d2h_bytes, r.d2h_bytes) << what;
      }
    }
}

// GAT on one chunk per partition: the fused last layer works in its own attention buffers, so
// layer L-2's Zm, el, er, alpha and input rows stay from its forward to its backward pass, which
// then loads, pulls, transforms and scores nothing again. The numbers are the reference's, and the
// backward pass's loads and pulls are gone: fewer loaded and peer bytes than recomputing the layer
// (which loads and pulls its rows in the forward pass and again in the backward pass).
TEST_F(TrainEquivalence, OneChunkGatKeepsLayerAttentionThroughTheFusedPass) {
  const Plan plan = test::make_plan(dataset(), plan_options(2, 1));
  for (const int layers : {2, 3}) {
    RunSetup s;
    s.model = "gat";
    s.layers = layers;
    s.hidden = 6;
    s.heads = 2;
    const std::string what = cat("gat ", layers, " layers");
    SCOPED_TRACE(what);
    const auto ref = test::train_reference(dataset(), reference_config(s), 4);
    const TrainResult kept = train(dataset(), plan, train_config(s, 4));
    expect_matches_reference(kept, ref, what);
    const TrainResult recomputed =
        train(dataset(), plan, train_config(s, 4).intermediates("recompute"));
    expect_matches_reference(recomputed, ref, what);
    const TransferCounters& k = kept.records.back().transfers;
    const TransferCounters& r = recomputed.records.back().transfers;
    EXPECT_LT(k.p2p_bytes, r.p2p_bytes);
    EXPECT_GT(k.p2p_bytes, 0);
    EXPECT_LT(k.h2d_gather_bytes + k.resident_bytes, r.h2d_gather_bytes + r.resident_bytes);
  }
}

// GAT's layer 0 attending over its input rows (--gat-layer-zero attend: the per-head weighted
// sums of X, then O^h = agg^h W^h, the scores through the attention vectors folded into W, the
// backward by destination) computes the reference's model: one partition, one to eight chunks,
// reorganized or not, cached or recomputed head outputs, with and without overlap, 2 and 3
// layers, 2 and 4 heads, one and three output heads. It moves the bytes of the transforming layer
// 0; auto picks it on one partition and one chunk where the rows are narrower than the heads
// together (12 < 2 x 8) and its buffers take no more device memory; it is refused on several
// partitions and with reloaded input rows.
// On several partitions, layer 0 attending over its input rows exchanges feature rows (pulled
// from the owners' loads, or each device's copy of them) and no gradients: every comm mode, two
// and four partitions of one and three chunks, matches the reference; auto attends on one chunk
// a partition (2 heads of 8: the 24-wide sums take no more memory than Zm 16 wide) and
// transforms first on three.
TEST_F(TrainEquivalence, GatLayerZeroAttendingOnSeveralPartitionsMatchesReference) {
  RunSetup s;
  s.model = "gat";
  s.heads = 2;
  s.hidden = 8;
  const auto ref = test::train_reference(dataset(), reference_config(s), 3);
  for (const int P : {2, 4})
    for (const int C : {1, 3}) {
      const Plan plan = test::make_plan(dataset(), plan_options(P, C));
      for (const std::string comm : {"p2p+reuse", "p2p", "baseline"})
        for (const std::string features : {"auto", "pull"}) {
          if (comm == "baseline" && features == "pull") continue;  // baseline pulls nothing
          const std::string what = cat("P=", P, " C=", C, " ", comm, " features ", features);
          SCOPED_TRACE(what);
          const test::TrainConfigBuilder config =
              train_config(s, 3).comm(comm).remote_features(features);
          const auto run = [&](const std::string& order) {
            return train(dataset(), plan, test::TrainConfigBuilder(config).gat_layer_zero(order));
          };
          const TrainResult attend = run("attend");
          expect_matches_reference(attend, ref, what);
          if (comm == "p2p+reuse" && features == "auto")
            expect_identical(run("auto"), C == 1 ? attend : run("transform"), what + " auto");
        }
    }
}

TEST_F(TrainEquivalence, GatLayerZeroAttendingOverItsInputsMatchesReference) {
  struct Case {
    int layers, heads, hidden, output_heads;
  };
  for (const Case& c : {Case{2, 2, 8, 1}, Case{3, 4, 4, 3}}) {
    RunSetup s;
    s.model = "gat";
    s.layers = c.layers;
    s.heads = c.heads;
    s.hidden = c.hidden;
    s.output_heads = c.output_heads;
    const auto ref = test::train_reference(dataset(), reference_config(s), 4);
    for (const int C : {1, 3, 8})
      for (const test::Reorganize reorganize : {test::Reorganize::kOff, test::Reorganize::kOn}) {
        const Plan plan = test::make_plan(dataset(), plan_options(1, C).reorganize(reorganize));
        for (const std::string intermediates : {"auto", "recompute"})
          for (const bool overlap : {true, false}) {
            const std::string what =
                cat(c.layers, " layers, ", c.heads, " heads, C=", C,
                    reorganize == test::Reorganize::kOn ? " reorganized " : " ", intermediates,
                    overlap ? "" : " no overlap");
            SCOPED_TRACE(what);
            test::TrainConfigBuilder config =
                train_config(s, 4).intermediates(intermediates).no_overlap(!overlap);
            const TrainResult attend = train(dataset(), plan, config.gat_layer_zero("attend"));
            expect_matches_reference(attend, ref, what);
            const TrainResult transform =
                train(dataset(), plan, config.gat_layer_zero("transform"));
            const TransferCounters& a = attend.records.back().transfers;
            const TransferCounters& t = transform.records.back().transfers;
            EXPECT_EQ(a.h2d_gather_bytes, t.h2d_gather_bytes);
            // Both keep layer 1's last gradient rows for layer 0's blocks: attending in dZm (its
            // layer 0 writes none), transforming first in the flush buffer, so only with overlap
            // buffers; without them the latter stores and loads those rows.
            if (overlap) {
              EXPECT_EQ(a.h2d_block_bytes, t.h2d_block_bytes);
              EXPECT_EQ(a.d2h_bytes, t.d2h_bytes);
            } else {
              EXPECT_LE(a.h2d_block_bytes, t.h2d_block_bytes);
              EXPECT_LT(a.d2h_bytes, t.d2h_bytes);
            }
            // Auto attends on one chunk where that takes no more device memory: 2 heads of 8 (a
            // 24-wide sum per chunk row, and Zm 4 instead of 16 wide), not 4 heads of 4 (48 wide).
            if (C != 8 && intermediates == "auto" && overlap)
              expect_identical(train(dataset(), plan, config.gat_layer_zero("auto")),
                               C == 1 && c.heads == 2 ? attend : transform, what + " auto");
          }
      }
  }
  RunSetup s;
  s.model = "gat";
  const Plan two = test::make_plan(dataset(), plan_options(2, 3));
  // Auto transforms first on several chunks a partition, and where the rows are not narrower
  // than the heads together (12 = 2 x 6).
  expect_identical(train(dataset(), two, train_config(s, 2)),
                   train(dataset(), two, train_config(s, 2).gat_layer_zero("transform")), "P=2");
  s.hidden = 6;
  const Plan one = test::make_plan(dataset(), plan_options(1, 3));
  expect_identical(train(dataset(), one, train_config(s, 2)),
                   train(dataset(), one, train_config(s, 2).gat_layer_zero("transform")),
                   "12 = 2 x 6");
  s.hidden = 8;
  EXPECT_THROW(train(dataset(), test::make_plan(dataset(), plan_options(1, 3)),
                     train_config(s, 1).gat_layer_zero("attend").input_rows("reload")),
               InputError);
}

// Bytes between host memory and the devices per epoch follow from the widths and the plan
// (2 layers, 12 -> 8 -> 4): forward 0 stores T^1 = dropout(H^1) W_1, as every model's layer 1
// transforms its rows (GCN's and SAGE's narrowing last layer, GAT): 4 wide, SAGE's 8
// ([W_self | W_neigh]); in cache mode also the aggregations A^0 (GCN 12, SAGE 24 wide). Training
// fuses the last layer's forward and backward, so G^2 never crosses the host link; layer 1's
// backward flushes its leaving gradient rows (dT^1, as wide as T^1) but for the last batch's,
// which stay on the devices for layer 0's blocks, and layer 0's backward loads one dT^1 block and,
// cached, one A^0 block per chunk. GAT keeps its tail in the flush buffer, an overlap buffer:
// without overlap the tail is flushed too.
TEST_F(TrainEquivalence, HostBytesFollowTheWidthsAndTheKeptTail) {
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  const std::int64_t n = dataset().num_nodes;
  // The last batch's leaving rows; in p2p mode every row of the last batch leaves, the same set.
  std::int64_t tail_rows = 0, reuse_leaves = 0;
  for (int p = 0; p < plan.partitions; ++p) {
    tail_rows += std::int64_t(plan.chunk(plan.chunks - 1, p).leave_vertices.size());
    for (int c = 0; c < plan.chunks; ++c)
      reuse_leaves += std::int64_t(plan.chunk(c, p).leave_vertices.size());
  }
  ASSERT_GT(tail_rows, 0);
  EXPECT_EQ(reuse_leaves, plan.stats.volume_reuse_rows);  // every loaded row leaves once
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const std::string intermediates : {"auto", "recompute"})
      for (const std::string comm : {"p2p+reuse", "p2p"})
        for (const bool overlap : {true, false}) {
          RunSetup s;
          s.model = model;
          const TrainConfig config =
              train_config(s, 3).intermediates(intermediates).comm(comm).no_overlap(!overlap);
          const std::string what =
              cat(model, " ", intermediates, " ", comm, overlap ? "" : " no overlap");
          const TrainResult got = train(dataset(), plan, config);
          const TransferCounters& t = got.records.back().transfers;
          const std::int64_t h1 = model == "sage" ? 8 : 4;  // T^1
          const bool cached = intermediates == "auto";
          // A^0: the aggregation (GCN d_0 = 12, SAGE 2 d_0), GAT's head outputs (K F = 16).
          const std::int64_t a0 = !cached ? 0 : model == "sage" ? 24 : model == "gat" ? 16 : 12;
          const std::int64_t leaves =
              comm == "p2p" ? plan.stats.volume_p2p_rows : plan.stats.volume_reuse_rows;
          const bool keeps_tail = overlap || model != "gat";
          const std::int64_t flushed = leaves - (keeps_tail ? tail_rows : 0);
          EXPECT_EQ(t.d2h_bytes, (n * (h1 + a0) + flushed * h1) * 4) << what;
          EXPECT_EQ(t.h2d_block_bytes, n * (h1 + a0) * 4) << what;
        }
}

// The last layer computes Â (X W) when that narrows its sparse product and widens no row moved:
// GCN when classes < hidden, SAGE when 2 classes <= hidden (T = [X W_self | X W_neigh]);
// (Â X) W otherwise. Narrowing, its inputs are stored transformed: both passes (forward 0 and
// the fused layer 1) load the plan's rows per epoch, 12 floats wide and T's width (GCN 4, SAGE 8)
// instead of H^1's 8, the fused pass but for the rows forward 0 hands over on the devices.
TEST_F(TrainEquivalence, LastLayerTransformsFirstWhenItNarrows) {
  ModelShape shape;
  shape.model = "gcn";
  shape.layers = 3;
  shape.in_dim = 12;
  shape.hidden = 8;
  shape.classes = 4;
  const ModelSpec narrowing = make_model(shape);
  EXPECT_FALSE(narrowing.layers[0].transform_first);
  EXPECT_FALSE(narrowing.layers[1].transform_first);
  EXPECT_TRUE(narrowing.layers[2].transform_first);
  EXPECT_EQ(narrowing.layers[2].transform_width, 4);
  EXPECT_EQ(narrowing.layers[2].aggregate_width, 0);
  EXPECT_EQ(narrowing.layers[2].w_rows, 8);  // the same W: hidden x classes
  shape.classes = 9;
  EXPECT_FALSE(make_model(shape).layers[2].transform_first);  // widening: aggregate first
  shape.model = "sage";
  shape.classes = 4;
  const ModelSpec sage = make_model(shape);
  EXPECT_FALSE(sage.layers[1].transform_first);
  EXPECT_TRUE(sage.layers[2].transform_first);
  EXPECT_EQ(sage.layers[2].transform_width, 8);  // self and neighbor halves
  EXPECT_EQ(sage.layers[2].aggregate_width, 0);
  EXPECT_EQ(sage.layers[2].w_rows, 16);  // the same W: W_self stacked over W_neigh
  shape.classes = 5;                     // T would be 10 wide, H^2 is 8
  EXPECT_FALSE(make_model(shape).layers[2].transform_first);

  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  const std::int64_t rows = plan.stats.volume_reuse_rows, handed_over = rows_handed_over(plan);
  ASSERT_GT(handed_over, 0);
  for (const auto& [model, t_width] : {std::pair{"gcn", 4}, std::pair{"sage", 8}}) {
    RunSetup s;
    s.model = model;
    const TrainResult got = train(dataset(), plan, train_config(s, 4));
    const TransferCounters& t = got.records.back().transfers;
    EXPECT_EQ(t.h2d_gather_rows, 2 * rows - handed_over) << model;
    EXPECT_EQ(t.h2d_gather_bytes, (rows * 12 + (rows - handed_over) * t_width) * 4) << model;
  }
}

TEST_F(TrainEquivalence, ReloadedInputRowsAgreeWithKeptOnes) {
  // --input-rows reload: layer 0 of a transforming model (GAT's; a one-layer GCN's or SAGE's,
  // which narrow 12 -> 4) keeps no input rows on the device and reads the leaving rows again from
  // host memory for its weight gradient; with the load stage and without (--no-overlap: slices
  // gathered from host memory).
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  for (const auto& [model, layers] :
       {std::pair{"gat", 3}, std::pair{"gcn", 1}, std::pair{"sage", 1}})
    for (const std::string comm : {"p2p+reuse", "baseline"})
      for (const bool overlap : {true, false}) {
        RunSetup s;
        s.model = model;
        s.layers = layers;
        test::TrainConfigBuilder config = train_config(s, 3).comm(comm).no_overlap(!overlap);
        const std::string what =
            cat(model, " ", layers, " layers ", comm, overlap ? "" : " no overlap");
        const TrainResult kept = train(dataset(), plan, config.input_rows("keep"));
        const TrainResult reloaded = train(dataset(), plan, config.input_rows("reload"));
        ASSERT_EQ(kept.losses.size(), 3u) << what;
        for (std::size_t e = 0; e < kept.losses.size(); ++e)
          EXPECT_NEAR(reloaded.losses[e], kept.losses[e], 1e-6 * std::abs(kept.losses[e]))
              << what << " epoch " << e;
        for (std::size_t i = 0; i < kept.parameters.size(); ++i)
          EXPECT_LE(relative_error(reloaded.parameters[i].second, kept.parameters[i].second), 1e-6)
              << what << " " << kept.parameters[i].first;
        // The leaving rows cross the host link once more, and X is gone from the device.
        const TransferCounters& a = reloaded.records.back().transfers;
        const TransferCounters& b = kept.records.back().transfers;
        EXPECT_GT(a.h2d_gather_bytes, b.h2d_gather_bytes) << what;
        EXPECT_EQ(a.p2p_rows, b.p2p_rows) << what;
        EXPECT_LT(reloaded.records.back().peak_device_bytes, kept.records.back().peak_device_bytes)
            << what;
      }
}

TEST_F(TrainEquivalence, TransferCountersFollowTheSchemes) {
  // Host-link rows per epoch shrink from baseline to p2p to p2p+reuse; p2p rows appear only
  // with peer transfers.
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  RunSetup s;
  std::int64_t rows[3];
  std::int64_t p2p[3];
  int k = 0;
  for (const std::string comm : {"baseline", "p2p", "p2p+reuse"}) {
    // The second epoch: from the first on, layer 0's backward pass loads the next epoch's first
    // batch (counted in the epoch that loads it), so every epoch moves one epoch's rows.
    const TrainResult r = train(dataset(), plan, train_config(s, 2).comm(comm));
    rows[k] = r.records.at(1).transfers.h2d_gather_rows;
    p2p[k] = r.records.at(1).transfers.p2p_rows;
    if (comm == "p2p+reuse") {  // the first epoch also loads the second's first batch
      std::int64_t head = 0;
      for (int p = 0; p < plan.partitions; ++p)
        head += std::int64_t(plan.chunk(0, p).load_vertices.size());
      EXPECT_EQ(r.records.at(0).transfers.h2d_gather_rows - rows[k], head);
    }
    ++k;
  }
  EXPECT_GT(rows[0], rows[1]);
  EXPECT_GE(rows[1], rows[2]);
  EXPECT_EQ(p2p[0], 0);
  EXPECT_GT(p2p[1], 0);
  EXPECT_GE(p2p[1], p2p[2]);
  // Forward 0 and the fused layer 1 load per batch what the plan's volumes count: N(p,c)
  // (baseline), T_c^p (p2p), L_c^p (p2p+reuse), but for the rows forward 0 hands over on the
  // devices to the fused pass (not in baseline mode).
  const std::int64_t handed_over = rows_handed_over(plan);
  EXPECT_EQ(rows[0], 2 * plan.stats.volume_baseline_rows);
  EXPECT_EQ(rows[1], 2 * plan.stats.volume_p2p_rows - handed_over);
  EXPECT_EQ(rows[2], 2 * plan.stats.volume_reuse_rows - handed_over);
}

// A forward pass whose outputs the next pass reads ends without waiting for its last stores: the
// next pass's first batch takes the rows of each device's last chunk from that chunk's output
// block instead of host memory. Per such pass (L - 1 per epoch) the host link loads exactly
// those rows fewer, except in baseline mode (whose loads read other devices' rows) and without
// overlap (no load stage); the numbers are bit-identical to the in-line run's.
TEST_F(TrainEquivalence, EarlyNextPassCopiesTheFirstRowsOnTheDevice) {
  const Plan plan = test::make_plan(dataset(), plan_options(4, 8));
  const std::int64_t handed_over = rows_handed_over(plan);
  ASSERT_GT(handed_over, 0);  // else the plan would not exercise the copy
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int layers : {2, 3})
      for (const std::string comm : {"p2p+reuse", "p2p", "baseline"}) {
        RunSetup s;
        s.model = model;
        s.layers = layers;
        test::TrainConfigBuilder config = train_config(s, 2).comm(comm);
        const std::string what = cat(model, " ", layers, " layers ", comm);
        const TrainResult early = train(dataset(), plan, config);
        const TrainResult in_line = train(dataset(), plan, config.no_overlap(true));
        expect_identical(early, in_line, what);
        // Every pass that loads reads one plan volume of rows: the forward passes and, since GAT
        // recomputes, its backward passes below the fused one.
        const std::int64_t volume = comm == "baseline" ? plan.stats.volume_baseline_rows
                                    : comm == "p2p"    ? plan.stats.volume_p2p_rows
                                                       : plan.stats.volume_reuse_rows;
        const std::int64_t passes = model == "gat" ? 2 * layers - 1 : layers;
        const std::int64_t saved = comm == "baseline" ? 0 : (layers - 1) * handed_over;
        EXPECT_EQ(early.records.back().transfers.h2d_gather_rows, passes * volume - saved) << what;
        EXPECT_EQ(in_line.records.back().transfers.h2d_gather_rows, passes * volume) << what;
      }
}

TEST_F(TrainEquivalence, AdamChunkedEqualsUnchunkedOver20Epochs) {
  const Plan whole =
      test::make_plan(dataset(), plan_options(1, 1).reorganize(test::Reorganize::kOff));
  const Plan chunked = test::make_plan(dataset(), plan_options(4, 8));
  for (const std::string model : {"gcn", "sage", "gat"}) {
    RunSetup s;
    s.model = model;
    s.optimizer = "adam";
    s.lr = 0.01;
    const TrainResult a = train(dataset(), whole, train_config(s, 20));
    const TrainResult b = train(dataset(), chunked, train_config(s, 20));
    ASSERT_EQ(a.losses.size(), 20u);
    for (std::size_t e = 0; e < a.losses.size(); ++e)
      EXPECT_LE(std::abs(a.losses[e] - b.losses[e]) / std::abs(a.losses[e]), 1e-4)
          << model << " epoch " << e;
  }
}

TEST_F(TrainEquivalence, AdamMatchesReference) {
  RunSetup s;
  s.optimizer = "adam";
  s.lr = 0.01;
  const auto ref = test::train_reference(dataset(), reference_config(s), 5);
  const TrainResult got =
      train(dataset(), test::make_plan(dataset(), plan_options(2, 3)), train_config(s, 5));
  for (std::size_t e = 0; e < ref.losses.size(); ++e)
    EXPECT_LE(std::abs(got.losses[e] - ref.losses[e]) / std::abs(ref.losses[e]), 1e-5);
  for (const auto& [name, values] : got.parameters)
    EXPECT_LE(relative_error(values, ref.final_parameters.get(name)), 1e-4) << name;
}

TEST_F(TrainEquivalence, EvaluationMatchesReference) {
  RunSetup s;
  s.model = "sage";
  const TrainResult got = train(dataset(), test::make_plan(dataset(), plan_options(2, 3)),
                                train_config(s, 3).eval_every(1));
  // Accuracy of the final parameters, evaluated by the reference from our own weights.
  test::ReferenceConfig rc = reference_config(s);
  test::ReferenceParameters params = test::init_reference_parameters(dataset(), rc);
  for (const auto& [name, values] : got.parameters)
    params.get(name).assign(values.begin(), values.end());
  const test::ReferenceAccuracy acc = test::evaluate_reference(dataset(), rc, params);
  const EpochRecord& last = got.records.back();
  ASSERT_TRUE(last.evaluated);
  EXPECT_NEAR(last.train_accuracy, acc.train, 1e-12);
  EXPECT_NEAR(last.valid_accuracy, acc.valid, 1e-12);
  EXPECT_NEAR(last.test_accuracy, acc.test, 1e-12);
  EXPECT_GE(got.best_epoch, 0);
}

TEST_F(TrainEquivalence, RejectsPlanOfAnotherGraph) {
  const Dataset other = random_dataset_with_edge_cases(90, 3, 12, 4, 8);
  const Plan plan = test::make_plan(other, plan_options(2, 2).reorganize(test::Reorganize::kOff));
  RunSetup s;
  EXPECT_THROW(train(dataset(), plan, train_config(s, 1)), InputError);
}

TEST_F(TrainEquivalence, RejectsCorruptedPlanIndices) {
  RunSetup s;
  Plan plan = test::make_plan(dataset(), plan_options(2, 3));
  // A load into the wrong slot is caught by the setup's slot simulation.
  for (auto& ch : plan.chunk_plans)
    if (ch.load_slots.size() >= 2) {
      std::swap(ch.load_slots[0], ch.load_slots[1]);
      break;
    }
  EXPECT_THROW(train(dataset(), plan, train_config(s, 1)), InputError);
}

}  // namespace
}  // namespace sluice
