// Implementation of formats/block_read.hpp.
#include "formats/block_read.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "common/error.hpp"
#include "formats/text_input.hpp"

namespace sluice {

std::size_t read_at_parallel(const InputFile& input, char* buffer, std::size_t bytes,
                             std::uint64_t offset) {
  const int pieces = std::max(8, omp_get_max_threads());
  std::vector<std::size_t> got(pieces, 0);
  std::vector<std::exception_ptr> errors(pieces);
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(std::int64_t(bytes)))
  for (int i = 0; i < pieces; ++i) {
    const std::size_t begin = bytes * i / pieces, end = bytes * (i + 1) / pieces;
    try {
      got[i] = input.read_at(buffer + begin, end - begin, offset + begin);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  rethrow_first(errors);
  std::size_t total = 0;
  for (int i = 0; i < pieces; ++i) {
    total += got[i];
    if (got[i] != bytes * (i + 1) / pieces - bytes * i / pieces) break;
  }
  return total;
}

void throw_bad_vertex_id(const std::string& where, std::int64_t id, std::int64_t limit) {
  SLUICE_INPUT_CHECK(id >= 0, where, "negative vertex id ", id);
  throw InputError(cat(where, "vertex id ", id, " out of range [0, ", limit, ")"));
}

}  // namespace sluice
