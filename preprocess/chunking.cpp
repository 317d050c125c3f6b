// Implementation of preprocess/chunking.hpp.
#include "preprocess/chunking.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "train/layout/chunk_sketch.hpp"

namespace sluice {

ChunkGraph build_chunk_graph(const Dataset& d, const Renumbering& r) {
  const vertex_t n = d.num_nodes;
  ChunkGraph graph;
  graph.indptr.assign(std::size_t(n) + 1, 0);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(d.indices.size()) + n))
  for (vertex_t v = 0; v < n; ++v) {
    const vertex_t old = r.new_to_old[v];
    edge_t count = 1;
    for (edge_t e = d.indptr[old]; e < d.indptr[old + 1]; ++e) count += d.indices[e] != old;
    graph.indptr[v + 1] = count;
  }
  for (vertex_t v = 0; v < n; ++v) graph.indptr[v + 1] += graph.indptr[v];
  graph.indices.resize(graph.indptr[n]);
#pragma omp parallel for schedule(dynamic, \
                                  1024) if (worth_parallel(std::int64_t(d.indices.size()) + n))
  for (vertex_t v = 0; v < n; ++v) {
    const vertex_t old = r.new_to_old[v];
    edge_t out = graph.indptr[v];
    graph.indices[out++] = v;
    for (edge_t e = d.indptr[old]; e < d.indptr[old + 1]; ++e)
      if (d.indices[e] != old) graph.indices[out++] = r.old_to_new[d.indices[e]];
  }
  return graph;
}

std::vector<vertex_t> chunk_bounds(const ChunkGraph& graph,
                                   const std::vector<vertex_t>& partition_offsets, int chunks) {
  return edge_balanced_bounds(graph.indptr, partition_offsets, chunks);
}

NeighborSets build_neighbor_sets(const ChunkGraph& graph, const std::vector<vertex_t>& bounds,
                                 int partitions, int chunks) {
  const std::size_t count = std::size_t(partitions) * chunks;
  const std::size_t words = (graph.indptr.size() - 1 + 63) / 64;
  std::vector<std::vector<vertex_t>> sets(count);
  Progress progress("neighbor sets", graph.indices.size());
  // A bitmap over all vertices per thread: marking is O(entries), and reading the bits back
  // yields the set already sorted (cheaper than sorting the chunk's entries).
#pragma omp parallel if (worth_parallel(std::int64_t(graph.indices.size())))
  {
    std::vector<std::uint64_t> bits(words, 0);
#pragma omp for schedule(dynamic, 1)
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t p = k / chunks;
      const std::size_t r = k % chunks;
      const vertex_t begin = bounds[p * (chunks + 1) + r];
      const vertex_t end = bounds[p * (chunks + 1) + r + 1];
      std::size_t marked = 0;
      for (edge_t e = graph.indptr[begin]; e < graph.indptr[end]; ++e) {
        const vertex_t u = graph.indices[e];
        std::uint64_t& word = bits[std::size_t(u) >> 6];
        const std::uint64_t bit = std::uint64_t(1) << (u & 63);
        marked += (word & bit) == 0;
        word |= bit;
      }
      std::vector<vertex_t> set;
      set.reserve(marked);
      for (std::size_t w = 0; w < words && set.size() < marked; ++w) {
        std::uint64_t word = bits[w];
        if (!word) continue;
        bits[w] = 0;
        while (word) {
          set.push_back(static_cast<vertex_t>(w * 64 + __builtin_ctzll(word)));
          word &= word - 1;
        }
      }
      sets[k] = std::move(set);
      progress.add(std::uint64_t(graph.indptr[end] - graph.indptr[begin]));
    }
  }
  progress.finish();
  NeighborSets result;
  result.partitions = partitions;
  result.chunks = chunks;
  result.offsets.assign(count + 1, 0);
  for (std::size_t k = 0; k < count; ++k)
    result.offsets[k + 1] = result.offsets[k] + static_cast<edge_t>(sets[k].size());
  result.vertices.resize(result.offsets.back());
#pragma omp parallel for schedule(dynamic, \
                                  1) if (worth_parallel(std::int64_t(graph.indices.size())))
  for (std::size_t k = 0; k < count; ++k) {
    std::copy(sets[k].begin(), sets[k].end(), result.vertices.begin() + result.offsets[k]);
    std::vector<vertex_t>().swap(sets[k]);
  }
  return result;
}

}  // namespace sluice
