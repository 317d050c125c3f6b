// Implementation of tests/support/plans.hpp.
#include "tests/support/plans.hpp"

namespace sluice::test {

PlanOptionsBuilder::PlanOptionsBuilder(int partitions, int chunks) {
  options_.partitions = partitions;
  options_.chunks = chunks;
  options_.partitioner = partitions == 1 ? "range" : "metis";
}

PlanOptionsBuilder& PlanOptionsBuilder::chunks(int count) {
  options_.chunks = count;
  return *this;
}

PlanOptionsBuilder& PlanOptionsBuilder::partitioner(const std::string& name) {
  options_.partitioner = name;
  return *this;
}

PlanOptionsBuilder& PlanOptionsBuilder::reorganize(Reorganize choice) {
  options_.reorganize = choice == Reorganize::kOn;
  return *this;
}

PlanOptionsBuilder& PlanOptionsBuilder::seed(std::uint64_t value) {
  options_.seed = value;
  return *this;
}

PlanOptionsBuilder& PlanOptionsBuilder::cost_feature_dim(std::int64_t width) {
  options_.cost_feature_dim = width;
  return *this;
}

Plan make_plan(const Dataset& dataset, const PlanOptions& options) {
  return build_plan(dataset, options, compute_fingerprint(dataset));
}

}  // namespace sluice::test
