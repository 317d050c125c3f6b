// Implementation of tests/support/sgd_epochs.hpp.
#include "tests/support/sgd_epochs.hpp"

namespace sluice::test {

SgdEpochs sgd_epochs(Schedule& schedule, const ModelSpec& spec, std::uint64_t init_seed,
                     int epochs) {
  const std::vector<float> initial = init_parameters(spec, init_seed);
  schedule.set_parameters(initial);
  SgdEpochs out;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    out.losses.push_back(schedule.forward_backward(epoch));
    schedule.sgd_step(0.5f, 0.f);
  }
  out.parameters = schedule.parameters();
  out.moved = out.parameters != initial;
  return out;
}

}  // namespace sluice::test
