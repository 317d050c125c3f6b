// The plan subcommands of sluice-preprocess: partition (build plan.h5), stats (print a plan's
// statistics or sweep the replication factor over partition counts) and verify (check a plan
// against its dataset).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <boost/program_options.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/option_checks.hpp"
#include "common/paths.hpp"
#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "preprocess/chunk_search.hpp"
#include "preprocess/commands.hpp"
#include "preprocess/partition.hpp"
#include "preprocess/plan_builder.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "preprocess/plan_stats.hpp"
#include "preprocess/plan_verify.hpp"
#include "train/layout/memory_estimate.hpp"

namespace po = boost::program_options;

namespace sluice {
namespace {

// Parses args (args[0] = subcommand); returns false after printing help.
bool parse(const std::vector<std::string>& args, const po::options_description& options,
           const po::positional_options_description& positional, po::variables_map& values,
           const char* usage) {
  std::vector<std::string> rest(args.begin() + 1, args.end());
  po::store(po::command_line_parser(rest).options(options).positional(positional).run(), values);
  if (values.count("help")) {
    std::cout << usage << "\n" << options << "\n";
    return false;
  }
  po::notify(values);
  check_integer_options(values, {{"partitions", 1},
                                 {"chunks", 1},
                                 {"hidden", 1},
                                 {"layers", 1},
                                 {"heads", 1},
                                 {"output-heads", 1}});
  if (values.count("quiet")) set_log_level(LogLevel::kQuiet);
  if (values.count("verbose")) set_log_level(LogLevel::kDebug);
  return true;
}

std::vector<int> parse_counts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SLUICE_INPUT_CHECK(used == item.size() && value >= 1, "--sweep-partitions: '", item,
                       "' is not a positive integer");
    counts.push_back(value);
  }
  SLUICE_INPUT_CHECK(!counts.empty(), "--sweep-partitions: empty list");
  return counts;
}

// --gpu-memory: a C whose estimated per-GPU peak fits the budget, by --chunk-choice.
ChunkSearchResult choose_chunks(const Dataset& dataset, const VertexPartition& partition,
                                const PlanOptions& options, std::int64_t budget,
                                const ModelShape& shape, const LayoutOptions& layout,
                                bool may_reload, const ChunkChoiceOptions& choice) {
  const ChunkSearchResult found =
      choose_fitting_chunks(dataset, partition, options, budget, shape, layout, may_reload, choice);
  SLUICE_INPUT_CHECK(found.fits, "--gpu-memory ", format_bytes(budget), ": even C=", found.chunks,
                     " needs ", format_bytes(found.bytes),
                     " per GPU with only the required buffers (the smallest partition has ",
                     found.smallest_partition, " vertices)");
  return found;
}

const char* kPartitionUsage =
    "usage: sluice-preprocess partition --dataset data.h5 --output plan.h5 [options]\n"
    "\n"
    "Builds a training plan: level-1 partitions (multilevel METIS k-way on the symmetrized\n"
    "graph, balancing in-degree + 1 and vertex counts), edge-balanced chunks, cost-model-guided\n"
    "reorganization, and every transfer index. Chunk count: --chunks C, or --gpu-memory BYTES\n"
    "with a model description to choose C: the smallest whose estimated per-GPU peak fits, or\n"
    "(--chunk-choice auto) a larger one whose smaller buffers leave room on the GPU for vertex\n"
    "data, where that shortens the forecast epoch.";

}  // namespace

int run_partition(const std::vector<std::string>& args) {
  std::string dataset_path, output, partitioner, model, gpu_memory, balance, imbalance;
  std::string layer_zero_order;
  std::string input_rows, intermediates, host_precision, chunk_choice;
  int partitions = 1, chunks = 0, hidden = 256, layers = 2, heads = 8, output_heads = 1;
  std::uint64_t seed = 0;
  std::int64_t feature_dim = 0;
  double h2d = 50, p2p = 350, reuse = 3900;
  po::options_description options("options");
  options.add_options()("help,h", "show this help")("dataset", po::value(&dataset_path)->required(),
                                                    "input dataset.h5")(
      "output,o", po::value(&output)->required(), "output plan.h5 (written atomically)")(
      "partitions,p", po::value(&partitions)->default_value(1), "P, partitions = GPUs")(
      "chunks,c", po::value(&chunks), "C, chunks per partition (default 1)")(
      "partitioner", po::value(&partitioner)->default_value("metis"),
      "metis (multithreaded coarsening, METIS on the coarsest graph, parallel refinement) | "
      "metis-direct (serial METIS on the whole graph: slow and memory-hungry on large graphs) | "
      "range | random (baselines)")("seed", po::value(&seed)->default_value(0),
                                    "seed of METIS and the random partitioner")(
      "balance", po::value(&balance)->default_value("both"),
      "what the partitions balance: edges (in-degree + 1) | vertices | both (METIS: two "
      "constraints; range: in-degree + mean degree)")("no-reorganize",
                                                      "keep the natural batch layout (ablation)")(
      "imbalance", po::value(&imbalance),
      "METIS load-imbalance tolerance, one value or one per balance constraint (both: edges, "
      "vertices), e.g. 1.03,1.01 (default: 1.01 for --balance both, METIS's 1.03 for one "
      "constraint)")(
      "feature-dim", po::value(&feature_dim)->default_value(0),
      "row width (floats) for the cost model and byte statistics (0: the dataset's)")(
      "bandwidth-h2d", po::value(&h2d)->default_value(50), "host->GPU GB/s for the cost model")(
      "bandwidth-p2p", po::value(&p2p)->default_value(350), "GPU<-GPU GB/s for the cost model")(
      "bandwidth-reuse", po::value(&reuse)->default_value(3900),
      "in-place (HBM) GB/s for the cost model and the --gpu-memory forecast's recomputed "
      "intermediates")(
      "gpu-memory", po::value(&gpu_memory),
      "per-GPU memory budget (bytes, or with K/M/G/T suffix): choose a C that fits")(
      "chunk-choice", po::value(&chunk_choice)->default_value("auto"),
      "auto | smallest (--gpu-memory): auto takes, of the smallest C that fits and larger ones "
      "up to 8x, the one whose forecast epoch (host-link bytes at --bandwidth-h2d, 5 ms a "
      "chunk) is the shortest, where vertex data fill what smaller buffers leave")(
      "model", po::value(&model)->default_value("gcn"), "gcn | sage | gat (--gpu-memory)")(
      "hidden", po::value(&hidden)->default_value(256), "hidden width (--gpu-memory)")(
      "layers", po::value(&layers)->default_value(2), "layers (--gpu-memory)")(
      "heads", po::value(&heads)->default_value(8), "GAT heads of hidden layers (--gpu-memory)")(
      "output-heads", po::value(&output_heads)->default_value(1),
      "GAT heads of the output layer (--gpu-memory)")(
      "layer-zero-order", po::value(&layer_zero_order)->default_value("auto"),
      "auto | aggregate | transform, as sluice-train --layer-zero-order (--gpu-memory; GCN, "
      "SAGE)")(
      "input-rows", po::value(&input_rows)->default_value("auto"),
      "keep | reload | auto, as sluice-train --input-rows (--gpu-memory): auto allows reloaded "
      "input rows when no C fits with kept ones")(
      "intermediates", po::value(&intermediates)->default_value("auto"),
      "auto | cache | recompute, as sluice-train --intermediates (--gpu-memory): GAT keeps "
      "its head outputs on the GPU unless recompute")(
      "host-precision", po::value(&host_precision)->default_value("fp32"),
      "fp32 | bf16, as sluice-train --host-precision (--gpu-memory): GAT with bf16 recomputes "
      "its head outputs")("verify", "verify the plan against the dataset after building it")(
      "quiet,q", "no log lines")("verbose,v",
                                 "also log each stage's time and memory, and other details");
  po::variables_map values;
  if (!parse(args, options, {}, values, kPartitionUsage)) return 0;
  check_outputs_do_not_clobber({{"--dataset", dataset_path}}, {{"--output", output}});
  SLUICE_INPUT_CHECK(!(values.count("chunks") && values.count("gpu-memory")),
                     "give either --chunks or --gpu-memory, not both");
  SLUICE_INPUT_CHECK(chunk_choice == "auto" || chunk_choice == "smallest",
                     "unknown --chunk-choice '", chunk_choice, "' (expected auto or smallest)");

  { AtomicOutput probe(output); }  // a missing output directory fails now, not after the build
  SLUICE_INPUT_CHECK(is_partitioner(partitioner), "--partitioner '", partitioner,
                     "' is not metis, metis-direct, range or random");
  const Balance level1_balance = parse_balance(balance);
  std::vector<double> tolerances;
  if (values.count("imbalance")) {
    SLUICE_INPUT_CHECK(partitioner == "metis" || partitioner == "metis-direct",
                       "--imbalance sets METIS's tolerances; the ", partitioner,
                       " partitioner has none");
    tolerances =
        parse_imbalance(imbalance, level1_balance == Balance::kBoth ? 2 : 1, "--imbalance");
  }
  const DatasetInfo info = read_dataset_info(dataset_path);
  DatasetReadOptions read_options;
  read_options.features = false;
  // The memory estimate counts the last layer's loss-row CSRs, whose rows the labels decide.
  read_options.labels = values.count("gpu-memory") > 0;
  const Dataset dataset = read_dataset(dataset_path, read_options);
  check_graph(dataset);

  PlanOptions plan_options;
  plan_options.partitions = partitions;
  plan_options.chunks = values.count("chunks") ? chunks : 1;
  plan_options.partitioner = partitioner;
  plan_options.seed = seed;
  plan_options.balance = balance;
  plan_options.imbalance = tolerances;
  plan_options.reorganize = values.count("no-reorganize") == 0;
  plan_options.bandwidths.h2d = h2d * 1e9;
  plan_options.bandwidths.p2p = p2p * 1e9;
  plan_options.bandwidths.reuse = reuse * 1e9;
  plan_options.cost_feature_dim = feature_dim > 0 ? feature_dim : info.feature_dim;
  log_info("partition: dataset ", dataset_path, " (", info.num_nodes, " vertices, ", info.num_edges,
           " edges), P=", partitions,
           values.count("gpu-memory") ? std::string(" C=auto") : cat(" C=", plan_options.chunks),
           ", partitioner ", partitioner, " (balance ", balance, "), seed ", seed,
           plan_options.reorganize ? ", reorganize" : ", no reorganization");

  const double start = now_seconds();
  VertexPartition partition;
  {
    StageTimer timer(cat("level-1 partition (", partitioner, ", P=", partitions, ")"));
    SLUICE_INPUT_CHECK(partitions >= 1 && partitions <= dataset.num_nodes, "--partitions ",
                       partitions, " must be in [1, ", dataset.num_nodes, "]");
    partition =
        partition_vertices(dataset, partitions, partitioner, seed, level1_balance, tolerances);
  }
  ModelShape shape;
  shape.model = model;
  shape.layers = layers;
  shape.in_dim = info.feature_dim;
  shape.hidden = hidden;
  shape.classes = std::max(1, info.num_classes);
  shape.heads = heads;
  shape.output_heads = output_heads;
  shape.layer_zero_order = parse_layer_zero_order(layer_zero_order, model);
  SLUICE_INPUT_CHECK(input_rows == "auto" || input_rows == "keep" || input_rows == "reload",
                     "unknown --input-rows '", input_rows, "' (expected auto, keep or reload)");
  SLUICE_INPUT_CHECK(
      intermediates == "auto" || intermediates == "cache" || intermediates == "recompute",
      "unknown --intermediates '", intermediates, "' (expected auto, cache or recompute)");
  SLUICE_INPUT_CHECK(host_precision == "fp32" || host_precision == "bf16",
                     "unknown --host-precision '", host_precision, "' (expected fp32 or bf16)");
  ChunkChoiceOptions choice;
  choice.choice =
      chunk_choice == "smallest" ? ChunkChoice::kSmallest : ChunkChoice::kShortestForecast;
  choice.host.cache_intermediates = intermediates != "recompute";
  choice.host.host_precision =
      host_precision == "bf16" ? HostPrecision::kBf16 : HostPrecision::kFp32;
  choice.intermediates = intermediates == "auto"
                             ? IntermediatesChoice::kRecomputeWhereEverythingFits
                             : IntermediatesChoice::kAsGiven;
  choice.link.bytes_per_second = h2d * 1e9;
  choice.link.in_place_bytes_per_second = reuse * 1e9;
  // The estimate assumes sluice-train's defaults: p2p+reuse transfers, overlap buffers.
  LayoutOptions layout;
  layout.reload_inputs = input_rows == "reload";
  layout.gat_head_outputs =
      gat_head_outputs(intermediates != "recompute",
                       host_precision == "bf16" ? HostPrecision::kBf16 : HostPrecision::kFp32);
  std::int64_t budget = 0;
  // The estimate the chosen C fits under (kept or reloaded input rows; all overlap buffers or
  // only the required buffers).
  BudgetRule rule;  // what the chosen C fits under
  auto fit_bytes = [&](const Plan& p) {
    return rule_bytes(p, loss_row_flags(dataset, p.old_to_new), shape, layout, rule);
  };
  ChunkSearchResult found;
  if (values.count("gpu-memory")) {
    budget = parse_bytes(gpu_memory, "--gpu-memory");
    SLUICE_INPUT_CHECK(budget > 0,
                       "--gpu-memory must be more than 0 bytes to choose a chunk "
                       "count (got '",
                       gpu_memory, "')");
    found = choose_chunks(dataset, partition, plan_options, budget, shape, layout,
                          input_rows == "auto", choice);
    plan_options.chunks = found.chunks;
    rule = found.rule;
    // The search sized buffers for the natural layout; a reorganized one may need more, which
    // the same sketch tells before any index is built.
    plan_options.layout_fits = [&](const std::vector<std::int32_t>& order) {
      const std::int64_t bytes =
          rules_bytes(found.sketch->profiles(found.chunks, layout.comm, order), shape, layout,
                      {rule})
              .front();
      if (bytes <= budget) return true;
      log_info("--gpu-memory: the reorganized layout needs ", format_bytes(double(bytes)),
               " per GPU, over the budget; keeping the natural layout");
      return false;
    };
  }
  const Plan plan = build_plan_from_partition(dataset, partition, plan_options, info.fingerprint);
  const double total = now_seconds() - start;
  if (values.count("gpu-memory")) {
    const int C = plan_options.chunks;
    std::printf("--gpu-memory %s, model %s, %d layers, hidden %d: chose C=%d (%s input rows%s)\n",
                format_bytes(static_cast<double>(budget)).c_str(), model.c_str(), layers, hidden, C,
                rule.reload_inputs ? "reloaded" : "kept",
                rule.all_overlap ? "" : ", only the overlap buffers that fit");
    // C/2 and 2C by the search's sketch (natural layout), C by the plan built.
    std::vector<std::pair<int, std::int64_t>> rows = found.neighbors;
    rows.emplace_back(C, fit_bytes(plan));
    std::sort(rows.begin(), rows.end());
    for (const auto& [candidate, bytes] : rows) {
      std::printf("  C=%-6d estimated peak per GPU %s%s\n", candidate,
                  format_bytes(static_cast<double>(bytes)).c_str(),
                  bytes <= budget ? "  (fits)" : "  (does not fit)");
    }
    // The counts the forecast compared (the natural layout's profiles).
    for (const LinkForecast& f : found.forecasts)
      std::printf(
          "  C=%-6d forecast epoch and evaluation %.3f s: %s over the host link, on the GPU "
          "%s%s%s\n",
          f.chunks, f.seconds, format_bytes(static_cast<double>(f.link_bytes)).c_str(),
          f.resident.c_str(), recompute_note(f).c_str(), f.chunks == C ? "  (chosen)" : "");
  }
  log_debug("timing: level-1 partition ", partition.seconds, " s (", partition.method,
            partition.edge_cut >= 0 ? cat(", edge cut ", partition.edge_cut) : std::string(),
            "), rest ", total - partition.seconds, " s");
  write_plan(output, plan);
  if (values.count("verify")) {
    const std::string violation = find_plan_violation(dataset, plan);
    SLUICE_INPUT_CHECK(violation.empty(), output, ": plan verification failed: ", violation);
    log_info("verify: plan is consistent with ", dataset_path);
  }
  log_info("partition stages: ", stage_summary());
  std::fputs(plan_stats_table(plan).c_str(), stdout);
  return 0;
}

int run_stats(const std::vector<std::string>& args) {
  std::string plan_path, dataset_path, sweep, partitioner;
  std::int64_t feature_dim = 0;
  std::uint64_t seed = 0;
  po::options_description options("options");
  options.add_options()("help,h", "show this help")("plan", po::value(&plan_path),
                                                    "plan.h5 (also the first positional argument)")(
      "json", "print one JSON object instead of the table")(
      "feature-dim", po::value(&feature_dim)->default_value(0),
      "row width (floats) for byte figures (0: the plan's cost feature width)")(
      "sweep-partitions", po::value(&sweep),
      "comma-separated partition counts: print the replication factor of each (needs --dataset)")(
      "dataset", po::value(&dataset_path), "dataset.h5 for --sweep-partitions")(
      "partitioner", po::value(&partitioner)->default_value("metis"),
      "partitioner for --sweep-partitions")("seed", po::value(&seed)->default_value(0),
                                            "seed for --sweep-partitions")(
      "quiet,q", "no log lines")("verbose,v", "debug log lines");
  po::positional_options_description positional;
  positional.add("plan", 1);
  po::variables_map values;
  if (!parse(args, options, positional, values,
             "usage: sluice-preprocess stats plan.h5 [--json] [--feature-dim D]\n"
             "       sluice-preprocess stats --sweep-partitions 2,4,8 --dataset data.h5 [--json]"))
    return 0;
  if (values.count("sweep-partitions")) {
    SLUICE_INPUT_CHECK(!dataset_path.empty(), "--sweep-partitions needs --dataset");
    DatasetReadOptions read_options;
    read_options.features = false;
    read_options.labels = false;
    const Dataset dataset = read_dataset(dataset_path, read_options);
    check_graph(dataset);
    const auto rows = sweep_replication(dataset, parse_counts(sweep), partitioner, seed);
    if (values.count("json")) {
      std::printf("[");
      for (std::size_t i = 0; i < rows.size(); ++i)
        std::printf(
            "%s{\"partitions\":%d,\"partitioner\":\"%s\",\"replication_factor\":%.6f,"
            "\"seconds\":%.4f}",
            i ? "," : "", rows[i].partitions, rows[i].partitioner.c_str(),
            rows[i].replication_factor, rows[i].seconds);
      std::printf("]\n");
    } else {
      std::printf("%-12s %-12s %20s %12s\n", "partitions", "partitioner", "replication factor",
                  "seconds");
      for (const auto& row : rows)
        std::printf("%-12d %-12s %20.4f %12.3f\n", row.partitions, row.partitioner.c_str(),
                    row.replication_factor, row.seconds);
    }
    return 0;
  }
  SLUICE_INPUT_CHECK(!plan_path.empty(), "stats: give a plan.h5 (or --sweep-partitions)");
  const Plan plan = read_plan(plan_path);
  if (values.count("json"))
    std::printf("%s\n", plan_stats_json(plan, feature_dim).c_str());
  else
    std::fputs(plan_stats_table(plan, feature_dim).c_str(), stdout);
  return 0;
}

int run_verify(const std::vector<std::string>& args) {
  std::string dataset_path, plan_path;
  po::options_description options("options");
  options.add_options()("help,h", "show this help")("dataset", po::value(&dataset_path)->required(),
                                                    "dataset.h5 the plan was built from")(
      "plan", po::value(&plan_path)->required(), "plan.h5 to check")("quiet,q", "no log lines")(
      "verbose,v", "debug log lines");
  po::variables_map values;
  if (!parse(args, options, {}, values,
             "usage: sluice-preprocess verify --dataset data.h5 --plan plan.h5\n"
             "\n"
             "Re-derives every index of the plan from the dataset and checks it; exits 1 naming\n"
             "the first violation."))
    return 0;
  const DatasetInfo info = read_dataset_info(dataset_path);
  const Plan plan = read_plan(plan_path);
  require_plan_matches(plan, info.fingerprint, plan_path, dataset_path);
  DatasetReadOptions read_options;
  read_options.features = false;
  read_options.labels = false;
  const Dataset dataset = read_dataset(dataset_path, read_options);
  const std::string violation = find_plan_violation(dataset, plan);
  if (!violation.empty()) {
    std::fprintf(stderr, "sluice-preprocess verify: %s: FAILED: %s\n", plan_path.c_str(),
                 violation.c_str());
    return 1;
  }
  std::printf("%s: OK (P=%d, C=%d, %d vertices, %lld edges, every index checked)\n",
              plan_path.c_str(), plan.partitions, plan.chunks, plan.num_nodes,
              static_cast<long long>(plan.num_dataset_edges));
  return 0;
}

}  // namespace sluice
