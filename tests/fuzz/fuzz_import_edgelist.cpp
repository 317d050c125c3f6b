// libFuzzer target: the edge-list importer (import_edgelist) end to end. Input: a flags byte,
// then the edge list, optionally followed by NUL + a feature table and NUL + a label column.
// Without --remap the vertex count is fixed at 64, so ids stay small. Post-condition: the
// imported dataset passes validate_dataset.
#include "formats/importers.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const auto parts =
      fuzz::split_at_nul(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), 3);
  ImportOptions options;
  options.format = "edgelist";
  options.input = fuzz::write_file("edges.txt", parts[0]);
  options.remap = flags & 1;
  options.num_nodes = options.remap ? 0 : 64;
  options.graph.symmetrize = flags & 2;
  options.graph.self_loops = static_cast<SelfLoops>((flags >> 2) % 3);
  if (parts.size() > 1)
    options.features_path = fuzz::write_file("features.txt", parts[1]);
  else if (flags & 16)
    options.random_features = 2;
  if (parts.size() > 2)
    options.labels_path = fuzz::write_file("labels.txt", parts[2]);
  else if (flags & 32)
    options.random_labels = 3;
  if (flags & 64) options.classes = 4;
  ImportReport report;
  fuzz::run_expecting_errors([&] {
    const Dataset dataset = import_edgelist(options, report);
    validate_dataset(dataset, options.input);
  });
  return 0;
}
