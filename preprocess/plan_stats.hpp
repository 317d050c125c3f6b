// Statistics of a plan for people (a table in the spirit of the HongTu paper's Tables 3 and 8)
// and for scripts (one JSON object), and the replication-factor sweep over partition counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"

namespace sluice {

// feature_dim <= 0: the plan's cost_feature_dim (1 if that is 0 too).
std::string plan_stats_table(const Plan& plan, std::int64_t feature_dim = 0);
std::string plan_stats_json(const Plan& plan, std::int64_t feature_dim = 0);

struct SweepRow {
  int partitions = 0;
  std::string partitioner;  // the one actually used
  double replication_factor = 0;
  double seconds = 0;  // level-1 partitioning time
};
// Replication factor sum_p |N(p)| / |V| with P = count partitions of one chunk each.
std::vector<SweepRow> sweep_replication(const Dataset& dataset, const std::vector<int>& counts,
                                        const std::string& partitioner, std::uint64_t seed);

}  // namespace sluice
