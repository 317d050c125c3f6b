// Implementation of preprocess/chunk_search.hpp.
#include "preprocess/chunk_search.hpp"

#include <algorithm>
#include <map>

#include "common/log.hpp"
#include "preprocess/plan_builder_detail.hpp"

namespace sluice {

ChunkSearchResult smallest_fitting_chunks(const Dataset& dataset, const VertexPartition& partition,
                                          PlanOptions options, const std::string& fingerprint,
                                          std::int64_t budget, const ModelShape& shape) {
  options.reorganize = false;  // the search only needs buffer sizes
  ChunkSearchResult result;
  std::vector<vertex_t> sizes(options.partitions, 0);
  for (std::int32_t p : partition.part) ++sizes[p];
  result.smallest_partition = *std::min_element(sizes.begin(), sizes.end());
  const int max_chunks = std::max<int>(1, std::min<vertex_t>(result.smallest_partition, 1 << 16));
  std::map<int, std::int64_t> cache;
  auto estimate = [&](int chunks) {
    const auto it = cache.find(chunks);
    if (it != cache.end()) return it->second;
    options.chunks = chunks;
    const std::int64_t bytes = estimate_peak_gpu_bytes(
        build_plan_from_partition(dataset, partition, options, fingerprint), shape);
    log_info("--gpu-memory: C=", chunks, " needs about ", format_bytes(bytes), " per GPU");
    return cache[chunks] = bytes;
  };
  int high = 1;
  while (estimate(high) > budget) {
    if (high >= max_chunks) {
      result.chunks = high;
      result.bytes = estimate(high);
      return result;
    }
    high = std::min(max_chunks, high * 2);
  }
  int low = high / 2;  // estimate(low) > budget (or low == 0)
  while (high - low > 1) {
    const int middle = low + (high - low) / 2;
    if (estimate(middle) <= budget)
      high = middle;
    else
      low = middle;
  }
  result.fits = true;
  result.chunks = high;
  result.bytes = estimate(high);
  return result;
}

VertexPartition partition_of_plan(const Plan& plan) {
  VertexPartition partition;
  partition.method = plan.partitioner;
  partition.part.resize(std::size_t(plan.num_nodes));
  for (vertex_t old_id = 0; old_id < plan.num_nodes; ++old_id)
    partition.part[std::size_t(old_id)] = plan.owner(plan.old_to_new[std::size_t(old_id)]);
  return partition;
}

}  // namespace sluice
