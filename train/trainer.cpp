// Implementation of train/trainer.hpp.
#include "train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "common/atomic_file.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "formats/checkpoint.hpp"
#include "kernels/ops.hpp"
#include "train/host_memory.hpp"
#include "train/layout/chunk_search.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/model.hpp"
#include "train/timeline.hpp"

namespace sluice {

namespace {

using json = nlohmann::json;

// The plan's partition profiles under --comm, the chunks' loss-row CSR shapes included.
std::vector<PartitionProfile> partition_profiles(const Dataset& dataset, const Plan& plan,
                                                 const TrainConfig& config) {
  return plan_profiles(plan, loss_row_flags(dataset, plan.old_to_new),
                       parse_comm_mode(config.comm));
}

std::unique_ptr<Backend> make_backend(const TrainConfig& config, int partitions) {
  BackendOptions options;
  options.partitions = partitions;
  options.gpus = config.gpus;
  options.memory_budget = config.gpu_memory;
  options.threads = config.threads;
  options.tf32 = config.tf32;
  options.peer_access = parse_peer_access(config.peer_access, "--peer-access");
  options.op_times = config.op_times;
  if (config.device == "cuda") {
    SLUICE_INPUT_CHECK(cuda_backend_available(),
                       "--device cuda: this build of sluice-train has no CUDA backend or no GPU "
                       "is visible (use --device cpu, or build with -DSLUICE_CUDA=ON on a GPU "
                       "machine)");
    return make_cuda_backend(options);
  }
  return make_cpu_backend(options);
}

// Predictions (renumbered order) in dataset vertex order.
std::vector<std::int32_t> by_dataset_vertex(const std::vector<std::int32_t>& predictions,
                                            const Plan& plan) {
  std::vector<std::int32_t> out(plan.old_to_new.size());
  for (std::size_t v = 0; v < out.size(); ++v)
    out[v] = predictions[std::size_t(plan.old_to_new[v])];
  return out;
}

// Rows of evaluation outputs moved from renumbered to dataset vertex order.
Schedule::VertexOutputs by_dataset_vertex(Schedule::VertexOutputs renumbered, const Plan& plan) {
  Schedule::VertexOutputs out = renumbered;
  const std::size_t n = plan.new_to_old.size(), h = std::size_t(renumbered.hidden_width),
                    k = std::size_t(renumbered.classes);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t v = std::size_t(plan.new_to_old[r]);
    std::copy_n(renumbered.hidden.begin() + r * h, h, out.hidden.begin() + v * h);
    std::copy_n(renumbered.logits.begin() + r * k, k, out.logits.begin() + v * k);
    out.predictions[v] = renumbered.predictions[r];
  }
  return out;
}

// Median training-step time of the epochs this run trained (0 when none).
double median_epoch_seconds(const TrainResult& result) {
  std::vector<double> seconds;
  for (const EpochRecord& record : result.records) seconds.push_back(record.seconds);
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t half = seconds.size() / 2;
  return seconds.size() % 2 ? seconds[half] : (seconds[half - 1] + seconds[half]) / 2;
}

json phases_json(const PhaseTimes& t) {
  return json{{"load", t.load},   {"p2p", t.p2p},     {"compute", t.compute},
              {"store", t.store}, {"flush", t.flush}, {"optimizer", t.optimizer}};
}

json device_phases_json(const std::vector<PhaseTimes>& per_device) {
  json out = json::array();
  for (const auto& t : per_device) out.push_back(phases_json(t));
  return out;
}

json transfers_json(const TransferCounters& c) {
  return json{{"h2d_gather_rows", c.h2d_gather_rows},
              {"h2d_gather_bytes", c.h2d_gather_bytes},
              {"h2d_block_bytes", c.h2d_block_bytes},
              {"h2d_csr_bytes", c.h2d_csr_bytes},
              {"h2d_csr_in_line_bytes", c.h2d_csr_in_line_bytes},
              {"d2h_bytes", c.d2h_bytes},
              {"d2h_index_bytes", c.d2h_index_bytes},
              {"p2p_rows", c.p2p_rows},
              {"p2p_bytes", c.p2p_bytes},
              {"resident_bytes", c.resident_bytes}};
}

json epoch_json(const EpochRecord& r) {
  json j{{"epoch", r.epoch},
         {"loss", r.loss},
         {"seconds", r.seconds},
         {"eval_seconds", r.eval_seconds},
         {"phases", phases_json(r.phases)},
         {"device_phases", device_phases_json(r.device_phases)},
         {"transfers", transfers_json(r.transfers)},
         {"peak_host_bytes", r.peak_host_bytes},
         {"peak_device_bytes", r.peak_device_bytes}};
  if (r.evaluated) {
    j["train_accuracy"] = r.train_accuracy;
    j["valid_accuracy"] = r.valid_accuracy;
    j["test_accuracy"] = r.test_accuracy;
    j["eval_transfers"] = transfers_json(r.eval_transfers);
  } else {
    j["train_accuracy"] = nullptr;
    j["valid_accuracy"] = nullptr;
    j["test_accuracy"] = nullptr;
    j["eval_transfers"] = nullptr;
  }
  return j;
}

// On --resume the metrics file may hold records of epochs that ran after the checkpoint was
// written (the run stopped between checkpoints); those epochs run again, so their records are
// dropped here to keep one record per epoch. Records count epochs from 0, so a checkpoint
// after `epochs_done` epochs keeps epochs 0 .. epochs_done - 1. A final line without its
// newline is a record cut off mid-write and is dropped; any other line that is not a record is
// an error. The file is replaced atomically, so a failure leaves it as it was.
void truncate_metrics(const std::string& path, std::int64_t epochs_done) {
  std::ifstream in(path);
  if (!in) return;  // no metrics yet: the resumed run starts the file
  AtomicTextFile output(path, "metrics");
  {
    std::ostream& out = output.stream();
    std::string line;
    for (std::int64_t line_number = 1; std::getline(in, line); ++line_number) {
      const bool cut_off = in.eof();  // getline stopped at the end, not at a newline
      if (line.empty()) continue;
      json record;
      try {
        record = json::parse(line);
      } catch (const json::parse_error& error) {
        if (cut_off) break;
        throw InputError(cat("metrics file ", path, " line ", line_number, " is not valid JSON (",
                             error.what(), ")"));
      }
      SLUICE_INPUT_CHECK(
          record.is_object() && record.contains("epoch") && record["epoch"].is_number_integer(),
          "metrics file ", path, " line ", line_number,
          " is not a metrics record (an object with an integer \"epoch\")");
      if (record["epoch"].get<std::int64_t>() < epochs_done) out << line << "\n";
    }
  }
  output.commit();
}

ModelSpec model_for(const Dataset& dataset, const TrainConfig& config) {
  return make_model(model_shape(dataset, config));
}

// The message for a plan that does not fit --gpu-memory: the allocator's complaint, the plan's
// per-GPU need by the memory estimate, and the `sluice-preprocess partition` command that builds
// a plan that fits (same dataset, partitions, partitioner and model).
// The memory estimate of every budget rule the message names (empty without --gpu-memory).
// `profiles`: the plan's partition profiles under --comm.
std::vector<std::int64_t> budget_estimate(const Dataset& dataset,
                                          const std::vector<PartitionProfile>& profiles,
                                          const TrainConfig& config) {
  if (config.gpu_memory <= 0) return {};
  const ModelShape shape = memory_shape(dataset, config);
  const LayoutOptions options = memory_layout_options(config);
  return rules_bytes(profiles, shape, options,
                     budget_rules(shape, options, config.input_rows == "auto"));
}

// The chunk count that fits the plan's partition under --gpu-memory, by the search partition
// --gpu-memory runs (natural layout; one counting pass over the graph per candidate): "; C=N
// fits (...)". Reads the dataset's graph.
std::string fitting_chunks_clause(const Dataset& dataset, const Plan& plan,
                                  const TrainConfig& config) {
  const ModelShape shape = memory_shape(dataset, config);
  const LayoutOptions options = memory_layout_options(config);
  const std::vector<BudgetRule> rules = budget_rules(shape, options, config.input_rows == "auto");
  const ChunkSketch sketch(dataset, plan.new_to_old, plan.old_to_new, plan.partition_offsets);
  const FittingChunks fitting =
      sketch_fitting_chunks(sketch, config.gpu_memory, shape, options, rules);
  if (fitting.fits)
    return cat("; C=", fitting.chunks, " fits (", format_bytes(double(fitting.bytes)), " with ",
               budget_rule_name(fitting.rule), ")");
  return cat("; no chunk count up to C=", fitting.chunks, " fits this partition");
}

// What setup releases is read before: `estimate`, budget_estimate() (the plan's chunk lists),
// and `fitting`, fitting_chunks_clause() (the dataset's graph), each null when not taken; then
// the graph must still be there, or the clause is left out.
struct OverBudgetInputs {
  const std::vector<std::int64_t>* estimate = nullptr;
  const std::string* fitting = nullptr;
};
std::string over_budget_message(const OutOfDeviceMemory& error, const Dataset& dataset,
                                const Plan& plan, const TrainConfig& config,
                                const OverBudgetInputs& taken = {}) {
  const std::vector<std::int64_t>* estimate = taken.estimate;
  std::string message =
      cat(error.what(), "; the plan has C=", plan.chunks, " chunks per partition");
  if (config.gpu_memory <= 0) return message + ": build it with more chunks";
  const ModelShape shape = memory_shape(dataset, config);
  const LayoutOptions options = memory_layout_options(config);
  const std::vector<BudgetRule> rules = budget_rules(shape, options, config.input_rows == "auto");
  const std::vector<std::int64_t> bytes =
      estimate ? *estimate
               : budget_estimate(dataset, partition_profiles(dataset, plan, config), config);
  message += cat(" and needs about ", format_bytes(double(bytes.front())),
                 " per GPU by the memory estimate");
  if (rules.size() > 1)
    message += cat(" (", format_bytes(double(bytes.back())), " with ",
                   budget_rule_name(rules.back()), ")");
  message += cat(" against --gpu-memory ", format_bytes(double(config.gpu_memory)));
  if (taken.fitting)
    message += *taken.fitting;
  else if (!dataset.indices.empty())
    message += fitting_chunks_clause(dataset, plan, config);
  message += cat("; a plan that fits: sluice-preprocess partition --dataset ",
                 config.dataset.empty() ? std::string("DATASET") : config.dataset, " --partitions ",
                 plan.partitions, " --partitioner ", plan.partitioner);
  if (plan.seed != 0) message += cat(" --seed ", plan.seed);
  message += cat(" --gpu-memory ", config.gpu_memory, " --model ", config.model, " --hidden ",
                 config.hidden, " --layers ", config.layers);
  if (shape.model == "gat")
    message += cat(" --heads ", config.heads, " --output-heads ", config.output_heads);
  if (config.input_rows != "auto") message += cat(" --input-rows ", config.input_rows);
  if (config.layer_zero_order != "auto" && shape.model != "gat")
    message += cat(" --layer-zero-order ", config.layer_zero_order);
  if (config.intermediates != "auto") message += cat(" --intermediates ", config.intermediates);
  if (config.host_precision != "fp32") message += cat(" --host-precision ", config.host_precision);
  message += " --output PLAN";
  if (options.comm != CommMode::kP2pReuse || !options.overlap)
    message += " (it sizes the buffers of --comm p2p+reuse with overlap)";
  return message;
}

// --last-layer-rows: auto keeps the loss-row CSRs where, under --gpu-memory, every partition's
// chunk structures fit in GPU memory with them (the estimate's all_constants, input rows kept
// unless --input-rows reload): there the last layer's sparse work sets much of the epoch. Out of
// core the CSRs would sit in pinned host memory for a few percent of a link-bound epoch, cost
// host memory and start-up, and may push the plan into reloading its input rows (docs/design.md,
// "One epoch", has the measurements).
// `needed`: what auto compared with --gpu-memory (0 where it compared nothing).
struct LastLayerChoice {
  LastLayerRows rows = LastLayerRows::kLoss;
  std::int64_t needed = 0;
};
LastLayerChoice last_layer_rows(const Dataset& dataset,
                                const std::vector<PartitionProfile>& profiles,
                                const TrainConfig& config) {
  if (config.last_layer_rows != "auto")
    return {parse_last_layer_rows(config.last_layer_rows, "--last-layer-rows"), 0};
  if (config.gpu_memory <= 0) return {LastLayerRows::kLoss, 0};
  const ModelLayers layers = model_layers(memory_shape(dataset, config));
  LayoutOptions options = memory_layout_options(config);
  options.last_layer_rows = LastLayerRows::kLoss;
  LastLayerChoice choice;
  for (const PartitionProfile& profile : profiles)
    choice.needed =
        std::max(choice.needed,
                 estimate_layout_memory(partition_layout(profile, layers, options)).all_constants);
  if (choice.needed > config.gpu_memory) choice.rows = LastLayerRows::kAll;
  return choice;
}

// --input-rows: auto reloads the input rows of layers transformed on arrival when the plan meets
// --gpu-memory only that way by its memory estimate (the first budget rule that fits, as
// partition --gpu-memory chooses; the least memory when none fits).
bool reload_inputs(const Dataset& dataset, const std::vector<PartitionProfile>& profiles,
                   const TrainConfig& config, LastLayerRows last_layer_rows) {
  if (config.input_rows != "auto") return config.input_rows == "reload";
  if (config.gpu_memory <= 0) return false;
  const ModelShape shape = memory_shape(dataset, config);
  LayoutOptions options = memory_layout_options(config);
  options.last_layer_rows = last_layer_rows;
  const std::vector<BudgetRule> rules = budget_rules(shape, options, true);
  const std::vector<std::int64_t> bytes = rules_bytes(profiles, shape, options, rules);
  std::size_t chosen = rules.size() - 1;
  for (std::size_t r = 0; r < rules.size(); ++r)
    if (bytes[r] <= config.gpu_memory) {
      chosen = r;
      break;
    }
  if (!rules[chosen].reload_inputs) return false;
  log_info("--input-rows auto: reloading input rows (the memory estimate with kept rows is ",
           format_bytes(double(bytes.front())), " per GPU, over --gpu-memory ",
           format_bytes(double(config.gpu_memory)), ")");
  return true;
}

// --gat-layer-zero: attend has GAT's layer 0 attend over its input rows first where the run
// allows it (two layers or more, input rows kept) and, on CUDA, its kernels take the shape
// (cuda::gat_inputs_fit()). auto does so on a plan of one chunk per partition (where it is
// faster: with many chunks each one scores every merged row again; on several partitions layer 0
// exchanges feature rows, which need no gradient, instead of transformed rows and their
// gradients) where it also reads fewer floats per entry (D < K F), the kernels take the shape on
// either backend (so that both compute the same model) and every partition's buffers take no more
// device memory than transforming first by the memory estimate: a rule of the model and the plan
// alone, so the choice (and with it the rounding) does not depend on --gpu-memory.
GatLayerZero gat_layer_zero(const Dataset& dataset, const std::vector<PartitionProfile>& profiles,
                            const TrainConfig& config, bool reload_inputs) {
  if (config.model != "gat" || config.gat_layer_zero == "transform")
    return GatLayerZero::kTransformFirst;
  const bool allowed = config.layers >= 2 && !reload_inputs;
  const std::int64_t D = dataset.feature_dim, K = config.heads, F = config.hidden;
  if (config.gat_layer_zero == "attend") {
    SLUICE_INPUT_CHECK(allowed,
                       "--gat-layer-zero attend needs at least two layers and kept input rows "
                       "(--layers ",
                       config.layers, reload_inputs ? "; input rows reloaded" : "", ")");
    SLUICE_INPUT_CHECK(config.device != "cuda" || cuda::gat_inputs_fit(K, D),
                       "--gat-layer-zero attend on CUDA takes at most 8 heads of input rows up to "
                       "256 floats, a multiple of 4 (8 x 128 in all); this run has ",
                       K, " heads of ", D);
    return GatLayerZero::kAttendInputs;
  }
  const bool one_chunk = std::all_of(profiles.begin(), profiles.end(),
                                     [](const PartitionProfile& p) { return p.lists.size() == 1; });
  if (!allowed || !one_chunk || D >= K * F || !cuda::gat_inputs_fit(K, D))
    return GatLayerZero::kTransformFirst;
  const ModelLayers layers = model_layers(memory_shape(dataset, config));
  const auto bytes = [&](const PartitionProfile& profile, GatLayerZero order) {
    LayoutOptions layout = memory_layout_options(config);
    layout.reload_inputs = reload_inputs;
    layout.gat_layer_zero = order;
    return estimate_layout_memory(partition_layout(profile, layers, layout)).total;
  };
  for (const PartitionProfile& profile : profiles)
    if (bytes(profile, GatLayerZero::kAttendInputs) > bytes(profile, GatLayerZero::kTransformFirst))
      return GatLayerZero::kTransformFirst;
  return GatLayerZero::kAttendInputs;
}

// Where the vertex matrices could all live on the GPUs only without the overlap buffers or
// without cached intermediates (choose_residency()), gives those up: a run whose vertex data
// are all on its devices streams nothing over the host link, and there the overlap buffers
// serve no transfer and recomputing an aggregation from resident rows is cheaper than storing it
// to host memory and loading it back. Only with --vertex-data auto on devices bounded by their
// memory (Backend::placement_capacity()), where each reads its own partition's rows; the cached
// intermediates only with --intermediates auto.
void prefer_residency(const Backend& backend, const Dataset& dataset, const Plan& plan,
                      const ModelSpec& model, const std::vector<PartitionProfile>& profiles,
                      const TrainConfig& config, ScheduleOptions& options) {
  const int P = plan.partitions;
  if (options.vertex_data != VertexData::kDeviceWhereItFits ||
      (P > 1 && options.comm == CommMode::kBaseline))
    return;
  std::vector<std::int64_t> capacities;
  for (int p = 0; p < P; ++p) {
    capacities.push_back(backend.placement_capacity(p));
    if (capacities.back() < 0) return;
  }
  const ModelShape shape = memory_shape(dataset, config);
  const ModelLayers layers = model_layers(shape);
  // Each partition's needs under the options `o` (whose cached intermediates are given).
  const auto needs = [&](const ScheduleOptions& o) {
    LayoutOptions with_overlap = memory_layout_options(config);
    with_overlap.reload_inputs = o.reload_inputs;
    with_overlap.gat_layer_zero = o.gat_layer_zero;
    with_overlap.gat_head_outputs = gat_head_outputs(o.cache_intermediates, o.host_precision);
    with_overlap.overlap = true;
    LayoutOptions without_overlap = with_overlap;
    without_overlap.overlap = false;
    const std::vector<HostMatrixShape> matrices =
        host_matrix_shapes(model, o, dataset.num_nodes, plan.chunks);
    std::vector<ResidencyNeed> out;
    for (int p = 0; p < P; ++p) {
      // What giving up the overlap buffers frees: the difference of the two layouts (a one-chunk
      // GAT keeps its own last-layer attention buffers either way).
      const auto setup = [&](const LayoutOptions& layout) {
        const GpuMemoryEstimate e =
            estimate_layout_memory(partition_layout(profiles[std::size_t(p)], layers, layout));
        return e.cuda_setup + e.cuda_scratch;
      };
      const std::int64_t with = setup(with_overlap);
      ResidencyNeed need{with, with - setup(without_overlap), 0};
      const std::int64_t rows =
          plan.partition_offsets[std::size_t(p) + 1] - plan.partition_offsets[std::size_t(p)];
      for (const HostMatrixShape& m : matrices)
        need.vertex += rows * m.cols * element_bytes(o.host_precision);
      out.push_back(need);
    }
    return out;
  };
  ScheduleOptions recomputed = options;
  recomputed.cache_intermediates = false;
  const ResidencyChoice current{options.overlap, options.cache_intermediates};
  const ResidencyChoice choice = choose_residency(
      needs(options), needs(recomputed), capacities, current,
      config.intermediates == "auto" ? IntermediatesChoice::kRecomputeWhereEverythingFits
                                     : IntermediatesChoice::kAsGiven);
  if (choice.overlap == current.overlap &&
      choice.cache_intermediates == current.cache_intermediates)
    return;
  std::string given_up;
  if (!choice.overlap && options.overlap) given_up = "the overlap buffers";
  if (!choice.cache_intermediates && options.cache_intermediates)
    given_up += cat(given_up.empty() ? "" : " and ", "the cached intermediates (recomputed)");
  log_info("vertex data: every matrix fits on the GPU", P > 1 ? "s" : "", " without ", given_up,
           ", which the run therefore does without (nothing streams over the host link)");
  options.overlap = choice.overlap;
  options.cache_intermediates = choice.cache_intermediates;
  // The needs above count the loss-row CSRs under --last-layer-rows auto
  // (memory_layout_options()), so where last_layer_rows() found no room for them beside the
  // overlap buffers, they fit now.
  if (config.last_layer_rows == "auto" && options.last_layer_rows == LastLayerRows::kAll) {
    options.last_layer_rows = LastLayerRows::kLoss;
    log_info("--last-layer-rows auto: the loss rows (without ", given_up,
             " their CSRs fit beside every matrix)");
  }
}

// Runs under --gpu-memory push the sums of the loss rows' entries into other partitions' vertices
// to their owners (LossRowExchange::kPushSums): the chunk-count search that chose their plan
// counts the plain loss-row CSRs (train/layout/chunk_sketch.hpp), and the run must fit what it
// counted. Without a budget the loss gradients go to the owners.
LossRowExchange loss_row_exchange(const TrainConfig& config) {
  return config.gpu_memory > 0 ? LossRowExchange::kPushSums : LossRowExchange::kSendGradients;
}

// The schedule's options, all from the command line (config.hpp); `profiles` (the plan's
// partition profiles under --comm) must outlive them.
ScheduleOptions schedule_options(const Dataset& dataset,
                                 const std::vector<PartitionProfile>& profiles,
                                 const TrainConfig& config) {
  ScheduleOptions options;
  options.comm = parse_comm_mode(config.comm);
  options.cache_intermediates = config.intermediates != "recompute";
  options.dropout = static_cast<float>(config.dropout);
  options.attention_dropout = static_cast<float>(config.effective_attention_dropout());
  options.seed = config.seed;
  options.row_normalize_features = config.feature_norm == "row";
  options.synchronize_phases = config.phase_timing;
  options.overlap = !config.no_overlap;
  const LastLayerChoice last = last_layer_rows(dataset, profiles, config);
  if (last.needed > 0 && last.rows == LastLayerRows::kAll)
    log_info("--last-layer-rows auto: every row (with the loss-row CSRs the chunk structures need ",
             format_bytes(double(last.needed)),
             " per GPU to stay in GPU memory, over --gpu-memory ",
             format_bytes(double(config.gpu_memory)), ")");
  options.last_layer_rows = last.rows;
  options.loss_row_exchange = loss_row_exchange(config);
  options.reload_inputs = reload_inputs(dataset, profiles, config, options.last_layer_rows);
  options.host_precision = parse_host_precision(config.host_precision, "--host-precision");
  options.vertex_data =
      config.vertex_data == "host" ? VertexData::kHost : VertexData::kDeviceWhereItFits;
  options.evaluation_cache =
      config.evaluation_cache == "off" ? EvaluationCache::kNone : EvaluationCache::kWhereItFits;
  options.evaluation_outputs = config.evaluation_outputs == "host"
                                   ? EvaluationOutputs::kHost
                                   : EvaluationOutputs::kTrainingBuffersWhereTheyFit;
  options.evaluation_csrs = config.evaluation_csrs == "each-pass"
                                ? EvaluationCsrs::kStagedEachPass
                                : EvaluationCsrs::kKeptWhereTheyFit;
  options.layer_outputs = config.layer_outputs == "recompute" ? LayerOutputs::kRecomputed
                                                              : LayerOutputs::kDeviceWhereItFits;
  options.remote_features = config.remote_features == "pull"
                                ? RemoteFeatures::kPulled
                                : RemoteFeatures::kDeviceCopyWhereItFits;
  options.gat_layer_zero = gat_layer_zero(dataset, profiles, config, options.reload_inputs);
  options.profiles = &profiles;
  return options;
}

// Setup's host memory for `config` (host_memory_plan()).
HostMemoryPlan host_plan_for(const Dataset& dataset, const Plan& plan, const TrainConfig& config,
                             InputRelease release, const std::vector<PartitionProfile>& profiles) {
  // The options that shape host memory (schedule_options() without its device memory
  // estimate for the input rows): --input-rows auto counts as keep; --last-layer-rows as
  // schedule_options() resolves it.
  ScheduleOptions options;
  options.comm = parse_comm_mode(config.comm);
  options.cache_intermediates = config.intermediates != "recompute";
  options.overlap = !config.no_overlap;
  options.reload_inputs = config.input_rows == "reload";
  options.last_layer_rows = last_layer_rows(dataset, profiles, config).rows;
  options.loss_row_exchange = loss_row_exchange(config);
  return host_memory_plan(dataset, plan, model_for(dataset, config), options, release,
                          config.device == "cpu", &profiles);
}

}  // namespace

std::string host_memory_refusal(const Dataset& dataset, const Plan& plan, const TrainConfig& config,
                                InputRelease release, std::int64_t available) {
  const std::vector<PartitionProfile> profiles = partition_profiles(dataset, plan, config);
  const HostMemoryPlan need = host_plan_for(dataset, plan, config, release, profiles);
  if (available < 0 || need.peak <= available) return "";
  std::string message =
      cat("host memory: training setup needs about ", format_bytes(double(need.peak)),
          " more than the process holds (host matrices ", format_bytes(double(need.host_matrices)),
          ": ", need.matrices, "; constants up to ", format_bytes(double(need.chunk_constants)),
          "; index lists ", format_bytes(double(need.index_lists)), "), but only ",
          format_bytes(double(available)), " is available (MemAvailable)");
  // Options that shrink the host matrices, each alone: recomputed aggregations, a smaller
  // hidden width, fewer layers. More chunks do not shrink them.
  std::vector<std::string> fits;
  const auto try_option = [&](const TrainConfig& changed, const std::string& option) {
    const std::int64_t bytes = host_plan_for(dataset, plan, changed, release, profiles).peak;
    if (bytes <= available)
      fits.push_back(cat(option, " (about ", format_bytes(double(bytes)), ")"));
    return bytes <= available;
  };
  if (config.intermediates != "recompute") {
    TrainConfig changed = config;
    changed.intermediates = "recompute";
    try_option(changed, "--intermediates recompute");
  }
  if (config.host_precision != "bf16") {
    TrainConfig changed = config;
    changed.host_precision = "bf16";
    try_option(changed, "--host-precision bf16");
  }
  for (std::int64_t hidden = config.hidden / 2; hidden >= 8; hidden /= 2) {
    TrainConfig changed = config;
    changed.hidden = hidden;
    if (try_option(changed, cat("--hidden ", hidden))) break;
  }
  for (int layers = config.layers - 1; layers >= 1; --layers) {
    TrainConfig changed = config;
    changed.layers = layers;
    if (try_option(changed, cat("--layers ", layers))) break;
  }
  if (fits.empty())
    return message +
           "; no single change of --intermediates, --host-precision, --hidden or --layers fits "
           "(more " +
           "chunks do not reduce host memory): use a machine with more memory";
  message += "; options that fit: ";
  for (std::size_t i = 0; i < fits.size(); ++i) message += (i ? ", " : "") + fits[i];
  return message + " (more chunks do not reduce host memory)";
}

LayerZeroOrder layer_zero_order(const TrainConfig& config) {
  const LayerZeroOrder order = parse_layer_zero_order(config.layer_zero_order);
  if (order == LayerZeroOrder::kAuto && config.device == "cpu")
    return LayerZeroOrder::kAggregateFirst;
  return order;
}

ModelShape model_shape(const Dataset& dataset, const TrainConfig& config) {
  ModelShape shape;
  shape.model = config.model;
  shape.layers = config.layers;
  shape.in_dim = dataset.feature_dim;
  shape.hidden = config.hidden;
  shape.classes = dataset.num_classes;
  shape.heads = config.heads;
  shape.output_heads = config.output_heads;
  shape.layer_zero_order = layer_zero_order(config);
  return shape;
}

ModelShape memory_shape(const Dataset& dataset, const TrainConfig& config) {
  ModelShape shape = model_shape(dataset, config);
  shape.classes = std::max<std::int64_t>(1, shape.classes);
  return shape;
}

LayoutOptions memory_layout_options(const TrainConfig& config) {
  LayoutOptions options;
  options.comm = parse_comm_mode(config.comm);
  options.overlap = !config.no_overlap;
  options.reload_inputs = config.input_rows == "reload";
  // As layout_options() of the schedule's options: --intermediates auto counts as cache.
  options.gat_head_outputs =
      gat_head_outputs(config.intermediates != "recompute",
                       parse_host_precision(config.host_precision, "--host-precision"));
  // auto counts the loss-row CSRs: the most it may take.
  options.last_layer_rows =
      config.last_layer_rows == "all" ? LastLayerRows::kAll : LastLayerRows::kLoss;
  options.loss_row_exchange = loss_row_exchange(config);
  return options;
}

std::string config_fingerprint(const TrainConfig& c, const Plan& plan) {
  std::ostringstream text;
  text << std::setprecision(17) << "model=" << c.model << ";layers=" << c.layers
       << ";hidden=" << c.hidden << ";optimizer=" << c.optimizer << ";lr=" << c.lr
       << ";weight_decay=" << c.weight_decay << ";dropout=" << c.dropout << ";seed=" << c.seed
       << ";feature_norm=" << c.feature_norm;
  if (c.model == "gat")
    text << ";heads=" << c.heads << ";output_heads=" << c.output_heads
         << ";attention_dropout=" << c.effective_attention_dropout();
  text << ";dataset=" << plan.dataset_fingerprint << ";P=" << plan.partitions
       << ";C=" << plan.chunks << ";partitioner=" << plan.partitioner
       << ";reorganized=" << plan.reorganized;
  // bf16 host data changes the numbers; fp32 runs keep the fingerprint they always had.
  if (c.host_precision != "fp32") text << ";host_precision=" << c.host_precision;
  Fingerprint f;
  const std::string s = text.str();
  f.add(s.data(), s.size());
  f.add(plan.new_to_old.data(), plan.new_to_old.size() * sizeof(vertex_t));
  for (const auto& ch : plan.chunk_plans) {
    f.add_u64(std::uint64_t(ch.dst_begin));
    f.add_u64(std::uint64_t(ch.dst_end));
    f.add_u64(std::uint64_t(ch.range));
  }
  return f.hex();
}

namespace {

// `releasable`, `releasable_plan`: the dataset and plan themselves when setup may release their
// parts (InputRelease::kDatasetAndPlanLists).
// `profiles`: the plan's partition profiles under --comm.
TrainResult train_within_budget(const Dataset& dataset, Dataset* releasable, const Plan& plan,
                                Plan* releasable_plan, const TrainConfig& config,
                                const std::vector<PartitionProfile>& profiles) {
  validate_config(config);
  if (config.threads > 0) omp_set_num_threads(config.threads);
  const ModelSpec model = model_for(dataset, config);
  SLUICE_INPUT_CHECK(!dataset.labels.empty(), "dataset '", dataset.name,
                     "' has no labels; training needs labels");
  SLUICE_INPUT_CHECK(!dataset.train.empty(), "dataset '", dataset.name,
                     "' has no training vertices (empty train split)");

  const InputRelease release =
      releasable ? InputRelease::kDatasetAndPlanLists : InputRelease::kKeep;
  const std::int64_t available = available_host_memory_bytes();
  TrainConfig fitted = config;
  HostMemoryPlan need = host_plan_for(dataset, plan, fitted, release, profiles);
  if (available >= 0 && need.peak > available) {
    // --intermediates auto recomputes the aggregations when caching them does not fit.
    fitted.intermediates = "recompute";
    const HostMemoryPlan recomputed = host_plan_for(dataset, plan, fitted, release, profiles);
    if (config.intermediates == "auto" && recomputed.peak <= available) {
      log_info("--intermediates auto: recomputing aggregations (caching them needs more host ",
               "memory than the ", format_bytes(double(available)), " available)");
      need = recomputed;
    } else {
      throw InputError(host_memory_refusal(dataset, plan, config, release, available));
    }
  }
  ScheduleOptions options = schedule_options(dataset, profiles, fitted);
  // The host matrices are set up beside the index lists (a faster start) when the higher peak
  // of doing so fits too.
  const bool beside = available < 0 || need.peak_beside_lists <= available;
  options.host_setup = beside ? HostSetup::kBesideLists : HostSetup::kAfterLists;
  log_info(
      "host memory plan: ", format_bytes(double(current_rss_bytes())), " held, setup adds ",
      "up to ", format_bytes(double(beside ? need.peak_beside_lists : need.peak)),
      beside ? " (host matrices beside the index lists)" : " (host matrices after the index lists)",
      ": host matrices ", format_bytes(double(need.host_matrices)), " (", need.matrices,
      "), constants (CPU: every device buffer) up to ", format_bytes(double(need.chunk_constants)),
      ", index lists ", format_bytes(double(need.index_lists)),
      need.released > 0 ? cat(", less ", format_bytes(double(need.released)),
                              " of dataset features and graph and ",
                              format_bytes(double(need.released_plan)), " of plan lists released")
                        : std::string(),
      "; ", available >= 0 ? format_bytes(double(available)) : std::string("unknown"),
      " available");
  std::unique_ptr<Backend> backend = make_backend(config, plan.partitions);
  prefer_residency(*backend, dataset, plan, model, profiles, fitted, options);
  std::optional<Schedule> built;
  if (releasable)
    built.emplace(*backend, *releasable, *releasable_plan, model, options, release);
  else
    built.emplace(*backend, dataset, plan, model, options);
  Schedule& schedule = *built;
  bool keeps = false;  // some layer's backward takes A^l from its forward
  for (const LayerSpec& layer : model.layers) keeps |= keeps_intermediates(model, options, layer);
  log_info("model ", config.model, ": ", model.num_parameters, " parameters, ", plan.partitions,
           " x ", plan.chunks, " chunks, comm ", config.comm, ", intermediates ",
           keeps ? "cache" : "recompute", options.reload_inputs ? ", input rows reloaded" : "",
           options.host_precision == HostPrecision::kFp32 ? "" : ", bf16 host data",
           options.gat_layer_zero == GatLayerZero::kAttendInputs
               ? ", layer 0 attends over its input rows"
               : "",
           model.kind != ModelKind::kGat && !model.layers.front().last &&
                   model.layers.front().transform_first
               ? ", layer 0 multiplies first"
               : "");

  const bool adam = config.optimizer == "adam";
  const std::string fingerprint = config_fingerprint(config, plan);
  Checkpoint state;
  state.config_fingerprint = fingerprint;
  state.description = describe_config(config);
  state.seed = config.seed;
  if (config.resume) {
    Checkpoint loaded = read_checkpoint(config.checkpoint);
    SLUICE_INPUT_CHECK(loaded.config_fingerprint == fingerprint, "--resume: checkpoint ",
                       config.checkpoint,
                       " was written for a different model configuration, dataset or plan (",
                       loaded.description, ")");
    SLUICE_INPUT_CHECK(std::int64_t(loaded.parameters.size()) == model.num_parameters,
                       config.checkpoint, ": parameter count does not match the model");
    SLUICE_INPUT_CHECK(loaded.epochs_done <= config.epochs, "--resume: checkpoint ",
                       config.checkpoint, " already holds ", loaded.epochs_done,
                       " epochs, more than --epochs ", config.epochs);
    SLUICE_INPUT_CHECK(!adam || loaded.adam_m.size() == loaded.parameters.size(), config.checkpoint,
                       ": no Adam state in the checkpoint");
    state = std::move(loaded);
    state.description = describe_config(config);
    schedule.set_parameters(state.parameters);
    if (adam) schedule.set_optimizer_state(state.adam_m, state.adam_v);
    log_info("resuming from ", config.checkpoint, " after epoch ", state.epochs_done);
  } else {
    state.parameters = init_parameters(model, config.seed);
    schedule.set_parameters(state.parameters);
    if (adam) {
      std::vector<float> zeros(std::size_t(model.num_parameters), 0.f);
      schedule.set_optimizer_state(zeros, zeros);
    }
  }

  auto save_checkpoint = [&]() {
    state.parameters = schedule.parameters();
    if (adam)
      schedule.optimizer_state(state.adam_m, state.adam_v);
    else
      state.adam_m.clear(), state.adam_v.clear();
    write_checkpoint(config.checkpoint, state);
    log_debug("checkpoint ", config.checkpoint, " after epoch ", state.epochs_done);
  };

  // Metrics are a log appended as epochs end (so that --resume can keep the records of an
  // interrupted run), not a file renamed into place: each record is flushed with a checked
  // write; a run that started the file removes it when a write fails.
  std::optional<CheckedFile> metrics;
  if (!config.metrics.empty()) {
    if (config.resume) truncate_metrics(config.metrics, state.epochs_done);
    metrics.emplace(config.metrics, config.metrics, "metrics",
                    config.resume ? CheckedFile::Mode::kAppend : CheckedFile::Mode::kTruncate);
  }
  auto write_metrics = [&](const auto& write) {
    try {
      write();
    } catch (const InputError&) {
      metrics.reset();
      if (!config.resume) remove_regular_file(config.metrics);
      throw;
    }
  };

  std::optional<TraceRecorder> trace;
  if (!config.trace.empty()) {
    trace.emplace(plan.partitions, now_seconds());
    schedule.set_timeline(true);
  }

  TrainResult result;
  result.best_predictions.clear();
  const std::int64_t total = config.epochs;
  std::optional<Progress> progress;
  if (config.progress && !config.quiet)
    progress.emplace("train", std::uint64_t(std::max<std::int64_t>(total - state.epochs_done, 0)));
  const std::int64_t log_every = std::max<std::int64_t>(1, total / 20);
  for (std::int64_t epoch = state.epochs_done; epoch < total; ++epoch) {
    EpochRecord record;
    record.epoch = epoch;
    schedule.reset_times();
    schedule.reset_counters();
    const double start = now_seconds();
    record.loss = schedule.forward_backward(epoch);
    SLUICE_INPUT_CHECK(std::isfinite(record.loss), "training diverged at epoch ", epoch, " (loss ",
                       record.loss, "); lower --lr");
    if (adam)
      schedule.adam_step(float(config.lr), float(config.weight_decay), ++state.optimizer_step);
    else
      schedule.sgd_step(float(config.lr), float(config.weight_decay)), ++state.optimizer_step;
    record.seconds = now_seconds() - start;
    if (trace) {
      trace->add_device_ranges(schedule.timeline(), schedule.timeline_origin());
      trace->add_host_issues(schedule.host_issues());
      trace->add_host_range(cat("epoch ", epoch, " training step"), start, start + record.seconds);
    }
    record.phases = schedule.times();
    record.device_phases = schedule.device_times();
    record.transfers = schedule.counters();
    state.train_seconds += record.seconds;
    state.losses.push_back(record.loss);
    state.epochs_done = epoch + 1;

    if ((epoch + 1) % config.eval_every == 0 || epoch + 1 == total) {
      const double eval_start = now_seconds();
      schedule.reset_counters();  // the step's are in record.transfers
      // The last epoch always evaluates: another evaluation follows while epochs remain. The
      // predictions stay on the devices (the best-valid epoch's come back after the epochs).
      schedule.evaluate(epoch + 1 < total ? EvaluationsAhead::kMore : EvaluationsAhead::kNone,
                        Predictions::kOnDevices);
      record.evaluated = true;
      record.eval_transfers = schedule.counters();
      const std::array<double, 3> correct = schedule.accuracies();
      record.train_accuracy = correct[0];
      record.valid_accuracy = correct[1];
      record.test_accuracy = correct[2];
      if (record.valid_accuracy > state.best_valid_accuracy) {
        state.best_valid_accuracy = record.valid_accuracy;
        state.best_test_accuracy = record.test_accuracy;
        state.best_train_accuracy = record.train_accuracy;
        state.best_epoch = epoch;
        state.best_parameters = schedule.parameters();
      }
      record.eval_seconds = now_seconds() - eval_start;
      if (trace) {
        trace->add_device_ranges(schedule.timeline(), schedule.timeline_origin());
        trace->add_host_issues(schedule.host_issues());
        trace->add_host_range(cat("epoch ", epoch, " evaluation"), eval_start,
                              eval_start + record.eval_seconds);
      }
    }
    record.peak_host_bytes = peak_rss_bytes();
    record.peak_device_bytes = schedule.peak_device_bytes();
    if (metrics)
      write_metrics([&] {
        metrics->stream() << epoch_json(record).dump() << "\n";
        metrics->flush();
      });
    if (record.evaluated && ((epoch + 1) % log_every == 0 || epoch + 1 == total))
      log_info("epoch ", epoch + 1, "/", total, " loss ", record.loss, " train ",
               record.train_accuracy, " valid ", record.valid_accuracy, " test ",
               record.test_accuracy, " (", format_seconds(record.seconds), ")");
    else
      log_debug("epoch ", epoch + 1, "/", total, " loss ", record.loss, " (",
                format_seconds(record.seconds), ")");
    result.records.push_back(record);
    if (progress) progress->add(1);
    if (!config.checkpoint.empty() && config.checkpoint_every > 0 &&
        (epoch + 1) % config.checkpoint_every == 0)
      save_checkpoint();
  }
  if (progress) progress->finish();
  if (metrics) write_metrics([&] { metrics->close(); });
  if (trace) {
    trace->write(config.trace);
    log_info("trace: ", trace->size(), " ranges written to ", config.trace);
  }
  if (!config.checkpoint.empty() &&
      (config.checkpoint_every == 0 || state.epochs_done % config.checkpoint_every != 0))
    save_checkpoint();

  // The best-valid epoch's predictions (that epoch's, or one before a resume) where asked for,
  // and with embeddings_out its outputs: one evaluation with its parameters, which gives what
  // that epoch's evaluation gave (an evaluation is deterministic). An evaluation in the epochs
  // brings none to the host: they are one index a vertex over the link and then copied on the
  // host (docs/design.md). Without a best-valid epoch the outputs are the final parameters'.
  const bool best = state.best_epoch >= 0 && !state.best_parameters.empty();
  if ((best && !config.predictions.empty()) || !config.embeddings_out.empty()) {
    const double start = now_seconds();
    const std::vector<float> final_parameters = schedule.parameters();
    if (best) schedule.set_parameters(state.best_parameters);
    if (!config.embeddings_out.empty()) {
      result.best_outputs = by_dataset_vertex(schedule.evaluate_outputs(), plan);
      if (best) result.best_predictions = result.best_outputs.predictions;
    } else {
      result.best_predictions =
          by_dataset_vertex(schedule.evaluate(EvaluationsAhead::kNone, Predictions::kToHost), plan);
    }
    schedule.set_parameters(final_parameters);
    if (best)
      log_info("best-valid epoch ", state.best_epoch + 1, "/", total, " evaluated again for its ",
               config.embeddings_out.empty() ? "predictions" : "predictions and embeddings", ": ",
               format_seconds(now_seconds() - start));
  }

  result.losses = state.losses;
  result.flat_parameters = schedule.parameters();
  result.best_flat_parameters =
      state.best_parameters.empty() ? result.flat_parameters : state.best_parameters;
  result.parameters = named_parameters(model, result.flat_parameters);
  result.epochs = state.epochs_done;
  result.best_epoch = state.best_epoch;
  result.best_valid_accuracy = state.best_valid_accuracy;
  result.test_accuracy = state.best_test_accuracy;
  result.train_accuracy = state.best_train_accuracy;
  result.final_loss = state.losses.empty() ? 0 : state.losses.back();
  result.seconds_per_epoch =
      state.epochs_done > 0 ? state.train_seconds / double(state.epochs_done) : 0;
  return result;
}

// Host memory checked before the dataset's widths reach any allocation: the parameters with
// their gradients and two optimizer moments (--hidden, --heads, the feature dimension and the
// classes = largest label + 1 set their number). The CPU backend's devices live in host memory
// too: their estimated bytes (train/layout/memory_estimate.hpp) are added. The per-vertex host
// matrices are checked by the host memory plan (train/host_memory.hpp) before setup.
// `profiles`: the plan's partition profiles under --comm.
void require_training_memory(const Dataset& dataset, const Plan& plan, const TrainConfig& config,
                             const std::vector<PartitionProfile>& profiles) {
  const ModelSpec model = model_for(dataset, config);
  const std::int64_t bytes = saturating_bytes({model.num_parameters, 4, sizeof(float)});
  const std::string cause = cat("--hidden ", config.hidden, " --layers ", config.layers, " with ",
                                dataset.feature_dim, " input features and ", dataset.num_classes,
                                " classes (largest label + 1) in the dataset");
  const std::string purpose = cat("training ", config.model, " over ", dataset.num_nodes,
                                  " vertices (", model.num_parameters, " parameters)");
  require_memory({bytes, purpose, cause});
  if (config.device != "cpu") return;
  // What the CPU backend allocates through its Device interface, summed over the partitions.
  const ModelShape shape = memory_shape(dataset, config);
  const LayoutOptions layout = memory_layout_options(config);
  std::int64_t devices = 0;
  for (const GpuMemoryEstimate& e : plan_estimates(profiles, shape, layout))
    devices = saturating_add(devices, e.device_bytes());
  require_memory({saturating_add(bytes, devices),
                  cat(purpose, " on ", plan.partitions, " CPU device(s)"), cause});
}

}  // namespace

TrainResult train(const Dataset& dataset, const Plan& plan, const TrainConfig& config) {
  const std::vector<PartitionProfile> profiles = partition_profiles(dataset, plan, config);
  require_training_memory(dataset, plan, config, profiles);
  // Setup allocates every working buffer, but backends size some scratch on first use: an
  // over-budget allocation anywhere in the run gets the chunk-count suggestion.
  try {
    return train_within_budget(dataset, nullptr, plan, nullptr, config, profiles);
  } catch (const OutOfDeviceMemory& error) {
    throw InputError(over_budget_message(error, dataset, plan, config));
  }
}

TrainResult train(Dataset& dataset, Plan& plan, const TrainConfig& config, InputRelease release) {
  if (release == InputRelease::kKeep) return train(std::as_const(dataset), plan, config);
  // The partition profiles serve the memory checks, the estimate, the host memory plan and the
  // buffer layouts.
  const std::vector<PartitionProfile> profiles = partition_profiles(dataset, plan, config);
  require_training_memory(dataset, plan, config, profiles);
  // The over-budget message reads the plan's chunk lists and, for the chunk count that fits,
  // the dataset's graph: taken before setup releases them (the chunk count only when the
  // estimate already exceeds the budget).
  const std::vector<std::int64_t> estimate = budget_estimate(dataset, profiles, config);
  std::string fitting;
  const bool over = config.gpu_memory > 0 && estimate.back() > config.gpu_memory;
  if (over) fitting = fitting_chunks_clause(dataset, plan, config);
  try {
    return train_within_budget(dataset, &dataset, plan, &plan, config, profiles);
  } catch (const OutOfDeviceMemory& error) {
    throw InputError(
        over_budget_message(error, dataset, plan, config, {&estimate, over ? &fitting : nullptr}));
  }
}

void run_train(const TrainConfig& config) {
  validate_config(config);
  require_readable(config.dataset, "dataset");
  require_readable(config.plan, "plan");
  if (config.resume) require_readable(config.checkpoint, "checkpoint");
  // Fail before training, not after it, when an output cannot be written.
  for (const std::string* output :
       {&config.report, &config.metrics, &config.predictions, &config.checkpoint, &config.model_out,
        &config.trace, &config.embeddings_out})
    if (!output->empty()) AtomicOutput probe(*output);
  log_debug("configuration: ", describe_config(config));
  const DatasetInfo info = read_dataset_info(config.dataset);
  Plan plan = read_plan(config.plan);
  SLUICE_INPUT_CHECK(plan.dataset_fingerprint == info.fingerprint, "plan ", config.plan,
                     " was built from a different dataset (fingerprint ", plan.dataset_fingerprint,
                     ") than ", config.dataset, " (fingerprint ", info.fingerprint,
                     "); rebuild the plan with sluice-preprocess partition");
  // The features stay in the file until setup reads them into H^0 (fill_features()).
  DatasetReadOptions read_options;
  read_options.features = false;
  Dataset dataset = read_dataset(config.dataset, read_options);
  StageTimer train_stage("train");
  // Nothing below reads the dataset's features or graph (predictions take labels and ids).
  const TrainResult result = train(dataset, plan, config, InputRelease::kDatasetAndPlanLists);
  train_stage.finish();
  StageTimer write_stage("write outputs");

  if (!config.report.empty()) {
    json report{{"dataset", config.dataset},
                {"plan", config.plan},
                {"model", config.model},
                {"partitions", plan.partitions},
                {"chunks", plan.chunks},
                {"epochs", result.epochs},
                {"final_loss", result.final_loss},
                {"best_epoch", result.best_epoch},
                {"valid_accuracy", result.best_valid_accuracy},
                {"test_accuracy", result.test_accuracy},
                {"train_accuracy", result.train_accuracy},
                {"seconds_per_epoch", result.seconds_per_epoch},
                {"median_seconds_per_epoch", median_epoch_seconds(result)},
                {"peak_host_bytes", peak_rss_bytes()},
                {"losses", result.losses}};
    AtomicTextFile output(config.report, "report");
    output.stream() << report.dump(2) << "\n";
    output.commit();
  }
  if (!config.model_out.empty()) {
    const ModelSpec model = model_for(dataset, config);
    ModelFile file;
    file.description = describe_config(config);
    file.epoch = result.best_epoch >= 0 ? result.best_epoch : result.epochs - 1;
    for (const auto& p : model.parameters)
      file.tensors.push_back(
          {p.name, p.rows, p.cols,
           std::vector<float>(result.best_flat_parameters.begin() + p.offset,
                              result.best_flat_parameters.begin() + p.offset + p.size())});
    write_model(config.model_out, file);
  }
  if (!config.embeddings_out.empty()) {
    EmbeddingsFile file;
    file.description = describe_config(config);
    file.epoch = result.best_epoch >= 0 ? result.best_epoch : result.epochs - 1;
    file.hidden_width = result.best_outputs.hidden_width;
    file.classes = result.best_outputs.classes;
    file.original_ids.resize(std::size_t(dataset.num_nodes));
    for (vertex_t v = 0; v < dataset.num_nodes; ++v)
      file.original_ids[std::size_t(v)] =
          dataset.original_ids.empty() ? std::int64_t(v) : dataset.original_ids[std::size_t(v)];
    file.hidden = result.best_outputs.hidden;
    file.logits = result.best_outputs.logits;
    write_embeddings(config.embeddings_out, file);
  }
  if (!config.predictions.empty()) {
    SLUICE_INPUT_CHECK(!result.best_predictions.empty(),
                       "--predictions: no evaluation ran (--epochs 0?)");
    AtomicTextFile output(config.predictions, "predictions");
    {
      std::ostream& out = output.stream();
      out << "original_id,prediction,label\n";
      for (vertex_t v = 0; v < dataset.num_nodes; ++v) {
        const std::int64_t id =
            dataset.original_ids.empty() ? std::int64_t(v) : dataset.original_ids[std::size_t(v)];
        out << id << "," << result.best_predictions[std::size_t(v)] << ","
            << dataset.labels[std::size_t(v)] << "\n";
      }
    }
    output.commit();
  }
  write_stage.finish();
  std::int64_t peak_device = 0;
  for (const EpochRecord& record : result.records)
    peak_device = std::max(peak_device, record.peak_device_bytes);
  log_info("done: ", result.epochs, " epochs, final loss ", result.final_loss,
           ", best valid accuracy ", result.best_valid_accuracy, " at epoch ",
           result.best_epoch + 1,  // counted from 1, as the epochs' lines
           ", test accuracy ", result.test_accuracy, "; epoch time median ",
           format_seconds(median_epoch_seconds(result)), ", mean ",
           format_seconds(result.seconds_per_epoch));
  log_info("stages: ", stage_summary(),
           config.device == "cuda" ? cat(", peak GPU memory ", format_bytes(double(peak_device)))
                                   : std::string());
}

}  // namespace sluice
