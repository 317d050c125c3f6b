// libFuzzer target (structured): writes the valid template plan (P = 2, C = 2), applies the
// edits the input encodes (fuzz_support.hpp, mutate_hdf5), then reads it with read_plan, whose
// validation every input reaches. Post-condition: a plan that reads has P * C chunks with
// indptr of num_dst + 1 entries.
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

namespace {
std::string template_bytes;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  const Dataset dataset = fuzz::template_dataset();
  const std::string path = fuzz::scratch_dir() + "/template.h5";
  write_plan(path, fuzz::template_plan(dataset));
  template_bytes = fuzz::read_file(path);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("plan.h5", template_bytes);
  fuzz::mutate_hdf5(path, data, size);
  fuzz::run_expecting_errors([&] {
    const Plan plan = read_plan(path);
    SLUICE_FUZZ_REQUIRE(plan.chunk_plans.size() ==
                        std::size_t(plan.partitions) * std::size_t(plan.chunks));
    for (const ChunkPlan& chunk : plan.chunk_plans)
      SLUICE_FUZZ_REQUIRE(chunk.indptr.size() == std::size_t(chunk.num_dst()) + 1);
  });
  return 0;
}
