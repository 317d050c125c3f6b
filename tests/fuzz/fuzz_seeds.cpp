// Writes the HDF5 seed inputs of the fuzz targets into a directory: dataset.h5 (the template
// dataset) and plan.h5 (its P = 2, C = 2 plan). Used by scripts/fuzz.sh.
#include <cstdio>

#include "tests/fuzz/fuzz_support.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  sluice::fuzz::init();
  try {
    const sluice::Dataset dataset = sluice::fuzz::template_dataset();
    sluice::write_dataset(std::string(argv[1]) + "/dataset.h5", dataset);
    sluice::write_plan(std::string(argv[1]) + "/plan.h5", sluice::fuzz::template_plan(dataset));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", error.what());
    return 1;
  }
  return 0;
}
