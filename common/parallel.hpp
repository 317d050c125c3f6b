// When a loop is worth an OpenMP team. A team costs a fork and a barrier, and its idle threads
// spin at the barrier; on a machine another process shares (ctest -j, a CI runner) a spinning
// thread holds the core the working one needs, and a loop of a few hundred items can take
// milliseconds. Tiny graphs (tests, toy datasets) run thousands of such loops, so every
// `omp parallel` in the tree carries `if (worth_parallel(work))`, work being the items it visits.
#pragma once

#include <cstdint>

namespace sluice {

inline bool worth_parallel(std::int64_t work) {
  return work >= (std::int64_t(1) << 15);
}

}  // namespace sluice
