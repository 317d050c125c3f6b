// Implementation of formats/csr_builder.hpp.
#include "formats/csr_builder.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"

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

// One least-significant-digit radix pass over `bits`-bit digits at `shift`.
template <int kBits>
void radix_pass(const vertex_t* from, vertex_t* to, std::size_t size, int shift) {
  constexpr std::uint32_t kMask = (1u << kBits) - 1;
  std::uint32_t counts[1u << kBits] = {};
  for (std::size_t i = 0; i < size; ++i)
    ++counts[(static_cast<std::uint32_t>(from[i]) >> shift) & kMask];
  std::uint32_t sum = 0;
  for (auto& count : counts) {
    const std::uint32_t c = count;
    count = sum;
    sum += c;
  }
  for (std::size_t i = 0; i < size; ++i)
    to[counts[(static_cast<std::uint32_t>(from[i]) >> shift) & kMask]++] = from[i];
}

// Sorts ids ascending: std::sort for short rows, an LSD radix sort (8-bit digits, 11-bit for
// long rows; only over the digits that vary) otherwise. Measured on RMAT rows, this takes
// about 30 % less time than std::sort with a higher threshold, and far less than std::sort
// alone, whose comparisons dominate the import of skewed graphs.
void sort_row(vertex_t* begin, vertex_t* end, std::vector<vertex_t>& scratch) {
  const std::size_t size = static_cast<std::size_t>(end - begin);
  if (size < 2) return;
  if (size < 32) {
    std::sort(begin, end);
    return;
  }
  vertex_t max_id = 0;
  for (const vertex_t* p = begin; p < end; ++p) max_id = std::max(max_id, *p);
  scratch.resize(size);
  vertex_t* from = begin;
  vertex_t* to = scratch.data();
  const int bits = size >= 4096 ? 11 : 8;
  for (int shift = 0; shift < 32 && (static_cast<std::uint32_t>(max_id) >> shift) != 0;
       shift += bits) {
    if (bits == 8)
      radix_pass<8>(from, to, size, shift);
    else
      radix_pass<11>(from, to, size, shift);
    std::swap(from, to);
  }
  if (from != begin) std::copy(from, from + size, begin);
}

// Both passes split every block into `ranges` equal parts (one per thread), part r always
// feeding counter set ("lane") r % lanes. With a lane per part (lanes == ranges) neither pass
// needs atomics and part r's edges land in their own slice of every row; with fewer lanes
// (their counters, lanes x n x 8 bytes, must stay small next to the edges) parts sharing a lane
// use atomics, still far less contended on hub vertices than one shared counter array.
class LaneScatter {
 public:
  LaneScatter(vertex_t n, int lanes, int ranges)
      : n_(n), lanes_(lanes), ranges_(ranges), counters_(std::size_t(lanes) * n, 0) {}

  bool shared() const { return lanes_ < ranges_; }

  template <typename Fn>  // fn(begin, end, counters of the lane)
  void for_ranges(std::size_t count, Fn&& fn) {
#pragma omp parallel for schedule(static, 1) if (worth_parallel(std::int64_t(count)))
    for (int range = 0; range < ranges_; ++range) {
      const auto begin = static_cast<std::int64_t>(count * range / ranges_);
      const auto end = static_cast<std::int64_t>(count * (range + 1) / ranges_);
      fn(begin, end, counters_.data() + std::size_t(range % lanes_) * n_);
    }
  }
  // Degree of v summed over lanes.
  edge_t degree(vertex_t v) const {
    edge_t sum = 0;
    for (int lane = 0; lane < lanes_; ++lane) sum += counters_[std::size_t(lane) * n_ + v];
    return sum;
  }
  // Turns per-lane degrees into per-lane write cursors starting at row_begin[v].
  void to_cursors(const edge_t* row_begin) {
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(n_)))
    for (vertex_t v = 0; v < n_; ++v) {
      edge_t offset = row_begin[v];
      for (int lane = 0; lane < lanes_; ++lane) {
        edge_t& counter = counters_[std::size_t(lane) * n_ + v];
        const edge_t degree = counter;
        counter = offset;
        offset += degree;
      }
    }
  }
  // After the scatter: the end of the filled part of every row.
  std::vector<edge_t> filled_ends() const {
    const auto last = counters_.begin() + std::ptrdiff_t(lanes_ - 1) * n_;
    return std::vector<edge_t>(last, last + n_);
  }

 private:
  vertex_t n_;
  int lanes_, ranges_;
  std::vector<edge_t> counters_;
};

inline void increment(edge_t& counter, bool atomic) {
  if (atomic) {
#pragma omp atomic
    ++counter;
  } else {
    ++counter;
  }
}
inline edge_t take(edge_t& cursor, bool atomic) {
  edge_t slot;
  if (atomic) {
#pragma omp atomic capture
    slot = cursor++;
  } else {
    slot = cursor++;
  }
  return slot;
}

// Lanes whose counters fit the budget: a quarter of the expected CSR's bytes (64 MiB at
// least; 256 MiB when the edge count is unknown), at most one per thread.
int choose_lanes(vertex_t n, std::int64_t expected_edges, const CsrBuildOptions& options) {
  const int threads = omp_get_max_threads();
  const double directed = static_cast<double>(expected_edges) * (options.symmetrize ? 2 : 1);
  const double budget = expected_edges > 0
                            ? std::max(directed * sizeof(vertex_t) / 4, 64.0 * (1 << 20))
                            : 256.0 * (1 << 20);
  const double per_lane = std::max(1.0, static_cast<double>(n) * sizeof(edge_t));
  return static_cast<int>(std::clamp(std::floor(budget / per_lane), 1.0, double(threads)));
}

void count_and_scatter(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options,
                       std::int64_t expected_edges, CsrBuildResult& result,
                       std::int64_t& loops_seen, std::vector<edge_t>& cursor) {
  auto& indptr = result.indptr;
  const bool remove_loops = options.self_loops == SelfLoops::kRemove;
  const bool symmetrize = options.symmetrize;
  const int lane_count = choose_lanes(n, expected_edges, options);
  LaneScatter lanes(n, lane_count, omp_get_max_threads());
  const bool atomic = lanes.shared();
  log_debug("csr: ", lane_count, " counter lanes for ", omp_get_max_threads(), " threads",
            atomic ? " (shared, atomic)" : "");
  {
    StageTimer timer("csr: count degrees");
    source([&](const vertex_t* pairs, std::size_t count) {
      result.input_edges += static_cast<std::int64_t>(count);
      std::int64_t loops = 0;
      lanes.for_ranges(count, [&](std::int64_t begin, std::int64_t end, edge_t* degree) {
        std::int64_t range_loops = 0;
        for (std::int64_t i = begin; i < end; ++i) {
          const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
          if (src == dst) {
            ++range_loops;
            if (remove_loops) continue;
          }
          increment(degree[dst], atomic);
          if (symmetrize && src != dst) increment(degree[src], atomic);
        }
#pragma omp atomic
        loops += range_loops;
      });
      loops_seen += loops;
    });
  }
  const bool add_loops = options.self_loops == SelfLoops::kAdd;
  for (vertex_t v = 0; v < n; ++v)
    indptr[v + 1] = indptr[v] + lanes.degree(v) + (add_loops ? 1 : 0);
  result.indices.resize(static_cast<std::size_t>(indptr[n]));
  lanes.to_cursors(indptr.data());
  {
    StageTimer timer("csr: scatter edges");
    vertex_t* indices = result.indices.data();
    std::int64_t delivered = 0;
    source([&](const vertex_t* pairs, std::size_t count) {
      delivered += static_cast<std::int64_t>(count);
      lanes.for_ranges(count, [&](std::int64_t begin, std::int64_t end, edge_t* cursor) {
        for (std::int64_t i = begin; i < end; ++i) {
          const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
          if (src == dst && remove_loops) continue;
          indices[take(cursor[dst], atomic)] = src;
          if (symmetrize && src != dst) indices[take(cursor[src], atomic)] = dst;
        }
      });
    });
    SLUICE_EXPECTS(delivered == result.input_edges, "edge source delivered ", delivered,
                   " edges in its second pass, ", result.input_edges, " in the first");
  }
  cursor = lanes.filled_ends();
  for (vertex_t v = 0; v < n; ++v)
    SLUICE_EXPECTS(cursor[v] <= indptr[v + 1] - (add_loops ? 1 : 0),
                   "edge source delivered different edges in its second pass");
}

// Finishes row v, whose entries fill [begin, filled): sorted, duplicates removed (counted in
// `duplicates`) and, under SelfLoops::kAdd, the self loop inserted where missing (counted in
// `loops_added`; the row has room for it). Returns the row's final size.
edge_t finish_row(vertex_t v, vertex_t* begin, vertex_t* filled, SelfLoops self_loops,
                  std::vector<vertex_t>& scratch, std::int64_t& duplicates,
                  std::int64_t& loops_added) {
  sort_row(begin, filled, scratch);
  vertex_t* end = std::unique(begin, filled);
  duplicates += filled - end;
  if (self_loops == SelfLoops::kAdd) {
    vertex_t* position = std::lower_bound(begin, end, v);
    if (position == end || *position != v) {
      std::memmove(position + 1, position, sizeof(vertex_t) * (end - position));
      *position = v;
      ++end;
      ++loops_added;
    }
  }
  return end - begin;
}

// Moves the rows together: row v, of final size sizes[v] at indptr[v], follows row v - 1;
// indptr becomes the CSR's offsets and indices its entries.
void compact_rows(vertex_t n, const std::vector<edge_t>& sizes, std::vector<edge_t>& indptr,
                  std::vector<vertex_t>& indices) {
  StageTimer timer("csr: compact rows");
  edge_t write = 0;
  for (vertex_t v = 0; v < n; ++v) {
    const edge_t old_begin = indptr[v];
    indptr[v] = write;
    if (write != old_begin)
      std::memmove(indices.data() + write, indices.data() + old_begin,
                   sizeof(vertex_t) * sizes[std::size_t(v)]);
    write += sizes[std::size_t(v)];
  }
  indptr[n] = write;
  indices.resize(static_cast<std::size_t>(write));
}

}  // namespace

CsrBuildResult build_in_csr(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options,
                            std::int64_t expected_edges) {
  SLUICE_EXPECTS(n >= 0, "negative vertex count");
  CsrBuildResult result;
  auto& indptr = result.indptr;
  indptr.assign(std::size_t(n) + 1, 0);
  std::int64_t loops_seen = 0;
  std::vector<edge_t> cursor;  // end of the filled part of every row
  count_and_scatter(n, source, options, expected_edges, result, loops_seen, cursor);
  auto& indices = result.indices;

  std::int64_t duplicates = 0, loops_added = 0;
  {
    StageTimer timer("csr: sort and deduplicate rows");
#pragma omp parallel reduction(+ : duplicates, loops_added) if (worth_parallel(std::int64_t(indices.size()) + n))
    {
      std::vector<vertex_t> scratch;
#pragma omp for schedule(dynamic, 4096)
      for (vertex_t v = 0; v < n; ++v)  // cursor[v] becomes the row's final size
        cursor[v] = finish_row(v, indices.data() + indptr[v], indices.data() + cursor[v],
                               options.self_loops, scratch, duplicates, loops_added);
    }
  }
  compact_rows(n, cursor, indptr, indices);
  result.duplicates_removed = duplicates;
  result.self_loops_added = loops_added;
  if (options.self_loops == SelfLoops::kRemove) result.self_loops_removed = loops_seen;
  return result;
}

std::int64_t csr_build_bytes(std::int64_t n, std::int64_t edges, const CsrBuildOptions& options) {
  const std::int64_t per_vertex = saturating_bytes({n + 1, 3, sizeof(edge_t)});
  const std::int64_t per_edge =
      saturating_bytes({edges, options.symmetrize ? 2 : 1, sizeof(vertex_t)});
  return saturating_add(per_vertex, per_edge);
}

CsrBuildResult build_in_csr_from_pairs(vertex_t n, std::vector<vertex_t>&& pairs,
                                       const CsrBuildOptions& options) {
  SLUICE_EXPECTS(n > 0, "build_in_csr_from_pairs needs at least one vertex");
  CsrBuildResult result;
  const auto edges = static_cast<std::int64_t>(pairs.size() / 2);
  result.input_edges = edges;
  const bool remove_loops = options.self_loops == SelfLoops::kRemove;
  const bool add_loops = options.self_loops == SelfLoops::kAdd;
  const bool symmetrize = options.symmetrize;
  // Buckets of 2^shift consecutive destinations, at most 1024 of them.
  int shift = 0;
  while ((std::int64_t(n - 1) >> shift) >= 1024) ++shift;
  const std::int64_t buckets = (std::int64_t(n - 1) >> shift) + 1;
  const int ranges = omp_get_max_threads();
  // Entries (dst, src) per range and bucket, then each range's write cursor in every bucket.
  std::vector<edge_t> cursors(std::size_t(ranges) * buckets, 0);
  const vertex_t* input = pairs.data();
  std::int64_t loops_seen = 0;
  {
    StageTimer timer("csr: count bucket sizes");
#pragma omp parallel for schedule(static, 1) reduction(+ : loops_seen) if (worth_parallel(std::int64_t(edges)))
    for (int range = 0; range < ranges; ++range) {
      edge_t* count = cursors.data() + std::size_t(range) * buckets;
      const std::int64_t end = edges * (range + 1) / ranges;
      for (std::int64_t i = edges * range / ranges; i < end; ++i) {
        const vertex_t src = input[2 * i], dst = input[2 * i + 1];
        if (src == dst) {
          ++loops_seen;
          if (remove_loops) continue;
        }
        ++count[dst >> shift];
        if (symmetrize && src != dst) ++count[src >> shift];
      }
    }
  }
  std::vector<edge_t> bucket_begin(std::size_t(buckets) + 1, 0);
  for (std::int64_t b = 0; b < buckets; ++b) {
    edge_t offset = bucket_begin[b];
    for (int range = 0; range < ranges; ++range) {
      edge_t& cursor = cursors[std::size_t(range) * buckets + b];
      const edge_t count = cursor;
      cursor = offset;
      offset += count;
    }
    bucket_begin[b + 1] = offset;
  }
  // Not zero-filled: every slot is written by the scatter (and first touched by its thread).
  std::unique_ptr<vertex_t[]> entries(
      new vertex_t[2 * static_cast<std::size_t>(bucket_begin[buckets])]);
  {
    StageTimer timer("csr: scatter into buckets");
    vertex_t* out = entries.get();
#pragma omp parallel for schedule(static, 1) if (worth_parallel(std::int64_t(edges)))
    for (int range = 0; range < ranges; ++range) {
      edge_t* cursor = cursors.data() + std::size_t(range) * buckets;
      const std::int64_t end = edges * (range + 1) / ranges;
      for (std::int64_t i = edges * range / ranges; i < end; ++i) {
        const vertex_t src = input[2 * i], dst = input[2 * i + 1];
        if (src == dst && remove_loops) continue;
        edge_t slot = cursor[dst >> shift]++;
        out[2 * slot] = dst;
        out[2 * slot + 1] = src;
        if (symmetrize && src != dst) {
          slot = cursor[src >> shift]++;
          out[2 * slot] = src;
          out[2 * slot + 1] = dst;
        }
      }
    }
  }
  std::vector<vertex_t>().swap(pairs);

  auto& indptr = result.indptr;
  indptr.assign(std::size_t(n) + 1, 0);
  auto bucket_vertices = [&](std::int64_t b, vertex_t& first, vertex_t& last) {
    first = static_cast<vertex_t>(b << shift);
    last = static_cast<vertex_t>(std::min<std::int64_t>(n, (b + 1) << shift));
  };
  StageTimer degree_timer("csr: count degrees");
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(std::int64_t(edges)))
  for (std::int64_t b = 0; b < buckets; ++b) {
    for (edge_t e = bucket_begin[b]; e < bucket_begin[b + 1]; ++e) ++indptr[entries[2 * e] + 1];
    if (add_loops) {
      vertex_t first, last;
      bucket_vertices(b, first, last);
      for (vertex_t v = first; v < last; ++v) ++indptr[v + 1];
    }
  }
  for (vertex_t v = 0; v < n; ++v) indptr[v + 1] += indptr[v];
  auto& indices = result.indices;
  indices.resize(static_cast<std::size_t>(indptr[n]));
  degree_timer.finish();
  std::vector<edge_t> sizes(static_cast<std::size_t>(n));
  std::int64_t duplicates = 0, loops_added = 0;
  {
    StageTimer timer("csr: fill, sort and deduplicate rows");
#pragma omp parallel reduction(+ : duplicates, loops_added) if (worth_parallel(std::int64_t(edges) + n))
    {
      std::vector<edge_t> cursor;
      std::vector<vertex_t> scratch;
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t b = 0; b < buckets; ++b) {
        vertex_t first, last;
        bucket_vertices(b, first, last);
        cursor.assign(indptr.begin() + first, indptr.begin() + last);
        for (edge_t e = bucket_begin[b]; e < bucket_begin[b + 1]; ++e)
          indices[cursor[entries[2 * e] - first]++] = entries[2 * e + 1];
        for (vertex_t v = first; v < last; ++v)
          sizes[v] = finish_row(v, indices.data() + indptr[v], indices.data() + cursor[v - first],
                                options.self_loops, scratch, duplicates, loops_added);
      }
    }
  }
  entries.reset();
  compact_rows(n, sizes, indptr, indices);
  result.duplicates_removed = duplicates;
  result.self_loops_added = loops_added;
  if (remove_loops) result.self_loops_removed = loops_seen;
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
