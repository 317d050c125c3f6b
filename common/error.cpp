// Out-of-line part of common/error.hpp.
#include "common/error.hpp"

namespace sluice {

void throw_internal(const char* file, int line, const std::string& what) {
  throw Error(cat(file, ":", line, ": ", what));
}

}  // namespace sluice
