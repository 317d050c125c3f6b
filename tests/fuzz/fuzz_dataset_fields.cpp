// libFuzzer target (structured): writes the valid template dataset, applies the edits the
// input encodes (fuzz_support.hpp, mutate_hdf5: element values, boundary values, resized or
// deleted arrays, changed attributes), then reads it. Every edit keeps the HDF5 file
// well-formed, so each input exercises read_dataset's own checks. Post-condition: a dataset
// that reads passes validate_dataset and has the declared shapes (labels: n or none).
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

namespace {
std::string template_bytes;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  const std::string path = fuzz::scratch_dir() + "/template.h5";
  write_dataset(path, fuzz::template_dataset());
  template_bytes = fuzz::read_file(path);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("dataset.h5", template_bytes);
  fuzz::mutate_hdf5(path, data, size);
  fuzz::run_expecting_errors([&] { read_dataset_info(path); });
  fuzz::run_expecting_errors([&] {
    const Dataset dataset = read_dataset(path);
    validate_dataset(dataset, path);
    SLUICE_FUZZ_REQUIRE(dataset.indptr.size() == std::size_t(dataset.num_nodes) + 1);
    SLUICE_FUZZ_REQUIRE(dataset.features.size() ==
                        std::size_t(dataset.num_nodes) * std::size_t(dataset.feature_dim));
    // No labels at all is a valid dataset (the trainer refuses it with a message).
    SLUICE_FUZZ_REQUIRE(dataset.labels.empty() ||
                        dataset.labels.size() == std::size_t(dataset.num_nodes));
  });
  fuzz::run_expecting_errors([&] {
    DatasetReadOptions structure_only;
    structure_only.features = false;
    structure_only.labels = false;
    read_dataset(path, structure_only);
  });
  return 0;
}
