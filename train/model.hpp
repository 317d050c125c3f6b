// Model shapes and parameters (docs/model-math.md): layer widths for GCN, GraphSAGE and GAT,
// the flat parameter layout shared by every device, parameter names ("layer{l}.W", ...) that
// match the test reference, and the counter-based Glorot initialization.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "train/layout/model_layers.hpp"

namespace sluice {

ModelKind parse_model_kind(const std::string& name);  // gcn | sage | gat (InputError otherwise)
std::string model_kind_name(ModelKind kind);

// One named parameter tensor inside the flat parameter array.
struct ParameterInfo {
  std::string name;  // "layer{l}.W", "layer{l}.b", "layer{l}.att_src", "layer{l}.att_dst"
  int layer = 0;
  int q = 0;  // initialization index: 0 = W, 1 = att_src, 2 = att_dst, -1 = bias (zeros)
  std::int64_t offset = 0;
  std::int64_t rows = 0, cols = 0;  // rows x cols (vectors: 1 x size)
  double fan_in = 0, fan_out = 0;
  std::int64_t size() const { return rows * cols; }
};

struct LayerSpec {
  int index = 0;
  bool last = false;
  std::int64_t in_width = 0;   // d_l
  std::int64_t out_width = 0;  // d_{l+1} (width of H^{l+1} or of the logits)
  // GCN: d_l; SAGE: 2 d_l (aggregation output A^l, the cached intermediate). GAT and layers
  // that transform first: 0.
  std::int64_t aggregate_width = 0;
  int heads = 1;                // GAT: K
  std::int64_t head_width = 0;  // GAT: F
  // GAT: K * F (width of Z = X W); layers that transform first: GCN d_{l+1}, SAGE 2 d_{l+1}
  // (T = [X W_self | X W_neigh]).
  std::int64_t transform_width = 0;
  // The last layer of GCN or SAGE when multiplying first narrows its sparse product
  // (d_{l+1} < d_l) and widens none of its rows (SAGE: 2 d_{l+1} <= d_l): GCN Z = Â (X W) + b
  // instead of (Â X) W + b, SAGE Z_v = X_v W_self + mean_u (X_u W_neigh) + b, so its sparse
  // products run on d_{l+1}-wide rows (docs/model-math.md). Like GAT, the layer caches nothing
  // and its rows are transformed once by their owner (train/schedule_impl.hpp).
  bool transform_first = false;
  Activation activation = Activation::kNone;
  // Offsets of the layer's tensors in the flat parameter array (-1 when absent).
  std::int64_t w_offset = -1, w_rows = 0, w_cols = 0;
  std::int64_t b_offset = -1, b_size = 0;
  std::int64_t att_src_offset = -1, att_dst_offset = -1, att_size = 0;
};

struct ModelSpec {
  ModelKind kind = ModelKind::kGcn;
  std::vector<LayerSpec> layers;
  std::vector<ParameterInfo> parameters;
  std::int64_t num_parameters = 0;

  int num_layers() const { return static_cast<int>(layers.size()); }
  std::int64_t max_in_width() const;
  std::int64_t max_out_width() const;
  std::int64_t max_aggregate_width() const;
  std::int64_t max_transform_width() const;
  int max_heads() const;
};

// The layers and parameters of the model `shape` describes (the widths by model_layers(), so
// that the schedule's buffers and the memory estimate follow the same rules). Throws InputError
// for an unknown model and for shapes that make no sense (layers < 1, hidden < 1, ...).
ModelSpec make_model(const ModelShape& shape);

// Glorot-uniform weights keyed by (seed, 3, layer, q, element); biases 0.
std::vector<float> init_parameters(const ModelSpec& model, std::uint64_t seed);

// Copies of the named tensors of a flat parameter array.
std::vector<std::pair<std::string, std::vector<float>>> named_parameters(
    const ModelSpec& model, const std::vector<float>& flat);

}  // namespace sluice
