// The one configuration of sluice-train (TrainConfig, with defaults) and its command-line
// parser (Boost.Program_options). Library users (tests) fill TrainConfig directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

struct TrainConfig {
  // Inputs and outputs (used by the command-line program; the library API takes the data).
  std::string dataset;
  std::string plan;
  std::string metrics;       // JSON lines, one object per epoch ("" = none)
  std::string report;        // final JSON object ("" = none)
  std::string predictions;   // CSV original_id,prediction,label of the best-valid model
  std::string model_out;     // HDF5 file for the best-valid parameters ("" = none)
  std::string trace;         // Chrome trace JSON of every device lane's phases ("" = none)
  std::string checkpoint;    // HDF5 checkpoint file ("" = none)
  int checkpoint_every = 0;  // epochs between checkpoints (0 = only at the end when set)
  bool resume = false;       // continue from --checkpoint
  // HDF5 file for the best-valid model's last-layer inputs and logits ("" = none).
  std::string embeddings_out;

  // Model.
  std::string model = "gcn";  // gcn | sage | gat
  int layers = 2;
  std::int64_t hidden = 16;
  int heads = 8;         // GAT hidden-layer heads
  int output_heads = 1;  // GAT output-layer heads (averaged)

  // Optimization.
  int epochs = 200;
  std::string optimizer = "adam";  // adam | sgd
  double lr = 0.01;
  double weight_decay = 5e-4;
  double dropout = 0.5;
  double attention_dropout = -1;  // GAT; < 0 means "same as dropout"
  std::uint64_t seed = 0;
  std::string feature_norm = "none";  // none | row (divide each feature row by its L1 norm)
  int eval_every = 1;  // evaluate (forward only) every k epochs; the last epoch always

  // Schedule.
  std::string comm = "p2p+reuse";      // baseline | p2p | p2p+reuse
  std::string intermediates = "auto";  // auto | cache | recompute
  // Input rows of the layers transformed on arrival: keep them on the device, or reload the
  // leaving ones from host memory for the weight gradient (ScheduleOptions::reload_inputs);
  // auto: reload only when --gpu-memory is set and the plan's estimate with kept rows exceeds it.
  std::string input_rows = "auto";  // auto | keep | reload
  // Element type of vertex data in host memory and on the host link (features, layer outputs,
  // cached aggregations, flushed gradients): fp32 | bf16 (ScheduleOptions::host_precision).
  std::string host_precision = "fp32";
  // Where the vertex matrices live (ScheduleOptions::vertex_data): auto (one GPU: in its memory
  // while they fit the budget, the rest in host memory) | host (all in host memory).
  std::string vertex_data = "auto";
  // Whether evaluations keep layer 0's aggregation of the features
  // (ScheduleOptions::evaluation_cache): auto (on the devices where it fits, else in host
  // memory) | off.
  std::string evaluation_cache = "auto";
  // Where evaluations keep the layer outputs their next pass reads
  // (ScheduleOptions::evaluation_outputs): auto (in GPU buffers only training uses, where they
  // fit) | host.
  std::string evaluation_outputs = "auto";
  // Whether evaluations copy host-resident chunk CSRs once for all their passes
  // (ScheduleOptions::evaluation_csrs): auto (into GPU buffers only training uses, less the
  // layer outputs kept there, where they fit) | each-pass.
  std::string evaluation_csrs = "auto";
  // Whether training keeps layer outputs for the backward pass (ScheduleOptions::layer_outputs):
  // auto (where they fit) | recompute.
  std::string layer_outputs = "auto";
  // Where a GPU gets other partitions' feature rows that layer 0 reads
  // (ScheduleOptions::remote_features): auto (its own copy, where it fits) | pull.
  std::string remote_features = "auto";
  // How GAT's layer 0 orders its transform and attention (ScheduleOptions::gat_layer_zero):
  // auto (attend over its input rows first where that reads fewer floats per entry and takes no
  // more GPU memory, on one partition and one chunk) | transform (first) | attend.
  std::string gat_layer_zero = "auto";
  // Which rows the last layer's training passes compute (ScheduleOptions::last_layer_rows):
  // auto (loss where every chunk structure fits in GPU memory with its CSRs under --gpu-memory,
  // beside the overlap buffers or without them where the run gives them up) |
  // loss (the rows of the loss, through a second CSR per chunk) | all.
  std::string last_layer_rows = "auto";
  // Whether GCN's and SAGE's layer 0 aggregates or multiplies first (LayerZeroOrder): auto
  // (on the GPU, transform first where that narrows its rows at least fourfold; the CPU backend
  // aggregates first: layer_zero_order()) | aggregate | transform.
  std::string layer_zero_order = "auto";

  // Device.
  std::string device = "cpu";  // cpu | cuda
  int threads = 0;             // CPU threads (0 = OpenMP default)
  int gpus = 1;
  std::int64_t gpu_memory = 0;  // bytes per device (0 = all)
  bool tf32 = false;
  std::string peer_access = "auto";  // auto | off (CUDA; BackendOptions::peer_access)
  bool op_times = false;             // CUDA: per-operation times (BackendOptions::op_times)
  bool phase_timing = false;         // block the host at phase boundaries
  bool no_overlap = false;           // no transfer/compute overlap (ScheduleOptions::overlap)

  // Output.
  bool quiet = false;
  bool verbose = false;
  bool progress = true;

  double effective_attention_dropout() const {
    return attention_dropout < 0 ? dropout : attention_dropout;
  }
};

// Checks every option that can be checked without data (ranges, names, combinations);
// throws InputError with a message naming the option.
void validate_config(const TrainConfig& config);

// Parses argv. Returns nullopt after printing --help. Throws InputError on unknown options,
// unparsable values or inconsistent combinations.
std::optional<TrainConfig> parse_train_args(int argc, const char* const* argv);

// Throws InputError when an output file (--metrics, --report, --predictions, --model-out,
// --embeddings-out, --trace, --checkpoint) is an input (--dataset, --plan, the --checkpoint resumed
// from) or another output; see check_outputs_do_not_clobber.
void check_train_outputs(const TrainConfig& config);

// "key=value" lines describing the resolved configuration (logged at start).
std::string describe_config(const TrainConfig& config);

}  // namespace sluice
