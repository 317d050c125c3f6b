// Partition profiles (buffer_layout.hpp) for any chunk count C without building a plan: what the
// chunk-count search (chunk_search.hpp) estimates each candidate C from. Built once per level-1
// partition from the graph in renumbered ids: the destinations' row lengths, whose prefix sums
// give the edge-balanced chunk ranges of any C (edge_balanced_bounds, the rule the plan builder
// cuts chunks by), and the graph grouped by source, from which one parallel pass per C counts
// every neighbor set, transition set, reuse, remote and pull list and long CSR column exactly.
//
// The profiles are those of the plan with a given batch layout (the natural one, chunk c of every
// partition in batch c, or a reorganized one): equal, field by field, to partition_profile() of
// the plan build_plan_from_partition() builds with that layout (tests/test_chunk_sketch.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "common/types.hpp"
#include "formats/dataset.hpp"
#include "train/layout/buffer_layout.hpp"

namespace sluice {

// Edge-balanced chunk ranges of every partition: bounds[p * (C + 1) + r] ..
// bounds[p * (C + 1) + r + 1] is range r of partition p, in renumbered ids. `row_offsets` are
// the CSR offsets of the renumbered rows (one per destination: its self entry and in-edges).
// Ranges have about equal (entries + vertices) and are non-empty whenever the partition has at
// least C vertices.
std::vector<vertex_t> edge_balanced_bounds(const std::vector<edge_t>& row_offsets,
                                           const std::vector<vertex_t>& partition_offsets,
                                           int chunks);

class ChunkSketch {
 public:
  // From the dataset's graph and a renumbering by partition (the plan's new_to_old, old_to_new
  // and partition_offsets): row lengths and the rows grouped by source; and the loss rows, so
  // that the profiles hold every chunk's loss-row CSR shape. Memory: one vertex id
  // per entry and self entry, two offsets per vertex; building it holds 10 bytes more per entry
  // for a while (the renumbered rows and the entries by bucket of sources).
  ChunkSketch(const Dataset& dataset, const std::vector<vertex_t>& new_to_old,
              const std::vector<vertex_t>& old_to_new,
              const std::vector<vertex_t>& partition_offsets);

  int partitions() const { return static_cast<int>(partition_offsets_.size()) - 1; }
  // The smallest partition's vertex count (C beyond it leaves ranges empty).
  vertex_t smallest_partition() const;

  // Every partition's profile under `comm` of the natural-layout plan with `chunks` chunks.
  std::vector<PartitionProfile> profiles(int chunks, CommMode comm) const;
  // The same for the batch layout `order` (order[c * P + p] = the range of partition p that runs
  // in batch c, as the reorganizer gives it).
  std::vector<PartitionProfile> profiles(int chunks, CommMode comm,
                                         const std::vector<std::int32_t>& order) const;

 private:
  std::vector<vertex_t> partition_offsets_;
  std::vector<edge_t> row_offsets_;     // renumbered rows (destination first, then in-edges)
  std::vector<edge_t> source_offsets_;  // per renumbered source: where its entries start
  std::vector<vertex_t> destinations_;  // the destinations of each source's entries
  LossRowFlags loss_rows_;              // loss_row_flags() of the dataset, by renumbered id
};

}  // namespace sluice
