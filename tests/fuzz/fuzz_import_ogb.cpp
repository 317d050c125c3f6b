// libFuzzer target: the OGB raw-directory importer (import_ogb). The input is cut at NUL bytes
// into the directory's files, in this order: raw/num-node-list.csv, raw/num-edge-list.csv,
// raw/edge.csv, split/public/{train,valid,test}.csv, raw/node-feat.csv, raw/node-label.csv
// (missing pieces are missing files). Inputs declaring more than 4096 vertices are skipped
// (the importer sizes its arrays by that count). Post-condition: the dataset passes
// validate_dataset.
#include <filesystem>

#include "formats/importers.hpp"
#include "formats/text_tables.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const char* const files[] = {"raw/num-node-list.csv",  "raw/num-edge-list.csv",
                                      "raw/edge.csv",           "split/public/train.csv",
                                      "split/public/valid.csv", "split/public/test.csv",
                                      "raw/node-feat.csv",      "raw/node-label.csv"};
  const auto parts =
      fuzz::split_at_nul(std::string_view(reinterpret_cast<const char*>(data), size), 8);
  const std::string dir = fuzz::scratch_dir() + "/ogb";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/raw");
  std::filesystem::create_directories(dir + "/split/public");
  for (std::size_t i = 0; i < parts.size(); ++i)
    fuzz::write_file(std::string("ogb/") + files[i], parts[i]);

  bool small = true;
  fuzz::run_expecting_errors([&] {
    for (auto count : read_count_list(dir + "/raw/num-node-list.csv")) small &= count <= 4096;
  });
  if (!small) return 0;

  ImportOptions options;
  options.format = "ogb";
  options.input = dir;
  ImportReport report;
  fuzz::run_expecting_errors([&] {
    const Dataset dataset = import_ogb(options, report);
    validate_dataset(dataset, dir);
  });
  return 0;
}
