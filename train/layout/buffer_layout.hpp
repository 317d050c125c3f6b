// One description of the device buffers the out-of-core schedule (train/schedule.cpp) allocates
// on partition p's device: per role its rows, width (after the schedule's width alignment),
// element size and kind (required working buffer, optional overlap buffer, read-only constant,
// CUDA scratch), in the order the schedule allocates them, and the rules by which the backends
// charge them (the Device interface's byte count; the CUDA backend's granules, CSR layout, staging
// scratch and constant headroom, by the rules of kernels/cuda_memory_rules.hpp). The schedule takes
// its widths and predicates from here, and the memory estimate (memory_estimate.hpp) adds the
// buffers up, so the two cannot drift apart.
//
// Options fixed at the schedule's defaults: the next pass's prefetch and early start, the kept
// tail, the fused last layer and stored transforms are on, and overlap buffers are allocated
// before the chunks' constants. LayoutOptions holds the options that remain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "kernels/cuda_memory_rules.hpp"
#include "train/layout/comm_mode.hpp"
#include "train/layout/model_layers.hpp"

namespace sluice {

// Whether GAT's layers below the last keep their head outputs O^l from the forward to the
// backward pass (in the block set's A buffer, and as the host matrix A^l), or compute them again
// (--intermediates recompute, bf16 host data: keeps_intermediates(), train/schedule.hpp).
enum class GatHeadOutputs { kKept, kRecomputed };
// The one rule: kept with cached intermediates and fp32 host data (GAT's backward takes the
// softmax's per-row sums as dO . O, which must be the forward's O, not O rounded to bf16).
constexpr GatHeadOutputs gat_head_outputs(bool cache_intermediates, HostPrecision precision) {
  return cache_intermediates && precision == HostPrecision::kFp32 ? GatHeadOutputs::kKept
                                                                  : GatHeadOutputs::kRecomputed;
}

// How GAT's layer 0 orders its transform and its attention (docs/model-math.md, "GAT layer 0
// over its input rows"): transform first, as every GAT layer (Z = X W, attention over Z rows), or
// attend over the input rows first and transform each head's weighted sum (O^h = agg^h W^h).
// Attending first reads D-wide rows per entry instead of K F-wide ones, and its backward needs no
// pass by source (layer 0 has no input gradient); every merged row's input row must be on the
// device, so it keeps its input rows. On several partitions it exchanges feature rows, as GCN's
// layer 0 does (from the owners' loads, or each device's copy of them), and no gradients.
enum class GatLayerZero { kTransformFirst, kAttendInputs };

// Which destination rows the last layer's training passes compute. The loss reads only the
// rows of train vertices with a label; the others get no gradient, so their sums in the last
// layer's forward and backward are wasted work. kLoss keeps a second CSR per chunk with those
// rows' entries alone (LossRowFlags; the chunk's CSR where every row enters the loss) and the
// last layer's training passes read it; evaluations and the layers below read the chunk's CSR.
// The losses and weights are those of kAll. A one-layer model computes every row (its layer 0
// keeps the aggregation evaluations reuse).
enum class LastLayerRows { kLoss, kAll };
const char* last_layer_rows_name(LastLayerRows rows);  // "loss", "all"
// Parses "loss" or "all"; throws InputError naming `option` otherwise.
LastLayerRows parse_last_layer_rows(const std::string& text, const std::string& option);

// Per renumbered vertex, 1 where its row enters the loss: a train vertex with a label (>= 0).
// The dataset must hold its labels (DatasetReadOptions::labels). Empty flags: the profile counts
// no loss-row CSRs.
using LossRowFlags = std::vector<std::uint8_t>;
LossRowFlags loss_row_flags(const Dataset& dataset, const std::vector<vertex_t>& old_to_new);

// How the last layer's transposed product (GCN: dT = A^T dZ over the loss rows) reaches the
// vertices of other partitions, on a plan of one chunk a partition. kPushSums: each device walks
// a row for every source its loss rows read, the other partitions' vertices among them, and
// pushes those rows to their owners, which add them. kSendGradients: each device sends the
// gradient rows of its rows that its peers read into the peers' slots for them (where the forward
// sent those rows' transforms), and each owner walks its own vertices alone, every loss row's
// entry into them included, its peers' too: no rows for other partitions' vertices and no
// additions. Its loss-row CSR gains a row per remote loss vertex (owners_loss_rows_csr()), which
// needs every entry of the cut between loss rows to have its mirror (a symmetric graph:
// loss_cut_mirrors()); GCN alone (its weights are symmetric), elsewhere kPushSums.
enum class LossRowExchange { kPushSums, kSendGradients };

// The schedule options that change its device buffers (ScheduleOptions' fields of the same
// names; gat_head_outputs from its cache_intermediates and host_precision: layout_options()).
struct LayoutOptions {
  CommMode comm = CommMode::kP2pReuse;
  bool overlap = true;         // allocate the overlap buffers where memory allows
  bool reload_inputs = false;  // layers transformed on arrival keep no input rows
  GatHeadOutputs gat_head_outputs = GatHeadOutputs::kKept;  // recomputed: no A buffer for GAT
  GatLayerZero gat_layer_zero = GatLayerZero::kTransformFirst;
  LastLayerRows last_layer_rows = LastLayerRows::kLoss;
  LossRowExchange loss_row_exchange = LossRowExchange::kSendGradients;
};

// A row width rounded up to a multiple of 4 floats: 16-byte rows, which the vectorized sparse
// kernels need of their dense operands (kernels/cuda/NOTES.md).
std::int64_t aligned_width(std::int64_t cols);

// ---- per layer ----

// What the schedule does with one layer's rows.
struct LayerRoles {
  // Rows transformed by their owner and exchanged transformed (Zm = X W): GAT, transform-first
  // GCN.
  bool transforms = false;
  // A transforming layer above layer 0: the forward pass below stores its inputs transformed
  // (T^l), its loads land in Zm and its leaving rows flush dZm (dT^l).
  bool pretransformed = false;
  // Transforms on arrival (transforms, not pretransformed).
  bool transforms_on_arrival = false;
  // Keeps no input rows in X (LayoutOptions::reload_inputs, for layers transformed on arrival).
  bool reloads_inputs = false;
  // GAT's layer 0 attending over its input rows (GatLayerZero::kAttendInputs): it transforms no
  // rows on arrival and flushes no gradient rows; its forward and backward read X.
  bool attends_inputs = false;
  // The forward pass stores the next layer's T rows; the backward pass takes dT blocks.
  bool stores_transform = false;
  std::int64_t input_width = 0;    // rows of H[l] and of loads (T rows padded to 16 bytes)
  std::int64_t flushed_width = 0;  // rows of G[l]: dT^l or G^l
  std::int64_t output_width = 0;   // rows of the output block: H^{l+1}, or T^{l+1} and dT^{l+1}
};
LayerRoles layer_roles(const ModelLayers& model, int layer, const LayoutOptions& options);

// Whether layer 1's backward pass keeps its tail (its last batch's leaving gradient rows, for
// layer 0's G^1 blocks) in the flush buffer: when layer 0 writes the buffer the rows accumulate
// in (GAT's dZm where layer 0 transforms first). Otherwise they stay in dX, or in dZm of a
// pretransformed layer 1.
bool tail_in_flush_buffer(const ModelLayers& model, const LayoutOptions& options);
// Whether the schedule keeps that tail: two layers or more, not in baseline mode (whose leave
// lists hold rows several devices flush), and where the tail lives in the flush buffer only with
// overlap buffers (and then only on devices that get the flush buffer).
bool keeps_tail(const ModelLayers& model, const LayoutOptions& options);

// The model-wide widths (floats per row) the schedule sizes its device buffers by, after its
// width alignment; 0 where the buffer does not exist.
struct BufferWidths {
  std::int64_t transition = 0;           // X: inputs of layers neither pretransformed nor reloading
  std::int64_t transition_gradient = 0;  // dX: input gradients of layers above 0 that do not
                                         // transform
  std::int64_t aggregation = 0;          // A (both block sets)
  std::int64_t pre_activation = 0;       // Z, and dZ of block set 0
  std::int64_t layer_output = 0;         // out (both block sets; not aligned)
  std::int64_t second_output_gradient = 0;  // dZ of block set 1 (not aligned)
  // dA: GCN/SAGE layers above 0 that aggregate first, and GAT's last layer (0: none).
  std::int64_t aggregation_gradient = 0;
  std::int64_t transformed = 0;  // Zm and dZm
  std::int64_t heads = 0;        // GAT: el, er, alpha (the most heads of a layer)
  // GAT: the most heads of a layer whose backward needs transposed coefficients (not by source,
  // cuda::gat_backward_by_source()); 0: none.
  std::int64_t transposed_coefficient_heads = 0;
  std::int64_t head_outputs = 0;  // GAT: per-head outputs
  // GAT's layer 0 attending over its inputs (K heads of its D-wide rows): the per-head weighted
  // sums and the backward's head dots (aligned K D + K, block rows) and its folded attention
  // vectors and score sums (4 K D).
  std::int64_t input_aggregation = 0;
  std::int64_t input_attention = 0;
  // That layer's K and D (gat_input_backward's per-slice sums, CUDA scratch).
  std::int64_t input_heads = 0, input_width = 0;
  // GAT with two layers or more and kept head outputs: the last layer's Zm width and heads, for
  // the fused pass's own attention buffers on a one-chunk partition (0: none).
  std::int64_t last_layer_transformed = 0;
  std::int64_t last_layer_heads = 0;
  std::int64_t slice_inputs = 0;       // row slices of layers transformed on arrival (aligned)
  std::int64_t slice_transformed = 0;  // their transforms (not aligned)
  std::int64_t load_stage = 0;         // every layer's loads
  std::int64_t flush = 0;              // gradients flushed by layers above 0
  // Gradient rows pushed to their owners (dX or dZm rows; Schedule::Impl::push_phase()).
  std::int64_t received = 0;
  std::int64_t parameters = 1;  // parameters, gradients, Adam moments (at least 1)
  // SAGE's transform-first layer: its W_self and W_neigh side by side (d_l rows of
  // aligned_width(2 d_{l+1}); DeviceState::side_by_side_w).
  std::int64_t side_by_side_weights = 0;
  // 0..rows-1 per chunk, when some layer stores transforms or SAGE's last layer transforms first.
  bool chunk_row_positions = false;
  bool tail_in_flush_buffer = false;
  bool keep_tail = false;  // keeps_tail(): before the flush buffer is granted
};
BufferWidths layer_buffer_widths(const ModelLayers& model, const LayoutOptions& options);

// ---- per partition ----

// Rows per slice of arrivals transformed on arrival: large enough for efficient GEMMs, at most a
// quarter of the merged rows (less memory than the dX these layers do without).
inline constexpr std::int64_t kSliceRows = 65536;
std::int64_t slice_rows(std::int64_t max_loads, std::int64_t max_leaves, std::int64_t merged_rows);

// Lengths of one chunk's index lists under a transfer scheme, as the schedule derives them from
// the plan: baseline loads (and flushes) every distinct column; p2p every occupied transition
// slot, with pulls and pushes of every remote entry; p2p+reuse the plan's lists.
struct ChunkListSizes {
  std::int64_t rows = 0, nnz = 0;
  std::int64_t loads = 0, leaves = 0;
  std::int64_t remote = 0;                  // remote entries (none in baseline mode)
  std::vector<std::int64_t> pulls, pushes;  // entries per owner that has any, owners ascending
  std::int64_t received = 0;                // gradient rows the other partitions push into this one
  std::int64_t tail = 0;  // rows of the last batch's leave list whose destinations are here
};
std::vector<ChunkListSizes> chunk_list_sizes(const Plan& plan, int partition, CommMode comm);

// A chunk CSR: its shape, and (for the CUDA layout) the rows and transposed rows longer than
// cuda::long_degree_for(nnz) and its weighting (the layout sets it from the model).
using CsrShape = cuda::CsrCounts;

// How a model's chunk CSRs weigh their entries: GCN's symmetric norm from column degrees,
// GraphSAGE's neighbor mean, GAT's attention passed per call.
CsrWeights chunk_csr_weights(ModelKind kind);

// Everything partition_layout() reads of a plan for one partition under one transfer scheme:
// the merged buffer's two regions, every chunk's list sizes and CSR shape in batch order, and
// chunk 0's loads of the last chunk's vertices. partition_profile() takes it from a built plan;
// the chunk-count search computes the same figures from the graph without building one
// (chunk_sketch.hpp), so that both feed the one layout below.
struct PartitionProfile {
  int partition = 0;
  CommMode comm = CommMode::kP2pReuse;
  std::int64_t transition_rows = 0;  // max_c |T_c^p|
  std::int64_t remote_rows = 0;      // the remote region
  // Chunk 0's loads of the last chunk's vertices (PartitionSizes::head_rows; 0 in baseline
  // mode or where chunk 0's loads are not sorted).
  std::int64_t head_rows = 0;
  std::vector<ChunkListSizes> lists;  // per batch position
  std::vector<CsrShape> csr;          // per batch position; cols = the merged rows
  // Per batch position, the shape of the chunk CSR's loss rows alone (loss_rows_csr()); empty
  // where the profile was taken without loss-row flags.
  std::vector<CsrShape> loss_csr;
  // The shape of owners_loss_rows_csr() of the partition's one chunk, where a plan of one chunk
  // on several partitions has it (loss_cut_mirrors()); empty otherwise, and from the chunk-count
  // search (LossRowExchange::kSendGradients then counts as kPushSums there).
  std::vector<CsrShape> owners_loss_csr;
};

// Whether every entry of a loss row into another partition's vertex has its mirror: each loss
// row v of a partition reading vertex u of another reads u exactly when u's row reads v (a
// symmetric graph's cut). Plans of one chunk a partition only (false otherwise).
bool loss_cut_mirrors(const Plan& plan, const LossRowFlags& loss_rows);

// A chunk CSR's arrays.
struct CsrArrays {
  std::vector<edge_t> indptr;
  std::vector<vertex_t> columns;
};
// A chunk CSR restricted to the rows flagged in `keep` (by chunk row; LossRowFlags from the
// chunk's first vertex), their entries in order, every other row empty: the CSR of
// BufferRole::kLossCsr, which the last layer's training passes read (LastLayerRows::kLoss).
CsrArrays loss_rows_csr(const std::vector<edge_t>& indptr, const std::vector<vertex_t>& columns,
                        const std::uint8_t* keep);
// The loss-row CSR of partition p's one chunk for LossRowExchange::kSendGradients, merged_rows
// rows: rows [0, nd) those of the chunk's loss rows (loss_rows_csr()), every other row below the
// remote region empty; the row of the remote slot of a loss vertex v that the chunk's rows read:
// its self entry (v's slot), then the slots of the partition's vertices whose rows read v,
// ascending. On a cut that mirrors itself (loss_cut_mirrors()) those are v's entries into the
// partition, so the transpose's row of an own vertex holds every loss row's entry into it.
CsrArrays owners_loss_rows_csr(const Plan& plan, int p, const LossRowFlags& loss_rows);
// The shape of owners_loss_rows_csr(plan, p, loss_rows) (its entries, long rows and long
// columns), counted over the chunk's entries without building it.
CsrShape owners_loss_csr_shape(const Plan& plan, int p, const LossRowFlags& loss_rows);
// `loss_rows`: loss_row_flags() of the plan's dataset, or empty (no loss-row CSRs counted).
PartitionProfile partition_profile(const Plan& plan, int partition, CommMode comm,
                                   const LossRowFlags& loss_rows);
// The same where the caller knows loss_cut_mirrors() of the plan (kMirrored: the profile holds
// owners_loss_csr), as plan_profiles() finds it once for every partition.
enum class LossCut { kMirrored, kNotMirrored };
PartitionProfile partition_profile(const Plan& plan, int partition, CommMode comm,
                                   const LossRowFlags& loss_rows, LossCut cut);

// The partition's row counts behind the buffers.
struct PartitionSizes {
  std::int64_t merged_rows = 0;  // transition slots + remote slots
  std::int64_t buffer_rows = 1;  // rows of X, dX, Zm, dZm, el: max(merged_rows, 1)
  std::int64_t chunk_rows = 0;   // the largest chunk's destinations
  std::int64_t block_rows = 1;   // rows of the block buffers: max(chunk_rows, 1)
  std::int64_t max_nnz = 0;      // the largest chunk's entries
  std::int64_t max_loads = 0, max_leaves = 0;
  std::int64_t max_received = 0;  // the most rows other partitions push into this one in a batch
  std::int64_t slice_rows = 0;    // 0 without slices
  // Chunk 0's loads of the last chunk's vertices, taken from its output block when a forward
  // pass ends early (uploaded with the load stage; 0 in baseline mode).
  std::int64_t head_rows = 0;
};

enum class BufferRole {
  // Required working buffers and the position lists that come with them.
  kTransition,           // X
  kTransitionGradient,   // dX
  kAggregation,          // A, block set 0
  kPreActivation,        // Z
  kLayerOutput,          // out, block set 0
  kOutputGradient,       // dZ, block set 0
  kAggregationGradient,  // dA
  kTransformedRows,      // Zm
  kTransformedGradient,  // dZm
  kSourceScores,         // GAT el
  kDestinationScores,    // GAT er
  kAttention,            // GAT alpha
  kHeadOutputs,          // GAT per-head outputs
  kInputAggregation,     // GAT layer 0 attending over its inputs: per-head weighted sums, head dots
  kInputAttention,       // and its folded attention vectors and score sums
  kParameters,
  kGradients,
  kAdamFirstMoment,
  kAdamSecondMoment,
  kSideBySideWeights,
  kReceivedGradients,  // the rows other partitions push into this one, before they are added
  kSliceInputs,
  kSliceTransformed,
  kSlicePositions,     // constant
  kChunkRowPositions,  // constant
  // Overlap buffers and the constants that come with them.
  kLoadStage,
  kHeadRows,  // constant, with the load stage
  kFlushBuffer,
  kFlushPositions,  // constant, with the flush buffer
  kSecondLayerOutput,
  kSecondOutputGradient,
  kSecondAggregation,
  // The fused last layer's own attention intermediates (GAT, one chunk): its Zm, el, er, alpha.
  kLastLayerTransformedRows,
  kLastLayerSourceScores,
  kLastLayerDestinationScores,
  kLastLayerAttention,
  // Per-chunk constants, in upload order.
  kLossCsr,  // LastLayerRows::kLoss, where some but not all of the chunk's rows are in the loss
  kCsr,
  kSelfColumns,
  kLoadVertices,
  kLoadSlots,
  kLoadKeys,
  kPullOwnerSlots,
  kPullLocalSlots,
  kPushLocalSlots,
  kRemoteSlots,
  kLeaveVertices,
  kLeaveSlots,
  kLeaveKeys,
  kDestinationKeys,
  kLabels,
  kSplitBits,
  kReceivedSlots,  // where the rows other partitions push land here
  // The kept tail, per chunk, uploaded after every device's constants.
  kTailRows,
  kTailPositions,
  // CUDA backend scratch.
  kGatEntryGradients,             // first GAT backward: per entry and head
  kGatTransposedWeights,          // per entry and head
  kGatSourceScoreGradients,       // first GAT pass: per merged row and head
  kGatDestinationScoreGradients,  // per chunk row and head
  kGatInputScoreSums,             // per warp of gat_input_backward
  kColumnSumPartials,             // first column sum: per row slice and column
  kLossAccumulator,               // first loss
  kPredictions,                   // first evaluation: per chunk row
};
const char* buffer_role_name(BufferRole role);

enum class BufferKind {
  kRequired,         // Device::alloc: must fit
  kOverlap,          // Device::try_alloc: allocated only where memory allows
  kConstant,         // Device::upload*: read-only; may stay in host memory when the budget is full
  kFirstUseScratch,  // CUDA only: scratch sized by the first operation that needs it
};

// The overlap buffer a buffer is allocated with: it exists only where that one does. The last
// group saves computation instead of overlapping transfers: the fused last layer's attention
// buffers, with which layer L-2 keeps its own from its forward to its backward pass.
enum class OverlapGroup { kNone, kLoadStage, kFlushBuffer, kSecondBlockSet, kKeptAttention };

struct BufferSpec {
  BufferRole role = BufferRole::kTransition;
  BufferKind kind = BufferKind::kRequired;
  OverlapGroup group = OverlapGroup::kNone;
  int chunk = -1;  // batch position of a per-chunk constant or tail list; else -1
  std::int64_t rows = 0, width = 1;
  std::int64_t element_bytes = 4;  // floats and vertex indices; 8 for the loss accumulator
  CsrShape csr;                    // kCsr and kLossCsr only
};

struct PartitionLayout {
  int partition = 0;
  PartitionSizes sizes;
  BufferWidths widths;
  // Every buffer with a size above 0, in the order the schedule allocates them: required
  // buffers, overlap buffers (all granted), per-chunk constants, the kept tail; then the CUDA
  // backend's scratch.
  std::vector<BufferSpec> buffers;
  // The chunk's loss-row CSR is owners_loss_rows_csr() (sends_loss_gradients()).
  bool sends_loss_gradients = false;
};
// Whether a layout of `profile` sends the last layer's loss gradients to their owners
// (LossRowExchange::kSendGradients): GCN of two layers or more whose last layer transforms
// first and trains over its loss rows, on a profile with owners_loss_csr.
bool sends_loss_gradients(const PartitionProfile& profile, const ModelLayers& model,
                          const LayoutOptions& options);
PartitionLayout partition_layout(const Plan& plan, int partition, const ModelLayers& model,
                                 const LayoutOptions& options, const LossRowFlags& loss_rows);
// The same from a profile (its comm must be options.comm).
PartitionLayout partition_layout(const PartitionProfile& profile, const ModelLayers& model,
                                 const LayoutOptions& options);

// Whether a constant is one of a chunk's own (uploaded in the chunk loop; the CUDA backend may
// keep those of chunks beyond the budget in host memory).
bool per_chunk_constant(const BufferSpec& buffer);
// A chunk CSR: kCsr or kLossCsr (BufferSpec::csr holds its shape).
bool is_csr(const BufferSpec& buffer);

// ---- how the backends charge a buffer ----

// Bytes the Device interface accounts (CpuDevice::peak_bytes() counts exactly these): rows x
// width x element bytes; a CSR as int64 offsets and int32 columns; CUDA scratch not at all.
std::int64_t device_bytes(const BufferSpec& buffer);

// The granule the CUDA backend charges every allocation in (cuda::rounded()).
inline constexpr std::int64_t kCudaGranule = cuda::kGranuleBytes;
// What the CUDA backend charges for a buffer: whole granules, and a CSR in its layout
// (cuda::csr_bytes()).
std::int64_t cuda_bytes(const BufferSpec& buffer);
// Device scratch the CUDA backend stages a host-resident constant into before the operators
// that read it (CudaDevice::resident_csr): the CSR arrays; 0 for the rest (index lists are read
// in place).
std::int64_t cuda_staged_bytes(const BufferSpec& buffer);
// The CUDA backend places a constant or an overlap buffer in device memory only while an eighth
// of the budget (cuda::kBudgetHeadroomDivisor) stays free (ConstantStore::leaves_headroom): the
// least budget under which `resident` bytes of them fit, ceil(8/7 resident).
std::int64_t cuda_budget_with_headroom(std::int64_t resident);

}  // namespace sluice
