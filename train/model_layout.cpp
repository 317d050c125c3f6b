// Implementation of train/model_layout.hpp.
#include "train/model_layout.hpp"

namespace sluice {

ModelLayers model_layers(const ModelSpec& model) {
  ModelLayers out;
  out.kind = model.kind;
  out.parameters = model.num_parameters;
  for (const LayerSpec& layer : model.layers) {
    LayerShape shape;
    shape.index = layer.index;
    shape.last = layer.last;
    shape.in_width = layer.in_width;
    shape.out_width = layer.out_width;
    shape.aggregate_width = layer.aggregate_width;
    shape.transform_width = layer.transform_width;
    shape.heads = layer.heads;
    shape.transform_first = layer.transform_first;
    out.layers.push_back(shape);
  }
  return out;
}

}  // namespace sluice
