// Device memory one partition's GPU needs to train a model over a plan: the buffers of its
// layout (buffer_layout.hpp) added up as the CPU backend accounts them and as the CUDA backend
// charges them against --gpu-memory. Used by `sluice-preprocess partition --gpu-memory` to
// choose C, and by sluice-train to choose --input-rows auto and to explain a plan that does not
// fit. The rules are documented in docs/formats.md ("GPU memory estimate").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/plan.hpp"
#include "train/layout/buffer_layout.hpp"
#include "train/layout/model_layers.hpp"

namespace sluice {

// One partition's device memory, bytes. The first three parts are what the schedule allocates
// through the Device interface, so that their sum equals CpuDevice::peak_bytes() of a run
// without a budget (tests/test_memory_estimate.cpp checks this). The CUDA parts are what the
// CUDA backend charges for the same run, and `total` is the --gpu-memory budget under which
// that run keeps the constants it needs on the device and gets every overlap buffer.
struct GpuMemoryEstimate {
  std::int64_t buffers = 0;  // required working buffers (Device::alloc)
  // Optional overlap buffers (Device::try_alloc), all of them: load stage, flush buffer, second
  // block set.
  std::int64_t overlap = 0;
  // Read-only constants (Device::upload*): per-chunk CSRs (GCN's with column degrees) and index
  // lists, and the position lists and kept-tail lists of the schedule.
  std::int64_t constants = 0;
  // CUDA at setup: the buffers above and every constant in 256-byte granules, CSRs in the CUDA
  // layout: CudaDevice::bytes_in_use() after the schedule's setup without a budget.
  std::int64_t cuda_setup = 0;
  // CUDA scratch sized on first use: GAT backward scratch, loss accumulator, predictions.
  std::int64_t cuda_scratch = 0;
  // The per-chunk constants' share of cuda_setup, and the largest chunk's.
  std::int64_t cuda_chunk_constants = 0, cuda_largest_chunk = 0;
  // The scratch chunks whose constants live in host memory are staged into before use (their
  // CSR arrays): kStagedCsrSlots slots of the largest CSR (a chunk's or its loss-row CSR).
  std::int64_t cuda_staging = 0;
  // The overlap buffers' share of cuda_setup, with the constants allocated with them (head
  // rows, flush positions, a kept tail that lives in the flush buffer).
  std::int64_t cuda_overlap = 0;
  // The budget under which the run keeps every constant in device memory and gets every overlap
  // buffer: max(cuda_budget_with_headroom(cuda_setup), cuda_setup + cuda_scratch).
  std::int64_t all_constants = 0;
  // The budget --gpu-memory is checked against: the run gets every overlap buffer and room for
  // the largest chunk's constants, the others may be read from pinned host memory. The least of
  // all_constants and max(cuda_budget_with_headroom(cuda_setup with only the largest chunk's
  // constants), 8 x (cuda_scratch + cuda_staging)): constants fill the
  // device up to seven eighths of the budget, so the scratch must fit the free eighth.
  std::int64_t total = 0;
  // The least budget the run fits at all: `total` without the overlap buffers, which the
  // trainer allocates only where memory allows (it then overlaps less).
  std::int64_t minimum = 0;
  // The plan's shape behind the figures: the merged transition buffer's rows (local transition
  // slots + remote slots), the largest chunk's destination rows and entries.
  std::int64_t merged_rows = 0, chunk_rows = 0, max_nnz = 0;

  // What the Device interface accounts (the CPU backend's peak).
  std::int64_t device_bytes() const { return buffers + overlap + constants; }
};

// The estimate of one partition's layout.
GpuMemoryEstimate estimate_layout_memory(const PartitionLayout& layout);

// The plan-based estimates below take `loss_rows`, loss_row_flags() of the plan's dataset, for
// the chunks' loss-row CSRs (LastLayerRows::kLoss); empty counts none.
// The estimate of partition p's GPU, part by part. Throws InputError for a model sluice-train
// does not have or a shape make_model() rejects.
GpuMemoryEstimate estimate_gpu_memory(const Plan& plan, const LossRowFlags& loss_rows,
                                      int partition, const ModelShape& shape,
                                      const LayoutOptions& options = {});

// estimate_gpu_memory(...).total.
std::int64_t estimate_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows, int partition,
                                const ModelShape& shape, const LayoutOptions& options = {});

// Every partition's estimate, from the plan's profiles taken once (plan_profiles()), or from
// profiles taken under options.comm.
std::vector<GpuMemoryEstimate> plan_estimates(const Plan& plan, const LossRowFlags& loss_rows,
                                              const ModelShape& shape,
                                              const LayoutOptions& options = {});
std::vector<GpuMemoryEstimate> plan_estimates(const std::vector<PartitionProfile>& profiles,
                                              const ModelShape& shape,
                                              const LayoutOptions& options = {});

// The maximum of estimate_gpu_bytes over all partitions.
std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                     const ModelShape& shape, const LayoutOptions& options = {});
// The maximum of estimate_gpu_memory(...).minimum over all partitions.
std::int64_t estimate_minimum_gpu_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                        const ModelShape& shape, const LayoutOptions& options = {});

// The ways a plan may meet a --gpu-memory budget, in order of preference (the first that fits
// is what sluice-train does and what partition --gpu-memory searches for): every overlap buffer
// with kept input rows, then with reloaded ones, then only the required buffers with kept input
// rows, then with reloaded ones. Kept rows only without options.reload_inputs, reloaded ones
// only with options.reload_inputs or may_reload; rules that reloading does not change (no layer
// keeps input rows it transforms on arrival) are left out.
struct BudgetRule {
  bool reload_inputs = false;
  bool all_overlap = true;
};
std::vector<BudgetRule> budget_rules(const ModelShape& shape, const LayoutOptions& options,
                                     bool may_reload);
// "kept input rows", "reloaded input rows, required buffers only", ...
std::string budget_rule_name(const BudgetRule& rule);
// The plan's peak per-GPU need under each rule (the largest `total`, or `minimum` for rules
// without every overlap buffer, over the partitions), each partition estimated once per
// input-row choice; rule_bytes for one rule.
std::vector<std::int64_t> rules_bytes(const Plan& plan, const LossRowFlags& loss_rows,
                                      const ModelShape& shape, const LayoutOptions& options,
                                      const std::vector<BudgetRule>& rules);
std::int64_t rule_bytes(const Plan& plan, const LossRowFlags& loss_rows, const ModelShape& shape,
                        const LayoutOptions& options, const BudgetRule& rule);
// The same from the plan's partition profiles under options.comm (every partition's, in order):
// those of a built plan (plan_profiles) or of a chunk sketch (chunk_sketch.hpp).
std::vector<PartitionProfile> plan_profiles(const Plan& plan, const LossRowFlags& loss_rows,
                                            CommMode comm);
std::vector<std::int64_t> rules_bytes(const std::vector<PartitionProfile>& profiles,
                                      const ModelShape& shape, const LayoutOptions& options,
                                      const std::vector<BudgetRule>& rules);

// A partition's device memory for one choice of cached intermediates, bytes: what its setup
// allocates with every overlap buffer (GpuMemoryEstimate::cuda_setup + cuda_scratch), what a
// layout without overlap (LayoutOptions::overlap) allocates less, and its rows of the vertex
// matrices (the features, the layer inputs, the gradients and the cached intermediates A^l where
// they are cached).
struct ResidencyNeed {
  std::int64_t setup = 0, overlap = 0, vertex = 0;
};
// Whether sluice-train may give up the cached intermediates so that every matrix fits
// (--intermediates auto), or keeps them as given (cache, recompute).
enum class IntermediatesChoice { kAsGiven, kRecomputeWhereEverythingFits };
// What a run gives up so that every partition holds all of its vertex data, where it could not
// otherwise: the overlap buffers (they serve transfers, and a run whose vertex data are all on
// the devices streams nothing), and with them or without the cached intermediates (the backward
// pass computes them again from resident rows instead of a store and a load over the host link).
struct ResidencyChoice {
  bool overlap = true;
  bool cache_intermediates = true;
};
// The first of (overlap, cache), (no overlap, cache), (overlap, recompute), (no overlap,
// recompute) under which every partition's setup and vertex data fit its capacity
// (Backend::placement_capacity(); -1: unbounded), among those that keep or give up what
// `current` has (the cached intermediates only as `intermediates` allows); `current` when none
// fits: the vertex data then stream as placement leaves them. cached[p] and recomputed[p]:
// partition p's needs with and without cached intermediates.
ResidencyChoice choose_residency(const std::vector<ResidencyNeed>& cached,
                                 const std::vector<ResidencyNeed>& recomputed,
                                 const std::vector<std::int64_t>& capacities,
                                 const ResidencyChoice& current, IntermediatesChoice intermediates);

// What makes up the peak partition's estimate, for logs and errors: "partition 0: transition
// buffer 262144 rows, largest chunk 12 rows / 93113 entries; working buffers 1.2 GiB, ...".
std::string describe_estimate(const Plan& plan, const LossRowFlags& loss_rows,
                              const ModelShape& shape, const LayoutOptions& options = {});
std::string describe_estimate(const std::vector<PartitionProfile>& profiles,
                              const ModelShape& shape, const LayoutOptions& options = {});

}  // namespace sluice
