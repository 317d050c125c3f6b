// Implementation of train/layout/memory_estimate.hpp: sums over partition_layout(), nothing
// derived here.
#include "train/layout/memory_estimate.hpp"

#include <algorithm>
#include <map>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {

GpuMemoryEstimate estimate_layout_memory(const PartitionLayout& layout) {
  GpuMemoryEstimate e;
  e.merged_rows = layout.sizes.merged_rows;
  e.chunk_rows = layout.sizes.chunk_rows;
  e.max_nnz = layout.sizes.max_nnz;
  std::map<int, std::int64_t> chunk_bytes;  // per chunk: its constants
  for (const BufferSpec& b : layout.buffers) {
    const std::int64_t cuda = cuda_bytes(b);
    switch (b.kind) {
      case BufferKind::kRequired:
        e.buffers += device_bytes(b);
        break;
      case BufferKind::kOverlap:
        e.overlap += device_bytes(b);
        break;
      case BufferKind::kConstant:
        e.constants += device_bytes(b);
        break;
      case BufferKind::kFirstUseScratch:
        e.cuda_scratch += cuda;
        continue;
    }
    e.cuda_setup += cuda;
    if (b.group != OverlapGroup::kNone) e.cuda_overlap += cuda;
    if (per_chunk_constant(b)) {
      e.cuda_chunk_constants += cuda;
      chunk_bytes[b.chunk] += cuda;
      // A staging slot holds one CSR (a chunk's, or its loss-row CSR), sized for the largest.
      e.cuda_staging = std::max(e.cuda_staging, cuda_staged_bytes(b));
    }
  }
  for (const auto& [chunk, bytes] : chunk_bytes)
    e.cuda_largest_chunk = std::max(e.cuda_largest_chunk, bytes);
  e.cuda_staging *= cuda::kStagedCsrSlots;

  // The CUDA backend places constants and overlap buffers in device memory only while an eighth
  // of the budget stays free, and allocates working buffers and scratch without that check. Not
  // counted, because the budget does not account it or the layout cannot know it: cuSPARSE's
  // SpMM workspace (sized by cuSPARSE; it lives in the free eighth), the CUDA context and
  // library handles (outside the budget's accounting: --gpu-memory must leave room for them on
  // the GPU), and the staging of peer copies between GPUs without peer access.
  //
  // Every constant on the device: the setup fits seven eighths of the budget, and the first-use
  // scratch the rest.
  e.all_constants =
      std::max(cuda_budget_with_headroom(e.cuda_setup), e.cuda_setup + e.cuda_scratch);
  // Constants spilling to host memory: they fill the device up to seven eighths of the budget in
  // upload order, and the first-use scratch and the staged CSRs must then fit the free eighth.
  // Seven eighths hold the working and overlap buffers with the largest chunk's constants, so that
  // the need falls with C.
  const std::int64_t setup = e.cuda_setup - e.cuda_chunk_constants + e.cuda_largest_chunk;
  const std::int64_t free_eighth = cuda::kBudgetHeadroomDivisor * (e.cuda_scratch + e.cuda_staging);
  e.total = std::min(e.all_constants, std::max(cuda_budget_with_headroom(setup), free_eighth));
  e.minimum =
      std::min(e.total, std::max(cuda_budget_with_headroom(setup - e.cuda_overlap), free_eighth));
  return e;
}

GpuMemoryEstimate estimate_gpu_memory(const Plan& plan, const LossRowFlags& loss_rows,
                                      int partition, const ModelShape& shape,
                                      const LayoutOptions& options) {
  const ModelLayers model = model_layers(shape);
  SLUICE_EXPECTS(partition >= 0 && partition < plan.partitions, "partition ", partition);
  return estimate_layout_memory(partition_layout(plan, partition, model, options, loss_rows));
}

std::int64_t estimate_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows, int partition,
                                const ModelShape& shape, const LayoutOptions& options) {
  return estimate_gpu_memory(plan, loss_rows, partition, shape, options).total;
}

std::vector<GpuMemoryEstimate> plan_estimates(const Plan& plan, const LossRowFlags& loss_rows,
                                              const ModelShape& shape,
                                              const LayoutOptions& options) {
  return plan_estimates(plan_profiles(plan, loss_rows, options.comm), shape, options);
}

std::vector<GpuMemoryEstimate> plan_estimates(const std::vector<PartitionProfile>& profiles,
                                              const ModelShape& shape,
                                              const LayoutOptions& options) {
  const ModelLayers model = model_layers(shape);
  std::vector<GpuMemoryEstimate> estimates;
  for (const PartitionProfile& profile : profiles)
    estimates.push_back(estimate_layout_memory(partition_layout(profile, model, options)));
  return estimates;
}

std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                     const ModelShape& shape, const LayoutOptions& options) {
  std::int64_t peak = 0;
  for (const GpuMemoryEstimate& e : plan_estimates(plan, loss_rows, shape, options))
    peak = std::max(peak, e.total);
  return peak;
}

std::int64_t estimate_minimum_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                        const ModelShape& shape, const LayoutOptions& options) {
  std::int64_t peak = 0;
  for (const GpuMemoryEstimate& e : plan_estimates(plan, loss_rows, shape, options))
    peak = std::max(peak, e.minimum);
  return peak;
}

std::vector<BudgetRule> budget_rules(const ModelShape& shape, const LayoutOptions& options,
                                     bool may_reload) {
  const ModelLayers model = model_layers(shape);
  LayoutOptions kept = options, reloaded = options;
  kept.reload_inputs = false;
  reloaded.reload_inputs = true;
  // Reloading changes the layout only where a layer keeps input rows it transforms on arrival.
  const bool changes = layer_buffer_widths(model, kept).transition !=
                       layer_buffer_widths(model, reloaded).transition;
  const bool keep = !options.reload_inputs;
  const bool reload = (options.reload_inputs || may_reload) && (changes || !keep);
  std::vector<BudgetRule> rules;
  for (const bool all_overlap : {true, false}) {
    if (keep) rules.push_back({false, all_overlap});
    if (reload) rules.push_back({true, all_overlap});
  }
  return rules;
}

std::string budget_rule_name(const BudgetRule& rule) {
  return cat(rule.reload_inputs ? "reloaded" : "kept", " input rows",
             rule.all_overlap ? "" : ", required buffers only");
}

std::vector<PartitionProfile> plan_profiles(const Plan& plan, const LossRowFlags& loss_rows,
                                            CommMode comm) {
  std::vector<PartitionProfile> profiles;
  const LossCut cut =
      loss_cut_mirrors(plan, loss_rows) ? LossCut::kMirrored : LossCut::kNotMirrored;
  for (int p = 0; p < plan.partitions; ++p)
    profiles.push_back(partition_profile(plan, p, comm, loss_rows, cut));
  return profiles;
}

std::vector<std::int64_t> rules_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                      const ModelShape& shape, const LayoutOptions& options,
                                      const std::vector<BudgetRule>& rules) {
  return rules_bytes(plan_profiles(plan, loss_rows, options.comm), shape, options, rules);
}

std::vector<std::int64_t> rules_bytes(const std::vector<PartitionProfile>& profiles,
                                      const ModelShape& shape, const LayoutOptions& options,
                                      const std::vector<BudgetRule>& rules) {
  const ModelLayers model = model_layers(shape);
  std::vector<std::int64_t> bytes(rules.size(), 0);
  for (const bool reload : {false, true}) {
    if (std::none_of(rules.begin(), rules.end(),
                     [&](const BudgetRule& r) { return r.reload_inputs == reload; }))
      continue;
    LayoutOptions o = options;
    o.reload_inputs = reload;
    for (const PartitionProfile& profile : profiles) {
      const GpuMemoryEstimate e = estimate_layout_memory(partition_layout(profile, model, o));
      for (std::size_t r = 0; r < rules.size(); ++r)
        if (rules[r].reload_inputs == reload)
          bytes[r] = std::max(bytes[r], rules[r].all_overlap ? e.total : e.minimum);
    }
  }
  return bytes;
}

std::int64_t rule_bytes(const Plan& plan, const LossRowFlags& loss_rows, const ModelShape& shape,
                        const LayoutOptions& options, const BudgetRule& rule) {
  return rules_bytes(plan, loss_rows, shape, options, {rule}).front();
}

ResidencyChoice choose_residency(const std::vector<ResidencyNeed>& cached,
                                 const std::vector<ResidencyNeed>& recomputed,
                                 const std::vector<std::int64_t>& capacities,
                                 const ResidencyChoice& current,
                                 IntermediatesChoice intermediates) {
  const bool may_recompute = intermediates == IntermediatesChoice::kRecomputeWhereEverythingFits;
  SLUICE_EXPECTS(cached.size() == capacities.size() && recomputed.size() == capacities.size(),
                 "choose_residency: ", cached.size(), " and ", recomputed.size(), " needs for ",
                 capacities.size(), " partitions");
  const auto fits = [&](const ResidencyChoice& choice) {
    for (std::size_t p = 0; p < capacities.size(); ++p) {
      const ResidencyNeed& n = choice.cache_intermediates ? cached[p] : recomputed[p];
      const std::int64_t bytes = n.setup - (choice.overlap ? 0 : n.overlap) + n.vertex;
      if (capacities[p] >= 0 && bytes > capacities[p]) return false;
    }
    return true;
  };
  const ResidencyChoice candidates[] = {{true, true}, {false, true}, {true, false}, {false, false}};
  for (const ResidencyChoice& choice : candidates) {
    if ((choice.overlap && !current.overlap) ||
        (choice.cache_intermediates && !current.cache_intermediates) ||
        (!choice.cache_intermediates && current.cache_intermediates && !may_recompute))
      continue;
    if (fits(choice)) return choice;
  }
  return current;
}

std::string describe_estimate(const Plan& plan, const LossRowFlags& loss_rows,
                              const ModelShape& shape, const LayoutOptions& options) {
  return describe_estimate(plan_profiles(plan, loss_rows, options.comm), shape, options);
}

std::string describe_estimate(const std::vector<PartitionProfile>& profiles,
                              const ModelShape& shape, const LayoutOptions& options) {
  const ModelLayers model = model_layers(shape);
  int peak = 0;
  GpuMemoryEstimate e;
  for (std::size_t p = 0; p < profiles.size(); ++p) {
    const GpuMemoryEstimate candidate =
        estimate_layout_memory(partition_layout(profiles[p], model, options));
    if (p == 0 || candidate.total > e.total) {
      e = candidate;
      peak = profiles[p].partition;
    }
  }
  const auto bytes = [](std::int64_t b) { return format_bytes(double(b)); };
  return cat("partition ", peak, ": transition buffer ", e.merged_rows, " rows, largest chunk ",
             e.chunk_rows, " rows / ", e.max_nnz, " entries; working buffers ", bytes(e.buffers),
             ", overlap buffers ", bytes(e.overlap), ", largest chunk's constants ",
             bytes(e.cuda_largest_chunk));
}

}  // namespace sluice
