// sluice-train: full-graph GNN training over a chunked plan (see --help and docs/design.md).
#include <cstdio>
#include <exception>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "train/config.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  sluice::return_large_blocks_when_freed();
  sluice::install_output_signal_handlers();
  try {
    const auto config = sluice::parse_train_args(argc, argv);
    if (!config) return 0;
    sluice::check_train_outputs(*config);
    if (config->quiet)
      sluice::set_log_level(sluice::LogLevel::kQuiet);
    else if (config->verbose)
      sluice::set_log_level(sluice::LogLevel::kDebug);
    sluice::run_train(*config);
    return 0;
  } catch (const sluice::InputError& e) {
    std::fprintf(stderr, "sluice-train: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-train: internal error: %s\n", e.what());
    return 1;
  }
}
