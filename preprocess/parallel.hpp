// When a loop is worth an OpenMP team: tiny graphs (tests, toy datasets) run many small
// loops, and a team per loop costs more than the work, badly so on an oversubscribed machine.
#pragma once

#include <cstdint>

namespace sluice {

inline bool worth_parallel(std::int64_t work) {
  return work >= (std::int64_t(1) << 15);
}

}  // namespace sluice
