// Implementation of train/config.hpp.
#include "train/config.hpp"
#include "train/layout/buffer_layout.hpp"

#include <boost/program_options.hpp>
#include <cmath>
#include <iostream>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/option_checks.hpp"
#include "common/paths.hpp"
#include "kernels/ops.hpp"
#include "train/layout/model_layers.hpp"

namespace sluice {
namespace po = boost::program_options;

void validate_config(const TrainConfig& c) {
  SLUICE_INPUT_CHECK(
      c.model == "gcn" || c.model == "sage" || c.model == "graphsage" || c.model == "gat",
      "unknown --model '", c.model, "' (expected gcn, sage or gat)");
  SLUICE_INPUT_CHECK(c.layers >= 1, "--layers must be at least 1 (got ", c.layers, ")");
  SLUICE_INPUT_CHECK(c.layers <= 64, "--layers ", c.layers, " is unreasonably deep (max 64)");
  SLUICE_INPUT_CHECK(c.hidden >= 1, "--hidden must be at least 1 (got ", c.hidden, ")");
  SLUICE_INPUT_CHECK(c.heads >= 1, "--heads must be at least 1 (got ", c.heads, ")");
  SLUICE_INPUT_CHECK(c.output_heads >= 1, "--output-heads must be at least 1 (got ", c.output_heads,
                     ")");
  SLUICE_INPUT_CHECK(c.epochs >= 0, "--epochs must be >= 0 (got ", c.epochs, ")");
  SLUICE_INPUT_CHECK(c.optimizer == "adam" || c.optimizer == "sgd", "unknown --optimizer '",
                     c.optimizer, "' (expected adam or sgd)");
  SLUICE_INPUT_CHECK(std::isfinite(c.lr) && c.lr > 0, "--lr must be > 0 (got ", c.lr, ")");
  SLUICE_INPUT_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0,
                     "--weight-decay must be >= 0 (got ", c.weight_decay, ")");
  SLUICE_INPUT_CHECK(c.dropout >= 0 && c.dropout < 1, "--dropout must be in [0, 1) (got ",
                     c.dropout, ")");
  SLUICE_INPUT_CHECK(c.attention_dropout < 1 && std::isfinite(c.attention_dropout),
                     "--attention-dropout must be in [0, 1) (got ", c.attention_dropout, ")");
  SLUICE_INPUT_CHECK(c.feature_norm == "none" || c.feature_norm == "row",
                     "unknown --feature-norm '", c.feature_norm, "' (expected none or row)");
  SLUICE_INPUT_CHECK(c.eval_every >= 1, "--eval-every must be at least 1 (got ", c.eval_every, ")");
  SLUICE_INPUT_CHECK(c.comm == "baseline" || c.comm == "p2p" || c.comm == "p2p+reuse",
                     "unknown --comm '", c.comm, "' (expected baseline, p2p or p2p+reuse)");
  SLUICE_INPUT_CHECK(
      c.intermediates == "auto" || c.intermediates == "cache" || c.intermediates == "recompute",
      "unknown --intermediates '", c.intermediates, "' (expected auto, cache or recompute)");
  SLUICE_INPUT_CHECK(c.input_rows == "auto" || c.input_rows == "keep" || c.input_rows == "reload",
                     "unknown --input-rows '", c.input_rows, "' (expected auto, keep or reload)");
  parse_host_precision(c.host_precision, "--host-precision");
  SLUICE_INPUT_CHECK(c.vertex_data == "auto" || c.vertex_data == "host", "unknown --vertex-data '",
                     c.vertex_data, "' (expected auto or host)");
  SLUICE_INPUT_CHECK(c.evaluation_cache == "auto" || c.evaluation_cache == "off",
                     "unknown --evaluation-cache '", c.evaluation_cache,
                     "' (expected auto or off)");
  SLUICE_INPUT_CHECK(c.evaluation_outputs == "auto" || c.evaluation_outputs == "host",
                     "unknown --evaluation-outputs '", c.evaluation_outputs,
                     "' (expected auto or host)");
  SLUICE_INPUT_CHECK(c.evaluation_csrs == "auto" || c.evaluation_csrs == "each-pass",
                     "unknown --evaluation-csrs '", c.evaluation_csrs,
                     "' (expected auto or each-pass)");
  SLUICE_INPUT_CHECK(c.layer_outputs == "auto" || c.layer_outputs == "recompute",
                     "unknown --layer-outputs '", c.layer_outputs,
                     "' (expected auto or recompute)");
  SLUICE_INPUT_CHECK(
      c.last_layer_rows == "auto" || c.last_layer_rows == "loss" || c.last_layer_rows == "all",
      "unknown --last-layer-rows '", c.last_layer_rows, "' (expected auto, loss or all)");
  SLUICE_INPUT_CHECK(c.remote_features == "auto" || c.remote_features == "pull",
                     "unknown --remote-features '", c.remote_features, "' (expected auto or pull)");
  SLUICE_INPUT_CHECK(
      c.gat_layer_zero == "auto" || c.gat_layer_zero == "transform" || c.gat_layer_zero == "attend",
      "unknown --gat-layer-zero '", c.gat_layer_zero, "' (expected auto, transform or attend)");
  parse_layer_zero_order(c.layer_zero_order, c.model);  // throws for a value the model lacks
  SLUICE_INPUT_CHECK(!(c.gat_layer_zero == "attend" && c.input_rows == "reload"),
                     "--gat-layer-zero attend reads the input rows of every chunk: it needs them "
                     "kept (--input-rows auto or keep, not reload)");
  SLUICE_INPUT_CHECK(c.device == "cpu" || c.device == "cuda", "unknown --device '", c.device,
                     "' (expected cpu or cuda)");
  SLUICE_INPUT_CHECK(c.threads >= 0, "--threads must be >= 0 (got ", c.threads, ")");
  SLUICE_INPUT_CHECK(c.gpus >= 1, "--gpus must be at least 1 (got ", c.gpus, ")");
  SLUICE_INPUT_CHECK(c.gpu_memory >= 0, "--gpu-memory must be >= 0");
  SLUICE_INPUT_CHECK(c.checkpoint_every >= 0, "--checkpoint-every must be >= 0 (got ",
                     c.checkpoint_every, ")");
  SLUICE_INPUT_CHECK(!(c.checkpoint_every > 0 && c.checkpoint.empty()),
                     "--checkpoint-every needs --checkpoint FILE");
  SLUICE_INPUT_CHECK(!(c.resume && c.checkpoint.empty()), "--resume needs --checkpoint FILE");
  SLUICE_INPUT_CHECK(c.device != "cuda" || cuda_backend_available(),
                     "--device cuda: this build of sluice-train has no CUDA backend or no GPU "
                     "is visible (use --device cpu, or build with -DSLUICE_CUDA=ON on a GPU "
                     "machine)");
  parse_peer_access(c.peer_access, "--peer-access");
  SLUICE_INPUT_CHECK(
      !(c.device == "cpu" && (c.gpus != 1 || c.tf32 || c.peer_access != "auto" || c.op_times)),
      "--gpus, --tf32, --peer-access and --op-times apply to --device cuda only");
}

std::optional<TrainConfig> parse_train_args(int argc, const char* const* argv) {
  TrainConfig c;
  std::string gpu_memory = "0";
  po::options_description io("Input and output");
  io.add_options()("help,h", "print this help and exit")(
      "list-devices", "print the usable devices (cpu, and cuda when a GPU is usable) and exit")(
      "dataset", po::value(&c.dataset)->required(), "dataset file (dataset.h5, required)")(
      "plan", po::value(&c.plan)->required(),
      "training plan built from that dataset by 'sluice-preprocess partition' (required)")(
      "metrics", po::value(&c.metrics), "write one JSON object per epoch to FILE (JSON lines)")(
      "report", po::value(&c.report), "write the final JSON report to FILE")(
      "predictions", po::value(&c.predictions),
      "write the best-valid model's predictions to FILE (CSV original_id,prediction,label)")(
      "model-out", po::value(&c.model_out),
      "write the best-valid model's parameters to FILE (HDF5, /parameters/layer{l}.W ...)")(
      "embeddings-out", po::value(&c.embeddings_out),
      "write the best-valid model's last-layer inputs and logits of every vertex to FILE (HDF5 "
      "/hidden, /logits, /original_ids)")(
      "trace", po::value(&c.trace),
      "write a timeline of every device lane's phases per batch to FILE (Chrome trace JSON: "
      "open in Perfetto or chrome://tracing); with --op-times also every operation")(
      "checkpoint", po::value(&c.checkpoint),
      "HDF5 checkpoint FILE (model, optimizer state, epoch, best model)")(
      "checkpoint-every", po::value(&c.checkpoint_every)->default_value(c.checkpoint_every),
      "write the checkpoint every K epochs (0: only after the last epoch)")(
      "resume", po::bool_switch(&c.resume), "continue training from --checkpoint");
  po::options_description model("Model");
  model.add_options()("model", po::value(&c.model)->default_value(c.model), "gcn | sage | gat")(
      "layers", po::value(&c.layers)->default_value(c.layers), "number of layers")(
      "hidden", po::value(&c.hidden)->default_value(c.hidden),
      "hidden width (GAT: width per head)")("heads", po::value(&c.heads)->default_value(c.heads),
                                            "GAT: heads of hidden layers")(
      "output-heads", po::value(&c.output_heads)->default_value(c.output_heads),
      "GAT: heads of the output layer (averaged)");
  po::options_description optim("Optimization");
  optim.add_options()("epochs", po::value(&c.epochs)->default_value(c.epochs),
                      "training epochs (full-graph steps)")(
      "optimizer", po::value(&c.optimizer)->default_value(c.optimizer), "adam | sgd")(
      "lr", po::value(&c.lr)->default_value(c.lr, format_number(c.lr)), "learning rate")(
      "weight-decay",
      po::value(&c.weight_decay)->default_value(c.weight_decay, format_number(c.weight_decay)),
      "L2 weight decay added to every parameter's gradient")(
      "dropout", po::value(&c.dropout)->default_value(c.dropout, format_number(c.dropout)),
      "dropout rate on the input of every layer, in [0, 1)")(
      "attention-dropout",
      po::value(&c.attention_dropout)
          ->default_value(c.attention_dropout, format_number(c.attention_dropout)),
      "GAT attention dropout rate (negative: same as --dropout)")(
      "seed", po::value(&c.seed)->default_value(c.seed), "seed of initialization and dropout")(
      "feature-norm", po::value(&c.feature_norm)->default_value(c.feature_norm),
      "none | row: divide each input feature row by its L1 norm (Kipf & Welling's GCN "
      "preprocessing of bag-of-words features)")(
      "eval-every", po::value(&c.eval_every)->default_value(c.eval_every),
      "evaluate train/valid/test accuracy every K epochs (and after the last)");
  po::options_description sched("Schedule and device");
  sched.add_options()("comm", po::value(&c.comm)->default_value(c.comm),
                      "transfer scheme: baseline | p2p | p2p+reuse")(
      "intermediates", po::value(&c.intermediates)->default_value(c.intermediates),
      "what the backward pass takes from the forward instead of recomputing it (GCN/SAGE the "
      "aggregations, GAT the head outputs below the last layer): auto (cache where host memory "
      "allows) | cache | recompute")(
      "input-rows", po::value(&c.input_rows)->default_value(c.input_rows),
      "input rows of the layers transformed on arrival (GAT): keep (on the device) | reload "
      "(leaving rows read again from host memory for the weight gradient: less device memory, "
      "more host-link traffic) | auto (reload only when --gpu-memory cannot hold the kept "
      "rows)")("host-precision", po::value(&c.host_precision)->default_value(c.host_precision),
               "element type of vertex data in host memory and on the host link (features, "
               "layer outputs, cached aggregations, flushed gradients): fp32 | bf16 (half the "
               "host memory and link bytes; devices compute in fp32, rows are rounded to "
               "nearest even when they go back to host memory)")(
      "vertex-data", po::value(&c.vertex_data)->default_value(c.vertex_data),
      "where the vertex matrices live (features, layer outputs, cached aggregations, "
      "gradients): auto (on GPUs, each GPU holds its partition's rows of them in its memory "
      "while they fit beside the chunk constants and buffers within --gpu-memory, the most-read "
      "first; the rest, and all of them under --comm baseline with several partitions, in host "
      "memory) | host (all in host memory, streamed every epoch)")(
      "evaluation-cache", po::value(&c.evaluation_cache)->default_value(c.evaluation_cache),
      "auto (GCN, SAGE: the first evaluation keeps layer 0's aggregation of each partition's "
      "features on its device where it fits on every device, else, with fp32 host data, in host "
      "memory where there is room, and later evaluations start from it) | off")(
      "evaluation-outputs", po::value(&c.evaluation_outputs)->default_value(c.evaluation_outputs),
      "auto (an evaluation keeps the layer outputs its next pass reads, each GPU its partition's "
      "rows, in GPU buffers that only training uses, where one holds them, instead of storing and "
      "loading them over the host link; same results) | host")(
      "evaluation-csrs", po::value(&c.evaluation_csrs)->default_value(c.evaluation_csrs),
      "auto (an evaluation of several layers copies each chunk structure the GPU memory budget "
      "leaves in host memory once, into GPU buffers only training uses (what its layer outputs "
      "leave) where it fits, and its later passes read it there; same results) | each-pass")(
      "layer-outputs", po::value(&c.layer_outputs)->default_value(c.layer_outputs),
      "auto (GCN, SAGE: a ReLU layer whose outputs the next layer transforms keeps them on the "
      "device for its backward pass where they fit after everything else, instead of computing "
      "them again; same results) | recompute")(
      "remote-features", po::value(&c.remote_features)->default_value(c.remote_features),
      "auto (GCN, SAGE, and GAT attending over its input rows, on several GPUs: each GPU keeps "
      "its own copy of the feature rows it reads from other partitions where it fits after "
      "everything else, instead of pulling them from their owners in every pass that reads the "
      "features; same results) | pull")(
      "last-layer-rows", po::value(&c.last_layer_rows)->default_value(c.last_layer_rows),
      "auto (loss where under --gpu-memory every chunk structure fits in GPU memory with its "
      "CSRs, beside the overlap buffers or without them where the run gives them up to hold "
      "every vertex matrix; else all) | loss (the last layer's training "
      "passes compute only the rows of train vertices, the rows the loss reads, through a "
      "second CSR per chunk holding their entries; the same losses and weights, for that CSR's "
      "memory) | all (every row)")(
      "gat-layer-zero", po::value(&c.gat_layer_zero)->default_value(c.gat_layer_zero),
      "auto (GAT on one chunk per partition, two layers or more, input rows kept: layer 0 "
      "attends over its input rows and transforms each head's weighted sum where its rows are "
      "narrower than its heads together and that takes no more GPU memory; the same model up to "
      "rounding) | "
      "transform (Z = X W, then attention) | attend")(
      "layer-zero-order", po::value(&c.layer_zero_order)->default_value(c.layer_zero_order),
      "auto (GCN, SAGE below the last layer, on the GPU: layer 0 multiplies its input rows by its "
      "weights before its sparse product where that makes the rows at least four times narrower; "
      "the CPU backend aggregates first; the same model up to rounding) | aggregate (first) | "
      "transform (first)")("device", po::value(&c.device)->default_value(c.device), "cpu | cuda")(
      "threads", po::value(&c.threads)->default_value(c.threads),
      "CPU threads (0: OpenMP default)")("gpus", po::value(&c.gpus)->default_value(c.gpus),
                                         "CUDA: physical GPUs to use")(
      "gpu-memory", po::value(&gpu_memory)->default_value(gpu_memory),
      "CUDA: memory budget per device in bytes (suffixes K, M, G; 0: all)")(
      "tf32", po::bool_switch(&c.tf32), "CUDA: allow TF32 tensor-core GEMMs")(
      "peer-access", po::value(&c.peer_access)->default_value(c.peer_access),
      "CUDA: auto (GPUs read and add to each other's memory directly where they can) | off "
      "(rows between GPUs are staged through host memory: for machines whose peer-to-peer "
      "path is broken)")(
      "op-times", po::bool_switch(&c.op_times),
      "CUDA: log every operation's device time, summed per name over the run (the first "
      "training step left out as warm-up); adds a pair of timing events per operation; with "
      "--trace also writes each operation's range into the timeline")(
      "phase-timing", po::bool_switch(&c.phase_timing),
      "block the host at every phase boundary (debugging; per-phase times come from device "
      "timers either way)")(
      "no-overlap", po::bool_switch(&c.no_overlap),
      "do not overlap transfers with compute (no prefetch, stores and flushes in line)")(
      "quiet,q", po::bool_switch(&c.quiet), "log errors only")(
      "verbose,v", po::bool_switch(&c.verbose),
      "also log each stage's time and memory, every epoch, and other details")(
      "no-progress", "do not draw the progress line");
  po::options_description all(
      "sluice-train: full-graph GNN training over a chunked plan\n\n"
      "Usage: sluice-train --dataset FILE --plan FILE [options]");
  all.add(io).add(model).add(optim).add(sched);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).run(), vm);
    if (vm.count("help")) {
      std::cout << all << "\n";
      return std::nullopt;
    }
    if (vm.count("list-devices")) {
      std::cout << "cpu\n";
      if (cuda_backend_available()) std::cout << "cuda\n";
      return std::nullopt;
    }
    po::notify(vm);
    check_integer_options(vm, {{"layers", 1},
                               {"hidden", 1},
                               {"heads", 1},
                               {"output-heads", 1},
                               {"eval-every", 1},
                               {"gpus", 1}});
  } catch (const po::error& e) {
    throw InputError(cat(e.what(), " (see --help)"));
  }
  c.gpu_memory = parse_bytes(gpu_memory, "--gpu-memory");
  if (vm.count("no-progress")) c.progress = false;
  validate_config(c);
  return c;
}

void check_train_outputs(const TrainConfig& c) {
  check_outputs_do_not_clobber({{"--dataset", c.dataset},
                                {"--plan", c.plan},
                                {"--checkpoint", c.resume ? c.checkpoint : ""}},
                               {{"--metrics", c.metrics},
                                {"--report", c.report},
                                {"--predictions", c.predictions},
                                {"--model-out", c.model_out},
                                {"--embeddings-out", c.embeddings_out},
                                {"--trace", c.trace},
                                {"--checkpoint", c.checkpoint}});
}

std::string describe_config(const TrainConfig& c) {
  std::ostringstream out;
  out << "dataset=" << c.dataset << " plan=" << c.plan << " model=" << c.model
      << " layers=" << c.layers << " hidden=" << c.hidden;
  if (c.model == "gat") out << " heads=" << c.heads << " output_heads=" << c.output_heads;
  out << " epochs=" << c.epochs << " optimizer=" << c.optimizer << " lr=" << c.lr
      << " weight_decay=" << c.weight_decay << " dropout=" << c.dropout;
  if (c.model == "gat") out << " attention_dropout=" << c.effective_attention_dropout();
  out << " seed=" << c.seed << " feature_norm=" << c.feature_norm << " eval_every=" << c.eval_every
      << " comm=" << c.comm << " intermediates=" << c.intermediates
      << " input_rows=" << c.input_rows << " host_precision=" << c.host_precision
      << " vertex_data=" << c.vertex_data << " evaluation_cache=" << c.evaluation_cache
      << " evaluation_outputs=" << c.evaluation_outputs << " evaluation_csrs=" << c.evaluation_csrs
      << " layer_outputs=" << c.layer_outputs << " remote_features=" << c.remote_features
      << " last_layer_rows=" << c.last_layer_rows << " gat_layer_zero=" << c.gat_layer_zero
      << " layer_zero_order=" << c.layer_zero_order << " device=" << c.device
      << " threads=" << c.threads;
  if (c.device == "cuda")
    out << " gpus=" << c.gpus << " gpu_memory=" << c.gpu_memory << " tf32=" << c.tf32
        << " peer_access=" << c.peer_access << " op_times=" << c.op_times;
  if (c.phase_timing) out << " phase_timing=1";
  if (c.no_overlap) out << " overlap=0";
  if (!c.checkpoint.empty())
    out << " checkpoint=" << c.checkpoint << " checkpoint_every=" << c.checkpoint_every
        << " resume=" << c.resume;
  return out.str();
}

}  // namespace sluice
