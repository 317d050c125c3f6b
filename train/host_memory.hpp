// The host memory sluice-train's setup will allocate, computed from the dataset, plan and model
// shapes before anything is allocated, and the check against what the machine has available
// (/proc/meminfo MemAvailable), so that a run that cannot fit stops with a message instead of
// the kernel's out-of-memory killer or std::bad_alloc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {

// Where setup's host bytes go, beyond what the process holds when it starts (the dataset and
// plan just read). Setup's peak is the largest of its steps: the index lists (every chunk's),
// H^0 filled, every host matrix allocated, and the chunk constants uploaded (the lists freed as
// they go up); the dataset's features and graph, and the plan's chunk columns and lists, are
// subtracted from the steps after their release (InputRelease::kDatasetAndPlanLists).
struct HostMemoryPlan {
  std::int64_t host_matrices = 0;  // every host_matrix_shapes() matrix
  std::int64_t first_matrix = 0;   // H^0
  std::int64_t index_lists = 0;    // the schedule's per-chunk lists, before upload
  // Upper bound of the constants in host memory: every per-chunk constant (CUDA: pinned when
  // the GPU budget is full); for a host device (CPU) every device buffer and the CSR transposes.
  std::int64_t chunk_constants = 0;
  std::int64_t released = 0;       // the dataset's features and graph, when released
  std::int64_t released_plan = 0;  // the plan's chunk columns and lists, when released
  std::int64_t peak = 0;           // setup's peak, bytes added to what is held now
  // The peak with HostSetup::kBesideLists: the host matrices beside the index lists (the graph
  // not yet released) and then beside the chunk constants, bounded as if every index list
  // stayed until the last constant is up and no plan list were released.
  std::int64_t peak_beside_lists = 0;
  std::string matrices;  // "H^0 16 GiB, A^0 16 GiB, ..." for the log and errors
};

// `device_is_host`: the backend's device memory is host memory (--device cpu), so every device
// buffer is; otherwise the bound assumes every chunk constant spills to pinned host memory.
// `profiles`: the plan's partition profiles under options.comm (null: computed here).
HostMemoryPlan host_memory_plan(const Dataset& dataset, const Plan& plan, const ModelSpec& model,
                                const ScheduleOptions& options, InputRelease release,
                                bool device_is_host,
                                const std::vector<PartitionProfile>* profiles = nullptr);

}  // namespace sluice
