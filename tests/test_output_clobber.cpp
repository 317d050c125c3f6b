// An output path that names an input (the same path, a symlink or a hard link to it) or another
// output is refused before any work: a non-zero exit, a message naming both options, and the
// input left byte for byte as it was. Covers sluice-preprocess import, generate and partition,
// sluice-train, and check_outputs_do_not_clobber itself.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/paths.hpp"
#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"

namespace sluice {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A 40-vertex dataset and its plan, an edge list with feature and label files, and a small OGB
// directory; every file's bytes are recorded so each case can check they are untouched.
class OutputClobberCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir();
    Dataset d = test::random_symmetric_graph(40, 3, 7);
    d.name = "clobber";
    d.source = "test";
    test::add_hashed_features(d, 4, 7, 0.f, 1.f);
    test::add_hashed_labels(d, 3, 7);
    for (vertex_t v = 0; v < d.num_nodes; ++v) (v % 3 == 0 ? d.train : d.test).push_back(v);
    write_dataset(dir_->file("data.h5"), d);
    write_plan(dir_->file("plan.h5"),
               test::make_plan(d, test::plan_options(2, 2).partitioner("range")));
    test::write_text(dir_->file("edges.txt"), "0 1\n1 2\n2 0\n");
    test::write_text(dir_->file("features.txt"), "1 2\n3 4\n5 6\n");
    test::write_text(dir_->file("labels.txt"), "0\n1\n0\n");
    for (const char* sub : {"ogb", "ogb/raw"}) ASSERT_EQ(::mkdir(dir_->file(sub).c_str(), 0755), 0);
    test::write_text(dir_->file("ogb/raw/edge.csv"), "0,1\n1,2\n");
    ASSERT_EQ(::link(dir_->file("data.h5").c_str(), dir_->file("hardlink.h5").c_str()), 0);
    ASSERT_EQ(::symlink(dir_->file("data.h5").c_str(), dir_->file("symlink.h5").c_str()), 0);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string file(const std::string& name) { return dir_->file(name); }

  // Runs the command; expects failure naming every needle and `input` unchanged.
  static void expect_refused(const std::string& command, const std::string& input,
                             const std::vector<std::string>& needles) {
    const std::string before = read_bytes(file(input));
    ASSERT_FALSE(before.empty()) << input;
    const auto result = test::run_command(command);
    EXPECT_NE(result.exit_code, 0) << command << "\n" << result.output;
    for (const auto& needle : needles)
      EXPECT_NE(result.output.find(needle), std::string::npos)
          << "'" << command << "' should mention '" << needle << "', got:\n"
          << result.output;
    EXPECT_EQ(read_bytes(file(input)), before) << input << " changed: " << command;
  }

  static std::string train(const std::string& extra) {
    return test::bin("sluice-train") + " --dataset " + file("data.h5") + " --plan " +
           file("plan.h5") + " --epochs 1 --threads 1 --no-progress --quiet " + extra;
  }
  static std::string partition(const std::string& output) {
    return test::bin("sluice-preprocess") + " partition --quiet --dataset " + file("data.h5") +
           " --partitions 2 --partitioner range --output " + output;
  }
  static std::string import_edgelist(const std::string& extra) {
    return test::bin("sluice-preprocess") + " import --quiet --format edgelist --input " +
           file("edges.txt") + " " + extra;
  }

  static test::ScratchDir* dir_;
};
test::ScratchDir* OutputClobberCli::dir_ = nullptr;

TEST_F(OutputClobberCli, PartitionOutputIsTheDataset) {
  expect_refused(partition(file("data.h5")), "data.h5",
                 {"--output " + file("data.h5") + " is the same file as --dataset",
                  "refusing to overwrite an input"});
}

TEST_F(OutputClobberCli, PartitionOutputIsAHardLinkToTheDataset) {
  expect_refused(partition(file("hardlink.h5")), "data.h5",
                 {"--output " + file("hardlink.h5"), "--dataset " + file("data.h5")});
}

TEST_F(OutputClobberCli, PartitionOutputIsASymlinkToTheDataset) {
  expect_refused(partition(file("symlink.h5")), "data.h5",
                 {"--output " + file("symlink.h5"), "--dataset " + file("data.h5")});
}

TEST_F(OutputClobberCli, PartitionOutputThroughAnotherSpellingOfThePath) {
  expect_refused(partition(dir_->path() + "/./ogb/../data.h5"), "data.h5",
                 {"is the same file as --dataset"});
}

TEST_F(OutputClobberCli, TrainOutputsThatAreInputs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--metrics", "data.h5"},   {"--report", "plan.h5"},     {"--predictions", "data.h5"},
      {"--model-out", "plan.h5"}, {"--trace", "data.h5"},      {"--checkpoint", "plan.h5"},
      {"--report", "symlink.h5"}, {"--metrics", "hardlink.h5"}};
  for (const auto& [option, name] : cases) {
    const std::string input_option = name == "plan.h5" ? "--plan" : "--dataset";
    const std::string input = name == "plan.h5" ? "plan.h5" : "data.h5";
    expect_refused(train(option + " " + file(name)), input,
                   {option + " " + file(name) + " is the same file as " + input_option,
                    "refusing to overwrite an input"});
  }
}

TEST_F(OutputClobberCli, TrainOutputIsTheCheckpointResumedFrom) {
  // The resumed checkpoint is an input of the run; it may be rewritten only as --checkpoint.
  ASSERT_EQ(test::run_command(train("--checkpoint " + file("ck.h5"))).exit_code, 0);
  expect_refused(train("--checkpoint " + file("ck.h5") + " --resume --metrics " + file("ck.h5")),
                 "ck.h5", {"--metrics " + file("ck.h5") + " is the same file as --checkpoint"});
}

TEST_F(OutputClobberCli, TrainTwoOutputsToOneFile) {
  const auto result = test::run_command(
      train("--metrics " + file("out.json") + " --report " + dir_->path() + "/ogb/../out.json"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("--report"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("is the same file as --metrics " + file("out.json")),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(test::file_exists(file("out.json")));
}

TEST_F(OutputClobberCli, ImportOutputIsAnInputFile) {
  expect_refused(import_edgelist("--output " + file("edges.txt")), "edges.txt",
                 {"--output " + file("edges.txt") + " is the same file as --input"});
  expect_refused(
      import_edgelist("--features " + file("features.txt") + " --output " + file("features.txt")),
      "features.txt", {"is the same file as --features " + file("features.txt")});
  expect_refused(
      import_edgelist("--labels " + file("labels.txt") + " --output " + file("labels.txt")),
      "labels.txt", {"is the same file as --labels " + file("labels.txt")});
}

TEST_F(OutputClobberCli, ImportOutputIsAFileInTheOgbDirectory) {
  expect_refused(test::bin("sluice-preprocess") + " import --quiet --format ogb --input " +
                     file("ogb") + " --output " + file("ogb/raw/edge.csv"),
                 "ogb/raw/edge.csv",
                 {"--output " + file("ogb/raw/edge.csv") + " is the same file as",
                  "under --input " + file("ogb")});
}

TEST_F(OutputClobberCli, GenerateTwoOutputsToOneFile) {
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " generate --quiet --scale 4 --output " +
                        file("gen.h5") + " --edges-output " + file("gen.h5"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("--edges-output " + file("gen.h5") + " is the same file as " +
                               "--output " + file("gen.h5")),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(test::file_exists(file("gen.h5")));
}

TEST_F(OutputClobberCli, DistinctOutputsStillRun) {
  const auto result = test::run_command(train("--metrics " + file("m.json") + " --report " +
                                              file("r.json") + " --checkpoint " + file("ck2.h5")));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(test::file_exists(file("r.json")));
}

// check_outputs_do_not_clobber on its own: what is refused and what is allowed.
TEST(CheckOutputsDoNotClobber, RefusesAnOutputThatIsAnInput) {
  test::ScratchDir dir;
  test::write_text(dir.file("in.txt"), "x");
  try {
    check_outputs_do_not_clobber({{"--in", dir.file("in.txt")}}, {{"--out", dir.file("in.txt")}});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + dir.file("in.txt") + " is the same file as --in " +
                                         dir.file("in.txt") + ": refusing to overwrite an input");
  }
}

TEST(CheckOutputsDoNotClobber, RefusesLinksAndTwoOutputsToOneFile) {
  test::ScratchDir dir;
  test::write_text(dir.file("in.txt"), "x");
  ASSERT_EQ(::link(dir.file("in.txt").c_str(), dir.file("hard.txt").c_str()), 0);
  ASSERT_EQ(::symlink("in.txt", dir.file("soft.txt").c_str()), 0);
  EXPECT_THROW(
      check_outputs_do_not_clobber({{"--in", dir.file("in.txt")}}, {{"--o", dir.file("hard.txt")}}),
      InputError);
  EXPECT_THROW(
      check_outputs_do_not_clobber({{"--in", dir.file("in.txt")}}, {{"--o", dir.file("soft.txt")}}),
      InputError);
  // Two outputs not yet created, spelled differently.
  EXPECT_THROW(check_outputs_do_not_clobber(
                   {}, {{"--a", dir.file("new.txt")}, {"--b", dir.path() + "/./new.txt"}}),
               InputError);
  // Two existing outputs, one a hard link of the other.
  EXPECT_THROW(check_outputs_do_not_clobber(
                   {}, {{"--a", dir.file("in.txt")}, {"--b", dir.file("hard.txt")}}),
               InputError);
}

TEST(CheckOutputsDoNotClobber, AllowsDistinctFilesAndTheSameOptionAsInputAndOutput) {
  test::ScratchDir dir;
  test::write_text(dir.file("in.txt"), "x");
  test::write_text(dir.file("ck.h5"), "x");
  EXPECT_NO_THROW(check_outputs_do_not_clobber(
      {{"--in", dir.file("in.txt")}, {"--checkpoint", dir.file("ck.h5")}, {"--unset", ""}},
      {{"--out", dir.file("out.txt")},
       {"--checkpoint", dir.file("ck.h5")},
       {"--other", dir.file("other.txt")},
       {"--unset-out", ""},
       {"--also-unset", ""}}));
  // An input that does not exist is left to its reader; nothing can be overwritten.
  EXPECT_NO_THROW(check_outputs_do_not_clobber({{"--in", dir.file("missing.txt")}},
                                               {{"--out", dir.file("missing.txt")}}));
}

}  // namespace
}  // namespace sluice
