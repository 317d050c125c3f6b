// Implementation of train/layout/buffer_layout.hpp. The schedule allocates its device buffers in
// the order and under the conditions below (train/schedule_setup.cpp); the list sizes are those
// of its derive_lists() and tail_lists(), which it checks against them.
#include "train/layout/buffer_layout.hpp"

#include <omp.h>

#include <algorithm>
#include <parallel/algorithm>

#include "common/error.hpp"
#include "common/parallel.hpp"

namespace sluice {

const char* last_layer_rows_name(LastLayerRows rows) {
  return rows == LastLayerRows::kLoss ? "loss" : "all";
}

LastLayerRows parse_last_layer_rows(const std::string& text, const std::string& option) {
  if (text == "loss") return LastLayerRows::kLoss;
  if (text == "all") return LastLayerRows::kAll;
  throw InputError(cat("unknown ", option, " '", text, "' (expected loss or all)"));
}

LossRowFlags loss_row_flags(const Dataset& dataset, const std::vector<vertex_t>& old_to_new) {
  SLUICE_INPUT_CHECK(std::int64_t(old_to_new.size()) == dataset.num_nodes, "the plan renumbers ",
                     old_to_new.size(), " vertices, dataset '", dataset.name, "' has ",
                     dataset.num_nodes, " (plan built from another dataset?)");
  SLUICE_EXPECTS(std::int64_t(dataset.labels.size()) == dataset.num_nodes,
                 "loss-row flags of dataset '", dataset.name, "' read without its labels");
  LossRowFlags flags(std::size_t(dataset.num_nodes), 0);
  for (const vertex_t v : dataset.train)
    if (dataset.labels[std::size_t(v)] >= 0) flags[std::size_t(old_to_new[std::size_t(v)])] = 1;
  return flags;
}

std::int64_t aligned_width(std::int64_t cols) {
  return (cols + 3) / 4 * 4;
}

LayerRoles layer_roles(const ModelLayers& model, int l, const LayoutOptions& options) {
  SLUICE_EXPECTS(l >= 0 && l < int(model.layers.size()), "layer ", l, " of ", model.layers.size());
  const auto transforms = [&](const LayerShape& layer) {
    return model.kind == ModelKind::kGat || layer.transform_first;
  };
  const auto pretransformed = [&](const LayerShape& layer) {
    return layer.index > 0 && transforms(layer);
  };
  const LayerShape& layer = model.layers[std::size_t(l)];
  LayerRoles r;
  r.transforms = transforms(layer);
  r.pretransformed = pretransformed(layer);
  r.transforms_on_arrival = r.transforms && !r.pretransformed;
  r.reloads_inputs = options.reload_inputs && r.transforms_on_arrival;
  r.attends_inputs = model.kind == ModelKind::kGat && l == 0 && !layer.last &&
                     options.gat_layer_zero == GatLayerZero::kAttendInputs;
  SLUICE_EXPECTS(!(r.attends_inputs && r.reloads_inputs),
                 "GAT's layer 0 attends over its input rows only where it keeps them");
  const LayerShape* above = layer.last ? nullptr : &model.layers[std::size_t(l) + 1];
  r.stores_transform = above && pretransformed(*above);
  r.input_width = r.pretransformed ? aligned_width(layer.transform_width) : layer.in_width;
  r.flushed_width = r.pretransformed ? layer.transform_width : layer.in_width;
  r.output_width = r.stores_transform ? aligned_width(above->transform_width) : layer.out_width;
  return r;
}

bool tail_in_flush_buffer(const ModelLayers& model, const LayoutOptions& options) {
  if (model.layers.size() < 2) return false;
  const LayerRoles zero = layer_roles(model, 0, options), one = layer_roles(model, 1, options);
  // GAT's layer 0 attending over its input rows writes no dZm (it has no input gradient).
  return one.pretransformed ? zero.transforms && !zero.attends_inputs : one.transforms;
}

bool keeps_tail(const ModelLayers& model, const LayoutOptions& options) {
  return model.layers.size() >= 2 && options.comm != CommMode::kBaseline &&
         (!tail_in_flush_buffer(model, options) || options.overlap);
}

BufferWidths layer_buffer_widths(const ModelLayers& model, const LayoutOptions& options) {
  std::int64_t in_max = 0, arrival_in_max = 0, load_max = 0, grad_in_max = 0, dx_max = 0;
  std::int64_t block_out_max = 0, out_max = 0, aggregate_max = 0, transform_max = 0;
  std::int64_t transformed_max = 0;  // of the layers with rows in Zm
  std::int64_t pushed_max = 0;       // of the gradient rows pushed to their owners
  // dA: the gradient of an aggregation whose input gradient a layer above 0 computes
  // (aggregate_backward()), and the head-mean backward of GAT's last layer.
  std::int64_t aggregation_gradient_max = 0;
  int heads_max = 1;
  std::int64_t transposed_coefficient_heads = 0;
  bool any_transform = false, any_arrival_transform = false, any_stored_transform = false;
  bool sage_transforms_first = false;
  std::int64_t side_by_side = 0;
  std::int64_t input_aggregation = 0, input_attention = 0, input_heads = 0, input_width = 0;
  for (const LayerShape& layer : model.layers) {
    const LayerRoles r = layer_roles(model, layer.index, options);
    // Its head outputs are as wide as a transform-first layer's.
    transform_max = std::max(transform_max, layer.transform_width);
    if (r.attends_inputs) {
      input_heads = layer.heads;
      input_width = layer.in_width;
      input_aggregation = aligned_width(layer.heads * layer.in_width + layer.heads);
      input_attention = 4 * layer.heads * layer.in_width;
      in_max = std::max(in_max, layer.in_width);
      load_max = std::max(load_max, r.input_width);
      block_out_max = std::max(block_out_max, r.output_width);
      out_max = std::max(out_max, layer.out_width);
      if (options.gat_head_outputs == GatHeadOutputs::kKept)
        aggregate_max = std::max(aggregate_max, layer.aggregate_width);
      heads_max = std::max(heads_max, layer.heads);
      any_stored_transform |= r.stores_transform;
      continue;  // no Zm, dZm, slices or transposed coefficients; layer 0: no input gradient
    }
    // Its backward pass pushes the remote rows' gradients to their owners where it flushes
    // (layers above 0, and a layer 0 that transforms): rows of dZm or of dX.
    if (layer.index > 0 || r.transforms)
      pushed_max = std::max(pushed_max, r.transforms ? layer.transform_width : layer.in_width);
    any_transform |= r.transforms;
    any_arrival_transform |= r.transforms_on_arrival;
    any_stored_transform |= r.stores_transform;
    sage_transforms_first |= model.kind == ModelKind::kSage && layer.transform_first;
    if (model.kind == ModelKind::kSage && layer.transform_first)
      side_by_side = layer.in_width * aligned_width(layer.transform_width);
    if (r.transforms_on_arrival) arrival_in_max = std::max(arrival_in_max, layer.in_width);
    if (!r.pretransformed && !r.reloads_inputs) in_max = std::max(in_max, layer.in_width);
    load_max = std::max(load_max, r.input_width);
    block_out_max = std::max(block_out_max, r.output_width);
    out_max = std::max(out_max, layer.out_width);
    // GAT's A buffer holds kept head outputs only.
    if (model.kind != ModelKind::kGat || options.gat_head_outputs == GatHeadOutputs::kKept)
      aggregate_max = std::max(aggregate_max, layer.aggregate_width);
    transformed_max = std::max(transformed_max, layer.transform_width);
    heads_max = std::max(heads_max, layer.heads);
    if (model.kind == ModelKind::kGat && layer.heads > 0 &&
        !cuda::gat_backward_by_source(layer.heads, layer.transform_width / layer.heads))
      transposed_coefficient_heads =
          std::max<std::int64_t>(transposed_coefficient_heads, layer.heads);
    if (model.kind == ModelKind::kGat && layer.last)
      aggregation_gradient_max = std::max(aggregation_gradient_max, layer.transform_width);
    if (layer.index == 0) continue;
    grad_in_max = std::max(grad_in_max, r.flushed_width);
    if (!r.transforms) {
      dx_max = std::max(dx_max, layer.in_width);
      aggregation_gradient_max = std::max(aggregation_gradient_max, layer.aggregate_width);
    }
  }
  const bool gat = model.kind == ModelKind::kGat;
  BufferWidths w;
  w.transition = in_max > 0 ? aligned_width(in_max) : 0;
  w.transition_gradient = dx_max > 0 ? aligned_width(dx_max) : 0;
  w.aggregation = aggregate_max > 0 ? aligned_width(aggregate_max) : 0;
  w.pre_activation = aligned_width(out_max);
  w.layer_output = block_out_max;
  w.second_output_gradient = out_max;
  w.aggregation_gradient =
      aggregation_gradient_max > 0 ? aligned_width(aggregation_gradient_max) : 0;
  w.transformed = any_transform ? aligned_width(transformed_max) : 0;
  w.received = pushed_max > 0 ? aligned_width(pushed_max) : 0;
  w.heads = gat ? heads_max : 0;
  w.transposed_coefficient_heads = transposed_coefficient_heads;
  w.head_outputs = gat ? transform_max : 0;
  if (gat && model.layers.size() >= 2 && options.gat_head_outputs == GatHeadOutputs::kKept) {
    const LayerShape& last = model.layers.back();
    w.last_layer_transformed = aligned_width(last.transform_width);
    w.last_layer_heads = last.heads;
  }
  w.slice_inputs = any_arrival_transform ? aligned_width(arrival_in_max) : 0;
  w.slice_transformed = any_arrival_transform ? transformed_max : 0;
  w.input_aggregation = input_aggregation;
  w.input_attention = input_attention;
  w.input_heads = input_heads;
  w.input_width = input_width;
  w.load_stage = load_max;
  w.flush = grad_in_max;
  w.parameters = std::max<std::int64_t>(model.parameters, 1);
  w.side_by_side_weights = side_by_side;
  // Forward passes that store transforms apply the next layer's dropout to a chunk's rows;
  // SAGE's transform-first layer adds the rows' own T_self to theirs.
  w.chunk_row_positions = any_stored_transform || sage_transforms_first;
  w.tail_in_flush_buffer = tail_in_flush_buffer(model, options);
  w.keep_tail = keeps_tail(model, options);
  return w;
}

std::int64_t slice_rows(std::int64_t max_loads, std::int64_t max_leaves, std::int64_t merged_rows) {
  const std::int64_t buffer_rows = std::max<std::int64_t>(merged_rows, 1);
  return std::max<std::int64_t>(
      1, std::min({kSliceRows, std::max(max_loads, max_leaves), buffer_rows / 4}));
}

namespace {

// Entries per owner, owners ascending, owners without entries left out (group_by_owner).
template <typename Selected>
std::vector<std::int64_t> per_owner(const ChunkPlan& chunk, int partitions, Selected selected) {
  std::vector<std::int64_t> count(std::size_t(partitions), 0);
  for (std::size_t i = 0; i < chunk.remote_owner.size(); ++i)
    if (selected(i)) ++count[std::size_t(chunk.remote_owner[i])];
  count.erase(std::remove(count.begin(), count.end(), 0), count.end());
  return count;
}

}  // namespace

std::vector<ChunkListSizes> chunk_list_sizes(const Plan& plan, int p, CommMode comm) {
  const int C = plan.chunks, P = plan.partitions;
  const std::int64_t merged_rows =
      std::int64_t(plan.transition_rows[std::size_t(p)]) + plan.remote_rows[std::size_t(p)];
  std::vector<ChunkListSizes> sizes(static_cast<std::size_t>(C));
  std::vector<std::uint8_t> seen;
  if (comm == CommMode::kBaseline) seen.assign(std::size_t(merged_rows), 0);
  for (int c = 0; c < C; ++c) {
    const ChunkPlan& chunk = plan.chunk(c, p);
    ChunkListSizes& s = sizes[std::size_t(c)];
    s.rows = chunk.num_dst();
    s.nnz = chunk.num_entries();
    switch (comm) {
      case CommMode::kBaseline:
        for (vertex_t column : chunk.columns)
          if (!seen[std::size_t(column)]) {
            seen[std::size_t(column)] = 1;
            ++s.loads;
          }
        for (vertex_t column : chunk.columns) seen[std::size_t(column)] = 0;
        s.leaves = s.loads;
        break;
      case CommMode::kP2p:
        s.loads = std::int64_t(chunk.reuse_count) + std::int64_t(chunk.load_vertices.size());
        s.leaves = s.loads;
        s.remote = std::int64_t(chunk.remote_vertices.size());
        s.pushes = per_owner(chunk, P, [](std::size_t) { return true; });
        s.pulls = s.pushes;
        break;
      case CommMode::kP2pReuse:
        s.loads = std::int64_t(chunk.load_vertices.size());
        s.leaves = std::int64_t(chunk.leave_vertices.size());
        s.remote = std::int64_t(chunk.remote_vertices.size());
        s.pushes = per_owner(chunk, P, [](std::size_t) { return true; });
        s.pulls = per_owner(chunk, P, [&](std::size_t i) { return chunk.remote_pull[i] != 0; });
        break;
    }
  }
  if (comm == CommMode::kBaseline) return sizes;
  // Every remote entry of the other partitions' chunks of the batch pushes its gradient row to
  // its owner.
  for (int c = 0; c < C; ++c)
    for (int q = 0; q < P; ++q)
      if (q != p)
        for (const int owner : plan.chunk(c, q).remote_owner)
          sizes[std::size_t(c)].received += owner == p;
  // The last batch's leaving rows by the chunk of p whose destinations they are.
  std::vector<int> order;  // chunks of p with destinations, by first destination
  for (int c = 0; c < C; ++c)
    if (plan.chunk(c, p).num_dst() > 0) order.push_back(c);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return plan.chunk(a, p).dst_begin < plan.chunk(b, p).dst_begin; });
  // The last batch's leave list holds every row in a transition slot then (in p2p mode too).
  for (vertex_t v : plan.chunk(C - 1, p).leave_vertices) {
    const auto it = std::upper_bound(order.begin(), order.end(), v, [&](vertex_t x, int c) {
      return x < plan.chunk(c, p).dst_begin;
    });
    if (it != order.begin()) ++sizes[std::size_t(*(it - 1))].tail;
  }
  return sizes;
}

namespace {

// Chunk 0's loads of the last chunk's vertices (a contiguous run of its load list when sorted).
std::int64_t head_rows(const Plan& plan, int p, CommMode comm) {
  if (comm == CommMode::kBaseline) return 0;
  // p2p's batch 0 loads exactly the plan's loads (no slot is occupied before), sorted.
  std::vector<vertex_t> v = plan.chunk(0, p).load_vertices;
  if (comm == CommMode::kP2p) std::sort(v.begin(), v.end());
  if (!std::is_sorted(v.begin(), v.end())) return 0;
  const ChunkPlan& last = plan.chunk(plan.chunks - 1, p);
  const auto first = std::lower_bound(v.begin(), v.end(), last.dst_begin);
  const auto stop = std::lower_bound(v.begin(), v.end(), vertex_t(last.dst_begin + last.num_dst()));
  return stop - first;
}

// The shape of a chunk's CSR, or of its rows flagged in `keep` (by chunk row; null: every row)
// with the others left empty: its long rows, and its long columns (columns with more entries
// than the threshold), counted in `column_count` (merged_rows zeros, left zero): by a team over
// the rows (atomic counts) with CsrShapeThreads::kTeam, else on the calling thread.
enum class CsrShapeThreads { kOne, kTeam };
CsrShape csr_shape(const ChunkPlan& chunk, const std::uint8_t* keep, std::int64_t merged_rows,
                   std::vector<std::int32_t>& column_count, CsrShapeThreads threads) {
  CsrShape csr;
  csr.rows = chunk.num_dst();
  csr.cols = merged_rows;
  const std::int64_t rows = csr.rows;
  const std::vector<edge_t>& indptr = chunk.indptr;
  const auto length = [&](std::int64_t r) -> std::int64_t {
    return keep && !keep[r] ? 0 : indptr[std::size_t(r) + 1] - indptr[std::size_t(r)];
  };
  const bool team = threads == CsrShapeThreads::kTeam && worth_parallel(chunk.num_entries());
  std::int64_t nnz = 0;
#pragma omp parallel for schedule(static) reduction(+ : nnz) if (team)
  for (std::int64_t r = 0; r < rows; ++r) nnz += length(r);
  csr.nnz = nnz;
  const std::int64_t threshold = cuda::long_degree_for(csr.nnz);
  std::int64_t long_rows = 0, long_columns = 0;
#pragma omp parallel for schedule(static) reduction(+ : long_rows) if (team)
  for (std::int64_t r = 0; r < rows; ++r) long_rows += length(r) > threshold ? 1 : 0;
  // Column counts, then each column's count taken (and zeroed) by the first of its entries.
  std::int32_t* count = column_count.data();
  const vertex_t* columns = chunk.columns.data();
  if (!team) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (edge_t e = indptr[std::size_t(r)], end = e + length(r); e < end; ++e)
        ++count[columns[e]];
    for (std::int64_t r = 0; r < rows; ++r)
      for (edge_t e = indptr[std::size_t(r)], end = e + length(r); e < end; ++e) {
        long_columns += count[columns[e]] > threshold ? 1 : 0;
        count[columns[e]] = 0;
      }
  } else {
#pragma omp parallel for schedule(dynamic, 256) if (team)
    for (std::int64_t r = 0; r < rows; ++r)
      for (edge_t e = indptr[std::size_t(r)], end = e + length(r); e < end; ++e) {
#pragma omp atomic update
        ++count[columns[e]];
      }
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : long_columns) if (team)
    for (std::int64_t r = 0; r < rows; ++r)
      for (edge_t e = indptr[std::size_t(r)], end = e + length(r); e < end; ++e) {
        std::int32_t seen;
#pragma omp atomic capture
        {
          seen = count[columns[e]];
          count[columns[e]] = 0;
        }
        long_columns += seen > threshold ? 1 : 0;
      }
  }
  csr.long_rows = long_rows;
  csr.long_columns = long_columns;
  return csr;
}

// Appends buffers, leaving out those of no size (the backends allocate nothing for them).
class LayoutBuilder {
 public:
  explicit LayoutBuilder(std::vector<BufferSpec>& out) : out_(out) {}
  void add(BufferRole role, BufferKind kind, std::int64_t rows, std::int64_t width,
           OverlapGroup group = OverlapGroup::kNone, int chunk = -1) {
    if (rows <= 0 || width <= 0) return;
    BufferSpec b;
    b.role = role;
    b.kind = kind;
    b.group = group;
    b.chunk = chunk;
    b.rows = rows;
    b.width = width;
    out_.push_back(b);
  }
  void required(BufferRole role, std::int64_t rows, std::int64_t width) {
    add(role, BufferKind::kRequired, rows, width);
  }
  void list(BufferRole role, std::int64_t count, int chunk = -1,
            OverlapGroup group = OverlapGroup::kNone) {
    add(role, BufferKind::kConstant, count, 1, group, chunk);
  }
  void scratch(BufferRole role, BufferKind kind, std::int64_t rows, std::int64_t width,
               std::int64_t element_bytes = 4) {
    add(role, kind, rows, width);
    if (rows > 0 && width > 0) out_.back().element_bytes = element_bytes;
  }
  void csr(BufferRole role, int chunk, const CsrShape& shape) {
    BufferSpec b;
    b.role = role;
    b.kind = BufferKind::kConstant;
    b.chunk = chunk;
    b.rows = shape.rows;
    b.width = 1;
    b.csr = shape;
    out_.push_back(b);
  }

 private:
  std::vector<BufferSpec>& out_;
};

// The vertex in each slot of partition p's remote region (one chunk a partition).
std::vector<vertex_t> remote_slot_vertices(const Plan& plan, int p) {
  const ChunkPlan& chunk = plan.chunk(0, p);
  std::vector<vertex_t> vertex(std::size_t(plan.remote_rows[std::size_t(p)]), -1);
  for (std::size_t i = 0; i < chunk.remote_slots.size(); ++i)
    vertex[std::size_t(chunk.remote_slots[i])] = chunk.remote_vertices[i];
  return vertex;
}

// Whether the vertex in each slot of partition p's remote region is a loss row's (one chunk a
// partition): the remote loss slots of owners_loss_rows_csr() and its shape.
std::vector<std::uint8_t> remote_loss_slots(const Plan& plan, int p,
                                            const LossRowFlags& loss_rows) {
  const std::vector<vertex_t> vertex = remote_slot_vertices(plan, p);
  std::vector<std::uint8_t> loss(vertex.size(), 0);
  for (std::size_t s = 0; s < vertex.size(); ++s)
    loss[s] = vertex[s] >= 0 && loss_rows[std::size_t(vertex[s])];
  return loss;
}

}  // namespace

bool loss_cut_mirrors(const Plan& plan, const LossRowFlags& loss_rows) {
  if (plan.chunks != 1 || plan.partitions < 2 || loss_rows.empty()) return false;
  // (v, u) for each entry of a loss row v into another partition's u, and for each entry of a
  // row u into another partition's loss vertex v: the same pairs where the cut mirrors itself.
  const auto pair = [](vertex_t v, vertex_t u) {
    return std::uint64_t(std::uint32_t(v)) << 32 | std::uint32_t(u);
  };
  std::vector<std::uint64_t> read_by_loss_rows, reading_loss_vertices;
  for (int p = 0; p < plan.partitions; ++p) {
    const ChunkPlan& chunk = plan.chunk(0, p);
    const std::int64_t transition = plan.transition_rows[std::size_t(p)];
    const std::vector<vertex_t> slot_vertex = remote_slot_vertices(plan, p);
    for (vertex_t r = 0; r < chunk.num_dst(); ++r) {
      const vertex_t v = chunk.dst_begin + r;
      for (edge_t e = chunk.indptr[std::size_t(r)]; e < chunk.indptr[std::size_t(r) + 1]; ++e) {
        const std::int64_t column = chunk.columns[std::size_t(e)];
        if (column < transition) continue;
        const vertex_t u = slot_vertex[std::size_t(column - transition)];
        if (loss_rows[std::size_t(v)]) read_by_loss_rows.push_back(pair(v, u));
        if (loss_rows[std::size_t(u)]) reading_loss_vertices.push_back(pair(u, v));
      }
    }
  }
  for (std::vector<std::uint64_t>* pairs : {&read_by_loss_rows, &reading_loss_vertices})
    __gnu_parallel::sort(pairs->begin(), pairs->end());
  return read_by_loss_rows == reading_loss_vertices;
}

CsrArrays loss_rows_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                        const std::uint8_t* keep) {
  const std::int64_t rows = std::int64_t(indptr.size()) - 1;
  CsrArrays out;
  out.indptr.assign(std::size_t(rows) + 1, 0);
  for (std::int64_t r = 0; r < rows; ++r)
    out.indptr[std::size_t(r) + 1] =
        out.indptr[std::size_t(r)] +
        (keep[r] ? indptr[std::size_t(r) + 1] - indptr[std::size_t(r)] : 0);
  out.columns.resize(std::size_t(out.indptr.back()));
#pragma omp parallel for schedule(dynamic, 1024) if (worth_parallel(std::int64_t(columns.size())))
  for (std::int64_t r = 0; r < rows; ++r)
    if (keep[r])
      std::copy(columns.begin() + indptr[std::size_t(r)],
                columns.begin() + indptr[std::size_t(r) + 1],
                out.columns.begin() + out.indptr[std::size_t(r)]);
  return out;
}

CsrArrays owners_loss_rows_csr(const Plan& plan, int p, const LossRowFlags& loss_rows) {
  SLUICE_EXPECTS(plan.chunks == 1 && p >= 0 && p < plan.partitions,
                 "the owners' loss-row CSR of partition ", p, " of a plan of ", plan.partitions,
                 " x ", plan.chunks, " chunks (one chunk a partition)");
  const ChunkPlan& chunk = plan.chunk(0, p);
  const std::int64_t rows = chunk.num_dst();
  const std::int64_t transition = plan.transition_rows[std::size_t(p)];
  const std::int64_t merged = transition + plan.remote_rows[std::size_t(p)];
  SLUICE_EXPECTS(rows <= transition, "partition ", p, ": ", rows, " rows beyond ", transition,
                 " transition slots");
  const std::vector<std::uint8_t> loss_slots = remote_loss_slots(plan, p, loss_rows);
  const auto loss_slot = [&](std::int64_t column) {
    return column >= transition && loss_slots[std::size_t(column - transition)];
  };
  // The chunk's loss rows, then empty rows up to the remote region, whose rows follow: a remote
  // loss vertex read by `readers` of the chunk's rows takes its self entry and those readers, in
  // the order of their rows. The rows go in blocks of about equal entries, each counting its
  // readers of every slot (so that block b's readers of slot s follow those of blocks before b),
  // on an OpenMP team where worth it; any count of blocks builds the same CSR.
  CsrArrays out = loss_rows_csr(chunk.indptr, chunk.columns, loss_rows.data() + chunk.dst_begin);
  const std::int64_t remote = merged - transition, entries = chunk.num_entries();
  constexpr std::int64_t kEntriesPerBlock = 4096, kMaxBlocks = 64, kCountBytes = 64 << 20;
  const std::int64_t blocks = std::max<std::int64_t>(
      1,
      std::min({kMaxBlocks, entries / kEntriesPerBlock + 1, 4 * std::int64_t(omp_get_max_threads()),
                kCountBytes / std::max<std::int64_t>(1, 4 * remote)}));
  std::vector<std::int64_t> first_row(std::size_t(blocks) + 1, rows);
  for (std::int64_t b = 0; b < blocks; ++b)
    first_row[std::size_t(b)] =
        std::lower_bound(chunk.indptr.begin(), chunk.indptr.begin() + rows, entries * b / blocks) -
        chunk.indptr.begin();
  // count[b * remote + s]: block b's readers of slot s, then where they start in the slot's row.
  std::vector<std::int32_t> count(std::size_t(blocks * remote), 0);
  const bool team = worth_parallel(entries);
#pragma omp parallel for schedule(dynamic, 1) if (team)
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::int32_t* mine = count.data() + b * remote;
    for (edge_t e = chunk.indptr[std::size_t(first_row[std::size_t(b)])];
         e < chunk.indptr[std::size_t(first_row[std::size_t(b) + 1])]; ++e)
      if (loss_slot(chunk.columns[std::size_t(e)]))
        ++mine[chunk.columns[std::size_t(e)] - transition];
  }
  std::vector<edge_t> readers(std::size_t(remote), 0);
#pragma omp parallel for schedule(static) if (team)
  for (std::int64_t s = 0; s < remote; ++s) {
    std::int32_t at = 1;  // after the self entry
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int32_t n = count[std::size_t(b * remote + s)];
      count[std::size_t(b * remote + s)] = at;
      at += n;
    }
    readers[std::size_t(s)] = at - 1;
  }
  out.indptr.resize(std::size_t(merged) + 1, out.indptr.back());
  for (std::int64_t s = transition; s < merged; ++s) {
    const edge_t n = readers[std::size_t(s - transition)];
    out.indptr[std::size_t(s) + 1] = out.indptr[std::size_t(s)] + (n > 0 ? 1 + n : 0);
  }
  out.columns.resize(std::size_t(out.indptr.back()));
  const edge_t* slot_begin = out.indptr.data() + transition;
#pragma omp parallel for schedule(dynamic, 1) if (team)
  for (std::int64_t b = 0; b < blocks; ++b) {
    if (b == 0)
      for (std::int64_t s = 0; s < remote; ++s)
        if (readers[std::size_t(s)] > 0)
          out.columns[std::size_t(slot_begin[s])] = vertex_t(transition + s);
    std::int32_t* next = count.data() + b * remote;
    for (std::int64_t r = first_row[std::size_t(b)]; r < first_row[std::size_t(b) + 1]; ++r) {
      const edge_t begin = chunk.indptr[std::size_t(r)], end = chunk.indptr[std::size_t(r) + 1];
      const vertex_t self = chunk.columns[std::size_t(begin)];  // the row's own slot
      for (edge_t e = begin; e < end; ++e) {
        const vertex_t column = chunk.columns[std::size_t(e)];
        if (loss_slot(column)) {
          const std::int64_t s = column - transition;
          out.columns[std::size_t(slot_begin[s] + next[s]++)] = self;
        }
      }
    }
  }
  return out;
}

CsrShape owners_loss_csr_shape(const Plan& plan, int p, const LossRowFlags& loss_rows) {
  SLUICE_EXPECTS(plan.chunks == 1 && p >= 0 && p < plan.partitions,
                 "the owners' loss-row CSR shape of partition ", p, " of a plan of ",
                 plan.partitions, " x ", plan.chunks, " chunks (one chunk a partition)");
  const ChunkPlan& chunk = plan.chunk(0, p);
  const std::int64_t rows = chunk.num_dst();
  const std::int64_t transition = plan.transition_rows[std::size_t(p)];
  const std::int64_t merged = transition + plan.remote_rows[std::size_t(p)];
  const std::vector<std::uint8_t> loss_slots = remote_loss_slots(plan, p, loss_rows);
  const std::uint8_t* keep = loss_rows.data() + chunk.dst_begin;
  const std::vector<edge_t>& indptr = chunk.indptr;
  const vertex_t* columns = chunk.columns.data();
  // count[c]: the entries of column c; readers[s]: the chunk's entries into remote loss slot s.
  // A loss row keeps its entries; a row reading k remote loss slots adds k entries in its own
  // column (its self entry's), one in each of those slots' rows; each slot read gets its self
  // entry.
  std::vector<std::int32_t> count(std::size_t(merged), 0);
  std::vector<std::int32_t> readers(std::size_t(merged - transition), 0);
  std::int64_t loss_entries = 0;
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : loss_entries) if (worth_parallel(chunk.num_entries()))
  for (std::int64_t r = 0; r < rows; ++r) {
    const edge_t begin = indptr[std::size_t(r)], end = indptr[std::size_t(r) + 1];
    std::int32_t read = 0;
    for (edge_t e = begin; e < end; ++e) {
      const vertex_t c = columns[e];
      if (keep[r]) {
#pragma omp atomic update
        ++count[std::size_t(c)];
      }
      if (c >= transition && loss_slots[std::size_t(c - transition)]) {
        ++read;
#pragma omp atomic update
        ++readers[std::size_t(c - transition)];
      }
    }
    if (keep[r]) loss_entries += end - begin;
    if (read > 0) {
#pragma omp atomic update
      count[std::size_t(columns[begin])] += read;
    }
  }
  CsrShape shape;
  shape.rows = merged;
  shape.cols = merged;
  shape.nnz = loss_entries;
  for (std::size_t s = 0; s < readers.size(); ++s)
    if (readers[s] > 0) {
      shape.nnz += 1 + readers[s];
      ++count[std::size_t(transition) + s];
    }
  const std::int64_t threshold = cuda::long_degree_for(shape.nnz);
  for (std::int64_t r = 0; r < rows; ++r)
    shape.long_rows += keep[r] && indptr[std::size_t(r) + 1] - indptr[std::size_t(r)] > threshold;
  for (const std::int32_t n : readers) shape.long_rows += n > 0 && 1 + n > threshold;
  for (const std::int32_t n : count) shape.long_columns += n > threshold;
  return shape;
}

bool sends_loss_gradients(const PartitionProfile& profile, const ModelLayers& model,
                          const LayoutOptions& options) {
  if (options.loss_row_exchange != LossRowExchange::kSendGradients ||
      options.last_layer_rows != LastLayerRows::kLoss || profile.owners_loss_csr.empty() ||
      model.kind != ModelKind::kGcn || model.layers.size() < 2)
    return false;
  return layer_roles(model, int(model.layers.size()) - 1, options).transforms;
}

PartitionProfile partition_profile(const Plan& plan, int p, CommMode comm,
                                   const LossRowFlags& loss_rows) {
  return partition_profile(
      plan, p, comm, loss_rows,
      loss_cut_mirrors(plan, loss_rows) ? LossCut::kMirrored : LossCut::kNotMirrored);
}

PartitionProfile partition_profile(const Plan& plan, int p, CommMode comm,
                                   const LossRowFlags& loss_rows, LossCut cut) {
  SLUICE_EXPECTS(p >= 0 && p < plan.partitions, "partition ", p, " of ", plan.partitions);
  SLUICE_EXPECTS(loss_rows.empty() || std::int64_t(loss_rows.size()) == plan.num_nodes,
                 loss_rows.size(), " loss-row flags for a plan of ", plan.num_nodes, " vertices");
  PartitionProfile profile;
  profile.partition = p;
  profile.comm = comm;
  profile.transition_rows = plan.transition_rows[std::size_t(p)];
  profile.remote_rows = plan.remote_rows[std::size_t(p)];
  profile.head_rows = head_rows(plan, p, comm);
  profile.lists = chunk_list_sizes(plan, p, comm);
  const std::int64_t merged_rows = profile.transition_rows + profile.remote_rows;
  // Chunks in parallel, each on one thread with its own counts, when there are enough of them
  // to keep the threads busy; else one chunk after the other, each by the whole team.
  const int C = plan.chunks;
  const bool losses = !loss_rows.empty();
  profile.csr.resize(std::size_t(C));
  if (losses) profile.loss_csr.resize(std::size_t(C));
  const auto shapes = [&](int c, std::vector<std::int32_t>& column_count, CsrShapeThreads threads) {
    const ChunkPlan& chunk = plan.chunk(c, p);
    profile.csr[std::size_t(c)] = csr_shape(chunk, nullptr, merged_rows, column_count, threads);
    if (losses)
      profile.loss_csr[std::size_t(c)] =
          csr_shape(chunk, loss_rows.data() + chunk.dst_begin, merged_rows, column_count, threads);
  };
  std::int64_t entries = 0;
  for (int c = 0; c < C; ++c) entries += std::int64_t(plan.chunk(c, p).columns.size());
  if (C >= omp_get_max_threads() && worth_parallel(entries)) {
#pragma omp parallel if (worth_parallel(entries))
    {
      std::vector<std::int32_t> column_count(std::size_t(merged_rows), 0);
#pragma omp for schedule(dynamic, 1)
      for (int c = 0; c < C; ++c) shapes(c, column_count, CsrShapeThreads::kOne);
    }
  } else {
    std::vector<std::int32_t> column_count(std::size_t(merged_rows), 0);
    for (int c = 0; c < C; ++c) shapes(c, column_count, CsrShapeThreads::kTeam);
  }
  if (comm != CommMode::kBaseline && cut == LossCut::kMirrored)
    profile.owners_loss_csr.push_back(owners_loss_csr_shape(plan, p, loss_rows));
  return profile;
}

PartitionLayout partition_layout(const Plan& plan, int p, const ModelLayers& model,
                                 const LayoutOptions& options, const LossRowFlags& loss_rows) {
  return partition_layout(partition_profile(plan, p, options.comm, loss_rows), model, options);
}

PartitionLayout partition_layout(const PartitionProfile& profile, const ModelLayers& model,
                                 const LayoutOptions& options) {
  SLUICE_EXPECTS(!model.layers.empty(), "a model without layers");
  SLUICE_EXPECTS(profile.comm == options.comm, "a partition profile of another transfer scheme");
  SLUICE_EXPECTS(profile.csr.size() == profile.lists.size(), "a partition profile with ",
                 profile.csr.size(), " CSRs for ", profile.lists.size(), " chunks");
  const bool gat = model.kind == ModelKind::kGat;
  const int chunks = static_cast<int>(profile.lists.size());
  PartitionLayout layout;
  layout.partition = profile.partition;
  layout.widths = layer_buffer_widths(model, options);
  const BufferWidths& w = layout.widths;
  const std::vector<ChunkListSizes>& lists = profile.lists;

  PartitionSizes& n = layout.sizes;
  n.merged_rows = profile.transition_rows + profile.remote_rows;
  n.buffer_rows = std::max<std::int64_t>(n.merged_rows, 1);
  for (const ChunkListSizes& s : lists) {
    n.chunk_rows = std::max(n.chunk_rows, s.rows);
    n.max_nnz = std::max(n.max_nnz, s.nnz);
    n.max_loads = std::max(n.max_loads, s.loads);
    n.max_leaves = std::max(n.max_leaves, s.leaves);
    n.max_received = std::max(n.max_received, s.received);
  }
  n.block_rows = std::max<std::int64_t>(n.chunk_rows, 1);
  if (w.slice_inputs > 0) n.slice_rows = slice_rows(n.max_loads, n.max_leaves, n.merged_rows);
  if (model.layers.size() >= 2) n.head_rows = profile.head_rows;

  const std::int64_t M = n.buffer_rows, D = n.block_rows;
  LayoutBuilder add(layout.buffers);
  // Required buffers, in the constructor's order.
  add.required(BufferRole::kTransition, M, w.transition);
  add.required(BufferRole::kTransitionGradient, M, w.transition_gradient);
  add.required(BufferRole::kAggregation, D, w.aggregation);
  add.required(BufferRole::kPreActivation, D, w.pre_activation);
  add.required(BufferRole::kLayerOutput, D, w.layer_output);
  add.required(BufferRole::kOutputGradient, D, w.pre_activation);
  add.required(BufferRole::kAggregationGradient, D, w.aggregation_gradient);
  add.required(BufferRole::kTransformedRows, M, w.transformed);
  add.required(BufferRole::kTransformedGradient, M, w.transformed);
  add.required(BufferRole::kSourceScores, M, w.heads);
  add.required(BufferRole::kDestinationScores, D, w.heads);
  add.required(BufferRole::kAttention, std::max<std::int64_t>(n.max_nnz, 1), w.heads);
  add.required(BufferRole::kHeadOutputs, D, w.head_outputs);
  add.required(BufferRole::kInputAggregation, D, w.input_aggregation);
  add.required(BufferRole::kInputAttention, 1, w.input_attention);
  add.required(BufferRole::kParameters, 1, w.parameters);
  add.required(BufferRole::kGradients, 1, w.parameters);
  add.required(BufferRole::kAdamFirstMoment, 1, w.parameters);
  add.required(BufferRole::kAdamSecondMoment, 1, w.parameters);
  add.required(BufferRole::kSideBySideWeights, 1, w.side_by_side_weights);
  add.required(BufferRole::kReceivedGradients, n.max_received, w.received);
  add.required(BufferRole::kSliceInputs, n.slice_rows, w.slice_inputs);
  add.required(BufferRole::kSliceTransformed, n.slice_rows, w.slice_transformed);
  add.list(BufferRole::kSlicePositions, n.slice_rows);
  if (w.chunk_row_positions) add.list(BufferRole::kChunkRowPositions, D);

  // Overlap buffers, before the constants: the load stage (and with it the early next pass's
  // head rows), the flush buffer and its positions, the second block set (two chunks or more:
  // chunk c uses set c % 2, so one chunk uses set 0 alone).
  const bool stage = options.overlap && n.max_loads > 0;
  const bool flush = stage && n.max_leaves > 0 && w.flush > 0;
  if (stage) {
    add.add(BufferRole::kLoadStage, BufferKind::kOverlap, n.max_loads, w.load_stage,
            OverlapGroup::kLoadStage);
    add.list(BufferRole::kHeadRows, n.head_rows, -1, OverlapGroup::kLoadStage);
  }
  if (flush) {
    add.add(BufferRole::kFlushBuffer, BufferKind::kOverlap, n.max_leaves, w.flush,
            OverlapGroup::kFlushBuffer);
    add.list(BufferRole::kFlushPositions, n.max_leaves, -1, OverlapGroup::kFlushBuffer);
  }
  if (stage && chunks > 1) {
    for (const auto& [role, width] :
         {std::pair{BufferRole::kSecondLayerOutput, w.layer_output},
          std::pair{BufferRole::kSecondOutputGradient, w.second_output_gradient},
          std::pair{BufferRole::kSecondAggregation, w.aggregation}})
      add.add(role, BufferKind::kOverlap, D, width, OverlapGroup::kSecondBlockSet);
  }
  // GAT's fused last layer on a one-chunk partition: its own Zm, el, er and alpha, so that layer
  // L-2's attention intermediates stay from its forward to its backward pass (no transform of
  // the arrivals, pulls or coefficients again; Schedule::Impl::attention_kept()).
  if (chunks == 1 && w.last_layer_heads > 0) {
    const OverlapGroup kept = OverlapGroup::kKeptAttention;
    add.add(BufferRole::kLastLayerTransformedRows, BufferKind::kOverlap, M,
            w.last_layer_transformed, kept);
    add.add(BufferRole::kLastLayerSourceScores, BufferKind::kOverlap, M, w.last_layer_heads, kept);
    add.add(BufferRole::kLastLayerDestinationScores, BufferKind::kOverlap, D, w.last_layer_heads,
            kept);
    add.add(BufferRole::kLastLayerAttention, BufferKind::kOverlap,
            std::max<std::int64_t>(n.max_nnz, 1), w.last_layer_heads, kept);
  }

  // Per-chunk constants.
  // A model of one layer computes every row (LastLayerRows).
  const bool keeps_loss_csr = options.last_layer_rows == LastLayerRows::kLoss &&
                              model.layers.size() >= 2 && !profile.loss_csr.empty();
  const bool owners_loss_csr = keeps_loss_csr && sends_loss_gradients(profile, model, options);
  for (int c = 0; c < chunks; ++c) {
    const ChunkListSizes& s = lists[std::size_t(c)];
    CsrShape csr = profile.csr[std::size_t(c)];
    csr.weights = chunk_csr_weights(model.kind);
    if (keeps_loss_csr) {
      CsrShape loss = profile.loss_csr[std::size_t(c)];
      loss.weights = csr.weights;
      // A chunk without loss rows reads its own CSR: no CSR of no entries goes up. The owners'
      // loss-row CSR goes up on every device (all of them exchange so), unless it has none.
      if (owners_loss_csr) {
        loss = profile.owners_loss_csr[std::size_t(c)];
        loss.weights = csr.weights;
        layout.sends_loss_gradients = true;
        if (loss.nnz > 0) add.csr(BufferRole::kLossCsr, c, loss);
      } else if (loss.nnz > 0 && loss.nnz < csr.nnz) {
        add.csr(BufferRole::kLossCsr, c, loss);
      }
    }
    add.csr(BufferRole::kCsr, c, csr);
    add.list(BufferRole::kSelfColumns, s.rows, c);
    add.list(BufferRole::kLoadVertices, s.loads, c);
    add.list(BufferRole::kLoadSlots, s.loads, c);
    add.list(BufferRole::kLoadKeys, s.loads, c);
    for (std::int64_t count : s.pulls) {
      add.list(BufferRole::kPullOwnerSlots, count, c);
      add.list(BufferRole::kPullLocalSlots, count, c);
    }
    for (std::int64_t count : s.pushes) add.list(BufferRole::kPushLocalSlots, count, c);
    add.list(BufferRole::kRemoteSlots, s.remote, c);
    add.list(BufferRole::kLeaveVertices, s.leaves, c);
    add.list(BufferRole::kLeaveSlots, s.leaves, c);
    add.list(BufferRole::kLeaveKeys, s.leaves, c);
    add.list(BufferRole::kDestinationKeys, s.rows, c);
    add.list(BufferRole::kLabels, s.rows, c);
    add.list(BufferRole::kSplitBits, s.rows, c);
    add.list(BufferRole::kReceivedSlots, s.received, c);
  }
  // The kept tail: in the flush buffer only where there is one.
  if (w.keep_tail && (!w.tail_in_flush_buffer || flush)) {
    const OverlapGroup group =
        w.tail_in_flush_buffer ? OverlapGroup::kFlushBuffer : OverlapGroup::kNone;
    for (int c = 0; c < chunks; ++c) {
      add.list(BufferRole::kTailRows, lists[std::size_t(c)].tail, c, group);
      add.list(BufferRole::kTailPositions, lists[std::size_t(c)].tail, c, group);
    }
  }

  // CUDA scratch (kernels/cuda/cuda_device.cpp), sized on first use: the GAT backward's
  // per-entry, per-source and per-destination gradients, the per-slice column sums of the bias
  // and attention-vector gradients (as wide as the widest such gradient), the loss accumulators
  // (per slot the loss and 6 split counters, 8 bytes each) and the largest chunk's predictions.
  if (gat) {
    const BufferKind first_use = BufferKind::kFirstUseScratch;
    add.scratch(BufferRole::kGatEntryGradients, first_use, n.max_nnz, w.heads);
    if (w.transposed_coefficient_heads > 0)
      add.scratch(BufferRole::kGatTransposedWeights, first_use, n.max_nnz,
                  w.transposed_coefficient_heads);
    add.scratch(BufferRole::kGatSourceScoreGradients, first_use, n.merged_rows, w.heads);
    add.scratch(BufferRole::kGatDestinationScoreGradients, first_use, n.chunk_rows, w.heads);
    if (w.input_heads > 0)
      add.scratch(BufferRole::kGatInputScoreSums, first_use,
                  cuda::gat_input_partials(n.chunk_rows, n.merged_rows),
                  w.input_heads * w.input_width);
  }
  std::int64_t summed = 0;
  for (const LayerShape& layer : model.layers)
    summed = std::max({summed, layer.out_width, gat ? layer.transform_width : 0});
  // Bias gradients sum a chunk's rows; GAT's attention vectors also the merged rows.
  const std::int64_t summed_rows = gat ? std::max(n.merged_rows, n.chunk_rows) : n.chunk_rows;
  add.scratch(BufferRole::kColumnSumPartials, BufferKind::kFirstUseScratch,
              cuda::column_sum_slices(summed_rows), summed);
  add.scratch(BufferRole::kLossAccumulator, BufferKind::kFirstUseScratch, cuda::kLossSlots,
              cuda::kLossSlotWords, sizeof(double));
  add.scratch(BufferRole::kPredictions, BufferKind::kFirstUseScratch, D, 1, sizeof(std::int32_t));
  return layout;
}

CsrWeights chunk_csr_weights(ModelKind kind) {
  switch (kind) {
    case ModelKind::kGcn:
      return CsrWeights::kSymmetricNorm;
    case ModelKind::kSage:
      return CsrWeights::kNeighborMean;
    case ModelKind::kGat:
      return CsrWeights::kPerCall;
  }
  return CsrWeights::kPerCall;
}

bool is_csr(const BufferSpec& b) {
  return b.role == BufferRole::kCsr || b.role == BufferRole::kLossCsr;
}

bool per_chunk_constant(const BufferSpec& b) {
  return b.kind == BufferKind::kConstant && b.chunk >= 0 && b.role != BufferRole::kTailRows &&
         b.role != BufferRole::kTailPositions;
}

std::int64_t device_bytes(const BufferSpec& b) {
  switch (b.kind) {
    case BufferKind::kFirstUseScratch:
      return 0;
    default:
      break;
  }
  if (is_csr(b))
    return (b.csr.rows + 1) * std::int64_t(sizeof(edge_t)) +
           b.csr.nnz * std::int64_t(sizeof(vertex_t)) +
           (b.csr.weights == CsrWeights::kSymmetricNorm
                ? b.csr.cols * std::int64_t(sizeof(std::int32_t))
                : 0);
  return b.rows * b.width * b.element_bytes;
}

std::int64_t cuda_bytes(const BufferSpec& b) {
  if (is_csr(b)) return cuda::csr_bytes(b.csr);
  return cuda::rounded(b.rows * b.width * b.element_bytes);
}

std::int64_t cuda_staged_bytes(const BufferSpec& b) {
  if (is_csr(b)) return cuda_bytes(b);
  return 0;
}

std::int64_t cuda_budget_with_headroom(std::int64_t resident) {
  const std::int64_t divisor = cuda::kBudgetHeadroomDivisor, kept = divisor - 1;
  return (resident * divisor + kept - 1) / kept;
}

const char* buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::kTransition:
      return "transition buffer X";
    case BufferRole::kTransitionGradient:
      return "transition gradient dX";
    case BufferRole::kAggregation:
      return "aggregation A";
    case BufferRole::kPreActivation:
      return "pre-activation Z";
    case BufferRole::kLayerOutput:
      return "layer output";
    case BufferRole::kOutputGradient:
      return "output gradient dZ";
    case BufferRole::kAggregationGradient:
      return "gradient dA";
    case BufferRole::kTransformedRows:
      return "transformed rows Zm";
    case BufferRole::kTransformedGradient:
      return "transformed-row gradient dZm";
    case BufferRole::kSourceScores:
      return "GAT source scores";
    case BufferRole::kDestinationScores:
      return "GAT destination scores";
    case BufferRole::kAttention:
      return "GAT attention";
    case BufferRole::kHeadOutputs:
      return "GAT head outputs";
    case BufferRole::kInputAggregation:
      return "GAT per-head input sums";
    case BufferRole::kInputAttention:
      return "GAT folded attention vectors";
    case BufferRole::kParameters:
      return "parameters";
    case BufferRole::kGradients:
      return "gradients";
    case BufferRole::kAdamFirstMoment:
      return "Adam m";
    case BufferRole::kAdamSecondMoment:
      return "Adam v";
    case BufferRole::kSideBySideWeights:
      return "side-by-side weights";
    case BufferRole::kReceivedGradients:
      return "received gradient rows";
    case BufferRole::kSliceInputs:
      return "transform row slice";
    case BufferRole::kSliceTransformed:
      return "transformed-row slice";
    case BufferRole::kSlicePositions:
      return "slice positions";
    case BufferRole::kChunkRowPositions:
      return "chunk row positions";
    case BufferRole::kLoadStage:
      return "load stage";
    case BufferRole::kHeadRows:
      return "last-chunk rows of the first batch";
    case BufferRole::kFlushBuffer:
      return "flush buffer";
    case BufferRole::kFlushPositions:
      return "flush positions";
    case BufferRole::kSecondLayerOutput:
      return "layer output (second set)";
    case BufferRole::kSecondOutputGradient:
      return "dZ (second set)";
    case BufferRole::kSecondAggregation:
      return "aggregation A (second set)";
    case BufferRole::kLastLayerTransformedRows:
      return "last layer's transformed rows Zm";
    case BufferRole::kLastLayerSourceScores:
      return "last layer's GAT source scores";
    case BufferRole::kLastLayerDestinationScores:
      return "last layer's GAT destination scores";
    case BufferRole::kLastLayerAttention:
      return "last layer's GAT attention";
    case BufferRole::kCsr:
      return "CSR";
    case BufferRole::kLossCsr:
      return "loss-row CSR";
    case BufferRole::kSelfColumns:
      return "self columns";
    case BufferRole::kLoadVertices:
      return "load vertices";
    case BufferRole::kLoadSlots:
      return "load slots";
    case BufferRole::kLoadKeys:
      return "load keys";
    case BufferRole::kPullOwnerSlots:
      return "pull owner slots";
    case BufferRole::kPullLocalSlots:
      return "pull local slots";
    case BufferRole::kPushLocalSlots:
      return "push local slots";
    case BufferRole::kRemoteSlots:
      return "remote slots";
    case BufferRole::kLeaveVertices:
      return "leave vertices";
    case BufferRole::kLeaveSlots:
      return "leave slots";
    case BufferRole::kLeaveKeys:
      return "leave keys";
    case BufferRole::kDestinationKeys:
      return "destination keys";
    case BufferRole::kLabels:
      return "labels";
    case BufferRole::kSplitBits:
      return "split bits";
    case BufferRole::kReceivedSlots:
      return "received slots";
    case BufferRole::kTailRows:
      return "kept tail rows";
    case BufferRole::kTailPositions:
      return "kept tail block positions";
    case BufferRole::kGatEntryGradients:
    case BufferRole::kGatTransposedWeights:
    case BufferRole::kGatSourceScoreGradients:
    case BufferRole::kGatDestinationScoreGradients:
    case BufferRole::kGatInputScoreSums:
      return "GAT scratch";
    case BufferRole::kColumnSumPartials:
      return "column sum partials";
    case BufferRole::kLossAccumulator:
      return "loss accumulator";
    case BufferRole::kPredictions:
      return "predictions";
  }
  return "?";
}

}  // namespace sluice
