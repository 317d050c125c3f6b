// The schedule's per-chunk index lists on the host (train/schedule.hpp): derived from the plan
// for one transfer scheme while replaying every device's slot contents batch by batch, which
// checks every plan index against the dataset; and the lists of the backward tail that layer 1
// keeps on the devices for layer 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "train/layout/buffer_layout.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"
#include "train/schedule_state.hpp"

namespace sluice::schedule_detail {

// Rows moved between two devices: owner positions and local positions; for pulls also the rows'
// vertices (renumbered ids).
struct PeerRows {
  int owner = 0;
  std::vector<vertex_t> owner_rows, local_rows, vertices;
  // A push's first row in the owner's receive buffer (receive_pushes()).
  std::int64_t receive_first = 0;
};

// Host-side index lists of one chunk (p, c) under one transfer scheme.
struct ChunkLists {
  // GCN: the degree (in-degree + 1) of the vertex in each merged row the chunk's CSR reads, 0 in
  // the others (CsrWeighting::column_degrees); empty for the other models.
  std::vector<std::int32_t> column_degrees;
  std::vector<vertex_t> self_columns;
  std::vector<vertex_t> load_vertices, load_rows, load_keys;
  std::vector<PeerRows> pulls, pushes;
  std::vector<vertex_t> remote_rows;  // merged positions of the remote entries (all of them)
  // What the other partitions push into this one in the batch, pushers ascending, and where
  // each received row is added here (every pusher's owner_rows, concatenated).
  std::vector<ReceivedRows> received;
  std::vector<vertex_t> received_rows;
  // Leaving rows, those flushed for the first time in a backward layer first: they are stored
  // into G^l, the rest (leave_store_count onwards) added.
  std::vector<vertex_t> leave_vertices, leave_rows, leave_keys;
  std::size_t leave_store_count = 0;
  // Per destination row: dataset id, label, splits (bit 0 train, 1 valid, 2 test).
  std::vector<vertex_t> dst_keys, labels, split_bits;
};

// The lists of every chunk (index batch * P + p) for `mode`, checking the plan against the
// dataset: every failed check throws InputError naming the plan element at fault.
std::vector<ChunkLists> derive_lists(const Dataset& d, const Plan& plan, const ModelSpec& model,
                                     CommMode mode);

// Orders every leave list as [rows flushed for the first time in a backward layer, rows flushed
// before] in the order the schedule flushes (batch by batch, partitions ascending), so that the
// first flush of a row stores it into G^l and G^l needs no zeroing.
void split_first_flushes(std::vector<ChunkLists>& lists, vertex_t num_nodes);

// Lays out every batch's pushes into each owner's receive buffer, pushers ascending: sets each
// push's receive_first and the owners' received lists.
void receive_pushes(std::vector<ChunkLists>& lists, int partitions);

// The row ranges of a one-chunk device's forward transform (`rows` rows), in the order it
// transforms them, each range's rows that the peers read (`li.received`, `li.received_rows`)
// sent once its transform is written, while the next range transforms. Where the sent rows lie
// in [low, high) with at least as many unsent rows above `high` (a partition numbered with its
// boundary vertices first, the peers' rows one run at its start) or else below `low`: that range
// first, then the others, beside whose transform the copies run, so that none is waited for
// after the transform (products-like GCN on two H200s: 0.19 ms of copies beside 0.53 ms of
// transform). Else two ranges in row order, split where two thirds of the sent rows lie below:
// the second range's sends alone are waited for, and the first range's end within the second
// range's transform (0.14 ms of copies beside 0.42 ms; docs/benchmarks.md, "Two GPUs"). One
// range where nothing is sent, where a list is not ascending (its positions are the peer's
// slots, in that order) or where the split leaves a range empty.
std::vector<SendRange> send_ranges(const ChunkLists& li, std::int64_t rows);
// Every row of a chunk of `rows` rows as one SendRange, each list's positions its whole list
// (what send_ranges() gives where a list does not ascend).
SendRange whole_send_range(const ChunkLists& li, std::int64_t rows);

// The last batch's leaving rows of partition p (a backward pass's tail) by the chunk of p whose
// destinations they are (Schedule::Impl::keeps_tail()). Per chunk: where each row sits on the
// device (`src`, TailPlace) and in the chunk's block (`dst`); the first `assign` rows leave for
// the first time in the pass, the others were flushed before, so G^l holds part of their sum.
struct TailLists {
  std::vector<vertex_t> src, dst;
  std::size_t assign = 0;
};

// Where the kept tail rows sit on the device: at their slots of the gradient buffer (dX or dZm),
// or compacted in the flush buffer, each at its position in the leave list.
enum class TailPlace { kGradientSlots, kFlushBuffer };

std::vector<TailLists> tail_lists(const ChunkLists& last, const Plan& plan, int p, TailPlace place);

}  // namespace sluice::schedule_detail
