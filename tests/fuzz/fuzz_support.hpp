// Shared pieces of the libFuzzer targets (tests/fuzz/, built with SLUICE_FUZZ=ON by
// scripts/fuzz.sh): a per-process scratch directory, writing fuzz bytes to files, the small
// valid dataset and plan the structured targets start from, and the outcome rule: a
// sluice::Error (InputError for bad input, Error for a failed HDF5/zlib call on a corrupt
// file) is a normal result; anything else (a crash, a sanitizer report, another exception, a
// broken post-condition) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "formats/plan.hpp"

namespace sluice::fuzz {

// Quiet logs, OpenMP limited to 2 threads (parsers still cut blocks into pieces), HDF5 error
// printing off. Call from LLVMFuzzerInitialize.
void init();

// A scratch directory for this process (under /dev/shm when it exists, so the files the
// targets write never reach a disk), removed at exit.
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name (creating subdirectories) and returns the path.
std::string write_file(const std::string& name, std::string_view bytes);
std::string write_file(const std::string& name, const std::uint8_t* data, std::size_t size);
std::string read_file(const std::string& path);

// Runs fn(); a sluice::Error is the expected outcome for bad input and is swallowed.
template <typename Fn>
bool run_expecting_errors(Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A post-condition the product promises; a violation aborts (a finding).
#define SLUICE_FUZZ_REQUIRE(cond)                                                            \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: post-condition failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Splits `bytes` at NUL bytes into at most `parts` pieces (the last piece keeps any further
// NULs); missing pieces are absent from the result.
std::vector<std::string_view> split_at_nul(std::string_view bytes, std::size_t parts);

// A small valid dataset: 12 vertices (a ring with chords, one self loop, one isolated vertex),
// 3 features, 3 classes, splits.
Dataset template_dataset();
// A valid plan of template_dataset(): P = 2 partitions, C = 2 chunks, range partitioner.
Plan template_plan(const Dataset& dataset);

// Applies edits decoded from `data` to the HDF5 file at `path`: overwrite one element of a
// dataset or attribute with raw bytes or a boundary value (0, -1, min, max, NaN, ...), resize
// a dataset, change the rank of a dataset or attribute, replace a string attribute, or delete
// an object or attribute. Edits that HDF5 refuses are skipped. Every edit leaves a
// well-formed HDF5 file, so the reader's own validation is what the input reaches.
void mutate_hdf5(const std::string& path, const std::uint8_t* data, std::size_t size);

}  // namespace sluice::fuzz
