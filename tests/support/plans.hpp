// Plans for tests: PlanOptions with the tests' defaults and chainable setters, and the plan of a
// dataset built with them (stamped with the dataset's fingerprint, as sluice-train checks).
#pragma once

#include <cstdint>
#include <string>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "preprocess/plan_builder.hpp"

namespace sluice::test {

enum class Reorganize { kOff, kOn };

// P partitions of C chunks; the range partitioner for P = 1 (no cut to optimize), METIS
// otherwise; the library's defaults for everything else (reorganization on, seed 0). Converts
// to the PlanOptions it holds, so it goes wherever PlanOptions does.
class PlanOptionsBuilder {
 public:
  PlanOptionsBuilder(int partitions, int chunks);
  PlanOptionsBuilder& chunks(int count);
  PlanOptionsBuilder& partitioner(const std::string& name);  // metis | range | random
  PlanOptionsBuilder& reorganize(Reorganize choice);
  PlanOptionsBuilder& seed(std::uint64_t value);
  PlanOptionsBuilder& cost_feature_dim(std::int64_t width);  // 0: the dataset's
  PlanOptions options() const { return options_; }
  operator PlanOptions() const { return options_; }

 private:
  PlanOptions options_;
};

inline PlanOptionsBuilder plan_options(int partitions, int chunks) {
  return PlanOptionsBuilder(partitions, chunks);
}

// build_plan with compute_fingerprint(dataset).
Plan make_plan(const Dataset& dataset, const PlanOptions& options);

}  // namespace sluice::test
