// Builds the dataset's in-edge CSR from a stream of (src, dst) pairs in two passes (count
// degrees, then scatter), then sorts and deduplicates the rows in parallel and compacts in
// place: memory is the CSR itself plus O(n), a fixed staging buffer and, while compacting, at
// most 1/64 of the indices, never a second copy of the edges. Both passes stage each block's
// entries by buckets of consecutive destinations and then work bucket by bucket, one thread per
// bucket; the scatter appends each entry to its group of consecutive rows as a packed (row, source)
// key, and one radix sort per group, in cache, leaves every row sorted in its own slots.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/types.hpp"

namespace sluice {

enum class SelfLoops { kKeep, kAdd, kRemove };
SelfLoops parse_self_loops(const std::string& text);  // keep | add | remove, else InputError
const char* to_string(SelfLoops mode);

struct CsrBuildOptions {
  bool symmetrize = false;  // add the reverse of every edge
  SelfLoops self_loops = SelfLoops::kKeep;
};

struct CsrBuildResult {
  std::vector<edge_t> indptr;     // n + 1
  std::vector<vertex_t> indices;  // sources of in-edges, each row sorted ascending, unique
  std::int64_t input_edges = 0;   // pairs delivered by the source
  std::int64_t duplicates_removed = 0;
  std::int64_t self_loops_removed = 0;
  std::int64_t self_loops_added = 0;
};

// Receives one block of interleaved pairs: pairs[2i] = src, pairs[2i + 1] = dst.
using EdgeBlockVisitor = std::function<void(const vertex_t* pairs, std::size_t count)>;
// Delivers every edge to the visitor, in blocks. Called twice; must deliver the same edges.
using EdgeSource = std::function<void(const EdgeBlockVisitor&)>;

// All ids delivered must lie in [0, n) (the source validates them). `expected_edges` (the
// number of pairs the source will deliver, 0 if unknown) caps the staging buffer. The result is
// independent of the thread count and of how the source splits its blocks.
CsrBuildResult build_in_csr(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options,
                            std::int64_t expected_edges = 0);

// Host memory build_in_csr needs at its peak for n vertices and `edges` input pairs: the
// indptr, the row ends, per-vertex slack for the staging and compaction buffers, and the
// indices (twice the edges when symmetrizing). Saturates instead of overflowing.
std::int64_t csr_build_bytes(std::int64_t n, std::int64_t edges, const CsrBuildOptions& options);

// An EdgeSource over pairs held in memory.
EdgeSource memory_edge_source(const std::vector<vertex_t>& pairs);

}  // namespace sluice
