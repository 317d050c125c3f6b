// Implementation of preprocess/chunk_search.hpp.
#include "preprocess/chunk_search.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/log.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "train/layout/chunk_sketch.hpp"

namespace sluice {

ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          const PlanOptions& plan_options, std::int64_t budget,
                                          const ModelShape& shape, const LayoutOptions& options,
                                          bool may_reload) {
  std::shared_ptr<ChunkSketch> sketch;
  {
    StageTimer timer("chunk sketch");
    Renumbering renumbering = renumber_by_partition(partition.part, plan_options.partitions);
    sketch = std::make_shared<ChunkSketch>(dataset, renumbering.new_to_old, renumbering.old_to_new,
                                           renumbering.partition_offsets);
  }
  const vertex_t smallest = sketch->smallest_partition();
  const int max_chunks = max_search_chunks(*sketch);
  const std::vector<BudgetRule> rules = budget_rules(shape, options, may_reload);
  const double start = now_seconds();
  double last = start;
  int candidates = 0;
  const SketchEstimateObserver log_candidate = [&](int chunks,
                                                   const std::vector<PartitionProfile>& profiles,
                                                   const std::vector<std::int64_t>& bytes) {
    std::string others;
    for (std::size_t r = 1; r < rules.size(); ++r)
      others += cat("; ", budget_rule_name(rules[r]), " ", format_bytes(double(bytes[r])));
    LayoutOptions first = options;
    first.reload_inputs = rules[0].reload_inputs;
    ++candidates;
    const double now = now_seconds();
    log_info("--gpu-memory: C=", chunks, " needs about ", format_bytes(double(bytes[0])),
             " per GPU (", describe_estimate(profiles, shape, first), others, "); ",
             format_number(std::round((now - last) * 100) / 100), " s");
    last = now;
  };
  ChunkSearchResult result;
  static_cast<FittingChunks&>(result) =
      sketch_fitting_chunks(*sketch, budget, shape, options, rules, log_candidate);
  result.smallest_partition = smallest;
  result.sketch = sketch;
  log_info("--gpu-memory: ", candidates, " chunk counts estimated in ",
           format_number(std::round((now_seconds() - start) * 100) / 100), " s");
  // The chosen rule's need at half and twice the chosen C, for the command's summary.
  LayoutOptions chosen = options;
  chosen.reload_inputs = result.rule.reload_inputs;
  for (const int chunks : {result.chunks / 2, result.chunks * 2}) {
    if (chunks < 1 || chunks > max_chunks) continue;
    result.neighbors.emplace_back(
        chunks,
        rules_bytes(sketch->profiles(chunks, options.comm), shape, chosen, {result.rule}).front());
  }
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
