// Estimated peak GPU memory of one partition's GPU when training a model with a plan; used by
// `sluice-preprocess partition --gpu-memory` to choose C, and by the trainer to warn early.
// The formula is documented in docs/formats.md ("GPU memory estimate").
#pragma once

#include <cstdint>
#include <string>

#include "formats/plan.hpp"

namespace sluice {

struct ModelShape {
  std::string model = "gcn";  // gcn | sage | gat | gin
  int layers = 2;
  std::int64_t in_dim = 0;    // input feature width
  std::int64_t hidden = 256;  // hidden width (per head for GAT)
  std::int64_t classes = 1;   // output width
  int heads = 1;              // GAT attention heads of hidden layers
};

// Width of layer l's input (l = 0..layers-1) and of the output (l = layers).
std::int64_t layer_width(const ModelShape& shape, int l);

// Bytes: merged buffer (transition + remote rows) x widest layer x 4 x 2 (rows + gradients);
// GAT adds per-head transformed rows (x 2), 3 per-edge-per-head floats (score, softmax,
// gradient) and per-head source/destination scores with their gradients (merged + chunk rows,
// x 2); chunk CSR (8 B per indptr entry, 4 B column + 4 B value per entry) plus one float per
// entry of transposed-SpMM scratch; 4 chunk-row
// blocks of the widest layer (aggregation, output and their gradients); weights, gradients and
// Adam's two moments; plus 10%.
std::int64_t estimate_gpu_bytes(const Plan& plan, int partition, const ModelShape& shape);

// The maximum of estimate_gpu_bytes over all partitions.
std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const ModelShape& shape);

}  // namespace sluice
