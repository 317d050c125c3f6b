// STUB (owned by the partition work): replaced by the real subcommands.
#include "common/error.hpp"
#include "preprocess/commands.hpp"

namespace sluice {
int run_partition(const std::vector<std::string>&) {
  SLUICE_FAIL("partition: not implemented yet");
}
int run_stats(const std::vector<std::string>&) {
  SLUICE_FAIL("stats: not implemented yet");
}
int run_verify(const std::vector<std::string>&) {
  SLUICE_FAIL("verify: not implemented yet");
}
}  // namespace sluice
