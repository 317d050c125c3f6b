// The layer widths of a built model (ModelSpec) in the form the buffer layout takes
// (train/layout/model_layers.hpp), so that the schedule sizes its device buffers with the same
// functions the memory estimate adds up.
#pragma once

#include "train/layout/model_layers.hpp"
#include "train/model.hpp"

namespace sluice {

ModelLayers model_layers(const ModelSpec& model);

}  // namespace sluice
