// libFuzzer target: the plan reader (read_plan) on arbitrary bytes as an HDF5 file. Seeds are
// valid plan files (fuzz_seeds); fuzz_plan_fields reaches the validation more directly.
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("plan.h5", data, size);
  fuzz::run_expecting_errors([&] { read_plan(path); });
  return 0;
}
