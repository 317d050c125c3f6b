// Implementation of preprocess/chunk_search.hpp.
#include "preprocess/chunk_search.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/log.hpp"
#include "preprocess/plan_builder_detail.hpp"
#include "train/layout/chunk_sketch.hpp"

namespace sluice {

namespace {

// ChunkChoice::kShortestForecast from the smallest fitting count `result.chunks`: that count C0,
// then the largest, 8 C0, as a probe (where it holds no more vertex data than C0, no count
// between does, and none is tried), then the counts between in steps of 1.5.
void choose_by_forecast(const ChunkSketch& sketch, int max_chunks, std::int64_t budget,
                        const ModelShape& shape, const LayoutOptions& options,
                        const std::vector<BudgetRule>& rules, const ChunkChoiceOptions& choice,
                        ChunkSearchResult& result) {
  const ModelLayers model = model_layers(shape);
  const int first = result.chunks, last = std::min(max_chunks, 8 * first);
  const double start = now_seconds();
  struct Candidate {
    LinkForecast forecast;
    std::int64_t bytes = 0;
    BudgetRule rule;
  };
  // A count's forecast under the first rule it fits; false where none fits.
  const auto estimate = [&](int chunks, Candidate& out) {
    const std::vector<PartitionProfile> profiles = sketch.profiles(chunks, options.comm);
    const std::vector<std::int64_t> bytes = rules_bytes(profiles, shape, options, rules);
    std::size_t r = 0;
    while (r < rules.size() && bytes[r] > budget) ++r;
    if (r == rules.size()) return false;
    LayoutOptions layout = options;
    layout.reload_inputs = rules[r].reload_inputs;
    out.forecast = forecast_link(profiles, model, layout, choice.host, choice.intermediates, budget,
                                 choice.link);
    out.bytes = bytes[r];
    out.rule = rules[r];
    log_info("--gpu-memory: C=", chunks, " forecast ",
             format_number(std::round(out.forecast.seconds * 1000) / 1000),
             " s an epoch: ", format_bytes(double(out.forecast.link_bytes)),
             " over the host link, on the GPU ", out.forecast.resident, " (",
             format_bytes(double(out.forecast.resident_bytes)), ")", recompute_note(out.forecast));
    return true;
  };
  Candidate best;
  if (!estimate(first, best)) return;
  const std::int64_t held = best.forecast.resident_bytes;
  result.forecasts.push_back(best.forecast);
  // What a larger count could still gain: link bytes, or intermediates C0 recomputes.
  const auto improvable = [](const LinkForecast& f) {
    return f.link_bytes > 0 || f.recompute_seconds > 0;
  };
  Candidate probe;
  const bool probed = last > first && improvable(best.forecast) && estimate(last, probe);
  if (probed && probe.forecast.resident_bytes > held) {
    // A larger count must hold more vertex data to win: more chunks for fewer spilled
    // constants alone measured slower than the forecast says (docs/design.md, "Choosing C").
    const auto consider = [&](const Candidate& c) {
      result.forecasts.push_back(c.forecast);
      if (c.forecast.seconds < best.forecast.seconds && c.forecast.resident_bytes > held) best = c;
      return !improvable(c.forecast);  // nothing to gain beyond
    };
    bool done = false;
    for (int chunks = std::max(first + 1, int(std::ceil(1.5 * first))); chunks < last && !done;
         chunks = std::max(chunks + 1, int(std::ceil(1.5 * chunks)))) {
      Candidate c;
      if (estimate(chunks, c)) done = consider(c);
    }
    if (!done) consider(probe);
  } else if (probed) {
    result.forecasts.push_back(probe.forecast);
  }
  result.chunks = best.forecast.chunks;
  result.bytes = best.bytes;
  result.rule = best.rule;
  log_info("--gpu-memory: C=", result.chunks, " has the shortest forecast of ",
           result.forecasts.size(), " chunk counts from C=", first, " (",
           format_number(std::round((now_seconds() - start) * 100) / 100), " s)");
}

}  // namespace

ChunkSearchResult choose_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                        const PlanOptions& plan_options, std::int64_t budget,
                                        const ModelShape& shape, const LayoutOptions& options,
                                        bool may_reload, const ChunkChoiceOptions& choice) {
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
  result.smallest_fitting = result.chunks;
  result.sketch = sketch;
  log_info("--gpu-memory: ", candidates, " chunk counts estimated in ",
           format_number(std::round((now_seconds() - start) * 100) / 100), " s");
  if (result.fits && choice.choice == ChunkChoice::kShortestForecast)
    choose_by_forecast(*sketch, max_chunks, budget, shape, options, rules, choice, result);
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
