// Bad input to `sluice-preprocess import`: every case must fail with exit code != 0 and one
// error line naming the file (and the line for text input), and leave no output or temporary
// file behind. The OGB cases start from a valid 6-vertex dataset and break one file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <string>

#include "tests/support/paths.hpp"

namespace sluice {
namespace {

// One line, exit code != 0, naming `file` (and `file:line:` when line > 0) and `what`.
void expect_error(const test::CommandResult& result, const std::string& file, int line,
                  const std::string& what) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  const std::string named = line > 0 ? file + ":" + std::to_string(line) + ":" : file;
  EXPECT_NE(result.output.find(named), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(what), std::string::npos) << result.output;
  EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
}

// raw/ and split/s/ of a valid 6-vertex OGB dataset, plus an empty out/ directory.
class OgbImportErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* sub : {"/ogb", "/ogb/raw", "/ogb/split", "/ogb/split/s", "/out"})
      ASSERT_EQ(::mkdir((dir_.path() + sub).c_str(), 0755), 0);
    put("raw/num-node-list.csv", "6\n");
    put("raw/num-edge-list.csv", "5\n");
    put("raw/edge.csv", "0,1\n1,2\n2,0\n3,4\n4,5\n");
    put("raw/node-feat.csv", "0.5,1,2\n1,1,1\n2,2,2\n3,3,3\n4,4,4\n5,5,5\n");
    put("raw/node-label.csv", "0\n1\nnan\n2\n1\n0\n");
    put("split/s/train.csv", "0\n1\n");
    put("split/s/valid.csv", "3\n");
    put("split/s/test.csv", "4\n5\n");
  }
  void TearDown() override {
    // No output and no temporary file may be left behind, whatever failed.
    EXPECT_TRUE(test::list_dir(dir_.file("out")).empty());
  }

  void put(const std::string& name, const std::string& text) {
    test::write_text(dir_.file("ogb/" + name), text);
  }
  std::string path(const std::string& name) const { return dir_.file("ogb/" + name); }

  test::CommandResult import(const std::string& extra = "") const {
    return test::run_command(test::bin("sluice-preprocess") +
                             " import --quiet --format ogb --input " + dir_.file("ogb") +
                             " --output " + dir_.file("out/d.h5") + " " + extra);
  }

  test::ScratchDir dir_;
};

TEST_F(OgbImportErrors, ValidFixtureImports) {
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " import --quiet --format ogb --input " +
                        dir_.file("ogb") + " --output " + dir_.file("d.h5"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(test::file_exists(dir_.file("d.h5")));
}

TEST_F(OgbImportErrors, NonNumericToken) {
  put("raw/edge.csv", "0,1\n1,x2\n2,0\n3,4\n4,5\n");
  expect_error(import(), path("raw/edge.csv"), 2, "non-numeric token 'x2'");
}

TEST_F(OgbImportErrors, MissingColumn) {
  put("raw/edge.csv", "0,1\n1,2\n2\n3,4\n4,5\n");
  expect_error(import(), path("raw/edge.csv"), 3, "missing column");
}

TEST_F(OgbImportErrors, IdOutOfRange) {
  put("raw/edge.csv", "0,1\n1,2\n2,0\n3,4\n4,6\n");
  expect_error(import(), path("raw/edge.csv"), 5, "vertex id 6 out of range [0, 6)");
}

TEST_F(OgbImportErrors, NegativeId) {
  put("raw/edge.csv", "0,1\n-1,2\n2,0\n3,4\n4,5\n");
  expect_error(import(), path("raw/edge.csv"), 2, "negative vertex id -1");
}

TEST_F(OgbImportErrors, EdgeCountDisagreesWithNumEdgeList) {
  put("raw/num-edge-list.csv", "7\n");
  const auto result = import();
  expect_error(result, path("raw/edge.csv"), 0, "5 edges, but");
  EXPECT_NE(result.output.find("num-edge-list.csv declares 7"), std::string::npos) << result.output;
}

TEST_F(OgbImportErrors, SeveralGraphsInNumNodeList) {
  put("raw/num-node-list.csv", "3\n3\n");
  expect_error(import(), path("raw/num-node-list.csv"), 0, "holds 2 graphs");
}

TEST_F(OgbImportErrors, FeatureRowCountMismatch) {
  put("raw/node-feat.csv", "0.5,1,2\n1,1,1\n2,2,2\n3,3,3\n4,4,4\n");
  expect_error(import(), path("raw/node-feat.csv"), 0, "5 feature rows, expected 6");
}

TEST_F(OgbImportErrors, FeatureWidthMismatch) {
  put("raw/node-feat.csv", "0.5,1,2\n1,1,1\n2,2,2\n3,3\n4,4,4\n5,5,5\n");
  expect_error(import(), path("raw/node-feat.csv"), 4, "2 columns, expected 3");
}

TEST_F(OgbImportErrors, NanFeature) {
  put("raw/node-feat.csv", "0.5,1,2\nnan,1,1\n2,2,2\n3,3,3\n4,4,4\n5,5,5\n");
  expect_error(import(), path("raw/node-feat.csv"), 2, "is not finite");
}

TEST_F(OgbImportErrors, InfFeature) {
  put("raw/node-feat.csv", "0.5,1,2\n1,1,1\n2,inf,2\n3,3,3\n4,4,4\n5,5,5\n");
  expect_error(import(), path("raw/node-feat.csv"), 3, "'inf' in column 2 is not finite");
}

TEST_F(OgbImportErrors, OverflowingFeatureIsNotFinite) {
  put("raw/node-feat.csv", "0.5,1,2\n1,1,1\n2,2,2\n3,3,1e60\n4,4,4\n5,5,5\n");
  expect_error(import(), path("raw/node-feat.csv"), 4, "is not finite");
}

TEST_F(OgbImportErrors, LabelNotBelowDeclaredClasses) {
  put("raw/node-label.csv", "0\n1\nnan\n3\n1\n0\n");
  expect_error(import("--classes 3"), path("raw/node-label.csv"), 4,
               "label 3 >= the declared number of classes 3");
}

TEST_F(OgbImportErrors, NonIntegerLabel) {
  put("raw/node-label.csv", "0\n1\nnan\n2.5\n1\n0\n");
  expect_error(import(), path("raw/node-label.csv"), 4, "non-integer label '2.5'");
}

TEST_F(OgbImportErrors, IntegralFloatLabelIsAccepted) {
  put("raw/node-label.csv", "0.0\n1\nnan\n2.0\n1\n0\n");
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " import --quiet --format ogb --input " +
                        dir_.file("ogb") + " --output " + dir_.file("d.h5"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
}

TEST_F(OgbImportErrors, SplitIndexOutOfRange) {
  put("split/s/train.csv", "0\n9\n");
  expect_error(import(), path("split/s/train.csv"), 2, "index 9 out of range [0, 6)");
}

TEST_F(OgbImportErrors, SplitIndexDuplicated) {
  put("split/s/test.csv", "4\n5\n4\n");
  expect_error(import(), path("split/s/test.csv"), 3, "index 4 duplicated (also on line 1)");
}

TEST_F(OgbImportErrors, EmptyGraph) {
  put("raw/edge.csv", "");
  put("raw/num-edge-list.csv", "0\n");
  expect_error(import(), path("raw/edge.csv"), 0, "empty graph");
}

TEST_F(OgbImportErrors, CorruptGzip) {
  // A gzip header followed by bytes that are not deflate data.
  test::write_text(path("raw/edge.csv.gz"),
                   std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) +
                       "this is not deflate data at all, not at all");
  expect_error(import(), path("raw/edge.csv.gz"), 0, "corrupt gzip data");
}

TEST_F(OgbImportErrors, TruncatedGzip) {
  std::string text;
  for (int i = 0; i < 5000; ++i)
    text += std::to_string(i % 6) + "," + std::to_string((i + 1) % 6) + "\n";
  put("raw/num-edge-list.csv", "5000\n");
  gzFile file = gzopen(path("raw/edge.csv.gz").c_str(), "wb");
  ASSERT_NE(file, nullptr);
  gzwrite(file, text.data(), static_cast<unsigned>(text.size()));
  gzclose(file);
  struct stat info {};
  ASSERT_EQ(::stat(path("raw/edge.csv.gz").c_str(), &info), 0);
  ASSERT_EQ(::truncate(path("raw/edge.csv.gz").c_str(), info.st_size / 2), 0);
  expect_error(import(), path("raw/edge.csv.gz"), 0, "truncated gzip file");
}

TEST_F(OgbImportErrors, GzipNameWithoutGzipData) {
  test::write_text(path("raw/edge.csv.gz"), "0,1\n");
  expect_error(import(), path("raw/edge.csv.gz"), 0, "not a gzip file");
}

TEST_F(OgbImportErrors, MissingRequiredFile) {
  ASSERT_EQ(std::remove(path("raw/num-edge-list.csv").c_str()), 0);
  expect_error(import(), path("raw/num-edge-list.csv.gz"), 0, "missing");
}

TEST_F(OgbImportErrors, UnknownSplitName) {
  expect_error(import("--split nope"), path("split/nope"), 0, "no such split");
}

TEST_F(OgbImportErrors, OutputInMissingDirectory) {
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " import --quiet --format ogb --input " +
                        dir_.file("ogb") + " --output " + dir_.file("missing/d.h5"));
  expect_error(result, dir_.file("missing/d.h5"), 0, "does not exist");
  EXPECT_FALSE(test::file_exists(dir_.file("missing")));
}

// Edge-list and binary input.
class FileImportErrors : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::mkdir(dir_.file("out").c_str(), 0755), 0); }
  void TearDown() override { EXPECT_TRUE(test::list_dir(dir_.file("out")).empty()); }

  test::CommandResult import(const std::string& format, const std::string& input,
                             const std::string& extra = "") const {
    return test::run_command(test::bin("sluice-preprocess") + " import --quiet --format " + format +
                             " --input " + input + " --output " + dir_.file("out/d.h5") + " " +
                             extra);
  }
  void write_binary(const std::string& name, const std::string& bytes) const {
    test::write_text(dir_.file(name), bytes);
  }
  test::ScratchDir dir_;
};

std::string int32_bytes(std::initializer_list<std::int32_t> values) {
  std::string bytes;
  for (std::int32_t v : values) bytes.append(reinterpret_cast<const char*>(&v), 4);
  return bytes;
}

TEST_F(FileImportErrors, EdgeListNonNumericTokenNamesTheLine) {
  test::write_text(dir_.file("g.txt"), "# header\n0 1\n1 2\n2 three\n");
  expect_error(import("edgelist", dir_.file("g.txt")), dir_.file("g.txt"), 4,
               "non-numeric token 'three'");
}

TEST_F(FileImportErrors, EdgeListLineNumbersSurviveParallelBlocks) {
  // Large enough to be parsed in several pieces; the bad line is near the end.
  std::string text;
  for (int i = 0; i < 200000; ++i) text += std::to_string(i) + " " + std::to_string(i + 1) + "\n";
  text += "5 -7\n";
  test::write_text(dir_.file("g.txt"), text);
  expect_error(import("edgelist", dir_.file("g.txt")), dir_.file("g.txt"), 200001,
               "negative vertex id -7");
}

TEST_F(FileImportErrors, EdgeListIdOutOfDeclaredRange) {
  test::write_text(dir_.file("g.txt"), "0 1\n1 4\n");
  expect_error(import("edgelist", dir_.file("g.txt"), "--num-nodes 4"), dir_.file("g.txt"), 2,
               "vertex id 4 out of range [0, 4)");
}

TEST_F(FileImportErrors, EdgeListWithOnlyCommentsIsEmpty) {
  test::write_text(dir_.file("g.txt"), "# nothing\n% here\n\n");
  expect_error(import("edgelist", dir_.file("g.txt")), dir_.file("g.txt"), 0, "empty graph");
}

TEST_F(FileImportErrors, EdgeListLabelFileErrors) {
  test::write_text(dir_.file("g.txt"), "0 1\n1 2\n");
  test::write_text(dir_.file("l.txt"), "0\n1\nabc\n");
  expect_error(import("edgelist", dir_.file("g.txt"), "--labels " + dir_.file("l.txt")),
               dir_.file("l.txt"), 3, "non-numeric token 'abc'");
  test::write_text(dir_.file("l.txt"), "0\n1\n");
  expect_error(import("edgelist", dir_.file("g.txt"), "--labels " + dir_.file("l.txt")),
               dir_.file("l.txt"), 0, "2 label rows, expected 3");
}

TEST_F(FileImportErrors, UnreadableInput) {
  expect_error(import("edgelist", dir_.file("absent.txt")), dir_.file("absent.txt"), 0,
               "cannot open");
}

TEST_F(FileImportErrors, BinaryNegativeId) {
  write_binary("g.bin", int32_bytes({0, 1, 1, -3}));
  expect_error(import("binary", dir_.file("g.bin")), dir_.file("g.bin"), 0,
               "pair 1 (byte offset 12): negative vertex id -3");
}

TEST_F(FileImportErrors, BinaryIdOutOfRange) {
  write_binary("g.bin", int32_bytes({0, 1, 9, 2}));
  expect_error(import("binary", dir_.file("g.bin"), "--num-nodes 5"), dir_.file("g.bin"), 0,
               "vertex id 9 out of range [0, 5)");
}

TEST_F(FileImportErrors, BinaryTruncatedPair) {
  write_binary("g.bin", int32_bytes({0, 1, 1}));
  expect_error(import("binary", dir_.file("g.bin")), dir_.file("g.bin"), 0,
               "truncated: ends inside a pair");
}

TEST_F(FileImportErrors, BinaryEmpty) {
  write_binary("g.bin", "");
  expect_error(import("binary", dir_.file("g.bin")), dir_.file("g.bin"), 0, "empty graph");
}

TEST_F(FileImportErrors, BadOptionValues) {
  test::write_text(dir_.file("g.txt"), "0 1\n");
  const auto loops = import("edgelist", dir_.file("g.txt"), "--self-loops sometimes");
  EXPECT_NE(loops.exit_code, 0);
  EXPECT_NE(loops.output.find("--self-loops"), std::string::npos) << loops.output;
  const auto fractions = import("edgelist", dir_.file("g.txt"), "--split-fractions 0.5,0.6,0.1");
  EXPECT_NE(fractions.exit_code, 0);
  EXPECT_NE(fractions.output.find("sum to more than 1"), std::string::npos) << fractions.output;
}

}  // namespace
}  // namespace sluice
