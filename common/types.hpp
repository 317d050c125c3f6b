// Index types used throughout Sluice. Vertex ids are 32-bit (up to 2^31 - 1 vertices, the
// documented limit); edge offsets and counts are 64-bit so billion-edge graphs index safely.
#pragma once

#include <cstdint>
#include <limits>

namespace sluice {

using vertex_t = std::int32_t;  // a vertex id or a row/slot position
using edge_t = std::int64_t;    // an edge offset or edge count

inline constexpr vertex_t kMaxVertices = std::numeric_limits<vertex_t>::max();

}  // namespace sluice
