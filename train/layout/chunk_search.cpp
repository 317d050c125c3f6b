// Implementation of train/layout/chunk_search.hpp.
#include "train/layout/chunk_search.hpp"

#include <algorithm>
#include <map>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {

FittingChunks search_fitting_chunks(int max_chunks, std::int64_t budget,
                                    const std::vector<BudgetRule>& rules,
                                    const ChunkEstimator& estimate) {
  SLUICE_EXPECTS(max_chunks >= 1, "chunk search up to C=", max_chunks);
  SLUICE_EXPECTS(!rules.empty(), "chunk search without budget rules");
  std::map<int, std::vector<std::int64_t>> cache;  // C -> bytes under each rule
  const auto figures = [&](int chunks) -> const std::vector<std::int64_t>& {
    const auto it = cache.find(chunks);
    if (it != cache.end()) return it->second;
    std::vector<std::int64_t> bytes = estimate(chunks);
    SLUICE_EXPECTS(bytes.size() == rules.size(), "the estimator gave ", bytes.size(),
                   " figures for ", rules.size(), " budget rules");
    return cache[chunks] = std::move(bytes);
  };
  FittingChunks result;
  for (std::size_t r = 0; r < rules.size(); ++r) {
    const auto need = [&](int chunks) { return figures(chunks)[r]; };
    int high = 1;
    while (need(high) > budget && high < max_chunks) high = std::min(max_chunks, high * 2);
    if (need(high) > budget) continue;
    int low = high / 2;  // need(low) > budget, or low == 0
    while (high - low > 1) {
      const int middle = low + (high - low) / 2;
      if (need(middle) <= budget)
        high = middle;
      else
        low = middle;
    }
    result.fits = true;
    result.chunks = high;
    result.bytes = need(high);
    result.rule = rules[r];
    if (r > 0)
      log_info("--gpu-memory: C=", high, " fits with ", budget_rule_name(rules[r]), " (",
               format_bytes(double(result.bytes)), ")");
    return result;
  }
  // Nothing fits: the largest C under the last rule (the least memory).
  result.chunks = max_chunks;
  result.bytes = figures(max_chunks).back();
  result.rule = rules.back();
  return result;
}

int max_search_chunks(const ChunkSketch& sketch) {
  return std::max<int>(1, std::min<vertex_t>(sketch.smallest_partition(), 1 << 16));
}

FittingChunks sketch_fitting_chunks(const ChunkSketch& sketch, std::int64_t budget,
                                    const ModelShape& shape, const LayoutOptions& options,
                                    const std::vector<BudgetRule>& rules,
                                    const SketchEstimateObserver& observe) {
  const ChunkEstimator estimate = [&](int chunks) {
    const std::vector<PartitionProfile> profiles = sketch.profiles(chunks, options.comm);
    std::vector<std::int64_t> bytes = rules_bytes(profiles, shape, options, rules);
    if (observe) observe(chunks, profiles, bytes);
    return bytes;
  };
  return search_fitting_chunks(max_search_chunks(sketch), budget, rules, estimate);
}

}  // namespace sluice
