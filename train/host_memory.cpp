// Implementation of train/host_memory.hpp.
#include "train/host_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/model_layout.hpp"

namespace sluice {

HostMemoryPlan host_memory_plan(const Dataset& dataset, const Plan& plan, const ModelSpec& model,
                                const ScheduleOptions& options, InputRelease release,
                                bool device_is_host,
                                const std::vector<PartitionProfile>* profiles) {
  HostMemoryPlan out;
  for (const HostMatrixShape& shape :
       host_matrix_shapes(model, options, dataset.num_nodes, plan.chunks)) {
    out.host_matrices += shape.bytes();
    if (shape.role == HostMatrixRole::kInput && shape.layer == 0) out.first_matrix = shape.bytes();
    if (!out.matrices.empty()) out.matrices += ", ";
    out.matrices += cat(shape.name, " ", format_bytes(double(shape.bytes())));
  }
  // The index lists per chunk, 4-byte entries: GCN's column degrees per merged row; self
  // columns, keys, labels and train mask per destination; vertices, slots and keys per load and
  // leave; remote slots with their pull and push groups.
  const std::int64_t degrees_per_merged_row = model.kind == ModelKind::kGcn ? 4 : 0;
  // The CPU backend's transpose of a CSR of `nnz` entries over `cols` columns beside the
  // modelled device memory: transposed offsets and entry positions of 8 bytes, transposed rows
  // of 4; and the derived entry weights (GCN, SAGE), 4 bytes an entry.
  const auto cpu_transpose_bytes = [&](std::int64_t nnz, std::int64_t cols) {
    return 12 * nnz + 8 * (cols + 1) + (model.kind == ModelKind::kGat ? 0 : 4 * nnz);
  };
  for (int p = 0; p < plan.partitions; ++p) {
    const std::int64_t merged =
        std::int64_t(plan.transition_rows[std::size_t(p)]) + plan.remote_rows[std::size_t(p)];
    for (int c = 0; c < plan.chunks; ++c) {
      const ChunkPlan& ch = plan.chunk(c, p);
      const std::int64_t nnz = ch.num_entries(), rows = ch.num_dst();
      std::int64_t loads = std::int64_t(ch.load_vertices.size());
      std::int64_t leaves = std::int64_t(ch.leave_vertices.size());
      if (options.comm == CommMode::kP2p)
        loads = leaves = plan.transition_rows[std::size_t(p)];
      else if (options.comm == CommMode::kBaseline)
        loads = leaves = std::min(nnz, merged);
      out.index_lists += degrees_per_merged_row * merged + 16 * rows + 12 * (loads + leaves) +
                         20 * std::int64_t(ch.remote_vertices.size());
      if (device_is_host) out.chunk_constants += cpu_transpose_bytes(nnz, merged);
    }
  }
  // The constants as the buffer layout has them (train/layout/memory_estimate.hpp): CUDA's
  // per-chunk constants, all of them as if in pinned host memory; with a host device (CPU),
  // every device buffer.
  // With a host device, the CPU backend's transpose of each loss-row CSR too.
  const ModelLayers layers = model_layers(model);
  const LayoutOptions layout = layout_options(options);
  const LossRowFlags loss_rows =
      !profiles && layout.last_layer_rows == LastLayerRows::kLoss && model.layers.size() >= 2
          ? loss_row_flags(dataset, plan.old_to_new)
          : LossRowFlags{};
  for (int p = 0; p < plan.partitions; ++p) {
    const PartitionLayout partition =
        profiles ? partition_layout((*profiles)[std::size_t(p)], layers, layout)
                 : partition_layout(plan, p, layers, layout, loss_rows);
    const GpuMemoryEstimate e = estimate_layout_memory(partition);
    out.chunk_constants +=
        device_is_host ? e.buffers + e.overlap + e.constants : e.cuda_chunk_constants;
    if (device_is_host)
      for (const BufferSpec& b : partition.buffers)
        if (b.role == BufferRole::kLossCsr)
          out.chunk_constants += cpu_transpose_bytes(b.csr.nnz, b.csr.cols);
  }
  std::int64_t graph = 0;
  if (release == InputRelease::kDatasetAndPlanLists) {
    graph = std::int64_t(dataset.indptr.size() * sizeof(edge_t) +
                         dataset.indices.size() * sizeof(vertex_t));
    out.released = graph + std::int64_t(dataset.features.size() * sizeof(float));
    for (const ChunkPlan& ch : plan.chunk_plans)
      out.released_plan += std::int64_t(
          4 * (ch.columns.size() + ch.load_vertices.size() + ch.load_slots.size() +
               ch.remote_vertices.size() + ch.remote_owner.size() + ch.remote_owner_slots.size() +
               ch.remote_slots.size() + ch.leave_vertices.size() + ch.leave_slots.size()) +
          ch.remote_pull.size());
  }
  out.peak = std::max({out.index_lists, out.index_lists - graph + out.first_matrix,
                       out.index_lists - out.released + out.host_matrices,
                       out.host_matrices + out.chunk_constants - out.released - out.released_plan});
  out.peak_beside_lists =
      std::max({out.peak, out.index_lists + out.host_matrices,
                out.index_lists - graph + out.host_matrices + out.chunk_constants});
  return out;
}

}  // namespace sluice
