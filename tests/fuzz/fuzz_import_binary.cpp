// libFuzzer target: the binary (src, dst) importer (import_binary). Input: a flags byte (id
// width 4 or 8 bytes, --remap, --symmetrize), then the pairs. Without --remap the vertex count
// is fixed at 64. Post-condition: the imported dataset passes validate_dataset.
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
  ImportOptions options;
  options.format = "binary";
  options.input = fuzz::write_file("edges.bin", data + 1, size - 1);
  options.binary_id_bytes = (flags & 1) ? 8 : 4;
  options.remap = flags & 2;
  options.num_nodes = options.remap ? 0 : 64;
  options.graph.symmetrize = flags & 4;
  options.graph.self_loops = static_cast<SelfLoops>((flags >> 3) % 3);
  if (flags & 32) options.random_features = 2;
  if (flags & 64) options.random_labels = 2;
  ImportReport report;
  fuzz::run_expecting_errors([&] {
    const Dataset dataset = import_binary(options, report);
    validate_dataset(dataset, options.input);
  });
  return 0;
}
