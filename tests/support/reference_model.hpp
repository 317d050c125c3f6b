// A plain full-graph training reference in double precision, written only from
// docs/model-math.md and the Dataset (no plan, no chunks, no backend). Chunked runs of
// sluice-train must match it up to float rounding; compare losses and final parameters.
//
// Conventions (all from docs/model-math.md):
// - Vertices are the dataset's ids (no renumbering); every random key uses them.
// - N(v) = the dataset in-neighbors of v with self-loops skipped, in dataset order;
//   N+(v) = v first, then N(v). A GAT entry's position k (for attention dropout) is its position
//   in N+(v): 0 = self, 1.. = N(v) in dataset order.
// - Feature dropout on the input of every layer (including layer 0), attention dropout on GAT
//   coefficients; epochs count from 0 in the keys. Rates are compared as float, like the kernels.
// - Loss = (1/|train|) * sum over train vertices with a label (>= 0) of the cross-entropy,
//   |train| = dataset.train.size(). The loss of epoch t is that of epoch t's forward pass
//   (before its update). Weight decay is added to the gradient of every parameter.
//
// Parameters, in this order for each layer l = 0..L-1 (flat, row-major):
//   "layer{l}.W"        GCN: d_l x d_{l+1}; SAGE: 2 d_l x d_{l+1} (= [W_self; W_neigh]);
//                       GAT: d_l x K*F
//   "layer{l}.b"        d_{l+1} (GAT hidden: K*F, GAT output: F = classes)
//   "layer{l}.att_src"  GAT only: K*F
//   "layer{l}.att_dst"  GAT only: K*F
// Initialization: element i of parameter q of layer l is (2 u(3, l, q, i) - 1) *
// sqrt(6 / (fan_in + fan_out)) with q = 0 for W (fan_in = rows of W, i.e. 2 d_l for SAGE,
// fan_out = columns), q = 1 att_src, q = 2 att_dst (fan_in = F, fan_out = 1); biases 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dataset.hpp"

namespace sluice::test {

struct ReferenceConfig {
  std::string model = "gcn";  // gcn | sage | gat
  int layers = 2;
  int hidden = 16;
  int heads = 1;         // GAT hidden layers
  int output_heads = 1;  // GAT output layer (heads averaged)
  double dropout = 0;
  double attention_dropout = -1;  // -1: same as dropout
  std::uint64_t seed = 0;
  double lr = 0.01;
  double weight_decay = 0;
  std::string optimizer = "sgd";  // sgd | adam
};

struct ReferenceParameters {
  std::vector<std::vector<double>> tensors;
  std::vector<std::string> names;  // "layer0.W", "layer0.b", "layer0.att_src", ...
  // The tensor with this name; throws if there is none.
  const std::vector<double>& get(const std::string& name) const;
  std::vector<double>& get(const std::string& name);
};

struct ReferenceResult {
  std::vector<double> losses;  // one per epoch, from that epoch's forward pass
  ReferenceParameters final_parameters;
};

struct ReferenceAccuracy {
  double train = 0, valid = 0, test = 0;  // fraction correct over each split's labeled vertices
};

// The initial parameters (docs/model-math.md, Initialization).
ReferenceParameters init_reference_parameters(const Dataset& dataset,
                                              const ReferenceConfig& config);

// E epochs of full-graph training from the initial parameters.
ReferenceResult train_reference(const Dataset& dataset, const ReferenceConfig& config, int epochs);

// One forward and backward pass with the dropout of epoch `epoch` (training = true) or none
// (training = false): the loss and the gradient of every parameter (without weight decay).
struct ReferenceGradients {
  double loss = 0;
  ReferenceParameters gradients;  // same names and shapes as the parameters
};
ReferenceGradients reference_gradients(const Dataset& dataset, const ReferenceConfig& config,
                                       const ReferenceParameters& parameters, std::int64_t epoch,
                                       bool training = true);
// The loss only (same pass as above, no backward).
double reference_loss(const Dataset& dataset, const ReferenceConfig& config,
                      const ReferenceParameters& parameters, std::int64_t epoch,
                      bool training = true);

// Logits of every vertex without dropout (num_nodes x classes, row-major).
std::vector<double> reference_logits(const Dataset& dataset, const ReferenceConfig& config,
                                     const ReferenceParameters& parameters);
// Accuracy (argmax, ties to the lowest class) on train / valid / test, no dropout.
ReferenceAccuracy evaluate_reference(const Dataset& dataset, const ReferenceConfig& config,
                                     const ReferenceParameters& parameters);

}  // namespace sluice::test
