// libFuzzer target: the dataset reader (read_dataset_info, read_dataset) on arbitrary bytes as
// an HDF5 file. Seeds are valid dataset files (fuzz_seeds); mutations mostly reach HDF5's own
// parser, fuzz_dataset_fields reaches Sluice's validation. Post-condition: a dataset that
// reads passes validate_dataset.
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("dataset.h5", data, size);
  fuzz::run_expecting_errors([&] {
    const DatasetInfo info = read_dataset_info(path);
    if (info.num_nodes > 4096 || info.num_edges > 65536 || info.feature_dim > 64) return;
    const Dataset dataset = read_dataset(path);
    validate_dataset(dataset, path);
  });
  return 0;
}
