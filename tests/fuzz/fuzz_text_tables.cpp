// libFuzzer target: the table parsers (feature table, label column, index list, count list).
// The first byte picks the parser and its parameters; the rest is the file. Post-conditions:
// the shapes and value ranges each parser promises.
#include <algorithm>
#include <cmath>

#include "formats/text_tables.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string path = fuzz::write_file("table.txt", text);
  // Rows the caller expects: the number of lines, give or take one (from the mode byte).
  const std::int64_t lines = std::count(text.begin(), text.end(), '\n') + 1;
  const std::int64_t rows = std::max<std::int64_t>(1, lines - ((mode >> 2) % 3));
  switch (mode % 4) {
    case 0:
      fuzz::run_expecting_errors([&] {
        std::int64_t width = -1;
        const auto values = read_feature_table(path, rows, width);
        SLUICE_FUZZ_REQUIRE(width >= 0);
        SLUICE_FUZZ_REQUIRE(std::int64_t(values.size()) == rows * width);
        for (float v : values) SLUICE_FUZZ_REQUIRE(std::isfinite(v));
      });
      break;
    case 1:
      fuzz::run_expecting_errors([&] {
        const std::int32_t classes = (mode >> 4) % 4 == 0 ? 0 : (mode >> 4);
        const auto labels = read_label_column(path, rows, classes);
        SLUICE_FUZZ_REQUIRE(std::int64_t(labels.size()) == rows);
        for (auto label : labels) {
          SLUICE_FUZZ_REQUIRE(label >= -1);
          SLUICE_FUZZ_REQUIRE(classes == 0 || label < classes);
        }
      });
      break;
    case 2:
      fuzz::run_expecting_errors([&] {
        const std::int64_t n = 1 + (mode >> 2);
        const auto ids = read_index_list(path, n);
        for (std::size_t i = 0; i < ids.size(); ++i) {
          SLUICE_FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < n);
          SLUICE_FUZZ_REQUIRE(i == 0 || ids[i - 1] < ids[i]);
        }
      });
      break;
    case 3:
      fuzz::run_expecting_errors([&] { read_count_list(path); });
      break;
  }
  return 0;
}
