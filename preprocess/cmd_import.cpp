// STUB (owned by the import/generate work): replaced by the real subcommands.
#include "common/error.hpp"
#include "preprocess/commands.hpp"

namespace sluice {
int run_import(const std::vector<std::string>&) {
  SLUICE_FAIL("import: not implemented yet");
}
int run_generate(const std::vector<std::string>&) {
  SLUICE_FAIL("generate: not implemented yet");
}
int run_info(const std::vector<std::string>&) {
  SLUICE_FAIL("info: not implemented yet");
}
}  // namespace sluice
