// The GPU memory estimate (train/layout/memory_estimate.hpp) against what the schedule really
// allocates. The estimate adds up the buffer layout (train/layout/buffer_layout.hpp), so its
// Device-interface figure must equal the CPU backend's allocated peak to the byte on every
// device, for every model, depth, width profile, plan shape, transfer scheme and input-row
// choice; any change to the schedule's device buffers that the layout does not describe fails
// here. Also: the budget rules, the chunk-count search and the trainer's --input-rows auto.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "kernels/ops.hpp"
#include "preprocess/chunk_search.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/host_memory.hpp"
#include "train/layout/chunk_search.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/model.hpp"
#include "train/model_layout.hpp"
#include "train/schedule.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

// The smallest fitting chunk count, as the search finds it.
const ChunkChoiceOptions kSmallest{ChunkChoice::kSmallest, {}, {}, {}};

// Input, hidden and output widths, none a multiple of 4 (the schedule pads rows to 16 bytes).
struct Widths {
  std::string name;
  std::int64_t features = 0, hidden = 0;
  std::int32_t classes = 0;
};
// Narrowing: GCN's last layer transforms first; widening: no layer does (even with one layer).
const Widths kNarrowing{"narrowing", 37, 10, 3};
const Widths kWidening{"widening", 6, 22, 7};

const Dataset& dataset_of(const Widths& widths) {
  static std::map<std::string, Dataset> datasets;
  auto it = datasets.find(widths.name);
  if (it == datasets.end())
    it = datasets
             .emplace(widths.name, test::random_dataset(240, 4, widths.features, widths.classes, 11,
                                                        test::ReverseEdgesIntoSources::kAdd))
             .first;
  return it->second;
}

const Plan& plan_of(const Widths& widths, int P, int C) {
  static std::map<std::tuple<std::string, int, int>, Plan> plans;
  const auto key = std::make_tuple(widths.name, P, C);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, test::make_plan(dataset_of(widths), test::plan_options(P, C).seed(5)))
             .first;
  return it->second;
}

ModelShape shape_of(const std::string& model, int layers, const Widths& widths) {
  return test::model_shape(model, layers)
      .in_dim(widths.features)
      .hidden(widths.hidden)
      .classes(widths.classes)
      .heads(3)
      .output_heads(1);
}

// The loss-row flags of a test plan's dataset (its chunks' loss-row CSRs).
LossRowFlags loss_rows(const Widths& widths, const Plan& plan) {
  return loss_row_flags(dataset_of(widths), plan.old_to_new);
}

void expect_same_layers(const ModelLayers& a, const ModelLayers& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.parameters, b.parameters);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    SCOPED_TRACE(cat("layer ", l));
    const LayerShape &x = a.layers[l], &y = b.layers[l];
    EXPECT_EQ(x.index, y.index);
    EXPECT_EQ(x.last, y.last);
    EXPECT_EQ(x.in_width, y.in_width);
    EXPECT_EQ(x.out_width, y.out_width);
    EXPECT_EQ(x.aggregate_width, y.aggregate_width);
    EXPECT_EQ(x.transform_width, y.transform_width);
    EXPECT_EQ(x.heads, y.heads);
    EXPECT_EQ(x.transform_first, y.transform_first);
  }
}

// The schedule's setup with the CPU backend and no budget: each device's allocated peak. The
// CPU backend allocates nothing after setup (EpochAllocatesNothingBeyondSetup).
std::vector<std::int64_t> setup_peaks(const Dataset& d, const Plan& plan, const ModelSpec& model,
                                      const LayoutOptions& layout) {
  std::unique_ptr<Backend> backend =
      make_cpu_backend(test::backend_options(plan.partitions).threads(1));
  ScheduleOptions options;
  options.comm = layout.comm;
  options.overlap = layout.overlap;
  options.reload_inputs = layout.reload_inputs;
  options.cache_intermediates = layout.gat_head_outputs == GatHeadOutputs::kKept;
  options.gat_layer_zero = layout.gat_layer_zero;
  options.last_layer_rows = layout.last_layer_rows;
  options.evaluation_cache = EvaluationCache::kNone;  // an optional buffer beyond the estimate
  options.remote_features = RemoteFeatures::kPulled;  // the same
  options.layer_outputs = LayerOutputs::kRecomputed;  // so are kept layer outputs
  const Schedule schedule(*backend, d, plan, model, options);
  std::vector<std::int64_t> peaks;
  for (int p = 0; p < plan.partitions; ++p) peaks.push_back(backend->device(p).peak_bytes());
  return peaks;
}

// Every model, depth, width profile, plan shape, transfer scheme and input-row choice (with and
// without overlap buffers for two partitions; GAT with its head outputs kept and recomputed, and
// on one chunk with its last layer's own attention buffers):
// the estimate's device_bytes() is each device's allocated peak, and the model's layers from
// its description are those make_model builds.
TEST(MemoryEstimate, EqualsTheCpuBackendsPeakOnEveryDevice) {
  int cases = 0;
  struct Variant {
    std::string model;
    GatHeadOutputs head_outputs;
  };
  const Variant variants[] = {{"gcn", GatHeadOutputs::kKept},
                              {"sage", GatHeadOutputs::kKept},
                              {"gat", GatHeadOutputs::kKept},
                              {"gat", GatHeadOutputs::kRecomputed}};
  for (const Widths& widths : {kNarrowing, kWidening})
    for (const Variant& variant : variants)
      for (int layers = 1; layers <= 3; ++layers) {
        const std::string& model = variant.model;
        const ModelShape shape = shape_of(model, layers, widths);
        const ModelSpec spec = test::model_spec(shape);
        expect_same_layers(model_layers(shape), model_layers(spec));
        for (int P = 1; P <= 3; ++P)
          for (int C = 1; C <= 4; ++C) {
            const Plan& plan = plan_of(widths, P, C);
            for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2p, CommMode::kP2pReuse})
              for (const bool reload : {false, true})
                for (const bool overlap : {true, false}) {
                  if (!overlap && P != 2) continue;
                  const LayoutOptions layout{comm, overlap, reload, variant.head_outputs};
                  SCOPED_TRACE(cat(model, " ", layers, " layers ", widths.name, ", P=", P, " C=", C,
                                   ", ", comm_mode_name(comm), reload ? ", reload" : ", keep",
                                   overlap ? "" : ", no overlap",
                                   variant.head_outputs == GatHeadOutputs::kRecomputed
                                       ? ", head outputs recomputed"
                                       : ""));
                  const std::vector<std::int64_t> peaks =
                      setup_peaks(dataset_of(widths), plan, spec, layout);
                  for (int p = 0; p < P; ++p) {
                    const GpuMemoryEstimate e =
                        estimate_gpu_memory(plan, loss_rows(widths, plan), p, shape, layout);
                    EXPECT_EQ(e.device_bytes(), peaks[std::size_t(p)]) << "partition " << p;
                    // The CUDA layout charges at least what the Device interface accounts.
                    EXPECT_GE(e.cuda_setup, e.device_bytes());
                    EXPECT_GE(e.all_constants, e.cuda_setup + e.cuda_scratch);
                    // Optional buffers: the overlap buffers, and without them GAT's last layer's
                    // own attention buffers on one chunk (with its head outputs kept).
                    const bool kept_attention = model == "gat" && layers >= 2 && C == 1 &&
                                                variant.head_outputs == GatHeadOutputs::kKept;
                    EXPECT_EQ(e.overlap > 0, overlap || kept_attention);
                    EXPECT_LE(e.minimum, e.total);
                    if (!overlap && !kept_attention) {
                      EXPECT_EQ(e.minimum, e.total);
                    }
                  }
                  ++cases;
                }
          }
      }
  EXPECT_EQ(cases, 2 * 4 * 3 * 3 * 4 * 3 * 2 + 2 * 4 * 3 * 4 * 3 * 2);
}

// GAT's layer 0 attending over its input rows: its per-head sums and folded attention vectors in
// place of the layer's Zm, dZm and row slices, counted as the CPU backend allocates them on every
// partition, for 2 and 3 layers, both width profiles, 1 and 2 partitions of 1 to 4 chunks, every
// transfer scheme, head outputs kept and recomputed, with and without overlap buffers.
TEST(MemoryEstimate, GatAttendingOverItsInputsEqualsTheCpuBackendsPeak) {
  int cases = 0;
  for (const Widths& widths : {kNarrowing, kWidening})
    for (int layers = 2; layers <= 3; ++layers) {
      const ModelShape shape = shape_of("gat", layers, widths);
      const ModelSpec spec = test::model_spec(shape);
      for (int P = 1; P <= 2; ++P)
        for (int C = 1; C <= 4; ++C)
          for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2p, CommMode::kP2pReuse})
            for (const GatHeadOutputs outputs :
                 {GatHeadOutputs::kKept, GatHeadOutputs::kRecomputed})
              for (const bool overlap : {true, false}) {
                LayoutOptions layout{comm, overlap, false, outputs};
                layout.gat_layer_zero = GatLayerZero::kAttendInputs;
                SCOPED_TRACE(cat(layers, " layers ", widths.name, ", P=", P, " C=", C, ", ",
                                 comm_mode_name(comm), overlap ? "" : ", no overlap",
                                 outputs == GatHeadOutputs::kRecomputed ? ", recomputed" : ""));
                const Plan& plan = plan_of(widths, P, C);
                const std::vector<std::int64_t> peaks =
                    setup_peaks(dataset_of(widths), plan, spec, layout);
                for (int p = 0; p < P; ++p) {
                  const std::int64_t peak = peaks[std::size_t(p)];
                  EXPECT_EQ(estimate_gpu_memory(plan, loss_rows(widths, plan), p, shape, layout)
                                .device_bytes(),
                            peak)
                      << "partition " << p;
                  LayoutOptions transform = layout;
                  transform.gat_layer_zero = GatLayerZero::kTransformFirst;
                  EXPECT_NE(estimate_gpu_memory(plan, loss_rows(widths, plan), p, shape, transform)
                                .device_bytes(),
                            peak)
                      << "partition " << p;
                }
                ++cases;
              }
    }
  EXPECT_EQ(cases, 2 * 2 * 2 * 4 * 3 * 2 * 2);
}

// GCN's and SAGE's layer 0 multiplying first (LayerZeroOrder::kTransformFirst): its Zm, dZm and
// row slices counted as the CPU backend allocates them, for 2 and 3 layers, both width
// profiles, 1 to 3 partitions, 1 to 4 chunks, every transfer scheme, input rows kept and
// reloaded; and auto chooses it only where the rows shrink fourfold.
TEST(MemoryEstimate, LayerZeroTransformingFirstEqualsTheCpuBackendsPeak) {
  int cases = 0;
  for (const Widths& widths : {kNarrowing, kWidening})
    for (const std::string model : {"gcn", "sage"})
      for (int layers = 2; layers <= 3; ++layers) {
        const ModelShape shape = test::model_shape(model, layers)
                                     .in_dim(widths.features)
                                     .hidden(widths.hidden)
                                     .classes(widths.classes)
                                     .layer_zero_order(LayerZeroOrder::kTransformFirst);
        const ModelSpec spec = test::model_spec(shape);
        expect_same_layers(model_layers(shape), model_layers(spec));
        ASSERT_TRUE(spec.layers[0].transform_first);
        for (int P = 1; P <= 3; ++P)
          for (int C = 1; C <= 4; ++C)
            for (const CommMode comm : {CommMode::kBaseline, CommMode::kP2p, CommMode::kP2pReuse})
              for (const bool reload : {false, true}) {
                const LayoutOptions layout{comm, true, reload, GatHeadOutputs::kKept};
                SCOPED_TRACE(cat(model, " ", layers, " layers ", widths.name, ", P=", P, " C=", C,
                                 ", ", comm_mode_name(comm), reload ? ", reload" : ""));
                const Plan& plan = plan_of(widths, P, C);
                const std::vector<std::int64_t> peaks =
                    setup_peaks(dataset_of(widths), plan, spec, layout);
                for (int p = 0; p < P; ++p)
                  EXPECT_EQ(estimate_gpu_memory(plan, loss_rows(widths, plan), p, shape, layout)
                                .device_bytes(),
                            peaks[std::size_t(p)])
                      << "partition " << p;
                ++cases;
              }
      }
  EXPECT_EQ(cases, 2 * 2 * 2 * 3 * 4 * 3 * 2);
  // 4 x hidden <= features (GCN) or 8 x hidden <= features (SAGE) under auto.
  const auto transforms_first = [](const std::string& model, std::int64_t features,
                                   std::int64_t hidden) {
    return model_layers(test::model_shape(model, 2).in_dim(features).hidden(hidden).classes(3))
        .layers[0]
        .transform_first;
  };
  EXPECT_TRUE(transforms_first("gcn", 40, 10));
  EXPECT_FALSE(transforms_first("gcn", 39, 10));
  EXPECT_TRUE(transforms_first("sage", 80, 10));
  EXPECT_FALSE(transforms_first("sage", 79, 10));
  EXPECT_FALSE(
      model_layers(test::model_shape("gcn", 2).in_dim(40).hidden(10).classes(3).layer_zero_order(
                       LayerZeroOrder::kAggregateFirst))
          .layers[0]
          .transform_first);
  // The trainer keeps auto's width rule on the GPU and aggregates first on the CPU backend; an
  // order given stays on both.
  for (const std::string device : {"cpu", "cuda"})
    for (const std::string order : {"auto", "aggregate", "transform"}) {
      TrainConfig config;
      config.device = device;
      config.layer_zero_order = order;
      const LayerZeroOrder expected = order == "aggregate"   ? LayerZeroOrder::kAggregateFirst
                                      : order == "transform" ? LayerZeroOrder::kTransformFirst
                                      : device == "cpu"      ? LayerZeroOrder::kAggregateFirst
                                                             : LayerZeroOrder::kAuto;
      EXPECT_EQ(layer_zero_order(config), expected) << device << " " << order;
    }
}

// One training epoch (training and evaluation) through train(): the trainer's peak is the
// estimate of its configuration (memory_shape, memory_layout_options), so nothing the CPU
// backend accounts is allocated after setup.
TEST(MemoryEstimate, EpochAllocatesNothingBeyondSetup) {
  const Dataset& d = dataset_of(kNarrowing);
  const Plan& plan = plan_of(kNarrowing, 2, 3);
  for (const std::string model : {"gcn", "sage", "gat"}) {
    SCOPED_TRACE(model);
    const TrainConfig config = test::train_config()
                                   .model(model)
                                   .layers(2)
                                   .hidden(kNarrowing.hidden)
                                   .heads(3)
                                   .output_heads(1)
                                   .epochs(1)
                                   .eval_every(1)
                                   .threads(1);
    const TrainResult result = train(d, plan, config);
    ASSERT_EQ(result.records.size(), 1u);
    // Beside the estimate, optional buffers placed last: the evaluation cache (GCN, SAGE: layer
    // 0's aggregation of each partition's vertices), layer 0's kept outputs (GCN, SAGE: the
    // last layer narrows, so it transforms layer 0's outputs) and the copies of the remote
    // feature rows with their keys (GCN, SAGE: one per row the partition pulls in a pass).
    const LayerSpec first = test::model_spec(memory_shape(d, config)).layers.front();
    std::int64_t estimated = 0;
    for (int p = 0; p < plan.partitions; ++p) {
      const std::int64_t rows =
          plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
      std::int64_t pulled = 0;
      for (int c = 0; c < plan.chunks; ++c) {
        const std::vector<std::uint8_t>& pulls = plan.chunk(c, p).remote_pull;
        pulled += std::count(pulls.begin(), pulls.end(), 1);
      }
      ASSERT_GT(pulled, 0);
      const std::int64_t cache =
          model == "gat"
              ? 0
              : rows * (first.aggregate_width + first.out_width) * std::int64_t(sizeof(float)) +
                    pulled * (first.in_width * std::int64_t(sizeof(float)) +
                              std::int64_t(sizeof(vertex_t)));
      estimated = std::max(
          estimated, estimate_gpu_memory(plan, loss_row_flags(d, plan.old_to_new), p,
                                         memory_shape(d, config), memory_layout_options(config))
                             .device_bytes() +
                         cache);
    }
    EXPECT_EQ(result.records.front().peak_device_bytes, estimated);
  }
}

// Each chunk of a model of two layers or more keeps a loss-row CSR (LastLayerRows::kLoss) that
// holds the entries of its rows in the loss; none with kAll or one layer. The estimate counts
// them as the CPU backend allocates them.
TEST(MemoryEstimate, LossRowCsrsHoldTheLossRowsEntries) {
  int kept = 0;
  for (const int C : {1, 3})
    for (const int layers : {1, 2})
      for (const LastLayerRows rows : {LastLayerRows::kLoss, LastLayerRows::kAll}) {
        SCOPED_TRACE(cat("C=", C, ", ", layers, " layers, ", last_layer_rows_name(rows)));
        const Plan& plan = plan_of(kNarrowing, 2, C);
        const LossRowFlags flags = loss_rows(kNarrowing, plan);
        const ModelShape shape = shape_of("gcn", layers, kNarrowing);
        LayoutOptions options;
        options.last_layer_rows = rows;
        for (int p = 0; p < 2; ++p) {
          const PartitionLayout layout =
              partition_layout(plan, p, model_layers(shape), options, flags);
          std::vector<std::int64_t> entries(std::size_t(C), -1);
          for (const BufferSpec& b : layout.buffers)
            if (b.role == BufferRole::kLossCsr) entries[std::size_t(b.chunk)] = b.csr.nnz;
          for (int c = 0; c < C; ++c) {
            const ChunkPlan& chunk = plan.chunk(c, p);
            std::int64_t expected = 0;
            for (vertex_t r = 0; r < chunk.num_dst(); ++r)
              if (flags[std::size_t(chunk.dst_begin + r)])
                expected += chunk.indptr[std::size_t(r) + 1] - chunk.indptr[std::size_t(r)];
            ASSERT_GT(expected, 0);
            ASSERT_LT(expected, chunk.num_entries());
            const bool keeps = rows == LastLayerRows::kLoss && layers >= 2;
            EXPECT_EQ(entries[std::size_t(c)], keeps ? expected : -1) << "chunk " << c;
            kept += keeps;
          }
        }
        const std::vector<std::int64_t> peaks =
            setup_peaks(dataset_of(kNarrowing), plan, test::model_spec(shape), options);
        for (int p = 0; p < 2; ++p)
          EXPECT_EQ(estimate_gpu_memory(plan, flags, p, shape, options).device_bytes(),
                    peaks[std::size_t(p)])
              << "partition " << p;
      }
  EXPECT_EQ(kept, 2 * (1 + 3));
}

// The CUDA figures by their rules: the per-chunk constants' share, the largest chunk, and the
// budgets built from them.
TEST(MemoryEstimate, CudaFiguresFollowTheirRules) {
  const Plan& plan = plan_of(kNarrowing, 2, 3);
  const ModelShape shape = shape_of("gat", 2, kNarrowing);
  const PartitionLayout layout =
      partition_layout(plan, 0, model_layers(shape), {}, loss_rows(kNarrowing, plan));
  const GpuMemoryEstimate e = estimate_layout_memory(layout);
  std::int64_t setup = 0, chunks = 0, largest = 0, staging = 0, overlap = 0;
  std::map<int, std::int64_t> per_chunk;
  int loss_csrs = 0;
  for (const BufferSpec& b : layout.buffers) {
    EXPECT_EQ(cuda_bytes(b) % kCudaGranule, 0) << buffer_role_name(b.role);
    if (b.kind == BufferKind::kFirstUseScratch) continue;
    setup += cuda_bytes(b);
    if (b.group != OverlapGroup::kNone) overlap += cuda_bytes(b);
    if (!per_chunk_constant(b)) continue;
    chunks += cuda_bytes(b);
    per_chunk[b.chunk] += cuda_bytes(b);
    // A slot holds one CSR: a chunk's or its loss-row CSR.
    staging = std::max(staging, cuda_staged_bytes(b));
    loss_csrs += b.role == BufferRole::kLossCsr;
  }
  for (const auto& [chunk, bytes] : per_chunk) largest = std::max(largest, bytes);
  staging *= cuda::kStagedCsrSlots;  // two slots: one computing, one filling
  ASSERT_EQ(per_chunk.size(), 3u);
  EXPECT_EQ(loss_csrs, 3);
  EXPECT_EQ(e.cuda_setup, setup);
  EXPECT_EQ(e.cuda_overlap, overlap);
  EXPECT_EQ(e.cuda_chunk_constants, chunks);
  EXPECT_EQ(e.cuda_largest_chunk, largest);
  EXPECT_EQ(e.cuda_staging, staging);
  // Every constant on the device: the setup in seven eighths, the first-use scratch beside it.
  EXPECT_EQ(e.all_constants, std::max(cuda_budget_with_headroom(setup), setup + e.cuda_scratch));
  // Constants spilling: seven eighths hold the largest chunk's, the free eighth the scratch.
  const std::int64_t resident = setup - chunks + largest;
  const std::int64_t eighth = 8 * (e.cuda_scratch + staging);
  EXPECT_EQ(e.total,
            std::min(e.all_constants, std::max(cuda_budget_with_headroom(resident), eighth)));
  EXPECT_EQ(e.minimum,
            std::min(e.total, std::max(cuda_budget_with_headroom(resident - overlap), eighth)));
  // The headroom: ceil(8/7 x resident), whose 7/8 holds the resident bytes.
  EXPECT_EQ(cuda_budget_with_headroom(7000), 8000);
  EXPECT_EQ(cuda_budget_with_headroom(7001), 8002);
  EXPECT_EQ(cuda::rounded(1), 256);
  EXPECT_EQ(cuda::rounded(256), 256);
  EXPECT_EQ(cuda::rounded(0), 0);
}

// The budget rules in order of preference: every overlap buffer before only the required
// buffers, kept input rows before reloaded ones; reloading only for models with a layer that
// transforms on arrival (GAT's layer 0), only when allowed, always when forced.
TEST(MemoryEstimate, BudgetRulesInOrderOfPreference) {
  const auto rules_of = [](const std::string& model, bool forced, bool may_reload) {
    const ModelShape shape = test::model_shape(model, 2).in_dim(10).hidden(16).classes(5).heads(4);
    LayoutOptions options;
    options.reload_inputs = forced;
    std::string text;
    for (const BudgetRule& rule : budget_rules(shape, options, may_reload))
      text += cat(rule.reload_inputs ? "reload" : "keep", rule.all_overlap ? "+all " : "+min ");
    return text;
  };
  EXPECT_EQ(rules_of("gat", false, true), "keep+all reload+all keep+min reload+min ");
  EXPECT_EQ(rules_of("gat", false, false), "keep+all keep+min ");
  EXPECT_EQ(rules_of("gat", true, false), "reload+all reload+min ");
  EXPECT_EQ(rules_of("gcn", false, true), "keep+all keep+min ");  // nothing to reload
  EXPECT_EQ(rules_of("sage", false, true), "keep+all keep+min ");
}

// Chunk c computes in block set c % 2, so a one-chunk plan has no second set: its overlap
// buffers are the load stage and the flush buffer (and their lists); with two chunks the second
// set's three buffers join them.
TEST(MemoryEstimate, SecondBlockSetOnlyWithTwoChunksOrMore) {
  for (const int C : {1, 2}) {
    const Plan& plan = plan_of(kNarrowing, 1, C);
    const PartitionLayout layout = partition_layout(
        plan, 0, model_layers(shape_of("gcn", 2, kNarrowing)), {}, loss_rows(kNarrowing, plan));
    int stage = 0, second = 0;
    for (const BufferSpec& b : layout.buffers) {
      stage += b.role == BufferRole::kLoadStage;
      second += b.group == OverlapGroup::kSecondBlockSet;
    }
    EXPECT_EQ(stage, 1) << "C=" << C;
    EXPECT_EQ(second, C == 1 ? 0 : 3) << "C=" << C;
  }
}

// GAT's A buffer holds the hidden layers' head outputs (K x F = 2 x 16, 16-byte rows) only where
// they are kept; recomputed (--intermediates recompute, bf16 host data) there is none. GCN's A
// holds its aggregation either way.
TEST(MemoryEstimate, GatAllocatesAnABufferOnlyForKeptHeadOutputs) {
  const auto aggregation = [](const std::string& model, GatHeadOutputs head_outputs) {
    const ModelShape shape = test::model_shape(model, 2).in_dim(12).hidden(16).classes(5).heads(2);
    LayoutOptions options;
    options.gat_head_outputs = head_outputs;
    return layer_buffer_widths(model_layers(shape), options).aggregation;
  };
  EXPECT_EQ(aggregation("gat", GatHeadOutputs::kKept), 32);
  EXPECT_EQ(aggregation("gat", GatHeadOutputs::kRecomputed), 0);
  EXPECT_EQ(aggregation("gcn", GatHeadOutputs::kKept), 12);
  EXPECT_EQ(aggregation("gcn", GatHeadOutputs::kRecomputed), 12);
}

// dA is as wide as the widest gradient of an aggregation that a backward pass reads: a GCN or
// SAGE layer above 0 that aggregates first (its input gradient), GAT's last layer (its head
// mean); never layer 0's aggregation or a hidden GAT layer's heads, and none at all when the
// only layer above 0 transforms first.
TEST(MemoryEstimate, AggregationGradientOnlyWhereABackwardPassReadsIt) {
  const auto width = [](const std::string& model, int layers, std::int64_t hidden,
                        std::int64_t classes) {
    const ModelShape shape =
        test::model_shape(model, layers).in_dim(12).hidden(hidden).classes(classes).heads(2);
    return layer_buffer_widths(model_layers(shape), LayoutOptions{}).aggregation_gradient;
  };
  EXPECT_EQ(width("gcn", 2, 8, 4), 0);    // 12 -> 8 -> 4: layer 1 transforms first
  EXPECT_EQ(width("sage", 2, 8, 4), 0);   // [T_self | T_neigh] 8 wide: transforms first
  EXPECT_EQ(width("gcn", 2, 8, 9), 8);    // layer 1 aggregates its 8-wide input
  EXPECT_EQ(width("sage", 2, 8, 5), 16);  // [self | mean] of 8, not layer 0's 24
  EXPECT_EQ(width("sage", 3, 6, 4), 12);  // layers 1 and 2 aggregate 2 x 6
  EXPECT_EQ(width("gat", 2, 6, 5), 8);    // the last layer's 5 x 1 head, padded; not 2 x 6
  EXPECT_EQ(width("gcn", 1, 8, 4), 0);
}

// The search against a made-up estimator: doubling then bisection finds the smallest fitting C
// of the first rule under which any fits, each C estimated once.
TEST(MemoryEstimate, SearchFindsTheSmallestFittingChunkCount) {
  const std::vector<BudgetRule> rules = {{false, true}, {false, false}};
  std::map<int, int> calls;
  // Rule 0 needs 1000 / C + 200 bytes, rule 1 half that.
  const ChunkEstimator estimate = [&](int chunks) {
    ++calls[chunks];
    const std::int64_t need = 1000 / chunks + 200;
    return std::vector<std::int64_t>{need, need / 2};
  };
  FittingChunks found = search_fitting_chunks(100, 300, rules, estimate);
  EXPECT_TRUE(found.fits);
  EXPECT_EQ(found.chunks, 10);  // 1000 / 10 + 200 = 300; C = 9 needs 311
  EXPECT_EQ(found.bytes, 300);
  EXPECT_TRUE(found.rule.all_overlap);
  for (const auto& [chunks, n] : calls) EXPECT_EQ(n, 1) << "C=" << chunks;
  // Only the second rule fits 205 bytes (the first needs 210 at C = 100): (1000 / C + 200) / 2
  // <= 205 from C = 5.
  found = search_fitting_chunks(100, 205, rules, estimate);
  EXPECT_TRUE(found.fits);
  EXPECT_EQ(found.chunks, 5);
  EXPECT_FALSE(found.rule.all_overlap);
  // Nothing fits 50 bytes: the largest C under the last rule.
  found = search_fitting_chunks(64, 50, rules, estimate);
  EXPECT_FALSE(found.fits);
  EXPECT_EQ(found.chunks, 64);
  EXPECT_EQ(found.bytes, (1000 / 64 + 200) / 2);
}

test::TrainConfigBuilder gat_config() {
  return test::train_config()
      .model("gat")
      .layers(2)
      .hidden(16)
      .heads(4)
      .output_heads(1)
      .epochs(1)
      .eval_every(1)
      .threads(2);
}

// The chunk search over real plans takes the first rule under which some C fits, and the
// trainer's --input-rows auto makes the same choice for the plan it gets.
TEST(MemoryEstimate, ChunkSearchFallsBackRuleByRule) {
  const Dataset d = test::random_dataset(800, 8, 40, 5, 3, test::ReverseEdgesIntoSources::kAdd);
  const Plan whole = test::make_plan(d, test::plan_options(1, 1).seed(5));
  const VertexPartition partition = partition_of_plan(whole);
  PlanOptions options = test::plan_options(1, 1).reorganize(test::Reorganize::kOff);
  const std::string fingerprint = compute_fingerprint(d);
  const ModelShape shape = memory_shape(d, gat_config());
  const LayoutOptions layout;
  const std::vector<BudgetRule> rules = budget_rules(shape, layout, true);
  ASSERT_EQ(rules.size(), 4u);
  // Each rule's least need over the chunk counts the search tries while doubling (1, 2, 4, ...,
  // then the largest possible).
  std::vector<std::int64_t> least(rules.size(), INT64_MAX);
  const int max_chunks = int(d.num_nodes);  // one partition: C stops at its vertex count
  for (int C = 1;; C = std::min(max_chunks, 2 * C)) {
    options.chunks = C;
    const Plan plan = build_plan_from_partition(d, partition, options, fingerprint);
    for (std::size_t r = 0; r < rules.size(); ++r)
      least[r] = std::min(
          least[r], rule_bytes(plan, loss_row_flags(d, plan.old_to_new), shape, layout, rules[r]));
    if (C == max_chunks) break;
  }
  // Kept rows need more than reloaded ones, every overlap buffer more than none.
  ASSERT_GT(least[0], least[1]);
  ASSERT_GT(least[1], least[2]);
  ASSERT_GT(least[2], least[3]);
  for (std::size_t r = 0; r < rules.size(); ++r) {
    SCOPED_TRACE(cat("budget: rule ", r, "'s least need"));
    const std::int64_t budget = least[r];
    const ChunkSearchResult found =
        choose_fitting_chunks(d, partition, options, budget, shape, layout, true, kSmallest);
    ASSERT_TRUE(found.fits);
    EXPECT_LE(found.bytes, budget);
    EXPECT_EQ(found.rule.reload_inputs, rules[r].reload_inputs);
    EXPECT_EQ(found.rule.all_overlap, rules[r].all_overlap);
    // Not allowed to reload: the kept-row rules only.
    const ChunkSearchResult kept =
        choose_fitting_chunks(d, partition, options, budget, shape, layout, false, kSmallest);
    EXPECT_FALSE(kept.rule.reload_inputs);
    EXPECT_EQ(kept.fits, r != 3);
    // The trainer (--input-rows auto) on the plan found reloads exactly when the rule does: its
    // host-link traffic is the one of that choice made explicitly, under the same budget, not
    // the other's (reloading reads the leaving rows' features again).
    options.chunks = found.chunks;
    const Plan plan = build_plan_from_partition(d, partition, options, fingerprint);
    test::TrainConfigBuilder config = gat_config().gpu_memory(budget);
    const auto gathered = [&](const std::string& input_rows) {
      config.input_rows(input_rows);
      return train(d, plan, config).records.back().transfers.h2d_gather_bytes;
    };
    const std::int64_t automatic = gathered("auto");
    const std::int64_t reloading = gathered("reload"), keeping = gathered("keep");
    ASSERT_GT(reloading, keeping);
    EXPECT_EQ(automatic, rules[r].reload_inputs ? reloading : keeping);
  }
  // Below the last rule's least need nothing fits.
  EXPECT_FALSE(
      choose_fitting_chunks(d, partition, options, least[3] - 1, shape, layout, true, kSmallest)
          .fits);
}

ModelSpec gcn_model(const Widths& widths, int layers) {
  ModelShape config;
  config.model = "gcn";
  config.layers = layers;
  config.in_dim = widths.features;
  config.hidden = widths.hidden;
  config.classes = widths.classes;
  return make_model(config);
}

// The schedule's host matrices for a two-layer GCN that narrows, 4 chunks per partition: H^0,
// then layer 0's gradients dT^1 (T rows padded to 16 bytes) and its cached aggregation A^0, then
// T^1; recomputing drops A^0, and so does a plan of one chunk, whose devices keep A^0's block.
// The residency rule of sluice-train (choose_residency()): the overlap buffers, then also the
// cached intermediates, are given up only where that lets every partition hold all of its
// vertex data, never what the run does not have, and the cached intermediates only when they
// may change.
TEST(MemoryEstimate, ResidencyGivesUpOverlapThenCachingOnlyToHoldEverything) {
  // Setup 50 (10 of it overlap buffers), vertex data 30 cached and 20 recomputed.
  const std::vector<ResidencyNeed> cached = {{50, 10, 30}, {50, 10, 30}};
  const std::vector<ResidencyNeed> recomputed = {{50, 10, 20}, {50, 10, 20}};
  const ResidencyChoice both{true, true};
  const auto choose =
      [&](std::vector<std::int64_t> capacity, ResidencyChoice current = {true, true},
          IntermediatesChoice intermediates = IntermediatesChoice::kRecomputeWhereEverythingFits) {
        const ResidencyChoice c =
            choose_residency(cached, recomputed, capacity, current, intermediates);
        return std::pair{c.overlap, c.cache_intermediates};
      };
  using Choice = std::pair<bool, bool>;             // overlap, cached intermediates
  EXPECT_EQ(choose({-1, -1}), Choice(true, true));  // unbounded
  EXPECT_EQ(choose({80, 80}), Choice(true, true));
  EXPECT_EQ(choose({79, 79}), Choice(false, true));  // 40 + 30 fits, 50 + 30 does not
  EXPECT_EQ(choose({70, 70}), Choice(false, true));
  EXPECT_EQ(choose({69, 69}), Choice(false, false));  // 40 + 20; 50 + 20 does not fit either
  EXPECT_EQ(choose({60, 60}), Choice(false, false));
  EXPECT_EQ(choose({59, 59}), Choice(true, true));    // nothing holds everything: as configured
  EXPECT_EQ(choose({80, 69}), Choice(false, false));  // every partition must fit
  EXPECT_EQ(choose({69, 69}, both, IntermediatesChoice::kAsGiven),
            Choice(true, true));                                    // caching may not change
  EXPECT_EQ(choose({79, 79}, {false, true}), Choice(false, true));  // overlap off already
  EXPECT_EQ(choose({59, 59}, {false, true}), Choice(false, true));
  EXPECT_EQ(choose({80, 80}, {true, false}), Choice(true, false));  // never caches anew
  // Overlap buffers smaller than the cached intermediates: where giving them up is not enough,
  // recomputing keeps them.
  const ResidencyChoice c = choose_residency({{50, 5, 30}}, {{50, 5, 20}}, {70}, both,
                                             IntermediatesChoice::kRecomputeWhereEverythingFits);
  EXPECT_TRUE(c.overlap);
  EXPECT_FALSE(c.cache_intermediates);
}

TEST(HostMemory, HostMatricesOfANarrowingGcn) {
  const Dataset& d = dataset_of(kNarrowing);
  const ModelSpec model = gcn_model(kNarrowing, 2);
  ScheduleOptions options;
  const auto describe = [&](const std::vector<HostMatrixShape>& shapes) {
    std::string text;
    for (const HostMatrixShape& m : shapes) text += cat(m.name, " ", m.rows, "x", m.cols, "; ");
    return text;
  };
  EXPECT_EQ(describe(host_matrix_shapes(model, options, d.num_nodes, 4)),
            "H^0 (features) 240x37; dT^1 240x4; A^0 240x37; T^1 240x4; ");
  EXPECT_EQ(describe(host_matrix_shapes(model, options, d.num_nodes, 1)),
            "H^0 (features) 240x37; dT^1 240x4; T^1 240x4; ");
  options.host_precision = HostPrecision::kBf16;
  EXPECT_EQ(describe(host_matrix_shapes(model, options, d.num_nodes, 1)),
            "H^0 (features) 240x37; dT^1 240x4; A^0 240x37; T^1 240x4; ");
  options.host_precision = HostPrecision::kFp32;
  options.cache_intermediates = false;
  EXPECT_EQ(describe(host_matrix_shapes(model, options, d.num_nodes, 4)),
            "H^0 (features) 240x37; dT^1 240x4; T^1 240x4; ");
}

// The device-memory priorities of the same matrices: link rows per row and epoch. With 720
// gathered rows per pass (3 per vertex): H^0 is gathered by the training pass (3) and read by
// the evaluation from its copy of layer 0's aggregation, one row a vertex (1), or gathered there
// too without that copy (3); T^1 is gathered by both forward passes and stored by both (8); dT^1
// and A^0 move twice; recomputing layer 0 makes its backward pass gather H^0 again.
TEST(HostMemory, VertexDataPrioritiesCountLinkRowsPerRow) {
  const Dataset& d = dataset_of(kNarrowing);
  const ModelSpec model = gcn_model(kNarrowing, 2);
  ScheduleOptions options;
  ASSERT_EQ(options.evaluation_cache, EvaluationCache::kWhereItFits);
  EXPECT_EQ(vertex_data_priorities(model, options, d.num_nodes, 3 * d.num_nodes, 4),
            (std::vector<double>{4., 2., 2., 8.}));
  options.cache_intermediates = false;
  EXPECT_EQ(vertex_data_priorities(model, options, d.num_nodes, 3 * d.num_nodes, 4),
            (std::vector<double>{7., 2., 8.}));
  options.evaluation_cache = EvaluationCache::kNone;
  EXPECT_EQ(vertex_data_priorities(model, options, d.num_nodes, 3 * d.num_nodes, 4),
            (std::vector<double>{9., 2., 8.}));
  options.evaluation_cache = EvaluationCache::kWhereItFits;
  options.cache_intermediates = true;
  options.host_precision = HostPrecision::kBf16;  // a bf16 run aggregates every evaluation
  EXPECT_EQ(vertex_data_priorities(model, options, d.num_nodes, 3 * d.num_nodes, 4),
            (std::vector<double>{6., 2., 2., 8.}));
}

// The refusal names the need and what is available, and the options that fit: recomputing
// drops the cached aggregations; nothing fits in one byte.
TEST(HostMemory, RefusalNamesNeedAvailableAndFittingOptions) {
  const Dataset& d = dataset_of(kWidening);
  const Plan& plan = plan_of(kWidening, 1, 3);
  const TrainConfig config = test::train_config().hidden(kWidening.hidden).layers(3);
  EXPECT_EQ(host_memory_refusal(d, plan, config, InputRelease::kKeep, std::int64_t(1) << 40), "");
  EXPECT_EQ(host_memory_refusal(d, plan, config, InputRelease::kKeep, -1), "");
  const std::string none = host_memory_refusal(d, plan, config, InputRelease::kKeep, 1);
  EXPECT_NE(none.find("host memory: training setup needs about"), std::string::npos) << none;
  EXPECT_NE(none.find("1 B is available"), std::string::npos) << none;
  EXPECT_NE(none.find("no single change"), std::string::npos) << none;
  // Between the need with recomputed aggregations and the need with cached ones.
  const HostMemoryPlan cached = host_memory_plan(d, plan, gcn_model(kWidening, 3),
                                                 ScheduleOptions{}, InputRelease::kKeep, true);
  EXPECT_GT(cached.host_matrices, 0);
  // Host matrices beside the index lists and then the chunk constants: all three at once (the
  // graph kept: nothing is released), above the peak of setting them up one after the other.
  EXPECT_EQ(cached.peak_beside_lists,
            cached.index_lists + cached.host_matrices + cached.chunk_constants);
  EXPECT_GT(cached.peak_beside_lists, cached.peak);
  EXPECT_GT(cached.index_lists, 0);
  const std::string fits =
      host_memory_refusal(d, plan, config, InputRelease::kKeep, cached.peak - 1);
  EXPECT_NE(fits.find("options that fit: --intermediates recompute"), std::string::npos) << fits;
}

// Releasing the dataset's features and graph and the plan's chunk lists during setup trains
// exactly as keeping them, and leaves the labels, splits and ids, and the plan's ranges.
TEST(HostMemory, ReleasedInputsTrainTheSame) {
  const Plan& plan = plan_of(kNarrowing, 2, 3);
  const TrainConfig config =
      test::train_config().hidden(kNarrowing.hidden).epochs(3).predictions("predictions.csv");
  const TrainResult kept = train(dataset_of(kNarrowing), plan, config);
  Dataset copy = dataset_of(kNarrowing);
  Plan plan_copy = plan;
  const TrainResult released = train(copy, plan_copy, config, InputRelease::kDatasetAndPlanLists);
  for (std::size_t k = 0; k < plan.chunk_plans.size(); ++k) {
    EXPECT_TRUE(plan_copy.chunk_plans[k].columns.empty());
    EXPECT_TRUE(plan_copy.chunk_plans[k].load_vertices.empty());
    EXPECT_EQ(plan_copy.chunk_plans[k].indptr, plan.chunk_plans[k].indptr);
    EXPECT_EQ(plan_copy.chunk_plans[k].dst_begin, plan.chunk_plans[k].dst_begin);
  }
  EXPECT_EQ(plan_copy.old_to_new, plan.old_to_new);
  EXPECT_EQ(kept.losses, released.losses);
  EXPECT_EQ(kept.flat_parameters, released.flat_parameters);
  ASSERT_EQ(kept.best_predictions.size(), std::size_t(dataset_of(kNarrowing).num_nodes));
  EXPECT_EQ(kept.best_predictions, released.best_predictions);
  EXPECT_TRUE(copy.features.empty());
  EXPECT_TRUE(copy.indices.empty());
  EXPECT_EQ(copy.labels, dataset_of(kNarrowing).labels);
  EXPECT_EQ(copy.train, dataset_of(kNarrowing).train);
}

}  // namespace
}  // namespace sluice
