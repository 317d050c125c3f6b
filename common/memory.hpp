// Process memory readings (Linux /proc) for logs and metrics.
#pragma once

#include <cstdint>

namespace sluice {

std::uint64_t current_rss_bytes();  // VmRSS
std::uint64_t peak_rss_bytes();     // VmHWM, the high-water mark since start

}  // namespace sluice
