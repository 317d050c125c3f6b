// The vertex matrices a run keeps in host memory (H^l or T^l, G^l or dT^l, A^l), the host-link
// rows each moves an epoch, and a forecast of an epoch's host-link bytes under a GPU memory
// budget: which matrices sluice-train's placement (--vertex-data auto) would hold on the GPU
// beside a plan's buffers and constants, and what the rest move. The schedule
// (train/schedule.hpp) allocates and places its matrices by these functions;
// `sluice-preprocess partition --gpu-memory` compares chunk counts by the forecast
// (preprocess/chunk_search.hpp). Written against the layout library's model and partition
// profiles, so that a chunk sketch feeds it as a built plan does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "train/layout/buffer_layout.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/layout/model_layers.hpp"

namespace sluice {

// What decides the host matrices beside the buffer layout: ScheduleOptions' fields of the same
// names (sluice-train --intermediates, --host-precision).
struct HostDataOptions {
  bool cache_intermediates = true;
  HostPrecision host_precision = HostPrecision::kFp32;
  // ScheduleOptions::evaluation_cache is EvaluationCache::kWhereItFits (sluice-train
  // --evaluation-cache auto): evaluations after the first take layer 0's aggregation from a copy.
  bool evaluation_cache = true;
};

// One host matrix the schedule allocates (Backend::alloc_host): H^l or T^l (a layer's input),
// G^l or dT^l (gradients flushed by layer l), A^l (cached aggregations). All the schedule's
// host matrices are in host_matrix_shapes(), in allocation order.
enum class HostMatrixRole { kInput, kGradient, kAggregation };
struct HostMatrixShape {
  HostMatrixRole role = HostMatrixRole::kInput;
  int layer = 0;  // the l of H^l, G^l, A^l
  std::string name;
  std::int64_t rows = 0, cols = 0;
  HostPrecision precision = HostPrecision::kFp32;
  std::int64_t bytes() const { return rows * cols * element_bytes(precision); }
};

// Whether the backward pass of layer `layer` takes A^l from its forward pass instead of
// recomputing the layer: GCN's and SAGE's aggregation, GAT's head outputs O^l below the last
// layer, with cache_intermediates; GAT only where gat_head_outputs() (buffer_layout.hpp) keeps
// them, with fp32 host data.
bool keeps_intermediates(const ModelLayers& model, const HostDataOptions& options, int layer);
// Whether the backward pass of layer `layer` loads the layer's input rows again: where it
// recomputes the layer, and every GAT layer's, whose attention backward reads the merged
// transforms Zm also when O^l is kept.
bool backward_reads_inputs(const ModelLayers& model, const HostDataOptions& options, int layer);
// Whether devices with `chunks` chunks each keep layer `layer`'s A block in their block set from
// the training forward pass to the backward pass, so that A^l needs no host matrix: one chunk,
// fp32 host data, the layer below the last keeping intermediates, and a last layer that writes
// no A block (it transforms its rows: GAT, or GCN/SAGE when narrowing). With bf16 host data the
// block goes through host memory, so that every plan rounds it alike.
bool keeps_a_block(const ModelLayers& model, const HostDataOptions& options, int layer, int chunks);

// The vertex data in host memory of a plan with `chunks` chunks per partition, `num_nodes` rows
// each (a partition's rows for one device's share).
std::vector<HostMatrixShape> host_matrix_shapes(const ModelLayers& model,
                                                const LayoutOptions& layout,
                                                const HostDataOptions& options,
                                                std::int64_t num_nodes, int chunks);

// The host-link rows one epoch (a training step and an evaluation) moves per row of each matrix
// of host_matrix_shapes() (same order), the priority of each for device memory
// (VertexData::kDeviceWhereItFits): a layer's input rows are gathered `gathered_rows` times per
// reading pass (the training pass, the evaluation, and the backward pass of a layer that reads
// its inputs again) and, above layer 0, stored once per forward pass (training and evaluation);
// A^l is stored and loaded once, G^l flushed and loaded once. An evaluation of GCN or SAGE whose
// layer 0 aggregates first reads, instead of the gathered features, its copy of layer 0's
// aggregation (HostDataOptions::evaluation_cache, fp32 host data): one row per vertex, as wide
// as the aggregation. Bytes saved per byte resident is the same ratio, as every row of a matrix
// has the same width.
std::vector<double> vertex_data_priorities(const ModelLayers& model, const LayoutOptions& layout,
                                           const HostDataOptions& options, std::int64_t num_nodes,
                                           std::int64_t gathered_rows, int chunks);

// The host-link traffic of one epoch (a training step and one evaluation) that a plan is
// expected to move under a --gpu-memory budget, from its partition profiles: each device's room
// for placements (the budget less its eighth) less its setup (buffers, overlap buffers and
// constants in the CUDA layout) holds vertex matrices by vertex_data_priorities(), each that
// fits, or all of them where choose_residency() (memory_estimate.hpp) gives up the overlap
// buffers or the cached intermediates for that; the rest move priority x their bytes. Constants
// the room cannot hold are staged once per pass (training forward and backward, evaluation).
// Intermediates given up cost their recomputation instead (LinkForecast::recompute_seconds). A
// model of the schedule's traffic, not a count of it: it leaves out the position lists and the
// staged index lists, and takes every load as a row gathered over the link.
struct LinkForecast {
  int chunks = 0;
  std::int64_t link_bytes = 0;      // the busiest device's bytes an epoch
  std::int64_t resident_bytes = 0;  // vertex matrices on that device
  std::string resident;             // their names ("none", "every matrix", "T^1, dT^1")
  // Where every matrix fits only without the cached intermediates (choose_residency()), what
  // computing them again in the backward passes adds to that device's epoch: each layer that
  // would keep its A^l gathers its entries' rows once more, at the in-place rate. 0 otherwise.
  double recompute_seconds = 0;
  // link_bytes / link rate + recompute_seconds (of the same, busiest device) + chunks x the
  // per-chunk cost.
  double seconds = 0;
};
struct LinkModel {
  double bytes_per_second = 50e9;  // host->GPU
  // What each chunk adds to an epoch beside its bytes (launches, pass boundaries, host work per
  // batch): 2-6 ms on one H200 at C = 48-102 (docs/design.md, "Choosing C").
  double seconds_per_chunk = 5e-3;
  // Rows gathered within device memory (`partition --bandwidth-reuse`), for recomputed
  // intermediates.
  double in_place_bytes_per_second = 3900e9;
};
// ", intermediates recomputed (+N s)" where the forecast recomputes them, else empty: for logs
// beside LinkForecast::resident.
std::string recompute_note(const LinkForecast& forecast);
LinkForecast forecast_link(const std::vector<PartitionProfile>& profiles, const ModelLayers& model,
                           const LayoutOptions& layout, const HostDataOptions& options,
                           IntermediatesChoice intermediates, std::int64_t budget,
                           const LinkModel& link = {});

}  // namespace sluice
