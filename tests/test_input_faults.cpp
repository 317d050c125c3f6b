// Fault injection: corrupt datasets, streams, lenient text and inputs that ask for more memory
// than the machine has. Every case runs the real programs and expects a non-zero exit (never a
// signal) with a message naming the file and the part at fault.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "formats/dataset.hpp"
#include "formats/hdf5.hpp"
#include "formats/plan.hpp"
#include "formats/text_input.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"

namespace sluice {
namespace {

// The exit code of a rejected input: sluice-train exits 2 for an InputError (1 is its internal
// error), sluice-preprocess exits 1 for every error it reports.
int input_error_exit(const std::string& command) {
  return command.rfind(test::bin("sluice-train"), 0) == 0 ? 2 : 1;
}

// ---- corrupt datasets

//   0 <----> 1 <----- 2      3 -> 3 (self loop)      4 (isolated)
// indptr {0, 1, 3, 3, 4, 4}, indices {1, 0, 2, 3}; 2 features, 3 classes.
Dataset drawn_dataset() {
  Dataset d = test::graph_from_edges(5, {{1, 0}, {0, 1}, {2, 1}, {3, 3}});
  d.name = "drawn";
  d.source = "test";
  d.options = "{}";
  d.feature_dim = 2;
  d.features = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 1.0f};
  d.num_classes = 3;
  d.labels = {0, 2, -1, 1, 2};
  d.train = {0, 4};
  d.valid = {1};
  d.test = {3};
  return d;
}

// Replaces the array at `name` by `values` (1-D) in an existing file.
template <typename T>
void replace_vector(const std::string& path, const std::string& name,
                    const std::vector<T>& values) {
  h5::Handle file = h5::open_file(path, true);
  SLUICE_H5(H5Ldelete(file, name.c_str(), H5P_DEFAULT));
  const auto slash = name.rfind('/');
  if (slash == std::string::npos) {
    h5::write_vector(file, name, values);
  } else {
    h5::Handle group = h5::open_group(file, name.substr(0, slash));
    h5::write_vector(group, name.substr(slash + 1), values);
  }
}

struct Corruption {
  const char* name;
  std::function<void(const std::string&)> apply;
  std::string message;  // expected in every program's error
  // Commands that load the corrupted part; the others do not see it (feature values are read
  // only by sluice-train).
  bool features_only = false;
};

std::vector<Corruption> corruptions() {
  return {
      {"IndexOutOfRange",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "graph/indices", {1, 0, 99, 3});
       },
       "/graph/indices[2] is 99, out of range [0, 5)"},
      {"NegativeIndex",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "graph/indices", {1, -4, 2, 3});
       },
       "/graph/indices[1] is -4"},
      {"ShortIndices",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "graph/indices", {1, 0, 2});
       },
       "/graph/indices has shape [3], expected [4] (num_edges 4)"},
      {"DecreasingIndptr",
       [](const std::string& p) {
         replace_vector<edge_t>(p, "graph/indptr", {0, 3, 1, 3, 4, 4});
       },
       "/graph/indptr decreases at vertex 1 (3 then 1)"},
      {"IndptrNotFromZero",
       [](const std::string& p) {
         replace_vector<edge_t>(p, "graph/indptr", {1, 1, 3, 3, 4, 4});
       },
       "/graph/indptr[0] is 1, expected 0"},
      {"IndptrEndsPastIndices",
       [](const std::string& p) {
         replace_vector<edge_t>(p, "graph/indptr", {0, 1, 3, 3, 4, 9});
       },
       "/graph/indices has 4 entries but /graph/indptr ends at 9"},
      {"NodeCountDisagrees",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         h5::write_attr<std::int64_t>(file, "num_nodes", 6);
       },
       "/graph/indptr has shape [6], expected [7] (num_nodes 6 + 1)"},
      {"EdgeCountDisagrees",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         h5::write_attr<std::int64_t>(file, "num_edges", 40);
       },
       "/graph/indices has shape [4], expected [40] (num_edges 40)"},
      {"FeaturesTransposed",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         SLUICE_H5(H5Ldelete(file, "features", H5P_DEFAULT));
         const std::vector<float> values(10, 0.5f);
         h5::write_matrix(file, "features", values.data(), 2, 5);
       },
       "/features has shape [2, 5], expected [5, 2] (num_nodes x feature_dim): the features are "
       "stored transposed"},
      {"FeatureDimDisagrees",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         h5::write_attr<std::int64_t>(file, "feature_dim", 3);
       },
       "/features has shape [5, 2], expected [5, 3]"},
      {"LabelOutOfRange",
       [](const std::string& p) {
         replace_vector<std::int32_t>(p, "labels", {0, 2, -1, 7, 2});
       },
       "/labels[3] is 7, not in [-1, num_classes = 3)"},
      {"ShortLabels",
       [](const std::string& p) {
         replace_vector<std::int32_t>(p, "labels", {0, 2, -1});
       },
       "/labels has shape [3], expected [5]"},
      {"MissingLabels",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         SLUICE_H5(H5Ldelete(file, "labels", H5P_DEFAULT));
       },
       "dataset lacks the array /labels"},
      {"SplitOutOfRange",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "split/test", {3, 12});
       },
       "/split/test[1] is 12, out of range [0, 5)"},
      {"SplitUnsorted",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "split/test", {3, 2});
       },
       "/split/test is not sorted and unique at index 1 (vertex 2)"},
      {"SplitsOverlap",
       [](const std::string& p) {
         replace_vector<vertex_t>(p, "split/test", {2, 3, 4});
       },
       "/split/test and /split/train overlap (vertex 4 is in both)"},
      {"FeatureNotFinite",
       [](const std::string& p) {
         h5::Handle file = h5::open_file(p, true);
         SLUICE_H5(H5Ldelete(file, "features", H5P_DEFAULT));
         std::vector<float> values(10, 0.5f);
         values[7] = std::numeric_limits<float>::quiet_NaN();
         h5::write_matrix(file, "features", values.data(), 5, 2);
       },
       "/features of vertex 3, column 1 is not finite", true},
  };
}

class CorruptDataset : public ::testing::TestWithParam<Corruption> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir();
    const Dataset d = drawn_dataset();
    write_dataset(dir_->file("good.h5"), d);
    write_plan(dir_->file("plan.h5"),
               test::make_plan(d, test::plan_options(1, 1).partitioner("range")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static test::ScratchDir* dir_;
};
test::ScratchDir* CorruptDataset::dir_ = nullptr;

// Every program that opens the dataset exits 1 naming the file and the corrupted part.
TEST_P(CorruptDataset, EveryProgramRefusesItNamingTheArray) {
  const Corruption& c = GetParam();
  const std::string bad = dir_->file(std::string(c.name) + ".h5");
  {
    std::ifstream in(dir_->file("good.h5"), std::ios::binary);
    std::ofstream out(bad, std::ios::binary);
    out << in.rdbuf();
  }
  c.apply(bad);
  const std::string preprocess = test::bin("sluice-preprocess");
  std::vector<std::string> commands = {test::bin("sluice-train") + " --dataset " + bad +
                                       " --plan " + dir_->file("plan.h5") +
                                       " --epochs 1 --threads 1 --no-progress"};
  if (!c.features_only) {
    commands.push_back(preprocess + " info " + bad);
    commands.push_back(preprocess + " partition --dataset " + bad + " --partitioner range -q" +
                       " --output " + dir_->file(std::string(c.name) + "-plan.h5"));
    commands.push_back(preprocess + " verify --dataset " + bad + " --plan " +
                       dir_->file("plan.h5"));
  }
  for (const std::string& command : commands) {
    const auto r = test::run_command(command);
    EXPECT_EQ(r.exit_code, input_error_exit(command)) << command << "\n" << r.output;
    EXPECT_NE(r.output.find(bad + ": "), std::string::npos)
        << command << " should name " << bad << ":\n"
        << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos)
        << command << " should say '" << c.message << "':\n"
        << r.output;
  }
  EXPECT_FALSE(test::file_exists(dir_->file(std::string(c.name) + "-plan.h5")));
}

INSTANTIATE_TEST_SUITE_P(Faults, CorruptDataset, ::testing::ValuesIn(corruptions()),
                         [](const auto& info) { return std::string(info.param.name); });

// The untouched file passes every program (the cases above fail for their corruption only).
TEST(CorruptDatasetControl, TheGoodFilePasses) {
  test::ScratchDir dir;
  const Dataset d = drawn_dataset();
  write_dataset(dir.file("d.h5"), d);
  const Dataset r = read_dataset(dir.file("d.h5"));
  EXPECT_EQ(r.indices, d.indices);
  DatasetReadOptions structure;
  structure.features = false;
  structure.labels = false;
  const Dataset s = read_dataset(dir.file("d.h5"), structure);
  EXPECT_TRUE(s.labels.empty());
  EXPECT_TRUE(s.features.empty());
  EXPECT_EQ(s.test, d.test);
}

// ---- streams

std::string gzip_bytes(const std::string& text) {
  // gzip with zlib: deflate with a gzip wrapper (windowBits 16 + 15).
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<unsigned>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<unsigned>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A path of n vertices as "src dst" lines, and n feature rows of `dim` values (large enough to
// span several read blocks of a pipe).
struct StreamInputs {
  std::string edges, features;
};
StreamInputs stream_inputs(int n, int dim) {
  StreamInputs in;
  for (int v = 0; v + 1 < n; ++v)
    in.edges += std::to_string(v) + " " + std::to_string(v + 1) + "\n";
  for (int v = 0; v < n; ++v) {
    for (int j = 0; j < dim; ++j)
      in.features += (j ? "," : "") + std::to_string((v * 31 + j * 7) % 101 / 10.0);
    in.features += "\n";
  }
  return in;
}

class Streams : public ::testing::Test {
 protected:
  void SetUp() override {
    const StreamInputs in = stream_inputs(3000, 24);
    test::write_text(dir_.file("edges.txt"), in.edges);
    test::write_text(dir_.file("features.csv"), in.features);
    write_bytes(dir_.file("edges.txt.gz"), gzip_bytes(in.edges));
    write_bytes(dir_.file("features.csv.gz"), gzip_bytes(in.features));
    ASSERT_EQ(
        import("--input " + dir_.file("edges.txt") + " --features " + dir_.file("features.csv"),
               "file.h5")
            .exit_code,
        0);
  }
  test::CommandResult import(const std::string& inputs, const std::string& output) {
    return test::run_command(test::bin("sluice-preprocess") + " import --format edgelist " +
                             inputs + " --random-labels 3 --output " + dir_.file(output) + " -q");
  }
  std::string fingerprint(const std::string& name) {
    return read_dataset_info(dir_.file(name)).fingerprint;
  }
  test::ScratchDir dir_;
};

TEST_F(Streams, EdgesFromStandardInputThroughAPipe) {
  const auto r = test::run_command(
      "cat " + dir_.file("edges.txt") + " | " + test::bin("sluice-preprocess") +
      " import --format edgelist --input /dev/stdin --features " + dir_.file("features.csv") +
      " --random-labels 3 --output " + dir_.file("pipe.h5") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fingerprint("pipe.h5"), fingerprint("file.h5"));
}

TEST_F(Streams, FeaturesFromAFifo) {
  const std::string fifo = dir_.file("features.fifo");
  ASSERT_EQ(test::run_command("mkfifo " + fifo).exit_code, 0);
  const auto r =
      test::run_command("(cat " + dir_.file("features.csv") + " > " + fifo + " &) ; " +
                        test::bin("sluice-preprocess") + " import --format edgelist --input " +
                        dir_.file("edges.txt") + " --features " + fifo +
                        " --random-labels 3 --output " + dir_.file("fifo.h5") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fingerprint("fifo.h5"), fingerprint("file.h5"));
}

TEST_F(Streams, GzipFilesAndGzipThroughAPipe) {
  ASSERT_EQ(
      import("--input " + dir_.file("edges.txt.gz") + " --features " + dir_.file("features.csv.gz"),
             "gz.h5")
          .exit_code,
      0);
  EXPECT_EQ(fingerprint("gz.h5"), fingerprint("file.h5"));
  const auto r = test::run_command(
      "cat " + dir_.file("features.csv.gz") + " | " + test::bin("sluice-preprocess") +
      " import --format edgelist --input " + dir_.file("edges.txt.gz") +
      " --features /dev/stdin --random-labels 3 --output " + dir_.file("gzpipe.h5") + " -q");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fingerprint("gzpipe.h5"), fingerprint("file.h5"));
}

TEST_F(Streams, ConcatenatedGzipMembersReadAsOneStream) {
  const StreamInputs in = stream_inputs(3000, 24);
  const std::size_t half = in.edges.find('\n', in.edges.size() / 2) + 1;
  write_bytes(dir_.file("two.gz"),
              gzip_bytes(in.edges.substr(0, half)) + gzip_bytes(in.edges.substr(half)));
  ASSERT_EQ(import("--input " + dir_.file("two.gz") + " --features " + dir_.file("features.csv"),
                   "two.h5")
                .exit_code,
            0);
  EXPECT_EQ(fingerprint("two.h5"), fingerprint("file.h5"));
}

TEST_F(Streams, TruncatedOrTrailingGzipDataIsRefused) {
  const std::string whole = gzip_bytes(stream_inputs(3000, 24).edges);
  write_bytes(dir_.file("cut.gz"), whole.substr(0, whole.size() / 2));
  auto r = import("--input " + dir_.file("cut.gz"), "cut.h5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir_.file("cut.gz") + ": truncated gzip file"), std::string::npos)
      << r.output;
  write_bytes(dir_.file("trailing.gz"), whole + "junk");
  r = import("--input " + dir_.file("trailing.gz"), "trailing.h5");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir_.file("trailing.gz") +
                          ": unexpected data after the end of the gzip stream"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(test::file_exists(dir_.file("cut.h5")));
}

// Binary pairs take several passes: a pipe is refused up front with what to do instead.
TEST_F(Streams, BinaryPairsNeedARegularFile) {
  const std::vector<std::int32_t> pairs = {0, 1, 1, 2};
  write_bytes(dir_.file("pairs.bin"),
              std::string(reinterpret_cast<const char*>(pairs.data()), pairs.size() * 4));
  const auto r = test::run_command(
      "cat " + dir_.file("pairs.bin") + " | " + test::bin("sluice-preprocess") +
      " import --format binary --input /dev/stdin --output " + dir_.file("bin.h5"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/dev/stdin: a regular file is needed (got a pipe/FIFO)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(test::file_exists(dir_.file("bin.h5")));
}

TEST(InputFileStream, ReadsAPipeFromItsFirstByteAndRefusesToRewind) {
  test::ScratchDir dir;
  const std::string fifo = dir.file("f");
  ASSERT_EQ(test::run_command("mkfifo " + fifo).exit_code, 0);
  // The writer blocks until the FIFO is opened for reading; its output streams are detached so
  // that run_command does not wait for it.
  ASSERT_EQ(test::run_command("(printf 'ab\\ncd\\n' > " + fifo + " 2>/dev/null &) >/dev/null 2>&1")
                .exit_code,
            0);
  InputFile input(fifo);
  EXPECT_FALSE(input.regular());
  EXPECT_FALSE(input.compressed());
  char buffer[16] = {};
  EXPECT_EQ(input.read_full(buffer, sizeof buffer), 6u);
  EXPECT_STREQ(buffer, "ab\ncd\n");
  try {
    input.rewind();
    ADD_FAILURE() << "rewind on a FIFO should throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fifo + ": a regular file is needed (got a pipe/FIFO)"),
              std::string::npos)
        << e.what();
  }
}

// ---- lenient text and options

// A minimal OGB raw directory: 3 vertices, edges and splits as given.
void write_ogb(const test::ScratchDir& dir, const std::string& edges, const std::string& train,
               const std::string& valid, const std::string& test_split) {
  const std::string root = dir.file("ogb");
  ASSERT_EQ(test::run_command("mkdir -p " + root + "/raw " + root + "/split/s").exit_code, 0);
  test::write_text(root + "/raw/edge.csv", edges);
  test::write_text(root + "/raw/num-node-list.csv", "3\n");
  test::write_text(root + "/raw/num-edge-list.csv", "2\n");
  test::write_text(root + "/split/s/train.csv", train);
  test::write_text(root + "/split/s/valid.csv", valid);
  test::write_text(root + "/split/s/test.csv", test_split);
}

test::CommandResult import_ogb(const test::ScratchDir& dir) {
  return test::run_command(test::bin("sluice-preprocess") + " import --format ogb --input " +
                           dir.file("ogb") + " --output " + dir.file("ogb.h5"));
}

TEST(Leniency, OgbEdgeLinesHoldExactlyTwoColumns) {
  test::ScratchDir dir;
  write_ogb(dir, "0,1\n1,2,7\n", "0\n", "1\n", "2\n");
  const auto r = import_ogb(dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("ogb") + "/raw/edge.csv:2: 3 columns, expected exactly 2"),
            std::string::npos)
      << r.output;
  write_ogb(dir, "0,1\n1,2\n", "0\n", "1\n", "2\n");
  EXPECT_EQ(import_ogb(dir).exit_code, 0);
}

TEST(Leniency, OverlappingOgbSplitsNameBothFilesAndAVertex) {
  test::ScratchDir dir;
  write_ogb(dir, "0,1\n1,2\n", "0\n2\n", "1\n", "2\n");
  const auto r = import_ogb(dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("train.csv and " + dir.file("ogb") +
                          "/split/s/test.csv overlap: vertex 2 is in both"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(test::file_exists(dir.file("ogb.h5")));
}

TEST(Leniency, EmptyCsvFieldsNameLineAndColumn) {
  test::ScratchDir dir;
  test::write_text(dir.file("e.csv"), "0,1\n1,2\n");
  const std::string base = test::bin("sluice-preprocess") + " import --format edgelist --input ";
  struct Case {
    std::string features, message;
  };
  for (const Case& c : {Case{"1,2\n3,,4\n5,6\n", "f.csv:2: column 2: empty field"},
                        Case{"1,2\n3,4\n,6\n", "f.csv:3: column 1: empty field"},
                        Case{"1,2\n3,4,\n5,6\n", "f.csv:2: column 3: empty field"}}) {
    test::write_text(dir.file("f.csv"), c.features);
    const auto r = test::run_command(base + dir.file("e.csv") + " --features " + dir.file("f.csv") +
                                     " --output " + dir.file("o.h5"));
    EXPECT_EQ(r.exit_code, 1) << c.features;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.features << r.output;
  }
  test::write_text(dir.file("e2.csv"), "0,1\n1,,2\n");
  const auto r = test::run_command(base + dir.file("e2.csv") + " --output " + dir.file("o.h5"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("e2.csv:2: column 2: empty field (expected a vertex id)"),
            std::string::npos)
      << r.output;
}

TEST(Leniency, TinyValuesAreFiniteHugeOnesAreNot) {
  test::ScratchDir dir;
  test::write_text(dir.file("e.csv"), "0 1\n1 2\n");
  test::write_text(dir.file("f.csv"), "1e-50 1\n2 3e-42\n4 5\n");
  const std::string base = test::bin("sluice-preprocess") + " import --format edgelist --input " +
                           dir.file("e.csv") + " --features " + dir.file("f.csv") + " --output ";
  auto r = test::run_command(base + dir.file("tiny.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Dataset d = read_dataset(dir.file("tiny.h5"));
  EXPECT_EQ(d.features[0], 0.0f);              // below the smallest subnormal
  EXPECT_NEAR(d.features[3], 3e-42f, 1e-44f);  // a subnormal
  EXPECT_GT(d.features[3], 0.0f);
  test::write_text(dir.file("f.csv"), "1 1\n2 1e40\n4 5\n");
  r = test::run_command(base + dir.file("huge.h5"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("f.csv:2: feature value '1e40' in column 2 is not finite"),
            std::string::npos)
      << r.output;
}

TEST(Leniency, NegativeIntegerOptionsStopAtParsing) {
  test::ScratchDir dir;
  write_dataset(dir.file("d.h5"), drawn_dataset());
  const std::string preprocess = test::bin("sluice-preprocess");
  struct Case {
    std::string command, message;
  };
  for (const Case& c :
       {Case{preprocess + " partition --dataset " + dir.file("d.h5") + " --output " +
                 dir.file("p.h5") + " --feature-dim -5",
             "--feature-dim must be at least 0 (got -5)"},
        Case{preprocess + " partition --dataset " + dir.file("d.h5") + " --output " +
                 dir.file("p.h5") + " --chunks 0",
             "--chunks must be at least 1 (got 0)"},
        Case{preprocess + " stats " + dir.file("p.h5") + " --feature-dim -1",
             "--feature-dim must be at least 0 (got -1)"},
        Case{preprocess + " import --format edgelist --input x --output " + dir.file("o.h5") +
                 " --random-features -3",
             "--random-features must be at least 0 (got -3)"},
        Case{preprocess + " generate --scale 4 --output " + dir.file("g.h5") + " --features -2",
             "--features must be at least 1 (got -2)"},
        Case{test::bin("sluice-train") + " --dataset " + dir.file("d.h5") + " --plan x --hidden -5",
             "--hidden must be at least 1 (got -5)"}}) {
    const auto r = test::run_command(c.command);
    EXPECT_EQ(r.exit_code, input_error_exit(c.command)) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.command << "\n" << r.output;
  }
  EXPECT_FALSE(test::file_exists(dir.file("p.h5")));
}

TEST(Leniency, ByteCountsTooLargeSaySo) {
  for (const char* text : {"99999999T", "1e300", "8EiB"}) {
    try {
      parse_bytes(text, "--gpu-memory");
      ADD_FAILURE() << text << " should be refused";
    } catch (const InputError& e) {
      const std::string message = e.what();
      if (std::string(text) == "8EiB")
        EXPECT_NE(message.find("unknown unit"), std::string::npos) << message;
      else
        EXPECT_NE(message.find(std::string("--gpu-memory '") + text + "' is too large"),
                  std::string::npos)
            << message;
    }
  }
  EXPECT_EQ(parse_bytes("1e-50", "--gpu-memory"), 0);
  test::ScratchDir dir;
  write_dataset(dir.file("d.h5"), drawn_dataset());
  const auto r = test::run_command(test::bin("sluice-preprocess") + " partition --dataset " +
                                   dir.file("d.h5") + " --output " + dir.file("p.h5") +
                                   " --gpu-memory 99999999T");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--gpu-memory '99999999T' is too large"), std::string::npos) << r.output;
}

// ---- memory guard

// Skips (saying why) on a machine that could hold `bytes`: the guard then rightly lets the job
// run, and running it is not what these tests are for.
#define SKIP_IF_MACHINE_HOLDS(bytes)                                                     \
  do {                                                                                   \
    if (available_host_memory_bytes() >= (bytes))                                        \
      GTEST_SKIP() << "this machine has " << format_bytes(available_host_memory_bytes()) \
                   << " available, enough for the " << format_bytes(bytes)               \
                   << " the input asks for";                                             \
  } while (0)

TEST(MemoryGuard, RequireMemoryNamesNeedAvailableAndCause) {
  try {
    require_memory({std::numeric_limits<std::int64_t>::max(), "a test table", "--rows 9e18"});
    ADD_FAILURE() << "should throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--rows 9e18: a test table needs more than 8 EiB of host memory, but only "),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(require_memory({1 << 20, "a small table", "--rows 10"}));
  EXPECT_EQ(saturating_bytes({std::int64_t(1) << 40, std::int64_t(1) << 40}),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(saturating_bytes({3, 4, 5}), 60);
}

// A binary pair file whose first pair is text: its ids ask for about 2^31 vertices.
TEST(MemoryGuard, BinaryFileWithAHugeIdStopsBeforeAllocating) {
  const std::int64_t need = (std::int64_t(1) << 31) * 32;  // indptr, counters, row ends, labels
  SKIP_IF_MACHINE_HOLDS(need);
  test::ScratchDir dir;
  std::string bytes = "\xf0\xff\xff\x7f";  // id 2147483632
  const std::vector<std::int32_t> pairs = {1, 0, 1, 2, 2, 3, 3, 1};
  bytes += std::string(reinterpret_cast<const char*>(pairs.data()), pairs.size() * 4);
  bytes += std::string(4, '\0');
  write_bytes(dir.file("e.bin"), bytes);
  const auto r =
      test::run_command(test::bin("sluice-preprocess") + " import --format binary --input " +
                        dir.file("e.bin") + " --output " + dir.file("o.h5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(dir.file("e.bin") + ": largest vertex id 2147483632: the in-edge CSR of "
                                              "2147483633 vertices and 5 edges needs about "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("of host memory, but only"), std::string::npos) << r.output;
  EXPECT_FALSE(test::file_exists(dir.file("o.h5")));
}

TEST(MemoryGuard, BinaryFileOfPartialPairsIsRefused) {
  test::ScratchDir dir;
  write_bytes(dir.file("e.bin"), std::string("0 1\n1 2\n3"));
  const auto r =
      test::run_command(test::bin("sluice-preprocess") + " import --format binary --input " +
                        dir.file("e.bin") + " --output " + dir.file("o.h5"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir.file("e.bin") +
                          ": truncated: ends inside a pair (9 bytes is not a multiple of 8-byte"),
            std::string::npos)
      << r.output;
}

TEST(MemoryGuard, HugeOptionsStopBeforeAllocating) {
  SKIP_IF_MACHINE_HOLDS(std::int64_t(1) << 44);  // 16 TiB
  test::ScratchDir dir;
  const Dataset d = drawn_dataset();
  write_dataset(dir.file("d.h5"), d);
  write_plan(dir.file("p.h5"), test::make_plan(d, test::plan_options(1, 1).partitioner("range")));
  test::write_text(dir.file("e.txt"), "0 1\n1 2\n");
  const std::string preprocess = test::bin("sluice-preprocess");
  struct Case {
    std::string command, message;
  };
  for (const Case& c :
       {Case{test::bin("sluice-train") + " --dataset " + dir.file("d.h5") + " --plan " +
                 dir.file("p.h5") + " --hidden 2000000000 --epochs 1 --no-progress",
             "--hidden 2000000000 --layers 2 with 2 input features and 3 classes (largest label "
             "+ 1) in the dataset: training gcn over 5 vertices"},
        Case{preprocess + " generate --scale 30 --edge-factor 3000 --output " + dir.file("g.h5"),
             "--scale 30 --edge-factor 3000 --features 64: a graph of 1073741824 vertices"},
        Case{preprocess + " import --format edgelist --input " + dir.file("e.txt") +
                 " --random-features 1000000000000 --output " + dir.file("o.h5"),
             "--random-features 1000000000000: the feature matrix of 3 vertices needs about "}}) {
    const auto r = test::run_command(c.command);
    EXPECT_EQ(r.exit_code, input_error_exit(c.command)) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.command << "\n" << r.output;
    EXPECT_NE(r.output.find("of host memory, but only"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(test::file_exists(dir.file("g.h5")));
  EXPECT_FALSE(test::file_exists(dir.file("o.h5")));
}

}  // namespace
}  // namespace sluice
