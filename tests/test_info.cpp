// `sluice-preprocess info`: statistics of a small graph drawn below, as text and as JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/dataset.hpp"
#include "preprocess/info.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

//   0 <----> 1 <----- 2      3 -> 3 (self loop)      4 (isolated)
// In-degrees: 0:1, 1:2, 2:0, 3:1, 4:0.
Dataset drawn_dataset() {
  Dataset d = test::graph_from_edges(5, {{1, 0}, {0, 1}, {2, 1}, {3, 3}});
  d.name = "drawn";
  d.source = "test";
  d.options = R"({"format":"test"})";
  d.feature_dim = 2;
  d.features.assign(10, 0.5f);
  d.num_classes = 3;
  d.labels = {0, 2, -1, 1, -1};
  d.train = {0};
  d.valid = {1};
  d.test = {3};
  return d;
}

TEST(Info, StatisticsOfADrawnGraph) {
  test::ScratchDir dir;
  write_dataset(dir.file("d.h5"), drawn_dataset());
  const DatasetStats s = dataset_stats(dir.file("d.h5"));
  EXPECT_EQ(s.info.num_nodes, 5);
  EXPECT_EQ(s.info.num_edges, 4);
  EXPECT_EQ(s.min_in_degree, 0);
  EXPECT_EQ(s.max_in_degree, 2);
  EXPECT_DOUBLE_EQ(s.mean_in_degree, 0.8);
  EXPECT_EQ(s.max_out_degree, 1);
  EXPECT_EQ(s.zero_in_degree, 2);  // 2 and 4
  EXPECT_EQ(s.isolated, 1);        // 4 only: 2 has an out-edge
  EXPECT_EQ(s.self_loops, 1);
  EXPECT_EQ(s.labeled, 3);
  const std::string text = stats_text(s);
  EXPECT_NE(text.find("nodes:           5"), std::string::npos) << text;
  EXPECT_NE(text.find("split:           train 1, valid 1, test 1"), std::string::npos) << text;
}

TEST(Info, JsonFromTheCommandLine) {
  test::ScratchDir dir;
  write_dataset(dir.file("d.h5"), drawn_dataset());
  const auto result = test::run_command(test::bin("sluice-preprocess") + " info " +
                                        dir.file("d.h5") + " --json 2>/dev/null");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
  const auto json = nlohmann::json::parse(result.output);
  EXPECT_EQ(json["nodes"], 5);
  EXPECT_EQ(json["edges"], 4);
  EXPECT_EQ(json["feature_dim"], 2);
  EXPECT_EQ(json["classes"], 3);
  EXPECT_EQ(json["train"], 1);
  EXPECT_EQ(json["valid"], 1);
  EXPECT_EQ(json["test"], 1);
  EXPECT_EQ(json["name"], "drawn");
  EXPECT_EQ(json["symmetrized"], false);
  EXPECT_EQ(json["isolated"], 1);
  EXPECT_EQ(json["max_in_degree"], 2);
  EXPECT_EQ(json["options"]["format"], "test");
  EXPECT_EQ(json["fingerprint"], compute_fingerprint(drawn_dataset()));
}

TEST(Info, StructureOnlyDatasetRoundTrips) {
  test::ScratchDir dir;
  Dataset d = drawn_dataset();
  d.feature_dim = 0;
  d.features.clear();
  write_dataset(dir.file("d.h5"), d);
  const Dataset r = read_dataset(dir.file("d.h5"));
  EXPECT_EQ(r.feature_dim, 0);
  EXPECT_TRUE(r.features.empty());
  EXPECT_EQ(r.indices, d.indices);
  EXPECT_EQ(dataset_stats(dir.file("d.h5")).info.feature_dim, 0);
}

TEST(Info, MissingOrForeignFileFailsWithItsName) {
  test::ScratchDir dir;
  const auto missing =
      test::run_command(test::bin("sluice-preprocess") + " info " + dir.file("absent.h5"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find(dir.file("absent.h5")), std::string::npos) << missing.output;
  test::write_text(dir.file("text.h5"), "not hdf5\n");
  const auto foreign =
      test::run_command(test::bin("sluice-preprocess") + " info " + dir.file("text.h5"));
  EXPECT_NE(foreign.exit_code, 0);
  EXPECT_NE(foreign.output.find(dir.file("text.h5")), std::string::npos) << foreign.output;
  const auto none = test::run_command(test::bin("sluice-preprocess") + " info");
  EXPECT_NE(none.exit_code, 0);
}

}  // namespace
}  // namespace sluice
