// Implementation of preprocess/memory_estimate.hpp. preprocess/ cannot include train/ headers
// (sluice_train links sluice_preprocess, not the other way round), so the few layer and width
// rules below repeat train/model.cpp (make_model) and train/schedule.cpp (the helpers of
// Schedule::Impl and the device buffers of Schedule::Schedule); tests/test_memory_estimate.cpp
// fails when they drift apart. Default schedule options throughout: p2p+reuse transfers,
// overlap, store_transformed, fuse_last_layer, keep_tail, cached intermediates.
#include "preprocess/memory_estimate.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {
namespace {

constexpr std::int64_t kFloat = sizeof(float);
constexpr std::int64_t kIndex = sizeof(vertex_t);

// A row width rounded up to a multiple of 4 floats (train/schedule.cpp, aligned_width).
std::int64_t aligned_width(std::int64_t cols) {
  return (cols + 3) / 4 * 4;
}

// What the CUDA backend charges for an allocation (kernels/cuda/memory.cpp: 256-byte granules).
std::int64_t granule(std::int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// One layer as make_model (train/model.cpp) builds it, with the schedule's view of it.
struct LayerFacts {
  bool last = false;
  std::int64_t in_width = 0, out_width = 0;
  std::int64_t aggregate_width = 0;  // GCN d_l, SAGE 2 d_l; 0 for GAT and transform-first GCN
  std::int64_t transform_width = 0;  // GAT K·F, transform-first GCN d_{l+1}; else 0
  int heads = 1;
  bool transforms = false;      // Schedule::Impl::transforms(): GAT, GCN's narrowing last layer
  bool pretransformed = false;  // Schedule::Impl::pretransformed() (store_transformed on)
  std::int64_t parameters = 0;
  // Schedule::Impl::input_width() and flushed_width().
  std::int64_t input_width() const {
    return pretransformed ? aligned_width(transform_width) : in_width;
  }
  std::int64_t flushed_width() const { return pretransformed ? transform_width : in_width; }
};

std::vector<LayerFacts> layer_facts(const ModelShape& shape) {
  const bool gat = shape.model == "gat";
  std::vector<LayerFacts> layers;
  std::int64_t width = shape.in_dim;
  for (int l = 0; l < shape.layers; ++l) {
    LayerFacts f;
    f.last = l == shape.layers - 1;
    f.in_width = width;
    if (gat) {
      f.heads = f.last ? shape.output_heads : shape.heads;
      const std::int64_t head_width = f.last ? shape.classes : shape.hidden;
      f.transform_width = f.heads * head_width;
      f.out_width = f.last ? head_width : f.transform_width;
      f.transforms = true;
      f.parameters =
          width * f.transform_width + f.out_width + 2 * f.transform_width;  // W b a_s a_d
    } else {
      f.out_width = f.last ? shape.classes : shape.hidden;
      const std::int64_t weight_rows = shape.model == "sage" ? 2 * width : width;
      f.parameters = weight_rows * f.out_width + f.out_width;
      if (shape.model == "gcn" && f.last && f.out_width < width) {
        f.transforms = true;  // transform_first: Â (X W) on d_{l+1}-wide rows
        f.transform_width = f.out_width;
      } else {
        f.aggregate_width = weight_rows;
      }
    }
    f.pretransformed = l > 0 && f.transforms;
    width = f.out_width;
    layers.push_back(f);
  }
  return layers;
}

// The model-wide widths Schedule::Schedule sizes its device buffers by.
struct ScheduleWidths {
  std::int64_t in_max = 0;  // X: inputs of the layers that are not pretransformed or reloaded
  std::int64_t arrival_in_max = 0;  // row slices: inputs of the layers transformed on arrival
  std::int64_t load_max = 0;        // the load stage: every layer's loads
  std::int64_t grad_in_max = 0;     // the flush buffer: gradients flushed by layers above 0
  std::int64_t dx_max = 0;          // dX: layers above 0 that do not transform
  std::int64_t block_out_max = 0;   // set.out: H^{l+1}, or T^{l+1} rows and dT^{l+1} blocks
  std::int64_t out_max = 0, aggregate_max = 0, transform_max = 0;
  int heads_max = 1;
  std::int64_t parameters = 0;
  bool any_transform = false, any_arrival_transform = false, any_stored_transform = false;
  bool tail_in_leave = false;  // layer 1's kept tail lives in the flush buffer
  bool keep_tail = false;
};

ScheduleWidths schedule_widths(const std::vector<LayerFacts>& layers, bool reload_inputs) {
  ScheduleWidths w;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const LayerFacts& layer = layers[l];
    const LayerFacts* above = layer.last ? nullptr : &layers[l + 1];
    const bool stores_transform = above && above->pretransformed;
    w.any_transform |= layer.transforms;
    const bool arrival_transform = layer.transforms && !layer.pretransformed;
    w.any_arrival_transform |= arrival_transform;
    w.any_stored_transform |= stores_transform;
    if (arrival_transform) w.arrival_in_max = std::max(w.arrival_in_max, layer.in_width);
    if (!layer.pretransformed && !(reload_inputs && arrival_transform))
      w.in_max = std::max(w.in_max, layer.in_width);
    w.load_max = std::max(w.load_max, layer.input_width());
    w.block_out_max =
        std::max(w.block_out_max, stores_transform ? above->input_width() : layer.out_width);
    w.out_max = std::max(w.out_max, layer.out_width);
    w.aggregate_max = std::max(w.aggregate_max, layer.aggregate_width);
    w.transform_max = std::max(w.transform_max, layer.transform_width);
    w.heads_max = std::max(w.heads_max, layer.heads);
    w.parameters += layer.parameters;
    if (l == 0) continue;
    w.grad_in_max = std::max(w.grad_in_max, layer.flushed_width());
    if (!layer.transforms) w.dx_max = std::max(w.dx_max, layer.in_width);
  }
  if (layers.size() >= 2)
    w.tail_in_leave = layers[1].pretransformed ? layers[0].transforms : layers[1].transforms;
  w.keep_tail = layers.size() >= 2;  // with the flush buffer when the tail lives in it
  return w;
}

// Adds allocations to an estimate: each at its exact size to its part and, in 256-byte granules,
// to the CUDA setup figure.
class Tally {
 public:
  explicit Tally(GpuMemoryEstimate& e) : e_(e) {}
  void buffer(std::int64_t rows, std::int64_t cols) { add(e_.buffers, rows * cols * kFloat); }
  void optional(std::int64_t rows, std::int64_t cols) { add(e_.overlap, rows * cols * kFloat); }
  void indices(std::int64_t count) { add(e_.constants, count * kIndex); }
  void floats(std::int64_t count) { add(e_.constants, count * kFloat); }
  // A CSR as the CPU backend accounts it (int64 offsets, int32 columns; CUDA: cuda_csr()).
  void cpu_csr(std::int64_t rows, std::int64_t nnz) {
    e_.constants += (rows + 1) * std::int64_t(sizeof(edge_t)) + nnz * kIndex;
  }
  void cuda(std::int64_t bytes) { e_.cuda_setup += granule(bytes); }
  void cuda_scratch(std::int64_t bytes) { e_.cuda_scratch += granule(bytes); }

 private:
  void add(std::int64_t& part, std::int64_t bytes) {
    part += bytes;
    e_.cuda_setup += granule(bytes);
  }
  GpuMemoryEstimate& e_;
};

// Rows of the CUDA backend's GAT kernels with more than this many entries are listed (per CSR
// and per transposed CSR, every model): kernels/cuda/cuda_backend.hpp, long_degree_for().
std::int64_t long_degree(std::int64_t nnz) {
  return std::min<std::int64_t>(1024, std::max<std::int64_t>(128, nnz / 2048));
}

// The arrays kernels/cuda/sparse.cpp (upload_device_csr) uploads for one chunk CSR: offsets and
// columns (int32 below 2^31 - 1 entries, else int64), the self entry of every row, the
// precomputed transpose (offsets over the merged rows, rows, entry permutation) and the lists of
// rows and transposed rows longer than long_degree(nnz). `column_count` (merged rows, zeros) is
// scratch for counting entries per column.
void cuda_csr(Tally& tally, const ChunkPlan& chunk, std::int64_t merged_rows,
              std::vector<std::int32_t>& column_count) {
  const std::int64_t rows = chunk.num_dst(), nnz = chunk.num_entries();
  const std::int64_t index = nnz >= std::numeric_limits<std::int32_t>::max() ? 8 : 4;
  const std::int64_t long_entries = long_degree(nnz);
  std::int64_t long_rows = 0, long_columns = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    long_rows += chunk.indptr[std::size_t(r) + 1] - chunk.indptr[std::size_t(r)] > long_entries;
  for (vertex_t c : chunk.columns)
    long_columns += ++column_count[std::size_t(c)] == long_entries + 1;
  for (vertex_t c : chunk.columns) column_count[std::size_t(c)] = 0;
  tally.cuda(long_rows * kIndex);
  tally.cuda((rows + 1) * index);  // offsets
  tally.cuda(nnz * index);         // columns
  tally.cuda(rows * kIndex);       // self entries
  tally.cuda((merged_rows + 1) * index);
  tally.cuda(nnz * index);  // transposed rows
  tally.cuda(nnz * index);  // transpose permutation
  tally.cuda(long_columns * kIndex);
}

// Entries per owner of the remote entries that satisfy `selected` (pull and push lists are
// uploaded per owner, two arrays each).
template <typename Selected>
void per_owner_lists(Tally& tally, const ChunkPlan& chunk, int partitions, Selected selected) {
  std::vector<std::int64_t> count(std::size_t(partitions), 0);
  for (std::size_t i = 0; i < chunk.remote_owner.size(); ++i)
    if (selected(i)) ++count[std::size_t(chunk.remote_owner[i])];
  for (std::int64_t n : count) {
    tally.indices(n);  // owner rows
    tally.indices(n);  // local rows
  }
}

// Layer 1's kept tail (Schedule::Schedule, tail_lists): the last batch's leaving rows, uploaded
// per chunk of p whose destinations hold them (source and block positions).
void tail_lists(Tally& tally, const Plan& plan, int p) {
  std::vector<int> order;
  for (int c = 0; c < plan.chunks; ++c)
    if (plan.chunk(c, p).num_dst() > 0) order.push_back(c);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return plan.chunk(a, p).dst_begin < plan.chunk(b, p).dst_begin; });
  std::vector<std::int64_t> count(std::size_t(plan.chunks), 0);
  for (vertex_t v : plan.chunk(plan.chunks - 1, p).leave_vertices) {
    const auto it = std::upper_bound(order.begin(), order.end(), v, [&](vertex_t x, int c) {
      return x < plan.chunk(c, p).dst_begin;
    });
    if (it != order.begin()) ++count[std::size_t(*(it - 1))];
  }
  for (std::int64_t n : count) {
    tally.indices(n);
    tally.indices(n);
  }
}

void check_shape(const ModelShape& shape) {
  SLUICE_INPUT_CHECK(shape.model == "gcn" || shape.model == "sage" || shape.model == "gat",
                     "unknown model '", shape.model,
                     "' (expected gcn, sage or gat, the models of sluice-train)");
  // The checks of make_model (train/model.cpp).
  SLUICE_INPUT_CHECK(shape.layers >= 1 && shape.layers <= 64, "--layers must be in [1, 64] (got ",
                     shape.layers, ")");
  SLUICE_INPUT_CHECK(shape.hidden >= 1, "--hidden must be at least 1 (got ", shape.hidden, ")");
  SLUICE_INPUT_CHECK(shape.in_dim >= 1, "the dataset has no features (feature width ", shape.in_dim,
                     ")");
  SLUICE_INPUT_CHECK(shape.classes >= 2, "the dataset has ", shape.classes,
                     " classes; training needs at least 2");
  SLUICE_INPUT_CHECK(shape.heads >= 1 && shape.output_heads >= 1,
                     "--heads and --output-heads must be at least 1 (got ", shape.heads, " and ",
                     shape.output_heads, ")");
}

}  // namespace

GpuMemoryEstimate estimate_gpu_memory(const Plan& plan, int p, const ModelShape& shape) {
  check_shape(shape);
  SLUICE_EXPECTS(p >= 0 && p < plan.partitions, "partition ", p);
  const bool gat = shape.model == "gat";
  const ScheduleWidths w = schedule_widths(layer_facts(shape), shape.reload_inputs);

  // Sizes from the plan (p2p+reuse: the index lists are the plan's own).
  const std::int64_t merged_rows =
      std::int64_t(plan.transition_rows[std::size_t(p)]) + plan.remote_rows[std::size_t(p)];
  const std::int64_t M = std::max<std::int64_t>(merged_rows, 1);
  std::int64_t chunk_rows = 0, max_nnz = 0, max_loads = 0, max_leaves = 0;
  for (int c = 0; c < plan.chunks; ++c) {
    const ChunkPlan& chunk = plan.chunk(c, p);
    chunk_rows = std::max<std::int64_t>(chunk_rows, chunk.num_dst());
    max_nnz = std::max<std::int64_t>(max_nnz, chunk.num_entries());
    max_loads = std::max<std::int64_t>(max_loads, std::int64_t(chunk.load_vertices.size()));
    max_leaves = std::max<std::int64_t>(max_leaves, std::int64_t(chunk.leave_vertices.size()));
  }
  const std::int64_t D = std::max<std::int64_t>(chunk_rows, 1);

  GpuMemoryEstimate e;
  e.merged_rows = merged_rows;
  e.chunk_rows = chunk_rows;
  e.max_nnz = max_nnz;
  Tally tally(e);
  // Working buffers, in the constructor's order.
  if (w.in_max > 0) tally.buffer(M, aligned_width(w.in_max));                // X
  if (w.dx_max > 0) tally.buffer(M, aligned_width(w.dx_max));                // dX
  if (w.aggregate_max > 0) tally.buffer(D, aligned_width(w.aggregate_max));  // A
  tally.buffer(D, aligned_width(w.out_max));                                 // Z
  tally.buffer(D, w.block_out_max);                                          // out
  tally.buffer(D, aligned_width(w.out_max));                                 // dZ
  if (w.aggregate_max > 0 || gat)
    tally.buffer(D, aligned_width(std::max(w.aggregate_max, w.transform_max)));  // dA
  if (w.any_transform) {
    tally.buffer(M, aligned_width(w.transform_max));  // Zm
    tally.buffer(M, aligned_width(w.transform_max));  // dZm
  }
  if (gat) {
    tally.buffer(M, w.heads_max);                                   // el
    tally.buffer(D, w.heads_max);                                   // er
    tally.buffer(std::max<std::int64_t>(max_nnz, 1), w.heads_max);  // alpha
    tally.buffer(D, w.transform_max);                               // head outputs
  }
  const std::int64_t parameters = std::max<std::int64_t>(w.parameters, 1);
  for (int k = 0; k < 4; ++k) tally.buffer(1, parameters);  // parameters, gradients, Adam m, v
  if (w.any_arrival_transform) {
    const std::int64_t rows = std::max<std::int64_t>(
        1, std::min({std::int64_t(65536), std::max(max_loads, max_leaves), M / 4}));
    tally.buffer(rows, aligned_width(w.arrival_in_max));  // transform row slice
    tally.buffer(rows, w.transform_max);                  // transformed-row slice
    tally.indices(rows);                                  // slice positions
  }
  if (w.any_stored_transform) tally.indices(D);  // chunk row positions

  // Per-chunk constants.
  std::vector<std::int32_t> column_count(std::size_t(merged_rows), 0);
  for (int c = 0; c < plan.chunks; ++c) {
    const ChunkPlan& chunk = plan.chunk(c, p);
    const std::int64_t before = e.cuda_setup;
    const std::int64_t rows = chunk.num_dst(), nnz = chunk.num_entries();
    tally.cpu_csr(rows, nnz);
    cuda_csr(tally, chunk, merged_rows, column_count);
    if (!gat) tally.floats(nnz);  // entry values
    tally.indices(rows);          // self columns
    for (int k = 0; k < 3; ++k) tally.indices(std::int64_t(chunk.load_vertices.size()));
    per_owner_lists(tally, chunk, plan.partitions,
                    [&](std::size_t i) { return chunk.remote_pull[i] != 0; });         // pulls
    per_owner_lists(tally, chunk, plan.partitions, [](std::size_t) { return true; });  // pushes
    tally.indices(std::int64_t(chunk.remote_vertices.size()));  // remote slots
    for (int k = 0; k < 3; ++k) tally.indices(std::int64_t(chunk.leave_vertices.size()));
    for (int k = 0; k < 3; ++k) tally.indices(rows);  // destination keys, labels, train mask
    e.cuda_chunk_constants += e.cuda_setup - before;
    e.cuda_largest_chunk = std::max(e.cuda_largest_chunk, e.cuda_setup - before);
  }
  if (max_nnz > 0) tally.cuda(max_nnz * kFloat);  // transposed-SpMM values (CUDA scratch)

  // Overlap buffers: the load stage, the flush buffer and its positions, the second block set.
  const std::int64_t before_overlap = e.cuda_setup;
  if (max_loads > 0) tally.optional(max_loads, w.load_max);
  // With the stage, chunk 0's loads of the last chunk's vertices as rows of its output block
  // (ScheduleOptions::early_next_pass: a forward pass ends before its last stores).
  if (max_loads > 0 && shape.layers >= 2) {
    const std::vector<vertex_t>& v = plan.chunk(0, p).load_vertices;
    const ChunkPlan& last = plan.chunk(plan.chunks - 1, p);
    if (std::is_sorted(v.begin(), v.end())) {
      const auto first = std::lower_bound(v.begin(), v.end(), last.dst_begin);
      const auto stop =
          std::lower_bound(v.begin(), v.end(), vertex_t(last.dst_begin + last.num_dst()));
      if (stop > first) tally.indices(stop - first);
    }
  }
  const bool flush_buffer = max_loads > 0 && max_leaves > 0 && w.grad_in_max > 0;
  if (flush_buffer) {
    tally.optional(max_leaves, w.grad_in_max);
    tally.indices(max_leaves);
  }
  tally.optional(D, w.block_out_max);
  tally.optional(D, w.out_max);
  if (w.aggregate_max > 0) tally.optional(D, aligned_width(w.aggregate_max));
  if (w.keep_tail && (!w.tail_in_leave || flush_buffer)) tail_lists(tally, plan, p);
  e.cuda_overlap = e.cuda_setup - before_overlap;

  // CUDA scratch sized on first use (kernels/cuda/cuda_device.cpp).
  if (gat) {
    tally.cuda_scratch(max_nnz * w.heads_max * kFloat);      // attention gradients (dalpha)
    tally.cuda_scratch(max_nnz * w.heads_max * kFloat);      // transposed weights (atilde)
    tally.cuda_scratch(merged_rows * w.heads_max * kFloat);  // source score gradients
    tally.cuda_scratch(chunk_rows * w.heads_max * kFloat);   // destination score gradients
  }
  tally.cuda_scratch(sizeof(double));  // loss
  tally.cuda_scratch(std::max<std::int64_t>(chunk_rows, 1) * std::int64_t(sizeof(std::int32_t)));

  // The budget: a constant goes to the device, and try_alloc gives an overlap buffer, only while
  // in-use + it + budget / 8 fits the budget (ConstantStore::leaves_headroom), so the setup must
  // fit 7/8 of it; the scratch above then fits the free eighth, or the budget grows to hold it.
  // Not counted, because the budget does not account it or the estimate cannot know it:
  //   - cuSPARSE's SpMM workspace (cuSPARSE sizes it; 0.1-0.6 MB measured for 2-layer GCNs on
  //     an H200, none for GAT): it lives in the free eighth;
  //   - the CUDA context, cuBLAS's own workspace and the library handles, outside the budget's
  //     accounting: --gpu-memory must leave room for them on the GPU;
  //   - the staging of peer copies between GPUs without peer access (push and pull staging);
  //   - SLUICE_CONSTANT_HEADROOM_MIB and non-default schedule options or switches.
  // Per-chunk constants beyond the largest chunk's may live in pinned host memory, read
  // zero-copy (the CUDA backend places them there when the budget is full): the budget needs
  // the largest chunk's only, so that a cap below the partition's whole CSR still has a C.
  e.all_constants = std::max((e.cuda_setup * 8 + 6) / 7, e.cuda_setup + e.cuda_scratch);
  // With constants in host memory the backend also stages a chunk's CSR into device scratch
  // before its operators (CudaDevice::resident_csr): at most the largest chunk's constants.
  const std::int64_t setup = e.cuda_setup - e.cuda_chunk_constants + e.cuda_largest_chunk;
  const std::int64_t scratch = e.cuda_scratch + e.cuda_largest_chunk;
  e.total = std::max((setup * 8 + 6) / 7, setup + scratch);
  const std::int64_t required = setup - e.cuda_overlap;
  e.minimum = std::max((required * 8 + 6) / 7, required + scratch);
  return e;
}

std::int64_t estimate_gpu_bytes(const Plan& plan, int partition, const ModelShape& shape) {
  return estimate_gpu_memory(plan, partition, shape).total;
}

std::int64_t estimate_peak_gpu_bytes(const Plan& plan, const ModelShape& shape) {
  std::int64_t peak = 0;
  for (int p = 0; p < plan.partitions; ++p)
    peak = std::max(peak, estimate_gpu_bytes(plan, p, shape));
  return peak;
}

std::int64_t estimate_minimum_gpu_bytes(const Plan& plan, const ModelShape& shape) {
  std::int64_t peak = 0;
  for (int p = 0; p < plan.partitions; ++p)
    peak = std::max(peak, estimate_gpu_memory(plan, p, shape).minimum);
  return peak;
}

std::vector<BudgetRule> budget_rules(const ModelShape& shape, bool may_reload) {
  ModelShape kept = shape, reloaded = shape;
  kept.reload_inputs = false;
  reloaded.reload_inputs = true;
  // Reloading changes the estimate only where a layer keeps input rows it transforms on arrival.
  const ScheduleWidths a = schedule_widths(layer_facts(kept), false);
  const ScheduleWidths b = schedule_widths(layer_facts(reloaded), true);
  const bool keep = !shape.reload_inputs;
  const bool reload = (shape.reload_inputs || may_reload) && (a.in_max != b.in_max || !keep);
  std::vector<BudgetRule> rules;
  for (const bool all_overlap : {true, false}) {
    if (keep) rules.push_back({false, all_overlap});
    if (reload) rules.push_back({true, all_overlap});
  }
  return rules;
}

std::vector<std::int64_t> rules_bytes(const Plan& plan, const ModelShape& shape,
                                      const std::vector<BudgetRule>& rules) {
  std::vector<std::int64_t> bytes(rules.size(), 0);
  for (const bool reload : {false, true}) {
    if (std::none_of(rules.begin(), rules.end(),
                     [&](const BudgetRule& r) { return r.reload_inputs == reload; }))
      continue;
    ModelShape s = shape;
    s.reload_inputs = reload;
    for (int p = 0; p < plan.partitions; ++p) {
      const GpuMemoryEstimate e = estimate_gpu_memory(plan, p, s);
      for (std::size_t r = 0; r < rules.size(); ++r)
        if (rules[r].reload_inputs == reload)
          bytes[r] = std::max(bytes[r], rules[r].all_overlap ? e.total : e.minimum);
    }
  }
  return bytes;
}

std::int64_t rule_bytes(const Plan& plan, const ModelShape& shape, const BudgetRule& rule) {
  return rules_bytes(plan, shape, {rule}).front();
}

std::string describe_estimate(const Plan& plan, const ModelShape& shape) {
  int peak = 0;
  GpuMemoryEstimate e;
  for (int p = 0; p < plan.partitions; ++p) {
    GpuMemoryEstimate candidate = estimate_gpu_memory(plan, p, shape);
    if (p == 0 || candidate.total > e.total) {
      e = candidate;
      peak = p;
    }
  }
  const auto bytes = [](std::int64_t b) { return format_bytes(double(b)); };
  return cat("partition ", peak, ": transition buffer ", e.merged_rows, " rows, largest chunk ",
             e.chunk_rows, " rows / ", e.max_nnz, " entries; working buffers ", bytes(e.buffers),
             ", overlap buffers ", bytes(e.overlap), ", largest chunk's constants ",
             bytes(e.cuda_largest_chunk));
}

}  // namespace sluice
