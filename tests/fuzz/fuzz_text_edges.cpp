// libFuzzer target: the text edge-list parser (read_text_edges) with and without an id limit.
// Post-conditions: every returned id is below the limit and max_id is the largest id.
#include <algorithm>

#include "formats/text_tables.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

namespace {
template <typename Ids>
void check_ids(const Ids& ids, std::int64_t limit, std::int64_t max_id) {
  std::int64_t largest = -1;
  for (auto id : ids) {
    SLUICE_FUZZ_REQUIRE(id >= 0);
    SLUICE_FUZZ_REQUIRE(limit <= 0 || id < limit);
    largest = std::max<std::int64_t>(largest, id);
  }
  if (!ids.empty()) SLUICE_FUZZ_REQUIRE(largest <= max_id);
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = fuzz::write_file("edges.txt", data, size);
  for (const std::int64_t limit : {std::int64_t(0), std::int64_t(100)}) {
    fuzz::run_expecting_errors([&] {
      const TextEdges edges = read_text_edges(path, limit);
      SLUICE_FUZZ_REQUIRE(edges.narrow.size() % 2 == 0 && edges.wide.size() % 2 == 0);
      check_ids(edges.narrow, limit, edges.max_id);
      check_ids(edges.wide, limit, edges.max_id);
    });
  }
  return 0;
}
