// Implementation of formats/csr_builder.hpp.
#include "formats/csr_builder.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {

SelfLoops parse_self_loops(const std::string& text) {
  if (text == "keep") return SelfLoops::kKeep;
  if (text == "add") return SelfLoops::kAdd;
  if (text == "remove") return SelfLoops::kRemove;
  throw InputError(cat("--self-loops must be add, remove or keep, not '", text, "'"));
}

const char* to_string(SelfLoops mode) {
  switch (mode) {
    case SelfLoops::kAdd:
      return "add";
    case SelfLoops::kRemove:
      return "remove";
    case SelfLoops::kKeep:
      break;
  }
  return "keep";
}

namespace {

// Returns the number of self-loops seen.
std::int64_t count_degrees(const vertex_t* pairs, std::size_t count, const CsrBuildOptions& options,
                           edge_t* degree_after) {
  const bool remove_loops = options.self_loops == SelfLoops::kRemove;
  const auto edges = static_cast<std::int64_t>(count);
  std::int64_t loops = 0;
#pragma omp parallel for schedule(static) reduction(+ : loops)
  for (std::int64_t i = 0; i < edges; ++i) {
    const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
    if (src == dst) {
      ++loops;
      if (remove_loops) continue;
    }
#pragma omp atomic
    ++degree_after[dst];
    if (options.symmetrize && src != dst) {
#pragma omp atomic
      ++degree_after[src];
    }
  }
  return loops;
}

void scatter_edges(const vertex_t* pairs, std::size_t count, const CsrBuildOptions& options,
                   const edge_t* row_end, edge_t* cursor, vertex_t* indices) {
  const bool remove_loops = options.self_loops == SelfLoops::kRemove;
  const auto edges = static_cast<std::int64_t>(count);
  bool overflow = false;
#pragma omp parallel for schedule(static) reduction(|| : overflow)
  for (std::int64_t i = 0; i < edges; ++i) {
    const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
    if (src == dst && remove_loops) continue;
    edge_t slot;
#pragma omp atomic capture
    slot = cursor[dst]++;
    if (slot < row_end[dst])
      indices[slot] = src;
    else
      overflow = true;
    if (options.symmetrize && src != dst) {
#pragma omp atomic capture
      slot = cursor[src]++;
      if (slot < row_end[src])
        indices[slot] = dst;
      else
        overflow = true;
    }
  }
  SLUICE_EXPECTS(!overflow, "edge source delivered more edges in its second pass");
}

}  // namespace

CsrBuildResult build_in_csr(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options) {
  SLUICE_EXPECTS(n >= 0, "negative vertex count");
  CsrBuildResult result;
  auto& indptr = result.indptr;
  indptr.assign(std::size_t(n) + 1, 0);
  std::int64_t loops_seen = 0;
  {
    StageTimer timer("csr: count degrees");
    source([&](const vertex_t* pairs, std::size_t count) {
      result.input_edges += static_cast<std::int64_t>(count);
      loops_seen += count_degrees(pairs, count, options, indptr.data() + 1);
    });
  }
  const bool add_loops = options.self_loops == SelfLoops::kAdd;
  for (vertex_t v = 0; v < n; ++v) indptr[v + 1] += indptr[v] + (add_loops ? 1 : 0);
  const edge_t capacity = indptr[n];

  auto& indices = result.indices;
  indices.resize(static_cast<std::size_t>(capacity));
  std::vector<edge_t> cursor(indptr.begin(), indptr.end() - 1);
  {
    StageTimer timer("csr: scatter edges");
    // Row ends exclude the slot reserved for an added self-loop.
    std::vector<edge_t> row_end(indptr.begin() + 1, indptr.end());
    if (add_loops)
      for (auto& end : row_end) --end;
    std::int64_t delivered = 0;
    source([&](const vertex_t* pairs, std::size_t count) {
      delivered += static_cast<std::int64_t>(count);
      scatter_edges(pairs, count, options, row_end.data(), cursor.data(), indices.data());
    });
    SLUICE_EXPECTS(delivered == result.input_edges, "edge source delivered ", delivered,
                   " edges in its second pass, ", result.input_edges, " in the first");
  }

  std::int64_t duplicates = 0, loops_added = 0;
  {
    StageTimer timer("csr: sort and deduplicate rows");
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : duplicates, loops_added)
    for (vertex_t v = 0; v < n; ++v) {
      vertex_t* begin = indices.data() + indptr[v];
      vertex_t* filled = indices.data() + cursor[v];
      std::sort(begin, filled);
      vertex_t* end = std::unique(begin, filled);
      duplicates += filled - end;
      if (add_loops) {
        vertex_t* position = std::lower_bound(begin, end, v);
        if (position == end || *position != v) {
          std::memmove(position + 1, position, sizeof(vertex_t) * (end - position));
          *position = v;
          ++end;
          ++loops_added;
        }
      }
      cursor[v] = end - begin;  // the row's final size
    }
  }
  {
    StageTimer timer("csr: compact rows");
    edge_t write = 0;
    for (vertex_t v = 0; v < n; ++v) {
      const edge_t old_begin = indptr[v];
      const edge_t size = cursor[v];
      indptr[v] = write;
      if (write != old_begin)
        std::memmove(indices.data() + write, indices.data() + old_begin, sizeof(vertex_t) * size);
      write += size;
    }
    indptr[n] = write;
    indices.resize(static_cast<std::size_t>(write));
  }
  result.duplicates_removed = duplicates;
  result.self_loops_added = loops_added;
  if (options.self_loops == SelfLoops::kRemove) result.self_loops_removed = loops_seen;
  return result;
}

EdgeSource memory_edge_source(const std::vector<vertex_t>& pairs) {
  return [&pairs](const EdgeBlockVisitor& visit) {
    const std::size_t block = std::size_t(1) << 24;
    const std::size_t count = pairs.size() / 2;
    for (std::size_t begin = 0; begin < count; begin += block)
      visit(pairs.data() + 2 * begin, std::min(block, count - begin));
  };
}

}  // namespace sluice
