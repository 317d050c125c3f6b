// sluice-preprocess: import/generate datasets, partition them into training plans, inspect
// and verify both. Dispatches to one subcommand; every error ends in one line and exit 1.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/memory.hpp"
#include "preprocess/commands.hpp"

namespace {

const char* kUsage =
    "usage: sluice-preprocess <command> [options]\n"
    "\n"
    "commands:\n"
    "  import     import a graph (OGB raw directory, edge list, binary pairs) into dataset.h5\n"
    "  generate   generate a synthetic RMAT graph with random or planted labels into dataset.h5\n"
    "  info       print counts and statistics of a dataset (--json for scripts)\n"
    "  partition  build a training plan (METIS + chunks + reorganization) into plan.h5\n"
    "  stats      print the statistics of a plan (--json for scripts)\n"
    "  verify     re-derive every index of a plan from its dataset and check them\n"
    "\n"
    "Run 'sluice-preprocess <command> --help' for the options of one command.\n";

}  // namespace

int main(int argc, char** argv) {
  sluice::return_large_blocks_when_freed();
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  sluice::install_output_signal_handlers();
  try {
    int status = -1;
    if (command == "import") status = sluice::run_import(args);
    if (command == "generate") status = sluice::run_generate(args);
    if (command == "info") status = sluice::run_info(args);
    if (command == "partition") status = sluice::run_partition(args);
    if (command == "stats") status = sluice::run_stats(args);
    if (command == "verify") status = sluice::run_verify(args);
    if (status >= 0) {
      // info/stats print their results: a full disk or closed pipe there is a failure too.
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "sluice-preprocess %s: error: cannot write standard output: %s\n",
                     command.c_str(), std::strerror(errno));
        return 1;
      }
      return status;
    }
    std::fprintf(stderr, "sluice-preprocess: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "sluice-preprocess %s: error: %s (see --help)\n", command.c_str(),
                 e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-preprocess %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
