// Implementation of preprocess/chunk_search.hpp.
#include "preprocess/chunk_search.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "preprocess/plan_builder_detail.hpp"

namespace sluice {

ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          PlanOptions plan_options, const std::string& fingerprint,
                                          std::int64_t budget, const ModelShape& shape,
                                          const LayoutOptions& options, bool may_reload) {
  plan_options.reorganize = false;  // the search only needs buffer sizes
  std::vector<vertex_t> sizes(std::size_t(plan_options.partitions), 0);
  for (std::int32_t p : partition.part) ++sizes[std::size_t(p)];
  const vertex_t smallest = *std::min_element(sizes.begin(), sizes.end());
  const int max_chunks = std::max<int>(1, std::min<vertex_t>(smallest, 1 << 16));
  const std::vector<BudgetRule> rules = budget_rules(shape, options, may_reload);
  const ChunkEstimator estimate = [&](int chunks) {
    plan_options.chunks = chunks;
    const Plan plan = build_plan_from_partition(dataset, partition, plan_options, fingerprint);
    std::vector<std::int64_t> bytes = rules_bytes(plan, shape, options, rules);
    std::string others;
    for (std::size_t r = 1; r < rules.size(); ++r)
      others += cat("; ", budget_rule_name(rules[r]), " ", format_bytes(double(bytes[r])));
    LayoutOptions first = options;
    first.reload_inputs = rules[0].reload_inputs;
    log_info("--gpu-memory: C=", chunks, " needs about ", format_bytes(double(bytes[0])),
             " per GPU (", describe_estimate(plan, shape, first), others, ")");
    return bytes;
  };
  ChunkSearchResult result;
  static_cast<FittingChunks&>(result) = search_fitting_chunks(max_chunks, budget, rules, estimate);
  result.smallest_partition = smallest;
  return result;
}

VertexPartition partition_of_plan(const Plan& plan) {
  VertexPartition partition;
  partition.method = plan.partitioner;
  partition.part.resize(std::size_t(plan.num_nodes));
  for (vertex_t old_id = 0; old_id < plan.num_nodes; ++old_id)
    partition.part[std::size_t(old_id)] = plan.owner(plan.old_to_new[std::size_t(old_id)]);
  return partition;
}

}  // namespace sluice
