// Implementation of formats/csr_builder.hpp.
#include "formats/csr_builder.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

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

// Splits blocks of pairs into their directed entries (dst, src), grouped by buckets of
// 2^shift consecutive destinations, then hands each bucket's entries to a visitor, buckets in
// parallel. A visitor that touches only its bucket's rows needs no atomics, and its random
// accesses stay inside one bucket's rows (in cache) instead of spreading over the whole CSR.
// Symmetrizing and dropping self-loops happen here, while the entries are written.
// What BucketPartition stages of every entry.
enum class Staged { kDestinations, kEntries };

class BucketPartition {
 public:
  // At most kMaxBuckets buckets, each of at least 2^min_shift vertices; blocks of up to
  // `stage_pairs` pairs are staged at once.
  BucketPartition(vertex_t n, const CsrBuildOptions& options, std::size_t stage_pairs,
                  int min_shift)
      : symmetrize_(options.symmetrize),
        remove_loops_(options.self_loops == SelfLoops::kRemove),
        ranges_(omp_get_max_threads()),
        stage_pairs_(std::max<std::size_t>(stage_pairs, 1)),
        shift_(min_shift),
        entries_(new vertex_t[4 * stage_pairs_]) {
    while ((std::int64_t(std::max<vertex_t>(n, 1) - 1) >> shift_) >= kMaxBuckets) ++shift_;
    buckets_ = static_cast<int>((std::int64_t(std::max<vertex_t>(n, 1) - 1) >> shift_) + 1);
    cursors_.resize(std::size_t(ranges_) * buckets_);
    bucket_begin_.resize(std::size_t(buckets_) + 1);
  }

  int shift() const { return shift_; }
  int buckets() const { return buckets_; }

  // Calls visit(entries, size) for every bucket with entries, in input order: under
  // Staged::kEntries entries[2i] = dst and entries[2i + 1] = src, under Staged::kDestinations
  // entries[i] = dst alone. Returns the self-loops among the pairs.
  template <Staged kStaged, typename Visit>
  std::int64_t visit(const vertex_t* pairs, std::size_t count, Visit&& fn) {
    std::int64_t loops = 0;
    for (std::size_t begin = 0; begin < count; begin += stage_pairs_)
      loops += visit_stage<kStaged>(pairs + 2 * begin, std::min(stage_pairs_, count - begin), fn);
    return loops;
  }

 private:
  static constexpr std::int64_t kMaxBuckets = 1024;

  template <Staged kStaged, typename Visit>
  std::int64_t visit_stage(const vertex_t* pairs, std::size_t count, Visit& visit) {
    constexpr int kWidth = kStaged == Staged::kEntries ? 2 : 1;
    const auto edges = static_cast<std::int64_t>(count);
    const int shift = shift_, buckets = buckets_, ranges = ranges_;
    const bool symmetrize = symmetrize_, remove_loops = remove_loops_;
    edge_t* cursors = cursors_.data();
    edge_t* bucket_begin = bucket_begin_.data();
    vertex_t* out = entries_.get();
    std::int64_t loops = 0;
#pragma omp parallel reduction(+ : loops) if (worth_parallel(edges))
    {
#pragma omp for schedule(static, 1)
      for (int range = 0; range < ranges; ++range) {
        edge_t* count_of = cursors + std::size_t(range) * buckets;
        std::fill(count_of, count_of + buckets, 0);
        const std::int64_t end = edges * (range + 1) / ranges;
        for (std::int64_t i = edges * range / ranges; i < end; ++i) {
          const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
          if (src == dst) {
            ++loops;
            if (remove_loops) continue;
          }
          ++count_of[dst >> shift];
          if (symmetrize && src != dst) ++count_of[src >> shift];
        }
      }
#pragma omp single
      {
        edge_t offset = 0;
        for (int b = 0; b < buckets; ++b) {
          bucket_begin[b] = offset;
          for (int range = 0; range < ranges; ++range) {
            edge_t& cursor = cursors[std::size_t(range) * buckets + b];
            const edge_t size = cursor;
            cursor = offset;
            offset += size;
          }
        }
        bucket_begin[buckets] = offset;
      }
#pragma omp for schedule(static, 1)
      for (int range = 0; range < ranges; ++range) {
        edge_t* cursor = cursors + std::size_t(range) * buckets;
        const std::int64_t end = edges * (range + 1) / ranges;
        for (std::int64_t i = edges * range / ranges; i < end; ++i) {
          const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
          if (src == dst && remove_loops) continue;
          edge_t slot = cursor[dst >> shift]++;
          out[kWidth * slot] = dst;
          if (kWidth == 2) out[kWidth * slot + 1] = src;
          if (symmetrize && src != dst) {
            slot = cursor[src >> shift]++;
            out[kWidth * slot] = src;
            if (kWidth == 2) out[kWidth * slot + 1] = dst;
          }
        }
      }
#pragma omp for schedule(dynamic, 1)
      for (int b = 0; b < buckets; ++b) {
        const edge_t size = bucket_begin[b + 1] - bucket_begin[b];
        if (size > 0) visit(out + kWidth * bucket_begin[b], size);
      }
    }
    return loops;
  }

  bool symmetrize_, remove_loops_;
  int ranges_;
  std::size_t stage_pairs_;
  int shift_;
  int buckets_ = 1;
  std::unique_ptr<vertex_t[]> entries_;  // 2 entries of 2 ids per staged pair at most
  std::vector<edge_t> cursors_;          // ranges x buckets: sizes, then write cursors
  std::vector<edge_t> bucket_begin_;     // buckets + 1 offsets into entries_
};

// Pairs staged at once: 16 MiB of entries, less for a source expected to deliver fewer pairs
// (not below 64 Ki pairs: a low estimate must not cut the blocks into tiny stages).
std::size_t stage_pairs(std::int64_t expected_edges) {
  constexpr std::size_t kStagePairs = std::size_t(1) << 20, kMinStagePairs = std::size_t(1) << 16;
  return expected_edges > 0 ? std::clamp(std::size_t(expected_edges), kMinStagePairs, kStagePairs)
                            : kStagePairs;
}

// The rows of the streaming build are grouped by 2^group_bits consecutive vertices. The scatter
// appends every entry to its group's part of the indices as a packed key, (row within the
// group) << id_bits | source, so one sort of a group's keys orders it by row, then by source:
// every row lands sorted in its own slots. Keys fit 32 bits: group_bits <= 32 - id_bits.
struct RowGroups {
  explicit RowGroups(vertex_t n) {
    while (id_bits < 31 && (std::int64_t(n) - 1) >> id_bits != 0) ++id_bits;
    group_bits = std::min(kMaxGroupBits, 32 - id_bits);
    count = n > 0 ? ((std::int64_t(n) - 1) >> group_bits) + 1 : 0;
  }
  static constexpr int kMaxGroupBits = 10;
  int id_bits = 1;     // bits of the largest id, n - 1
  int group_bits = 1;  // bits of a row within its group
  std::int64_t count = 0;
  std::uint32_t key(vertex_t dst, vertex_t src) const {
    const auto row = static_cast<std::uint32_t>(dst) & ((1u << group_bits) - 1);
    return (row << id_bits) | static_cast<std::uint32_t>(src);
  }
  vertex_t source(std::uint32_t key) const {
    return static_cast<vertex_t>(key & ((std::uint32_t(1) << id_bits) - 1));
  }
};

// Sorts keys ascending with an LSD radix sort over the digits that vary (8-bit digits, 11-bit
// for large sets), std::sort for small sets.
constexpr std::size_t kWideDigitKeys = 4096;
void sort_keys(std::uint32_t* keys, std::size_t size, int key_bits,
               std::vector<std::uint32_t>& scratch, std::vector<std::uint32_t>& counts) {
  if (size < 64) {
    std::sort(keys, keys + size);
    return;
  }
  const int max_digit_bits = size >= kWideDigitKeys ? 11 : 8;
  const int passes = (key_bits + max_digit_bits - 1) / max_digit_bits;
  const int digit_bits = (key_bits + passes - 1) / passes;
  const std::uint32_t mask = (1u << digit_bits) - 1;
  const std::size_t bins = std::size_t(1) << digit_bits;
  scratch.resize(size);
  counts.assign(std::size_t(passes) * bins, 0);
  for (std::size_t i = 0; i < size; ++i)
    for (int p = 0; p < passes; ++p) ++counts[p * bins + ((keys[i] >> (p * digit_bits)) & mask)];
  std::uint32_t* from = keys;
  std::uint32_t* to = scratch.data();
  for (int p = 0; p < passes; ++p) {
    std::uint32_t* count = counts.data() + p * bins;
    const int shift = p * digit_bits;
    if (count[(from[0] >> shift) & mask] == size) continue;  // a digit all keys share
    std::uint32_t sum = 0;
    for (std::size_t b = 0; b < bins; ++b) {
      const std::uint32_t c = count[b];
      count[b] = sum;
      sum += c;
    }
    for (std::size_t i = 0; i < size; ++i) to[count[(from[i] >> shift) & mask]++] = from[i];
    std::swap(from, to);
  }
  if (from != keys) std::copy(from, from + size, keys);
}

// Reads the source twice: first the degrees (into indptr, then its prefix sums, and the
// indices sized), then every entry appended to its row group as a packed key.
// `group_filled` receives the end of each group's appended keys.
void count_and_scatter(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options,
                       std::int64_t expected_edges, const RowGroups& groups, CsrBuildResult& result,
                       std::int64_t& loops_seen, std::vector<edge_t>& group_filled) {
  auto& indptr = result.indptr;
  BucketPartition partition(n, options, stage_pairs(expected_edges), groups.group_bits);
  {
    StageTimer timer("csr: count degrees");
    edge_t* degree = indptr.data() + 1;
    source([&](const vertex_t* pairs, std::size_t count) {
      result.input_edges += static_cast<std::int64_t>(count);
      loops_seen += partition.visit<Staged::kDestinations>(
          pairs, count, [&](const vertex_t* destinations, edge_t size) {
            for (edge_t e = 0; e < size; ++e) ++degree[destinations[e]];
          });
    });
  }
  const bool add_loops = options.self_loops == SelfLoops::kAdd;
  for (vertex_t v = 0; v < n; ++v) indptr[v + 1] += indptr[v] + (add_loops ? 1 : 0);
  resize_populated(result.indices, static_cast<std::size_t>(indptr[n]));
  // Each group's write cursor and the end of its appended keys (before the added self-loops).
  group_filled.resize(std::size_t(groups.count));
  std::vector<edge_t> group_end(std::size_t(groups.count));
  for (std::int64_t g = 0; g < groups.count; ++g) {
    const std::int64_t first = g << groups.group_bits;
    const std::int64_t last = std::min<std::int64_t>(n, (g + 1) << groups.group_bits);
    group_filled[g] = indptr[first];
    group_end[g] = indptr[last] - (add_loops ? last - first : 0);
  }
  {
    StageTimer timer("csr: scatter edges");
    auto* keys = reinterpret_cast<std::uint32_t*>(result.indices.data());
    edge_t* cursor = group_filled.data();
    const edge_t* end = group_end.data();
    const int group_bits = groups.group_bits;
    std::int64_t delivered = 0, overflows = 0;
    source([&](const vertex_t* pairs, std::size_t count) {
      delivered += static_cast<std::int64_t>(count);
      partition.visit<Staged::kEntries>(pairs, count, [&](const vertex_t* entries, edge_t size) {
        for (edge_t e = 0; e < size; ++e) {
          const vertex_t dst = entries[2 * e], src = entries[2 * e + 1];
          const edge_t slot = cursor[dst >> group_bits]++;
          if (slot < end[dst >> group_bits]) {
            keys[slot] = groups.key(dst, src);
          } else {
#pragma omp atomic
            ++overflows;
          }
        }
      });
    });
    SLUICE_EXPECTS(delivered == result.input_edges, "edge source delivered ", delivered,
                   " edges in its second pass, ", result.input_edges, " in the first");
    SLUICE_EXPECTS(overflows == 0, "edge source delivered different edges in its second pass");
  }
  for (std::int64_t g = 0; g < groups.count; ++g)
    SLUICE_EXPECTS(group_filled[g] == group_end[g],
                   "edge source delivered different edges in its second pass");
}

// Sorts the keys of group g (adding the self-loops under SelfLoops::kAdd), unpacks them into
// its rows and deduplicates every row; sets the rows' final sizes.
void finish_group(std::int64_t g, vertex_t n, const RowGroups& groups, SelfLoops self_loops,
                  const std::vector<edge_t>& indptr, std::vector<vertex_t>& indices,
                  std::vector<edge_t>& sizes, std::vector<std::uint32_t>& scratch,
                  std::vector<std::uint32_t>& counts, std::int64_t& duplicates,
                  std::int64_t& loops_added) {
  const auto first = static_cast<vertex_t>(g << groups.group_bits);
  const auto last = static_cast<vertex_t>(std::min<std::int64_t>(n, (g + 1) << groups.group_bits));
  auto* keys = reinterpret_cast<std::uint32_t*>(indices.data() + indptr[first]);
  const auto size = static_cast<std::size_t>(indptr[last] - indptr[first]);
  if (self_loops == SelfLoops::kAdd) {
    std::uint32_t* loop = keys + size - (last - first);
    for (vertex_t v = first; v < last; ++v) *loop++ = groups.key(v, v);
  }
  sort_keys(keys, size, groups.id_bits + groups.group_bits, scratch, counts);
  // Every row's keys now fill its own slots, sorted; unpack them, dropping repeated keys.
  for (vertex_t v = first; v < last; ++v) {
    const std::uint32_t* key = keys + (indptr[v] - indptr[first]);
    const std::uint32_t* key_end = keys + (indptr[v + 1] - indptr[first]);
    vertex_t* out = indices.data() + indptr[v];
    vertex_t* const row = out;
    std::uint32_t previous = 0;
    edge_t loops = 0;
    const std::uint32_t loop_key = groups.key(v, v);
    for (; key < key_end; ++key) {
      loops += *key == loop_key;
      if (out != row && *key == previous) continue;
      previous = *key;
      *out++ = groups.source(*key);
    }
    sizes[v] = out - row;
    const edge_t removed = (indptr[v + 1] - indptr[v]) - sizes[v];
    // Under kAdd the row holds its added self-loop, a duplicate where the input had one.
    if (self_loops == SelfLoops::kAdd) {
      duplicates += removed - (loops > 1 ? 1 : 0);
      if (loops == 1) ++loops_added;
    } else {
      duplicates += removed;
    }
  }
}

// The rows of the compaction by chunks of kRows rows: chunk c holds rows [first_row(c),
// first_row(c + 1)), whose entries start at indptr[first_row(c)] and move to begin[c] (its
// offset in the compacted CSR). Rows only move left.
struct CompactChunks {
  static constexpr std::int64_t kRows = 256;
  vertex_t n;
  std::int64_t count;
  std::vector<edge_t> begin;  // count + 1 final offsets
  vertex_t first_row(std::int64_t c) const {
    return static_cast<vertex_t>(std::min<std::int64_t>(n, c * kRows));
  }
};

// Moves the rows of chunks [first, last) in order, row by row, from indptr[v] to their final
// offsets. Entries at or past `saved_from` are taken from `saved` (saved[0] held the entry at
// saved_from) instead of `data`, where a later chunk may have written over them.
void move_chunk_rows(const CompactChunks& chunks, std::int64_t first, std::int64_t last,
                     const std::vector<edge_t>& sizes, const std::vector<edge_t>& indptr,
                     vertex_t* data, edge_t saved_from, const vertex_t* saved) {
  edge_t write = chunks.begin[first];
  for (vertex_t v = chunks.first_row(first); v < chunks.first_row(last); ++v) {
    const edge_t from = indptr[v], size = sizes[std::size_t(v)];
    const edge_t in_data = std::clamp<edge_t>(saved_from - from, 0, size);
    if (write != from && in_data > 0)
      std::memmove(data + write, data + from, sizeof(vertex_t) * in_data);
    if (in_data < size)
      std::memcpy(data + write + in_data, saved + (from + in_data - saved_from),
                  sizeof(vertex_t) * (size - in_data));
    write += size;
  }
}

// Few duplicates move the rows left by little, so that most chunks write over the entries of the
// chunk before them. Cut into pieces of about equal entries instead, each piece moves alone once
// the entries that the next piece writes over (its last shift's worth) are saved aside: no piece
// waits for another. Returns false, moving nothing, where those entries exceed 1/64 of the
// indices or a shift reaches past the piece before.
bool move_pieces_with_saved_tails(const CompactChunks& chunks, const std::vector<edge_t>& sizes,
                                  const std::vector<edge_t>& indptr, vertex_t* data,
                                  std::int64_t entries) {
  const std::int64_t pieces = 4 * std::int64_t(omp_get_max_threads());
  if (pieces < 8 || !worth_parallel(entries)) return false;
  const auto old_begin = [&](std::int64_t c) { return indptr[chunks.first_row(c)]; };
  // first[k]: the first chunk of piece k, which starts at chunks.begin[first[k]] once moved.
  std::vector<std::int64_t> first{0};
  for (std::int64_t k = 1; k < pieces; ++k) {
    std::int64_t low = first.back(), high = chunks.count;
    while (low < high) {
      const std::int64_t middle = low + (high - low) / 2;
      if (old_begin(middle) >= edge_t(entries * k / pieces))
        high = middle;
      else
        low = middle + 1;
    }
    if (low > first.back() && low < chunks.count) first.push_back(low);
  }
  first.push_back(chunks.count);
  const std::int64_t count = std::int64_t(first.size()) - 1;
  std::vector<edge_t> saved_begin(std::size_t(count) + 1, 0);
  for (std::int64_t k = 1; k < count; ++k) {
    const edge_t cut = chunks.begin[first[k]];
    if (cut < old_begin(first[k - 1])) return false;
    saved_begin[k + 1] = saved_begin[k] + (old_begin(first[k]) - cut);
  }
  if (saved_begin[count] > entries / 64) return false;
  std::vector<vertex_t> saved(static_cast<std::size_t>(saved_begin[count]));
#pragma omp parallel for schedule(static) if (count > 1)
  for (std::int64_t k = 1; k < count; ++k)
    std::memcpy(saved.data() + saved_begin[k], data + chunks.begin[first[k]],
                sizeof(vertex_t) * (saved_begin[k + 1] - saved_begin[k]));
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (std::int64_t p = 0; p < count; ++p) {
    // The last piece's entries are written over by no one.
    const bool last = p + 1 == count;
    move_chunk_rows(chunks, first[p], first[p + 1], sizes, indptr, data,
                    last ? entries : chunks.begin[first[p + 1]],
                    last ? nullptr : saved.data() + saved_begin[p + 1]);
  }
  return true;
}

// Moves every chunk, chunks in parallel: a chunk waits only for the earlier chunks whose entries
// lie where it writes. Where duplicates have moved the rows far left, those are chunks long done,
// and the moves run side by side.
void move_chunks_after_overlaps(const CompactChunks& chunks, const std::vector<edge_t>& sizes,
                                const std::vector<edge_t>& indptr, vertex_t* data,
                                std::int64_t entries) {
  std::unique_ptr<std::atomic<bool>[]> moved(new std::atomic<bool>[std::size_t(chunks.count)]);
  for (std::int64_t c = 0; c < chunks.count; ++c) moved[c].store(false, std::memory_order_relaxed);
  // The first chunk whose entries reach past `offset` (chunks before `limit` only).
  auto first_chunk_past = [&](edge_t offset, std::int64_t limit) {
    std::int64_t low = 0, high = limit;
    while (low < high) {
      const std::int64_t middle = low + (high - low) / 2;
      if (indptr[chunks.first_row(middle + 1)] > offset)
        high = middle;
      else
        low = middle + 1;
    }
    return low;
  };
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(entries))
  for (std::int64_t c = 0; c < chunks.count; ++c) {
    const edge_t to = chunks.begin[c], to_end = chunks.begin[c + 1];
    // Chunks are handed out in order, so every chunk waited for is already being moved.
    for (std::int64_t j = first_chunk_past(to, c); j < c && indptr[chunks.first_row(j)] < to_end;
         ++j)
      while (!moved[j].load(std::memory_order_acquire)) std::this_thread::yield();
    move_chunk_rows(chunks, c, c + 1, sizes, indptr, data, entries, nullptr);
    moved[c].store(true, std::memory_order_release);
  }
}

// Moves the rows together: row v, of final size sizes[v] at indptr[v], follows row v - 1;
// indptr becomes the CSR's offsets and indices its entries. The final offsets come first; the
// rows then move in place (nothing buffered but the few entries move_pieces_with_saved_tails
// saves), by pieces where they move little, else by chunks.
void compact_rows(vertex_t n, const std::vector<edge_t>& sizes, std::vector<edge_t>& indptr,
                  std::vector<vertex_t>& indices) {
  StageTimer timer("csr: compact rows");
  CompactChunks chunks{n, (std::int64_t(n) + CompactChunks::kRows - 1) / CompactChunks::kRows, {}};
  chunks.begin.assign(std::size_t(chunks.count) + 1, 0);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::int64_t c = 0; c < chunks.count; ++c) {
    edge_t size = 0;
    for (vertex_t v = chunks.first_row(c); v < chunks.first_row(c + 1); ++v)
      size += sizes[std::size_t(v)];
    chunks.begin[c + 1] = size;
  }
  for (std::int64_t c = 0; c < chunks.count; ++c) chunks.begin[c + 1] += chunks.begin[c];
  const edge_t total = chunks.begin[chunks.count];
  const auto entries = static_cast<std::int64_t>(indices.size());
  if (!move_pieces_with_saved_tails(chunks, sizes, indptr, indices.data(), entries))
    move_chunks_after_overlaps(chunks, sizes, indptr, indices.data(), entries);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
  for (std::int64_t c = 0; c < chunks.count; ++c) {
    edge_t offset = chunks.begin[c];
    for (vertex_t v = chunks.first_row(c); v < chunks.first_row(c + 1); ++v) {
      indptr[v] = offset;
      offset += sizes[std::size_t(v)];
    }
  }
  indptr[n] = total;
  indices.resize(static_cast<std::size_t>(total));
}

}  // namespace

CsrBuildResult build_in_csr(vertex_t n, const EdgeSource& source, const CsrBuildOptions& options,
                            std::int64_t expected_edges) {
  SLUICE_EXPECTS(n >= 0, "negative vertex count");
  CsrBuildResult result;
  auto& indptr = result.indptr;
  resize_populated(indptr, std::size_t(n) + 1);  // zeros, its pages touched by every thread
  std::int64_t loops_seen = 0;
  const RowGroups groups(n);
  {
    std::vector<edge_t> group_filled;
    count_and_scatter(n, source, options, expected_edges, groups, result, loops_seen, group_filled);
  }
  auto& indices = result.indices;
  std::vector<edge_t> sizes;
  resize_populated(sizes, static_cast<std::size_t>(n));
  std::int64_t duplicates = 0, loops_added = 0;
  {
    StageTimer timer("csr: sort and deduplicate rows");
#pragma omp parallel reduction(+ : duplicates, loops_added) if (worth_parallel(std::int64_t(indices.size()) + n))
    {
      std::vector<std::uint32_t> scratch, counts;
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t g = 0; g < groups.count; ++g)
        finish_group(g, n, groups, options.self_loops, indptr, indices, sizes, scratch, counts,
                     duplicates, loops_added);
    }
  }
  compact_rows(n, sizes, indptr, indices);
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

EdgeSource memory_edge_source(const std::vector<vertex_t>& pairs) {
  return [&pairs](const EdgeBlockVisitor& visit) {
    const std::size_t block = std::size_t(1) << 24;
    const std::size_t count = pairs.size() / 2;
    for (std::size_t begin = 0; begin < count; begin += block)
      visit(pairs.data() + 2 * begin, std::min(block, count - begin));
  };
}

}  // namespace sluice
