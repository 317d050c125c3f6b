// The central invariant (DESIGN.md): a chunked out-of-core run equals a plain full-graph run.
// sluice-train's schedule (CPU backend, P logical devices) against the double-precision
// reference of tests/support/reference_model.hpp on small random graphs: per-epoch losses and
// final weights (norm-wise relative error <= 1e-5 per tensor) for GCN, SAGE and GAT over
// P x C in {1x1, 2x3, 4x8}, with and without reorganization, cache and recompute modes,
// dropout on; the three transfer schemes give the same numbers; Adam chunked == unchunked.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "preprocess/plan_builder.hpp"
#include "tests/support/env.hpp"
#include "tests/support/random_graph.hpp"
#include "tests/support/reference_model.hpp"
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

Plan make_plan(const Dataset& d, int P, int C, bool reorganize) {
  PlanOptions options;
  options.partitions = P;
  options.chunks = C;
  options.partitioner = P == 1 ? "range" : "metis";
  options.reorganize = reorganize;
  options.seed = 3;
  return build_plan(d, options, compute_fingerprint(d));
}

struct RunSetup {
  std::string model = "gcn";
  int layers = 2;
  int hidden = 8;
  int heads = 2;
  double dropout = 0.5;
  double lr = 0.2;
  double weight_decay = 5e-4;
  std::string optimizer = "sgd";
  std::uint64_t seed = 11;
};

TrainConfig train_config(const RunSetup& s, int epochs) {
  TrainConfig c;
  c.model = s.model;
  c.layers = s.layers;
  c.hidden = s.hidden;
  c.heads = s.heads;
  c.output_heads = 1;
  c.dropout = s.dropout;
  c.lr = s.lr;
  c.weight_decay = s.weight_decay;
  c.optimizer = s.optimizer;
  c.seed = s.seed;
  c.epochs = epochs;
  c.eval_every = epochs;  // evaluation does not change the numbers; keep tests fast
  c.progress = false;
  c.threads = 2;
  return c;
}

test::ReferenceConfig reference_config(const RunSetup& s) {
  test::ReferenceConfig r;
  r.model = s.model;
  r.layers = s.layers;
  r.hidden = s.hidden;
  r.heads = s.heads;
  r.output_heads = 1;
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

// The same training run with one environment setting (the trainer's measurement switches).
TrainResult train_with(const char* name, const char* value, const Dataset& d, const Plan& plan,
                       const TrainConfig& config) {
  test::ScopedEnv setting(name, value);
  return train(d, plan, config);
}

// Bit-identical losses and parameters.
void expect_identical(const TrainResult& a, const TrainResult& b, const std::string& what) {
  EXPECT_EQ(a.losses, b.losses) << what;
  ASSERT_EQ(a.parameters.size(), b.parameters.size()) << what;
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    EXPECT_EQ(a.parameters[i].second, b.parameters[i].second)
        << what << " " << a.parameters[i].first;
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
    for (bool reorganize : {false, true}) {
      const Plan plan = make_plan(d, shape[0], shape[1], reorganize);
      // The cost model keeps the reorganized layout on this graph, so both layouts are covered.
      if (shape[0] > 1) {
        EXPECT_EQ(plan.reorganized, reorganize);
      }
      for (const auto& mode : modes) {
        TrainConfig config = train_config(setup, kEpochs);
        config.intermediates = mode;
        const std::string what = cat(setup.model, " ", setup.layers, " layers, P=", shape[0],
                                     " C=", shape[1], reorganize ? " reorganized" : "", " ", mode);
        SCOPED_TRACE(what);
        expect_matches_reference(train(d, plan, config), ref, what);
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

// One layer: the fused pass is the whole epoch, and GCN's only layer (12 -> 4) transforms first
// with no input gradient (its leaving rows give the weight gradient only).
TEST_F(TrainEquivalence, OneLayerMatchesReference) {
  for (const std::string model : {"gcn", "sage", "gat"}) {
    RunSetup s;
    s.model = model;
    s.layers = 1;
    const auto ref = test::train_reference(dataset(), reference_config(s), 5);
    for (const auto& shape : {std::pair{1, 1}, std::pair{4, 8}}) {
      const Plan plan = make_plan(dataset(), shape.first, shape.second, true);
      const std::string what = cat(model, " 1 layer, P=", shape.first, " C=", shape.second);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 5)), ref, what);
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
      const Plan plan = make_plan(dataset(), shape.first, shape.second, true);
      const std::string what = cat(model, " 3 layers, P=", shape.first, " C=", shape.second);
      SCOPED_TRACE(what);
      expect_matches_reference(train(dataset(), plan, train_config(s, 5)), ref, what);
    }
  }
}

TEST_F(TrainEquivalence, ThreeTransferSchemesGiveTheSameNumbers) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  for (const std::string model : {"gcn", "sage", "gat"}) {
    RunSetup s;
    s.model = model;
    TrainConfig config = train_config(s, 4);
    config.comm = "p2p+reuse";
    const TrainResult reuse = train(dataset(), plan, config);
    for (const std::string comm : {"p2p", "baseline"}) {
      config.comm = comm;
      const TrainResult other = train(dataset(), plan, config);
      for (std::size_t e = 0; e < reuse.losses.size(); ++e)
        EXPECT_NEAR(other.losses[e], reuse.losses[e], 1e-6 * std::abs(reuse.losses[e]))
            << model << " " << comm << " epoch " << e;
      for (std::size_t i = 0; i < reuse.parameters.size(); ++i)
        EXPECT_LE(relative_error(other.parameters[i].second, reuse.parameters[i].second), 1e-6)
            << model << " " << comm << " " << reuse.parameters[i].first;
    }
  }
}

// The overlap path (prefetched loads through the stage, backward blocks in a second buffer set,
// flushes from a compact buffer) must compute exactly what the in-line path computes, also when a
// memory budget leaves no room for its optional buffers.
TEST_F(TrainEquivalence, OverlapOnAndOffGiveIdenticalNumbers) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const std::string comm : {"p2p+reuse", "baseline"}) {
      RunSetup s;
      s.model = model;
      TrainConfig config = train_config(s, 3);
      config.comm = comm;
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
      config.no_overlap = true;
      const TrainResult in_line = train(dataset(), plan, config);
      expect_identical(overlapped, in_line, what);
      // The overlap buffers cost device memory; under a budget that fits only the in-line run's
      // peak they take what the constants leave or the constants spill (no error), and the
      // numbers stay the same.
      const std::int64_t in_line_peak = in_line.records.back().peak_device_bytes;
      EXPECT_GT(overlapped.records.back().peak_device_bytes, in_line_peak) << what;
      config.no_overlap = false;
      config.gpu_memory = in_line_peak;
      config.input_rows = "keep";  // auto would reload GAT's input rows under this budget
      const TrainResult capped = train(dataset(), plan, config);
      EXPECT_LE(capped.records.back().peak_device_bytes, in_line_peak) << what;
      EXPECT_GT(capped.records.back().peak_device_bytes, in_line_peak * 9 / 10) << what;
      EXPECT_EQ(capped.losses, in_line.losses) << what;
    }
}

// Layer 1's backward pass keeps its last batch's gradient rows on the devices and layer 0's
// backward pass takes them into its G^1 blocks (ScheduleOptions::keep_tail): the same numbers,
// bit for bit, as flushing them to host memory and loading them back (SLUICE_KEEP_TAIL=0), with
// every kept row's flush off the host link.
TEST_F(TrainEquivalence, KeptBackwardTailGivesIdenticalNumbersWithFewerTransfers) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  // The last batch's leaving rows; in p2p mode every row of the last batch leaves, the same set.
  std::int64_t tail_rows = 0;
  for (int p = 0; p < plan.partitions; ++p)
    tail_rows += std::int64_t(plan.chunk(plan.chunks - 1, p).leave_vertices.size());
  ASSERT_GT(tail_rows, 0);
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const std::string comm : {"p2p+reuse", "p2p"}) {
      RunSetup s;
      s.model = model;
      TrainConfig config = train_config(s, 3);
      config.comm = comm;
      const std::string what = model + " " + comm;
      const TrainResult kept = train(dataset(), plan, config);
      const TrainResult flushed = train_with("SLUICE_KEEP_TAIL", "0", dataset(), plan, config);
      expect_identical(kept, flushed, what);
      const TransferCounters& a = kept.records.back().transfers;
      const TransferCounters& b = flushed.records.back().transfers;
      // Layer 1 flushes G^1 rows, hidden floats wide (SAGE), or, for the layers whose inputs
      // are stored transformed (GCN's narrowing last layer, GAT), dT^1 rows, classes wide.
      const std::int64_t width = model == "sage" ? s.hidden : 4;
      const std::int64_t row_bytes = width * std::int64_t(sizeof(float));
      EXPECT_EQ(b.d2h_bytes - a.d2h_bytes, tail_rows * row_bytes) << what;
      EXPECT_EQ(a.h2d_block_bytes, b.h2d_block_bytes) << what;  // blocks still load whole
      EXPECT_EQ(a.h2d_gather_bytes, b.h2d_gather_bytes) << what;
      EXPECT_EQ(a.p2p_bytes, b.p2p_bytes) << what;
    }
}

// Training fuses the last layer's forward and backward into one pass
// (ScheduleOptions::fuse_last_layer): the same numbers, bit for bit, as separate passes
// (SLUICE_FUSE_LAST=0), without the loss gradients G^L and the aggregations A^{L-1} going to host
// memory and back, and without the backward's reload of the layer's inputs (GAT, recompute).
TEST_F(TrainEquivalence, FusedLastLayerGivesIdenticalNumbersWithFewerTransfers) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  const std::int64_t n = dataset().num_nodes, classes = 4;
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const std::string intermediates : {"auto", "recompute"}) {
      RunSetup s;
      s.model = model;
      TrainConfig config = train_config(s, 3);
      config.intermediates = intermediates;
      const std::string what = model + " " + intermediates;
      const TrainResult fused = train(dataset(), plan, config);
      const TrainResult separate = train_with("SLUICE_FUSE_LAST", "0", dataset(), plan, config);
      expect_identical(fused, separate, what);
      const TransferCounters& a = fused.records.back().transfers;
      const TransferCounters& b = separate.records.back().transfers;
      // Per vertex: G^L (classes wide) and, cached, A^{L-1} (SAGE: self and mean; GCN's last
      // layer narrows, so it transforms first and caches nothing, like GAT).
      const bool cached = model == "sage" && intermediates == "auto";
      const std::int64_t aggregate = 2 * s.hidden;
      const std::int64_t saved = n * (classes + (cached ? aggregate : 0)) * 4;
      EXPECT_EQ(b.d2h_bytes - a.d2h_bytes, saved) << what;
      EXPECT_EQ(b.h2d_block_bytes - a.h2d_block_bytes, saved) << what;
      if (cached) {
        EXPECT_EQ(a.h2d_gather_bytes, b.h2d_gather_bytes) << what;
      } else {
        EXPECT_GT(b.h2d_gather_bytes, a.h2d_gather_bytes) << what;  // no reload
      }
    }
}

// GCN's last layer computes Â (X W) when it narrows (classes < hidden), (Â X) W otherwise; the
// two orders agree up to rounding (both also match the reference above).
TEST_F(TrainEquivalence, GcnTransformFirstAgreesWithAggregateFirst) {
  ModelConfig shape;
  shape.kind = ModelKind::kGcn;
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
  shape.classes = 4;
  shape.kind = ModelKind::kSage;
  EXPECT_FALSE(make_model(shape).layers[2].transform_first);

  const Plan plan = make_plan(dataset(), 4, 8, true);
  RunSetup s;
  // Every row from host memory (EarlyNextPassCopiesTheFirstRowsOnTheDevice takes some from the
  // device), so that the byte counts below follow from the widths alone.
  test::ScopedEnv host_rows("SLUICE_EARLY_NEXT_PASS", "0");
  const TrainResult first = train(dataset(), plan, train_config(s, 4));
  const TrainResult aggregate =
      train_with("SLUICE_TRANSFORM_FIRST", "0", dataset(), plan, train_config(s, 4));
  for (std::size_t e = 0; e < first.losses.size(); ++e)
    EXPECT_NEAR(first.losses[e], aggregate.losses[e], 1e-6 * std::abs(aggregate.losses[e])) << e;
  for (std::size_t i = 0; i < first.parameters.size(); ++i)
    EXPECT_LE(relative_error(first.parameters[i].second, aggregate.parameters[i].second), 1e-6)
        << first.parameters[i].first;
  // Both passes (forward 0, fused 1) load the same R rows per epoch: 12 + 8 floats each when
  // aggregating first, 12 + 4 when layer 1's inputs are stored transformed (T = H W, 4 wide).
  const std::int64_t aggregate_bytes = aggregate.records.back().transfers.h2d_gather_bytes;
  const std::int64_t rows = aggregate_bytes / ((12 + 8) * 4);
  ASSERT_EQ(aggregate_bytes, rows * (12 + 8) * 4);
  EXPECT_EQ(first.records.back().transfers.h2d_gather_bytes, rows * (12 + 4) * 4);
}

// Forward passes store the next layer's inputs transformed when that layer transforms its rows
// (ScheduleOptions::store_transformed): T = dropout(H) W instead of H, and that layer's backward
// flushes dT, whose transform backward runs per chunk in the pass below. Up to rounding, the
// numbers are those of transforming rows on arrival (SLUICE_STORE_TRANSFORMED=0), for every
// transfer scheme and with a pretransformed hidden layer (3-layer GAT), and fewer bytes cross
// the host link.
TEST_F(TrainEquivalence, StoredTransformsAgreeWithTransformsOnArrival) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  for (const std::string model : {"gcn", "gat"})
    for (const int layers : {2, 3})
      for (const std::string comm : {"p2p+reuse", "baseline"}) {
        RunSetup s;
        s.model = model;
        s.layers = layers;
        TrainConfig config = train_config(s, 3);
        config.comm = comm;
        const std::string what = model + " " + std::to_string(layers) + " layers " + comm;
        const TrainResult stored = train(dataset(), plan, config);
        const TrainResult arrival =
            train_with("SLUICE_STORE_TRANSFORMED", "0", dataset(), plan, config);
        for (std::size_t e = 0; e < stored.losses.size(); ++e)
          EXPECT_NEAR(stored.losses[e], arrival.losses[e], 1e-6 * std::abs(arrival.losses[e]))
              << what << " epoch " << e;
        for (std::size_t i = 0; i < stored.parameters.size(); ++i)
          EXPECT_LE(relative_error(stored.parameters[i].second, arrival.parameters[i].second), 1e-6)
              << what << " " << stored.parameters[i].first;
        const TransferCounters& a = stored.records.back().transfers;
        const TransferCounters& b = arrival.records.back().transfers;
        EXPECT_LT(a.h2d_gather_bytes, b.h2d_gather_bytes) << what;
        EXPECT_LT(a.d2h_bytes, b.d2h_bytes) << what;
        EXPECT_EQ(a.p2p_rows, b.p2p_rows) << what;  // the same rows, exchanged transformed
      }
}

TEST_F(TrainEquivalence, ReloadedInputRowsAgreeWithKeptOnes) {
  // --input-rows reload: layers transformed on arrival keep no input rows on the device and read
  // the leaving rows again from host memory for their weight gradients. GAT's layer 0 (features),
  // and with SLUICE_STORE_TRANSFORMED=0 every GAT layer and GCN's narrowing last layer (hidden
  // rows, with input gradients); with the load stage and without (--no-overlap: slices gathered
  // from host memory).
  const Plan plan = make_plan(dataset(), 4, 8, true);
  for (const char* stored : {"1", "0"})
    for (const std::string model : {"gat", "gcn"})
      for (const std::string comm : {"p2p+reuse", "baseline"})
        for (const bool overlap : {true, false}) {
          if (model == "gcn" && std::string(stored) == "1") continue;  // nothing to reload
          RunSetup s;
          s.model = model;
          s.layers = 3;
          s.hidden = 8;  // GCN: layer 2 narrows from 8 to the 4 classes
          TrainConfig config = train_config(s, 3);
          config.comm = comm;
          config.no_overlap = !overlap;
          const std::string what =
              cat(model, " ", comm, overlap ? "" : " no overlap", " store_transformed=", stored);
          config.input_rows = "keep";
          const TrainResult kept =
              train_with("SLUICE_STORE_TRANSFORMED", stored, dataset(), plan, config);
          config.input_rows = "reload";
          const TrainResult reloaded =
              train_with("SLUICE_STORE_TRANSFORMED", stored, dataset(), plan, config);
          ASSERT_EQ(kept.losses.size(), 3u) << what;
          for (std::size_t e = 0; e < kept.losses.size(); ++e)
            EXPECT_NEAR(reloaded.losses[e], kept.losses[e], 1e-6 * std::abs(kept.losses[e]))
                << what << " epoch " << e;
          for (std::size_t i = 0; i < kept.parameters.size(); ++i)
            EXPECT_LE(relative_error(reloaded.parameters[i].second, kept.parameters[i].second),
                      1e-6)
                << what << " " << kept.parameters[i].first;
          // The leaving rows cross the host link once more. X is gone from the device for GAT;
          // GCN's lower layers aggregate first and keep it (as wide as the features).
          const TransferCounters& a = reloaded.records.back().transfers;
          const TransferCounters& b = kept.records.back().transfers;
          EXPECT_GT(a.h2d_gather_bytes, b.h2d_gather_bytes) << what;
          EXPECT_EQ(a.p2p_rows, b.p2p_rows) << what;
          if (model == "gat")
            EXPECT_LT(reloaded.records.back().peak_device_bytes,
                      kept.records.back().peak_device_bytes)
                << what;
          else
            EXPECT_EQ(reloaded.records.back().peak_device_bytes,
                      kept.records.back().peak_device_bytes)
                << what;
        }
}

TEST_F(TrainEquivalence, TransferCountersFollowTheSchemes) {
  // Host-link rows per epoch shrink from baseline to p2p to p2p+reuse; p2p rows appear only
  // with peer transfers.
  const Plan plan = make_plan(dataset(), 4, 8, true);
  RunSetup s;
  std::int64_t rows[3];
  std::int64_t p2p[3];
  int k = 0;
  // Every row from host memory, as the plan's volumes count them (the early next pass takes some
  // of the fused pass's first rows from the device: EarlyNextPassCopiesTheFirstRowsOnTheDevice).
  test::ScopedEnv host_rows("SLUICE_EARLY_NEXT_PASS", "0");
  for (const std::string comm : {"baseline", "p2p", "p2p+reuse"}) {
    // The second epoch: from the first on, layer 0's backward pass loads the next epoch's first
    // batch (counted in the epoch that loads it), so every epoch moves one epoch's rows.
    TrainConfig config = train_config(s, 2);
    config.comm = comm;
    const TrainResult r = train(dataset(), plan, config);
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
  // Forward of both layers loads T_c^p per batch in p2p mode: sum_c |T_c| rows per layer pass.
  EXPECT_EQ(rows[1], 2 * plan.stats.volume_p2p_rows);
  EXPECT_EQ(rows[2], 2 * plan.stats.volume_reuse_rows);
  EXPECT_EQ(rows[0], 2 * plan.stats.volume_baseline_rows);
}

// A forward pass whose outputs the next pass reads ends without waiting for its last stores
// (ScheduleOptions::early_next_pass): the next pass's first batch takes the rows of each
// device's last chunk from that chunk's output block instead of host memory. The numbers are
// bit-identical, and per such pass the host link loads exactly those rows fewer: the vertices of
// the last chunk in chunk 0's load list (p2p+reuse: the plan's own lists).
TEST_F(TrainEquivalence, EarlyNextPassCopiesTheFirstRowsOnTheDevice) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  std::int64_t head = 0;
  for (int p = 0; p < plan.partitions; ++p) {
    const ChunkPlan& last = plan.chunk(plan.chunks - 1, p);
    for (vertex_t v : plan.chunk(0, p).load_vertices)
      head += v >= last.dst_begin && v < last.dst_begin + last.num_dst();
  }
  ASSERT_GT(head, 0);  // else the plan would not exercise the copy
  for (const std::string model : {"gcn", "sage", "gat"})
    for (const int layers : {2, 3})
      for (const std::string comm : {"p2p+reuse", "p2p", "baseline"}) {
        RunSetup s;
        s.model = model;
        s.layers = layers;
        TrainConfig config = train_config(s, 2);
        config.comm = comm;
        const std::string what = model + " " + std::to_string(layers) + " layers " + comm;
        const TrainResult early = train(dataset(), plan, config);
        const TrainResult late = train_with("SLUICE_EARLY_NEXT_PASS", "0", dataset(), plan, config);
        expect_identical(early, late, what);
        // Per training epoch, L - 1 forward passes hand over to a pass that reads their outputs;
        // baseline loads keep waiting for every store.
        const std::int64_t saved = late.records.back().transfers.h2d_gather_rows -
                                   early.records.back().transfers.h2d_gather_rows;
        if (comm == "baseline")
          EXPECT_EQ(saved, 0) << what;
        else if (comm == "p2p+reuse")
          EXPECT_EQ(saved, (layers - 1) * head) << what;
        else
          EXPECT_GT(saved, 0) << what;
        EXPECT_EQ(early.records.back().transfers.d2h_bytes, late.records.back().transfers.d2h_bytes)
            << what;
      }
}

// The fused pass preloads layer 0's first backward block set (ScheduleOptions::preload_chunks 1)
// or the first two (SLUICE_PRELOAD_CHUNKS=2): the same blocks move either way, only earlier or
// later, so numbers and transfer counts are identical.
TEST_F(TrainEquivalence, PreloadedBlocksGiveIdenticalNumbersAndTransfers) {
  const Plan plan = make_plan(dataset(), 4, 8, true);
  for (const std::string model : {"gcn", "gat"}) {
    RunSetup s;
    s.model = model;
    const TrainConfig config = train_config(s, 2);
    const TrainResult one = train(dataset(), plan, config);
    const TrainResult two = train_with("SLUICE_PRELOAD_CHUNKS", "2", dataset(), plan, config);
    expect_identical(one, two, model);
    const TransferCounters& a = one.records.back().transfers;
    const TransferCounters& b = two.records.back().transfers;
    EXPECT_GT(a.h2d_block_bytes, 0) << model;
    EXPECT_EQ(a.h2d_block_bytes, b.h2d_block_bytes) << model;
    EXPECT_EQ(a.h2d_gather_bytes, b.h2d_gather_bytes) << model;
    EXPECT_EQ(a.d2h_bytes, b.d2h_bytes) << model;
  }
}

TEST_F(TrainEquivalence, AdamChunkedEqualsUnchunkedOver20Epochs) {
  const Plan whole = make_plan(dataset(), 1, 1, false);
  const Plan chunked = make_plan(dataset(), 4, 8, true);
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
  const TrainResult got = train(dataset(), make_plan(dataset(), 2, 3, true), train_config(s, 5));
  for (std::size_t e = 0; e < ref.losses.size(); ++e)
    EXPECT_LE(std::abs(got.losses[e] - ref.losses[e]) / std::abs(ref.losses[e]), 1e-5);
  for (const auto& [name, values] : got.parameters)
    EXPECT_LE(relative_error(values, ref.final_parameters.get(name)), 1e-4) << name;
}

TEST_F(TrainEquivalence, EvaluationMatchesReference) {
  RunSetup s;
  s.model = "sage";
  TrainConfig config = train_config(s, 3);
  config.eval_every = 1;
  const TrainResult got = train(dataset(), make_plan(dataset(), 2, 3, true), config);
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
  const Plan plan = make_plan(other, 2, 2, false);
  RunSetup s;
  EXPECT_THROW(train(dataset(), plan, train_config(s, 1)), InputError);
}

TEST_F(TrainEquivalence, RejectsCorruptedPlanIndices) {
  RunSetup s;
  Plan plan = make_plan(dataset(), 2, 3, true);
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
