// Implementation of train/layout/model_layers.hpp.
#include "train/layout/model_layers.hpp"

#include "common/error.hpp"

namespace sluice {
namespace {

void check_shape(const ModelShape& shape) {
  SLUICE_INPUT_CHECK(shape.model == "gcn" || shape.model == "sage" || shape.model == "gat",
                     "unknown model '", shape.model,
                     "' (expected gcn, sage or gat, the models of sluice-train)");
  SLUICE_INPUT_CHECK(shape.layers >= 1, "--layers must be at least 1 (got ", shape.layers, ")");
  SLUICE_INPUT_CHECK(shape.layers <= 64, "--layers ", shape.layers, " is unreasonably deep");
  SLUICE_INPUT_CHECK(shape.hidden >= 1, "--hidden must be at least 1 (got ", shape.hidden, ")");
  SLUICE_INPUT_CHECK(shape.in_dim >= 1, "the dataset has no features (feature width ", shape.in_dim,
                     ")");
  SLUICE_INPUT_CHECK(shape.classes >= 2, "the dataset has ", shape.classes,
                     " classes; training needs at least 2");
  if (shape.model == "gat") {
    SLUICE_INPUT_CHECK(shape.heads >= 1, "--heads must be at least 1 (got ", shape.heads, ")");
    SLUICE_INPUT_CHECK(shape.output_heads >= 1, "--output-heads must be at least 1 (got ",
                       shape.output_heads, ")");
  }
}

}  // namespace

LayerZeroOrder parse_layer_zero_order(const std::string& name) {
  if (name == "auto") return LayerZeroOrder::kAuto;
  if (name == "aggregate") return LayerZeroOrder::kAggregateFirst;
  if (name == "transform") return LayerZeroOrder::kTransformFirst;
  throw InputError(
      cat("unknown --layer-zero-order '", name, "' (expected auto, aggregate or transform)"));
}

LayerZeroOrder parse_layer_zero_order(const std::string& name, const std::string& model) {
  const LayerZeroOrder order = parse_layer_zero_order(name);
  SLUICE_INPUT_CHECK(model != "gat" || order == LayerZeroOrder::kAuto,
                     "--layer-zero-order is GCN's and SAGE's; GAT's layer 0 has sluice-train "
                     "--gat-layer-zero");
  return order;
}

ModelLayers model_layers(const ModelShape& shape) {
  check_shape(shape);
  ModelLayers model;
  model.kind = shape.model == "gat"    ? ModelKind::kGat
               : shape.model == "sage" ? ModelKind::kSage
                                       : ModelKind::kGcn;
  std::int64_t width = shape.in_dim;
  for (int l = 0; l < shape.layers; ++l) {
    LayerShape layer;
    layer.index = l;
    layer.last = l == shape.layers - 1;
    layer.in_width = width;
    if (model.kind == ModelKind::kGat) {
      layer.heads = layer.last ? shape.output_heads : shape.heads;
      const std::int64_t head_width = layer.last ? shape.classes : shape.hidden;
      layer.transform_width = layer.heads * head_width;
      layer.out_width = layer.last ? head_width : layer.transform_width;
      // The head outputs O^l, which the backward pass below the last layer would recompute.
      layer.aggregate_width = layer.last ? 0 : layer.transform_width;
      // W, b, att_src, att_dst.
      model.parameters +=
          width * layer.transform_width + layer.out_width + 2 * layer.transform_width;
    } else {
      layer.out_width = layer.last ? shape.classes : shape.hidden;
      const std::int64_t weight_rows = model.kind == ModelKind::kSage ? 2 * width : width;
      layer.aggregate_width = weight_rows;
      // The last layer multiplies first when that narrows its sparse product (d_{l+1} < d_l)
      // without widening the rows it moves: GCN's transform is d_{l+1} wide, SAGE's
      // [X W_self | X W_neigh] 2 d_{l+1}. Layer 0 below it as LayerZeroOrder says.
      const std::int64_t transformed =
          model.kind == ModelKind::kSage ? 2 * layer.out_width : layer.out_width;
      const bool first_layer_transforms =
          l == 0 && !layer.last &&
          (shape.layer_zero_order == LayerZeroOrder::kTransformFirst ||
           (shape.layer_zero_order == LayerZeroOrder::kAuto &&
            transform_first_pays(width, transformed)));
      if (first_layer_transforms ||
          (layer.last && layer.out_width < width && transformed <= width)) {
        layer.transform_first = true;
        layer.transform_width = transformed;
        layer.aggregate_width = 0;
      }
      model.parameters += weight_rows * layer.out_width + layer.out_width;  // W, b
    }
    width = layer.out_width;
    model.layers.push_back(layer);
  }
  return model;
}

}  // namespace sluice
