// The layer widths the schedule sizes its device buffers by, for one model: from a model
// description alone (ModelShape: what `sluice-preprocess partition --gpu-memory` and the memory
// estimate know) by the width rules of make_model (train/model.cpp), or from the trainer's
// ModelSpec (train/model_layout.hpp). tests/test_memory_estimate.cpp checks that both agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

enum class ModelKind { kGcn, kSage, kGat };

// Whether GCN's and SAGE's layer 0 multiplies by its weights before or after its sparse product
// (`sluice-train --layer-zero-order`). kAuto: transform first where that narrows the rows the
// product reads at least fourfold (transform_first_pays()).
enum class LayerZeroOrder { kAuto, kAggregateFirst, kTransformFirst };

// A model as the command lines describe it.
struct ModelShape {
  std::string model = "gcn";  // gcn | sage | gat (the models of train/model.hpp)
  int layers = 2;
  std::int64_t in_dim = 0;    // input feature width
  std::int64_t hidden = 256;  // hidden width (per head for GAT)
  std::int64_t classes = 1;   // output width
  int heads = 1;              // GAT attention heads of hidden layers
  int output_heads = 1;       // GAT attention heads of the output layer (sluice-train's default)
  LayerZeroOrder layer_zero_order = LayerZeroOrder::kAuto;  // GCN, SAGE below the last layer
};

// One layer's widths (the fields of train/model.hpp's LayerSpec that size device buffers).
struct LayerShape {
  int index = 0;
  bool last = false;
  std::int64_t in_width = 0;   // d_l
  std::int64_t out_width = 0;  // d_{l+1}
  // What a layer's backward pass can take from its forward pass instead of recomputing it (A^l
  // with --intermediates cache or auto): GCN's aggregation (d_l), SAGE's (2 d_l), GAT's head
  // outputs below the last layer (K F); 0 for GAT's last layer and transform-first layers.
  std::int64_t aggregate_width = 0;
  // GAT K F; transform-first layers: GCN d_{l+1}, SAGE 2 d_{l+1} (self and neighbor halves);
  // else 0.
  std::int64_t transform_width = 0;
  int heads = 1;  // GAT K
  // GCN's or SAGE's layer that multiplies first, Â (X W): the last layer where that narrows
  // its product, layer 0 by LayerZeroOrder.
  bool transform_first = false;
};

struct ModelLayers {
  ModelKind kind = ModelKind::kGcn;
  std::vector<LayerShape> layers;
  std::int64_t parameters = 0;  // floats in the flat parameter array
};

// The layers make_model builds for `shape`. Throws InputError for a model sluice-train does not
// have or a shape make_model rejects (the same checks, the same messages).
ModelLayers model_layers(const ModelShape& shape);

// --layer-zero-order's value (auto | aggregate | transform); InputError naming the option
// otherwise.
LayerZeroOrder parse_layer_zero_order(const std::string& name);
// The same for a run of `model` (gcn | sage | gat), both commands' rule: GAT takes only auto
// (InputError pointing to sluice-train --gat-layer-zero otherwise).
LayerZeroOrder parse_layer_zero_order(const std::string& name, const std::string& model);

// Whether layer 0 of `width`-wide inputs, transform_width wide once multiplied, transforms first
// under LayerZeroOrder::kAuto: its forward product then reads transform_width floats an entry
// instead of width, but its backward adds a transposed product over those rows (an
// aggregation first needs none: layer 0 has no input gradient), and evaluations cannot keep its
// aggregation, which is constant. So the rows must shrink at least fourfold.
constexpr bool transform_first_pays(std::int64_t width, std::int64_t transform_width) {
  return 4 * transform_width <= width;
}

}  // namespace sluice
