// Device memory one partition's GPU needs to train a model over a plan, counted buffer by buffer
// as sluice-train allocates it (train/schedule.cpp, Schedule::Schedule, default options) and as
// the CUDA backend charges it against --gpu-memory (kernels/cuda/memory.cpp). Used by
// `sluice-preprocess partition --gpu-memory` to choose C, and by sluice-train to name a chunk
// count that fits. The formula is documented in docs/formats.md ("GPU memory estimate").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/plan.hpp"

namespace sluice {

struct ModelShape {
  std::string model = "gcn";  // gcn | sage | gat (the models of train/model.hpp)
  int layers = 2;
  std::int64_t in_dim = 0;    // input feature width
  std::int64_t hidden = 256;  // hidden width (per head for GAT)
  std::int64_t classes = 1;   // output width
  int heads = 1;              // GAT attention heads of hidden layers
  int output_heads = 1;       // GAT attention heads of the output layer (sluice-train's default)
  // Layers transformed on arrival keep no input rows on the device (ScheduleOptions::
  // reload_inputs, sluice-train --input-rows reload).
  bool reload_inputs = false;
};

// One partition's device memory, bytes. The first three parts are what the schedule allocates
// through the Device interface, each allocation counted at its exact size as the CPU backend
// accounts it, so that their sum equals CpuDevice::peak_bytes() of a run with default options
// and no budget (tests/test_memory_estimate.cpp checks this). The CUDA parts are what the CUDA
// backend charges for the same run, and `total` is the --gpu-memory budget under which that
// run keeps every constant in device memory and gets every overlap buffer.
struct GpuMemoryEstimate {
  std::int64_t buffers = 0;  // working buffers (Device::alloc)
  // Optional overlap buffers (Device::try_alloc), all of them: load stage, flush buffer, second
  // block set.
  std::int64_t overlap = 0;
  // Read-only constants (Device::upload*): per-chunk CSRs, entry values and index lists, and the
  // position lists and kept-tail lists of the schedule.
  std::int64_t constants = 0;
  // CUDA at setup: the buffers above and every constant in 256-byte cudaMalloc granules, CSRs
  // in the CUDA layout (int32 offsets, self entries, the precomputed transpose, hub-row lists)
  // and the transposed-SpMM value scratch (one float per entry of the largest chunk).
  std::int64_t cuda_setup = 0;
  // CUDA scratch sized on first use: GAT backward scratch, loss accumulator, predictions.
  std::int64_t cuda_scratch = 0;
  // The per-chunk constants' share of cuda_setup, and the largest chunk's.
  std::int64_t cuda_chunk_constants = 0, cuda_largest_chunk = 0;
  // The overlap buffers' share of cuda_setup (with the flush positions and kept-tail lists).
  std::int64_t cuda_overlap = 0;
  // The budget under which the run keeps every constant in device memory and gets every overlap
  // buffer: constants and overlap buffers go to the device only while an eighth of the budget
  // stays free (ConstantStore's headroom), so max(8/7 of cuda_setup, cuda_setup +
  // cuda_scratch).
  std::int64_t all_constants = 0;
  // The budget --gpu-memory is checked against: the same with only the largest chunk's
  // constants on the device (the backend reads the others zero-copy from pinned host memory, one
  // chunk at a time). Every overlap buffer still fits.
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

// The estimate of partition p's GPU, part by part. Throws InputError for a model sluice-train
// does not have or a shape make_model() rejects.
GpuMemoryEstimate estimate_gpu_memory(const Plan& plan, int partition, const ModelShape& shape);

// estimate_gpu_memory(...).total.
std::int64_t estimate_gpu_bytes(const Plan& plan, int partition, const ModelShape& shape);

// The maximum of estimate_gpu_bytes over all partitions.
std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const ModelShape& shape);
// The maximum of estimate_gpu_memory(...).minimum over all partitions.
std::int64_t estimate_minimum_gpu_bytes(const Plan& plan, const ModelShape& shape);

// The ways a plan may meet a --gpu-memory budget, in order of preference (the first that fits
// is what sluice-train does and what partition --gpu-memory searches for): every overlap buffer
// with kept input rows, then with reloaded ones, then only the required buffers with kept input
// rows, then with reloaded ones. Kept rows only without may_reload, reloaded ones only with
// shape.reload_inputs; rules that reloading does not change (no layer keeps input rows it
// transforms on arrival) are left out.
struct BudgetRule {
  bool reload_inputs = false;
  bool all_overlap = true;
};
std::vector<BudgetRule> budget_rules(const ModelShape& shape, bool may_reload);
// The plan's peak per-GPU need under each rule (estimate_peak_gpu_bytes or _minimum_), each
// partition estimated once per input-row choice; rule_bytes for one rule.
std::vector<std::int64_t> rules_bytes(const Plan& plan, const ModelShape& shape,
                                      const std::vector<BudgetRule>& rules);
std::int64_t rule_bytes(const Plan& plan, const ModelShape& shape, const BudgetRule& rule);

// What makes up the peak partition's estimate, for logs and errors: "partition 0: transition
// buffer 262144 rows, largest chunk 12 rows / 93113 entries; buffers 1.2 GiB, ...".
std::string describe_estimate(const Plan& plan, const ModelShape& shape);

}  // namespace sluice
