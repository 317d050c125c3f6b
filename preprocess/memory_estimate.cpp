// Implementation of preprocess/memory_estimate.hpp.
#include "preprocess/memory_estimate.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace sluice {
namespace {

// Parameters of layer l (input width -> output width), weights and biases.
std::int64_t layer_parameters(const ModelShape& shape, int l) {
  const std::int64_t in = layer_width(shape, l);
  const std::int64_t out = layer_width(shape, l + 1);
  if (shape.model == "sage") return 2 * in * out + out;             // self and neighbor weights
  if (shape.model == "gin") return in * out + out * out + 2 * out;  // 2-layer MLP
  if (shape.model == "gat") return in * out + 3 * out;  // W, attention vectors a_l a_r, bias
  return in * out + out;                                // gcn
}

}  // namespace

std::int64_t layer_width(const ModelShape& shape, int l) {
  if (l == 0) return shape.in_dim;
  if (l == shape.layers) return shape.classes;
  return shape.model == "gat" ? shape.hidden * std::max(1, shape.heads) : shape.hidden;
}

std::int64_t estimate_gpu_bytes(const Plan& plan, int partition, const ModelShape& shape) {
  SLUICE_INPUT_CHECK(
      shape.model == "gcn" || shape.model == "sage" || shape.model == "gat" || shape.model == "gin",
      "unknown model '", shape.model, "' (expected gcn, sage, gat or gin)");
  SLUICE_INPUT_CHECK(shape.layers >= 1, "a model needs at least one layer");
  SLUICE_EXPECTS(partition >= 0 && partition < plan.partitions, "partition ", partition);
  std::int64_t width = 1;
  for (int l = 0; l <= shape.layers; ++l) width = std::max(width, layer_width(shape, l));
  width = (width + 3) / 4 * 4;  // the schedule pads rows to 16 bytes
  const std::int64_t merged_rows =
      std::int64_t(plan.transition_rows[partition]) + plan.remote_rows[partition];
  std::int64_t max_dst = 0, max_entries = 0;
  for (int c = 0; c < plan.chunks; ++c) {
    const ChunkPlan& chunk = plan.chunk(c, partition);
    max_dst = std::max<std::int64_t>(max_dst, chunk.num_dst());
    max_entries = std::max<std::int64_t>(max_entries, chunk.num_entries());
  }
  constexpr std::int64_t kFloat = 4;
  std::int64_t bytes = merged_rows * width * kFloat * 2;
  if (shape.model == "gat") {
    const std::int64_t heads = std::max(1, shape.heads);
    bytes += merged_rows * width * kFloat * 2;              // transformed rows W h and gradients
    bytes += max_entries * heads * kFloat * 3;              // edge scores, softmax, gradients
    bytes += (merged_rows + max_dst) * heads * kFloat * 2;  // el, er and their gradients
  }
  // GCN's last layer transforms first when it narrows (train/model.hpp): its transformed rows
  // and their gradients, classes wide.
  if (shape.model == "gcn" && shape.classes < layer_width(shape, shape.layers - 1))
    bytes += merged_rows * ((std::int64_t(shape.classes) + 3) / 4 * 4) * kFloat * 2;
  bytes += (max_dst + 1) * 8 + max_entries * (4 + 4);  // chunk CSR: indptr, columns, values
  bytes += max_entries * kFloat;          // entry values permuted for the transposed SpMM (scratch)
  bytes += max_dst * width * kFloat * 4;  // aggregation/output rows + gradients
  std::int64_t parameters = 0;
  for (int l = 0; l < shape.layers; ++l) parameters += layer_parameters(shape, l);
  bytes += parameters * kFloat * 4;  // weights, gradients, Adam m and v
  return bytes + bytes / 10;
}

std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const ModelShape& shape) {
  std::int64_t peak = 0;
  for (int p = 0; p < plan.partitions; ++p)
    peak = std::max(peak, estimate_gpu_bytes(plan, p, shape));
  return peak;
}

}  // namespace sluice
