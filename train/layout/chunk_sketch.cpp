// Implementation of train/layout/chunk_sketch.hpp.
#include "train/layout/chunk_sketch.hpp"

#include <omp.h>

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"

namespace sluice {
namespace {

// Per-thread counts of one candidate C; chunk k = p * C + r is range r of partition p.
struct SketchCounts {
  SketchCounts(std::size_t chunks, int partitions)
      : owned(chunks * partitions, 0),
        pulled(chunks * partitions, 0),
        long_columns(chunks, 0),
        loss_long_columns(chunks, 0),
        tail(chunks, 0),
        transition(chunks, 0),
        reused(chunks, 0),
        head(std::size_t(partitions), 0) {}
  void add(const SketchCounts& other) {
    const auto sum = [](std::vector<std::int64_t>& to, const std::vector<std::int64_t>& from) {
      for (std::size_t i = 0; i < to.size(); ++i) to[i] += from[i];
    };
    sum(owned, other.owned);
    sum(pulled, other.pulled);
    sum(long_columns, other.long_columns);
    sum(loss_long_columns, other.loss_long_columns);
    sum(tail, other.tail);
    sum(transition, other.transition);
    sum(reused, other.reused);
    sum(head, other.head);
  }
  // Per chunk k and owner q (index k * P + q): the sources of chunk k's entries owned by q
  // (|N(k) ∩ V_q|), and those of them not in the previous batch's chunk of the same partition.
  std::vector<std::int64_t> owned, pulled;
  // Per chunk: sources with more entries than the chunk's long-degree threshold.
  std::vector<std::int64_t> long_columns;
  // The same in the chunk's loss-row CSR: sources with more entries into loss rows than its
  // threshold.
  std::vector<std::int64_t> loss_long_columns;
  // Per partition p and batch c (index p * C + c): vertices of p's chunk in batch c that are in
  // the last batch's T^p.
  std::vector<std::int64_t> tail;
  // Per partition p and batch c (index p * C + c): |T_c^p| and |T_c^p ∩ T_{c-1}^p|.
  std::vector<std::int64_t> transition, reused;
  // Per partition: vertices of its last range in T_0^p.
  std::vector<std::int64_t> head;
};

}  // namespace

std::vector<vertex_t> edge_balanced_bounds(const std::vector<edge_t>& row_offsets,
                                           const std::vector<vertex_t>& partition_offsets,
                                           int chunks) {
  SLUICE_EXPECTS(chunks >= 1, "chunk ranges for C=", chunks);
  const int parts = static_cast<int>(partition_offsets.size()) - 1;
  std::vector<vertex_t> bounds(std::size_t(parts) * (chunks + 1));
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(row_offsets.back()))
  for (int p = 0; p < parts; ++p) {
    const vertex_t begin = partition_offsets[p];
    const vertex_t end = partition_offsets[p + 1];
    vertex_t* b = bounds.data() + std::size_t(p) * (chunks + 1);
    // Weight of a destination: its row length (in-edges + self entry) plus one.
    const double total = static_cast<double>(row_offsets[end] - row_offsets[begin]) +
                         static_cast<double>(end - begin);
    b[0] = begin;
    int next = 1;
    for (vertex_t v = begin; v < end && next < chunks; ++v) {
      const double before = static_cast<double>(row_offsets[v] - row_offsets[begin] + (v - begin));
      const double weight = static_cast<double>(row_offsets[v + 1] - row_offsets[v] + 1);
      // A vertex belongs to the chunk its weight midpoint falls in; a range starts at its
      // first vertex.
      const int chunk =
          std::min(chunks - 1, static_cast<int>((before + 0.5 * weight) * chunks / total));
      while (next <= chunk) b[next++] = v;
    }
    while (next <= chunks) b[next++] = end;
    b[chunks] = end;
    if (end - begin >= chunks) {
      for (int r = 1; r < chunks; ++r) b[r] = std::clamp(b[r], b[r - 1] + 1, end - (chunks - r));
    }
  }
  return bounds;
}

ChunkSketch::ChunkSketch(const Dataset& d, const std::vector<vertex_t>& new_to_old,
                         const std::vector<vertex_t>& old_to_new,
                         const std::vector<vertex_t>& partition_offsets)
    : partition_offsets_(partition_offsets) {
  const vertex_t n = d.num_nodes;
  SLUICE_EXPECTS(new_to_old.size() == std::size_t(n) && old_to_new.size() == std::size_t(n),
                 "a renumbering of ", new_to_old.size(), " vertices for ", n);
  loss_rows_ = loss_row_flags(d, old_to_new);
  SLUICE_EXPECTS(partition_offsets.size() >= 2 && partition_offsets.front() == 0 &&
                     partition_offsets.back() == n,
                 "partition offsets do not cover the ", n, " vertices");
  const bool parallel = worth_parallel(std::int64_t(d.indices.size()) + n);
  // The renumbered rows (self entry, then the in-edges from other vertices) grouped by source,
  // each source's destinations ascending, by a two-level counting sort without atomics: the
  // entries of every block of destinations go to buckets of 2^shift consecutive sources (bucket
  // major, block minor, so a bucket's entries ascend by destination), then each bucket is
  // sorted by source on one thread, stably.
  int shift = 0;
  while (shift < 16 && (std::int64_t(n - 1) >> shift) >= 4096) ++shift;
  const std::int64_t buckets = (std::int64_t(std::max<vertex_t>(n, 1) - 1) >> shift) + 1;
  const std::int64_t blocks = parallel ? 4 * std::int64_t(omp_get_max_threads()) : 1;
  const auto block_begin = [&](std::int64_t b) { return vertex_t(std::int64_t(n) * b / blocks); };
  std::vector<edge_t> bucket_cursor(std::size_t(blocks * buckets), 0);  // [bucket][block]
  const auto cursor_of = [&](std::int64_t bucket, std::int64_t block) -> edge_t& {
    return bucket_cursor[std::size_t(bucket * blocks + block)];
  };
  row_offsets_.assign(std::size_t(n) + 1, 0);
  Progress progress("chunk sketch", 2 * std::uint64_t(d.indices.size() + std::size_t(n)));
  // Pass 1: row lengths, then the renumbered rows (every source id looked up once) and their
  // entries per (bucket, block).
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (std::int64_t b = 0; b < blocks; ++b)
    for (vertex_t v = block_begin(b); v < block_begin(b + 1); ++v) {
      const vertex_t old = new_to_old[std::size_t(v)];
      edge_t count = 1;
      for (edge_t e = d.indptr[old]; e < d.indptr[old + 1]; ++e)
        count += d.indices[std::size_t(e)] != old;
      row_offsets_[std::size_t(v) + 1] = count;
    }
  for (std::size_t v = 0; v < std::size_t(n); ++v) row_offsets_[v + 1] += row_offsets_[v];
  const edge_t entries = row_offsets_.back();
  std::vector<vertex_t> sources(static_cast<std::size_t>(entries));
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint64_t visited = 0;
    for (vertex_t v = block_begin(b); v < block_begin(b + 1); ++v) {
      const vertex_t old = new_to_old[std::size_t(v)];
      vertex_t* out = sources.data() + row_offsets_[std::size_t(v)];
      *out++ = v;
      ++cursor_of(v >> shift, b);
      for (edge_t e = d.indptr[old]; e < d.indptr[old + 1]; ++e) {
        const vertex_t source = d.indices[std::size_t(e)];
        if (source == old) continue;
        const vertex_t u = old_to_new[std::size_t(source)];
        *out++ = u;
        ++cursor_of(u >> shift, b);
      }
      visited += std::uint64_t(out - (sources.data() + row_offsets_[std::size_t(v)]));
    }
    progress.add(visited);
  }
  std::vector<edge_t> bucket_begin(std::size_t(buckets) + 1, 0);
  {
    edge_t sum = 0;
    for (std::int64_t k = 0; k < buckets; ++k) {
      bucket_begin[std::size_t(k)] = sum;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const edge_t size = cursor_of(k, b);
        cursor_of(k, b) = sum;
        sum += size;
      }
    }
    bucket_begin[std::size_t(buckets)] = sum;
    SLUICE_EXPECTS(sum == entries, "chunk sketch: ", sum, " bucketed entries for ", entries);
  }
  // Pass 2: every entry's source (its offset in the bucket) and destination, bucket by bucket.
  std::vector<std::uint16_t> source_low(static_cast<std::size_t>(entries));
  std::vector<vertex_t> bucketed_destination(static_cast<std::size_t>(entries));
  const vertex_t mask = vertex_t((std::int64_t(1) << shift) - 1);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (std::int64_t b = 0; b < blocks; ++b) {
    std::uint64_t visited = 0;
    const auto put = [&](vertex_t u, vertex_t v) {
      const edge_t at = cursor_of(u >> shift, b)++;
      source_low[std::size_t(at)] = static_cast<std::uint16_t>(u & mask);
      bucketed_destination[std::size_t(at)] = v;
    };
    for (vertex_t v = block_begin(b); v < block_begin(b + 1); ++v) {
      for (edge_t e = row_offsets_[std::size_t(v)]; e < row_offsets_[std::size_t(v) + 1]; ++e)
        put(sources[std::size_t(e)], v);
      visited += std::uint64_t(row_offsets_[std::size_t(v) + 1] - row_offsets_[std::size_t(v)]);
    }
    progress.add(visited);
  }
  progress.finish();
  std::vector<edge_t>().swap(bucket_cursor);
  std::vector<vertex_t>().swap(sources);
  // Pass 3: each bucket sorted by source (counting sort, stable: destinations stay ascending).
  source_offsets_.assign(std::size_t(n) + 1, 0);
  destinations_.resize(std::size_t(entries));
#pragma omp parallel if (parallel)
  {
    std::vector<edge_t> next(std::size_t(mask) + 1);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t k = 0; k < buckets; ++k) {
      const vertex_t first = vertex_t(k << shift);
      const vertex_t size = std::min<vertex_t>(mask + 1, n - first);
      std::fill(next.begin(), next.begin() + size, 0);
      const edge_t begin = bucket_begin[std::size_t(k)], end = bucket_begin[std::size_t(k) + 1];
      for (edge_t i = begin; i < end; ++i) ++next[source_low[std::size_t(i)]];
      edge_t at = begin;
      for (vertex_t u = 0; u < size; ++u) {
        source_offsets_[std::size_t(first + u)] = at;
        const edge_t count = next[std::size_t(u)];
        next[std::size_t(u)] = at;
        at += count;
      }
      for (edge_t i = begin; i < end; ++i)
        destinations_[std::size_t(next[source_low[std::size_t(i)]]++)] =
            bucketed_destination[std::size_t(i)];
    }
  }
  source_offsets_[std::size_t(n)] = entries;
}

vertex_t ChunkSketch::smallest_partition() const {
  vertex_t smallest = partition_offsets_[1] - partition_offsets_[0];
  for (int p = 1; p < partitions(); ++p)
    smallest = std::min(smallest, partition_offsets_[p + 1] - partition_offsets_[p]);
  return smallest;
}

std::vector<PartitionProfile> ChunkSketch::profiles(int chunks, CommMode comm) const {
  std::vector<std::int32_t> natural(std::size_t(partitions()) * std::max(chunks, 0));
  for (std::size_t i = 0; i < natural.size(); ++i)
    natural[i] = static_cast<std::int32_t>(i / std::size_t(partitions()));
  return profiles(chunks, comm, natural);
}

std::vector<PartitionProfile> ChunkSketch::profiles(int chunks, CommMode comm,
                                                    const std::vector<std::int32_t>& order) const {
  const int P = partitions(), C = chunks;
  SLUICE_EXPECTS(C >= 1 && std::int64_t(P) * C <= (std::int64_t(1) << 24),
                 "P x C = ", std::int64_t(P) * C, " chunks");
  const vertex_t n = partition_offsets_.back();
  const std::size_t K = std::size_t(P) * C;
  // Chunk k = p * C + r is range r of partition p; batch_of[k] is the batch it runs in, and
  // previous[k] the chunk of p in the batch before (K for none).
  SLUICE_EXPECTS(order.size() == K, "a batch layout of ", order.size(), " chunks for P x C = ", K);
  std::vector<std::int32_t> batch_of(K, -1);
  std::vector<std::size_t> previous(K, K);
  for (int c = 0; c < C; ++c)
    for (int p = 0; p < P; ++p) {
      const std::int32_t r = order[std::size_t(c) * P + p];
      SLUICE_EXPECTS(r >= 0 && r < C && batch_of[std::size_t(p) * C + r] < 0,
                     "batch layout: ", "range ", r, " of partition ", p, " in batch ", c);
      batch_of[std::size_t(p) * C + r] = c;
      if (c > 0)
        previous[std::size_t(p) * C + r] = std::size_t(p) * C + order[std::size_t(c - 1) * P + p];
    }
  const std::vector<vertex_t> bounds = edge_balanced_bounds(row_offsets_, partition_offsets_, C);
  const auto range_begin = [&](std::size_t k) { return bounds[k / C * (C + 1) + k % C]; };
  const auto range_end = [&](std::size_t k) { return bounds[k / C * (C + 1) + k % C + 1]; };
  const bool parallel = worth_parallel(std::int64_t(destinations_.size()));

  // Where every chunk's range starts (ascending: partitions and their ranges follow the ids; an
  // empty range starts where the next one does), and per chunk its entries, long-row threshold
  // and long rows.
  std::vector<vertex_t> starts(K + 1);
  for (std::size_t k = 0; k < K; ++k) starts[k] = range_begin(k);
  starts[K] = n;
  // The chunk of vertex v at or after chunk `from`: the last chunk starting at or before v.
  const auto chunk_of = [&](vertex_t v, std::size_t from) {
    return std::size_t(std::upper_bound(starts.begin() + std::ptrdiff_t(from), starts.end(), v) -
                       starts.begin()) -
           1;
  };
  // The same for the chunk's loss-row CSR (its loss rows' entries alone).
  std::vector<std::int64_t> nnz(K), threshold(K), long_rows(K);
  std::vector<std::int64_t> loss_nnz(K), loss_threshold(K), loss_long_rows(K);
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (std::size_t k = 0; k < K; ++k) {
    const vertex_t begin = range_begin(k), end = range_end(k);
    const auto length = [&](vertex_t v) {
      return row_offsets_[std::size_t(v) + 1] - row_offsets_[std::size_t(v)];
    };
    nnz[k] = row_offsets_[std::size_t(end)] - row_offsets_[std::size_t(begin)];
    threshold[k] = cuda::long_degree_for(nnz[k]);
    std::int64_t long_count = 0, loss_entries = 0;
    for (vertex_t v = begin; v < end; ++v) {
      long_count += length(v) > threshold[k];
      if (loss_rows_[std::size_t(v)]) loss_entries += length(v);
    }
    long_rows[k] = long_count;
    loss_nnz[k] = loss_entries;
    loss_threshold[k] = cuda::long_degree_for(loss_entries);
    std::int64_t loss_long = 0;
    for (vertex_t v = begin; v < end; ++v)
      loss_long += loss_rows_[std::size_t(v)] && length(v) > loss_threshold[k];
    loss_long_rows[k] = loss_long;
  }

  // One pass over the entries grouped by source: the chunks each source appears in (with how
  // many entries) and the batches, so every set size comes from counting, not from sets.
  SketchCounts total(K, P);
  Progress progress(cat("chunk sketch C=", C), std::uint64_t(destinations_.size()));
#pragma omp parallel if (parallel)
  {
    SketchCounts mine(K, P);
    std::vector<std::int32_t> chunk_stamp(K, -1), entries(K, 0), loss_entries(K, 0),
        batch_stamp(std::size_t(C), -1);
    std::vector<std::size_t> runs;
    std::vector<int> batches;
    std::uint64_t pending = 0;  // entries not yet counted in the progress line
#pragma omp for schedule(dynamic, 1024) nowait
    for (vertex_t u = 0; u < n; ++u) {
      const int owner = static_cast<int>(std::upper_bound(partition_offsets_.begin(),
                                                          partition_offsets_.end(), u) -
                                         partition_offsets_.begin()) -
                        1;
      runs.clear();
      batches.clear();
      pending +=
          std::uint64_t(source_offsets_[std::size_t(u) + 1] - source_offsets_[std::size_t(u)]);
      if (pending >= (1u << 16)) {
        progress.add(pending);
        pending = 0;
      }
      // The destinations ascend, so each chunk's entries form one run.
      std::size_t k = 0;
      vertex_t run_end = 0;
      for (edge_t e = source_offsets_[std::size_t(u)]; e < source_offsets_[std::size_t(u) + 1];
           ++e) {
        const vertex_t v = destinations_[std::size_t(e)];
        if (v >= run_end) {
          k = chunk_of(v, k);
          run_end = starts[k + 1];
        }
        if (chunk_stamp[k] != u) {
          chunk_stamp[k] = u;
          entries[k] = 0;
          loss_entries[k] = 0;
          runs.push_back(k);
        }
        ++entries[k];
        loss_entries[k] += loss_rows_[std::size_t(v)];
      }
      for (const std::size_t k : runs) {
        const int p = static_cast<int>(k / C), c = batch_of[k];
        ++mine.owned[k * P + owner];
        // A remote source not in the previous batch's chunk of p is pulled.
        if (p != owner && (previous[k] == K || chunk_stamp[previous[k]] != u))
          ++mine.pulled[k * P + owner];
        if (entries[k] > threshold[k]) ++mine.long_columns[k];
        if (loss_entries[k] > loss_threshold[k]) ++mine.loss_long_columns[k];
        if (batch_stamp[std::size_t(c)] != u) {
          batch_stamp[std::size_t(c)] = u;
          batches.push_back(c);
        }
      }
      for (const int c : batches) {
        ++mine.transition[std::size_t(owner) * C + c];
        if (c > 0 && batch_stamp[std::size_t(c) - 1] == u)
          ++mine.reused[std::size_t(owner) * C + c];
      }
      const int own_batch = batch_of[chunk_of(u, 0)];
      if (batch_stamp[std::size_t(C) - 1] == u) ++mine.tail[std::size_t(owner) * C + own_batch];
      if (batch_stamp[0] == u && own_batch == C - 1) ++mine.head[std::size_t(owner)];
    }
    progress.add(pending);
#pragma omp critical(chunk_sketch_counts)
    total.add(mine);
  }
  progress.finish();

  std::vector<PartitionProfile> result(static_cast<std::size_t>(P));
  for (int p = 0; p < P; ++p) {
    PartitionProfile& profile = result[std::size_t(p)];
    profile.partition = p;
    profile.comm = comm;
    const std::size_t first = std::size_t(p) * C;
    const auto distinct = [&](std::size_t k) {
      std::int64_t sum = 0;
      for (int q = 0; q < P; ++q) sum += total.owned[k * P + q];
      return sum;
    };
    const auto remote = [&](std::size_t k) { return distinct(k) - total.owned[k * P + p]; };
    for (int c = 0; c < C; ++c) {
      profile.transition_rows = std::max(profile.transition_rows, total.transition[first + c]);
      profile.remote_rows = std::max(profile.remote_rows, remote(first + c));
    }
    const std::int64_t merged_rows = profile.transition_rows + profile.remote_rows;
    const auto per_owner = [&](const std::vector<std::int64_t>& counts, std::size_t k) {
      std::vector<std::int64_t> lists;
      for (int q = 0; q < P; ++q)
        if (q != p && counts[k * P + q] > 0) lists.push_back(counts[k * P + q]);
      return lists;
    };
    for (int c = 0; c < C; ++c) {
      const std::size_t k = first + std::size_t(order[std::size_t(c) * P + p]);
      ChunkListSizes s;
      s.rows = range_end(k) - range_begin(k);
      s.nnz = nnz[k];
      const std::int64_t transition = total.transition[first + c];
      switch (comm) {
        case CommMode::kBaseline:
          s.loads = distinct(k);
          s.leaves = s.loads;
          break;
        case CommMode::kP2p:
          s.loads = transition;
          s.leaves = transition;
          s.remote = remote(k);
          s.pushes = per_owner(total.owned, k);
          s.pulls = s.pushes;
          break;
        case CommMode::kP2pReuse:
          s.loads = transition - total.reused[first + c];
          s.leaves = c + 1 < C ? transition - total.reused[first + c + 1] : transition;
          s.remote = remote(k);
          s.pushes = per_owner(total.owned, k);
          s.pulls = per_owner(total.pulled, k);
          break;
      }
      if (comm != CommMode::kBaseline) {
        s.tail = total.tail[first + c];
        // The other partitions' chunks of the batch push a row for each of their columns p owns.
        for (int q = 0; q < P; ++q)
          if (q != p)
            s.received +=
                total.owned[(std::size_t(q) * C + std::size_t(order[std::size_t(c) * P + q])) * P +
                            std::size_t(p)];
      }
      profile.lists.push_back(std::move(s));
      CsrShape csr;
      csr.rows = range_end(k) - range_begin(k);
      csr.cols = merged_rows;
      csr.nnz = nnz[k];
      csr.long_rows = long_rows[k];
      csr.long_columns = total.long_columns[k];
      profile.csr.push_back(csr);
      CsrShape loss = csr;
      loss.nnz = loss_nnz[k];
      loss.long_rows = loss_long_rows[k];
      loss.long_columns = total.loss_long_columns[k];
      profile.loss_csr.push_back(loss);
    }
    profile.head_rows = comm == CommMode::kBaseline ? 0 : total.head[std::size_t(p)];
  }
  return result;
}

}  // namespace sluice
