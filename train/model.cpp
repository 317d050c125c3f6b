// Implementation of train/model.hpp.
#include "train/model.hpp"

#include <algorithm>
#include <cmath>

#include "common/hash.hpp"

namespace sluice {

ModelKind parse_model_kind(const std::string& name) {
  if (name == "gcn") return ModelKind::kGcn;
  if (name == "sage" || name == "graphsage") return ModelKind::kSage;
  if (name == "gat") return ModelKind::kGat;
  throw InputError(cat("unknown model '", name, "' (expected gcn, sage or gat)"));
}

std::string model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGcn:
      return "gcn";
    case ModelKind::kSage:
      return "sage";
    case ModelKind::kGat:
      return "gat";
  }
  return "?";
}

std::int64_t ModelSpec::max_in_width() const {
  std::int64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.in_width);
  return m;
}
std::int64_t ModelSpec::max_out_width() const {
  std::int64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.out_width);
  return m;
}
std::int64_t ModelSpec::max_aggregate_width() const {
  std::int64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.aggregate_width);
  return m;
}
std::int64_t ModelSpec::max_transform_width() const {
  std::int64_t m = 0;
  for (const auto& l : layers) m = std::max(m, l.transform_width);
  return m;
}
int ModelSpec::max_heads() const {
  int m = 1;
  for (const auto& l : layers) m = std::max(m, l.heads);
  return m;
}

ModelSpec make_model(const ModelShape& shape) {
  // The widths (and the checks of the shape) are the layout library's; the parameters are added
  // here.
  const ModelKind kind = parse_model_kind(shape.model);
  const ModelLayers widths = model_layers(shape);

  ModelSpec model;
  model.kind = kind;
  std::int64_t offset = 0;
  auto add = [&](int layer, const std::string& name, int q, std::int64_t rows, std::int64_t cols,
                 double fan_in, double fan_out) {
    ParameterInfo info;
    info.name = cat("layer", layer, ".", name);
    info.layer = layer;
    info.q = q;
    info.offset = offset;
    info.rows = rows;
    info.cols = cols;
    info.fan_in = fan_in;
    info.fan_out = fan_out;
    offset += rows * cols;
    model.parameters.push_back(info);
    return info.offset;
  };
  for (const LayerShape& w : widths.layers) {
    LayerSpec layer;
    layer.index = w.index;
    layer.last = w.last;
    layer.in_width = w.in_width;
    layer.out_width = w.out_width;
    layer.aggregate_width = w.aggregate_width;
    layer.transform_width = w.transform_width;
    layer.transform_first = w.transform_first;
    layer.heads = w.heads;
    const int l = w.index;
    if (kind == ModelKind::kGat) {
      layer.head_width = layer.last ? shape.classes : shape.hidden;
      layer.activation = layer.last ? Activation::kNone : Activation::kElu;
      layer.w_rows = layer.in_width;
      layer.w_cols = layer.transform_width;
      layer.w_offset = add(l, "W", 0, layer.w_rows, layer.w_cols, double(layer.in_width),
                           double(layer.transform_width));
      layer.b_size = layer.out_width;
      layer.b_offset = add(l, "b", -1, 1, layer.b_size, 0, 0);
      layer.att_size = layer.transform_width;
      layer.att_src_offset = add(l, "att_src", 1, 1, layer.att_size, double(layer.head_width), 1.0);
      layer.att_dst_offset = add(l, "att_dst", 2, 1, layer.att_size, double(layer.head_width), 1.0);
    } else {
      layer.activation = layer.last ? Activation::kNone : Activation::kRelu;
      // W multiplies the aggregated rows (SAGE: [self, mean] concatenated), or for a
      // transform-first layer the input rows before aggregation.
      layer.w_rows = kind == ModelKind::kSage ? 2 * layer.in_width : layer.in_width;
      layer.w_cols = layer.out_width;
      layer.w_offset =
          add(l, "W", 0, layer.w_rows, layer.w_cols, double(layer.w_rows), double(layer.w_cols));
      layer.b_size = layer.out_width;
      layer.b_offset = add(l, "b", -1, 1, layer.b_size, 0, 0);
    }
    model.layers.push_back(layer);
  }
  model.num_parameters = offset;
  SLUICE_EXPECTS(model.num_parameters == widths.parameters,
                 "make_model and model_layers count different parameters");
  return model;
}

std::vector<float> init_parameters(const ModelSpec& model, std::uint64_t seed) {
  std::vector<float> flat(std::size_t(model.num_parameters), 0.f);
  for (const auto& p : model.parameters) {
    if (p.q < 0) continue;  // biases start at zero
    const double bound = std::sqrt(6.0 / (p.fan_in + p.fan_out));
    for (std::int64_t i = 0; i < p.size(); ++i) {
      const double r = hash_to_unit(
          key_hash(seed, 3, std::uint64_t(p.layer), std::uint64_t(p.q), std::uint64_t(i)));
      flat[std::size_t(p.offset + i)] = static_cast<float>((2.0 * r - 1.0) * bound);
    }
  }
  return flat;
}

std::vector<std::pair<std::string, std::vector<float>>> named_parameters(
    const ModelSpec& model, const std::vector<float>& flat) {
  SLUICE_EXPECTS(std::int64_t(flat.size()) == model.num_parameters, "parameter array of ",
                 flat.size(), " floats, model has ", model.num_parameters);
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& p : model.parameters)
    out.emplace_back(
        p.name, std::vector<float>(flat.begin() + p.offset, flat.begin() + p.offset + p.size()));
  return out;
}

}  // namespace sluice
