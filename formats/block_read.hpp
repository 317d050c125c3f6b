// Pieces of the block-wise readers of large binary inputs (the .npy arrays of formats/npy.cpp
// and the binary pair files of formats/import_edgelist.cpp): a positional read of one block
// with all threads, and the vertex id check of a block.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "common/parallel.hpp"

namespace sluice {

class InputFile;

// Reads `bytes` bytes of a plain file at `offset` in pieces (one per thread, at least 8), in
// parallel (the copy out of the page cache is a sizeable part of an import); returns the count
// read, short only at the end of the file (it stops at the first short piece: a file that
// shrank while being read).
// Rethrows the first piece's error.
std::size_t read_at_parallel(const InputFile& input, char* buffer, std::size_t bytes,
                             std::uint64_t offset);

struct IdBlockCheck {
  std::int64_t max_id = -1;     // the largest id; -1 for an empty block
  std::int64_t first_bad = -1;  // index of the first id outside [0, limit); -1 when none
};

// Visits ids id_at(0) .. id_at(count - 1) in parallel (id_at may store the id as it reads it)
// and reports the largest and the first outside [0, limit), whatever the thread count.
template <typename IdAt>
IdBlockCheck check_id_block(std::int64_t count, std::int64_t limit, IdAt&& id_at) {
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  std::int64_t block_max = -1, first_bad = kNone;
#pragma omp parallel for schedule(static) reduction(max          \
                                                    : block_max) \
    reduction(min                                                \
              : first_bad) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t id = id_at(i);
    block_max = std::max(block_max, id);
    if (id < 0 || id >= limit) first_bad = std::min(first_bad, i);
  }
  return {block_max, first_bad == kNone ? -1 : first_bad};
}

// Throws InputError "<where>negative vertex id <id>" or "<where>vertex id <id> out of range
// [0, <limit>)"; `where` names the file and the position, ending in ": ".
[[noreturn]] void throw_bad_vertex_id(const std::string& where, std::int64_t id,
                                      std::int64_t limit);

}  // namespace sluice
