// When a loop is worth an OpenMP team. A team costs a fork and a barrier, and its idle threads
// spin at the barrier; on a machine another process shares (ctest -j, a CI runner) a spinning
// thread holds the core the working one needs, and a loop of a few hundred items can take
// milliseconds. Tiny graphs (tests, toy datasets) run thousands of such loops, so every
// `omp parallel` in the tree carries `if (worth_parallel(work))`, work being the items it visits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>

namespace sluice {

inline bool worth_parallel(std::int64_t work) {
  return work >= (std::int64_t(1) << 15);
}

// Runs check(i) for every i in [0, count), on an OpenMP team (dynamic schedule, `grain` items a
// take) when worth_parallel(work), and rethrows the exception of the lowest i that threw: the
// one a loop in order meets first, as long as no check reads what another writes.
template <typename Check>
void check_in_parallel(std::int64_t count, std::int64_t grain, std::int64_t work, Check check) {
  std::int64_t first_bad = count;
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, grain) if (worth_parallel(work))
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      check(i);
    } catch (...) {
#pragma omp critical(sluice_check_in_parallel_error)
      if (i < first_bad) {
        first_bad = i;
        error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// out[i] = in[i] for i in [0, count) (trivially copyable T), in blocks of 2^16 elements over an
// OpenMP team when there is more than one: a vertex-sized array (an evaluation's predictions, a
// CPU device matrix) copies at the memory's bandwidth, not one core's.
template <typename T>
void parallel_copy(const T* in, std::int64_t count, T* out) {
  constexpr std::int64_t kBlock = std::int64_t(1) << 16;
  const std::int64_t blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kBlock, end = std::min(count, begin + kBlock);
    std::memcpy(out + begin, in + begin, sizeof(T) * std::size_t(end - begin));
  }
}

}  // namespace sluice
