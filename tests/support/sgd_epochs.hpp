// Training epochs with an SGD step after each, for tests that compare two runs: the steps make
// the later losses and the parameters depend on the gradients, so that a wrong gradient shows.
#pragma once

#include <cstdint>
#include <vector>

#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice::test {

struct SgdEpochs {
  std::vector<double> losses;     // each epoch's training loss
  std::vector<float> parameters;  // after the last step
  bool moved = false;             // the steps changed the parameters
};

// Sets `schedule`'s parameters to init_parameters(spec, init_seed), then runs `epochs` training
// epochs, each followed by an SGD step (learning rate 0.5, no weight decay).
SgdEpochs sgd_epochs(Schedule& schedule, const ModelSpec& spec, std::uint64_t init_seed,
                     int epochs);

}  // namespace sluice::test
