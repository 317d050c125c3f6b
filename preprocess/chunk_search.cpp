// Implementation of preprocess/chunk_search.hpp.
#include "preprocess/chunk_search.hpp"

#include <algorithm>
#include <map>

#include "common/log.hpp"
#include "preprocess/plan_builder_detail.hpp"

namespace sluice {

ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          PlanOptions options, const std::string& fingerprint,
                                          std::int64_t budget, const ModelShape& shape,
                                          bool may_reload) {
  options.reorganize = false;  // the search only needs buffer sizes
  ChunkSearchResult result;
  std::vector<vertex_t> sizes(options.partitions, 0);
  for (std::int32_t p : partition.part) ++sizes[p];
  result.smallest_partition = *std::min_element(sizes.begin(), sizes.end());
  const int max_chunks = std::max<int>(1, std::min<vertex_t>(result.smallest_partition, 1 << 16));

  const std::vector<BudgetRule> rules = budget_rules(shape, may_reload);
  auto rule_name = [](const BudgetRule& rule) {
    return cat(rule.reload_inputs ? "reloaded" : "kept", " input rows",
               rule.all_overlap ? "" : ", required buffers only");
  };
  std::map<int, std::vector<std::int64_t>> cache;  // C -> bytes under each rule
  auto figures = [&](int chunks) -> const std::vector<std::int64_t>& {
    const auto it = cache.find(chunks);
    if (it != cache.end()) return it->second;
    options.chunks = chunks;
    const Plan plan = build_plan_from_partition(dataset, partition, options, fingerprint);
    const std::vector<std::int64_t> bytes = rules_bytes(plan, shape, rules);
    std::string others;
    for (std::size_t r = 1; r < rules.size(); ++r)
      others += cat("; ", rule_name(rules[r]), " ", format_bytes(double(bytes[r])));
    ModelShape first = shape;
    first.reload_inputs = rules[0].reload_inputs;
    log_info("--gpu-memory: C=", chunks, " needs about ", format_bytes(double(bytes[0])),
             " per GPU (", describe_estimate(plan, first), others, ")");
    return cache[chunks] = bytes;
  };
  for (std::size_t r = 0; r < rules.size(); ++r) {
    auto estimate = [&](int chunks) { return figures(chunks)[r]; };
    int high = 1;
    while (estimate(high) > budget && high < max_chunks) high = std::min(max_chunks, high * 2);
    if (estimate(high) > budget) continue;
    int low = high / 2;  // estimate(low) > budget (or low == 0)
    while (high - low > 1) {
      const int middle = low + (high - low) / 2;
      if (estimate(middle) <= budget)
        high = middle;
      else
        low = middle;
    }
    result.fits = true;
    result.chunks = high;
    result.bytes = estimate(high);
    result.rule = rules[r];
    if (r > 0)
      log_info("--gpu-memory: C=", high, " fits with ", rule_name(rules[r]), " (",
               format_bytes(double(result.bytes)), ")");
    return result;
  }
  // Nothing fits: report the largest C under the last rule (the least memory).
  result.chunks = max_chunks;
  result.bytes = figures(max_chunks).back();
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
