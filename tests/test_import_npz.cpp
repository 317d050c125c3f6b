// NumPy imports: OGB's NumPy raw layout (raw/data.npz, raw/node-label.npz, split/time/*.csv.gz;
// .npz archives written at test time by numpy, stored and deflated) and plain .npy edge arrays
// (written by the test itself), with exact CSR, features, labels and splits, and the error
// messages for missing arrays, wrong shapes and dtypes, truncated files and ids out of range
// (for large arrays also through the parallel block reads the binary importer shares).
#include <gtest/gtest.h>
#include <omp.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"
#include "formats/block_read.hpp"
#include "formats/dataset.hpp"
#include "formats/importers.hpp"
#include "formats/text_input.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

const char* kPython = "/usr/bin/python3";

// A .npy file (format 1.0) with the given header fields and raw little-endian data.
std::string npy_bytes(const std::string& descr, const std::string& shape, const void* data,
                      std::size_t bytes, const char* fortran = "False") {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += {char(1), char(0), char(header.size() & 0xff), char(header.size() >> 8)};
  return file + header + std::string(static_cast<const char*>(data), bytes);
}
void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const void* data, std::size_t bytes, const char* fortran = "False") {
  test::write_text(path, npy_bytes(descr, shape, data, bytes, fortran));
}
template <typename T>
void write_npy(const std::string& path, const std::string& descr, const std::string& shape,
               const std::vector<T>& values) {
  write_npy(path, descr, shape, values.data(), values.size() * sizeof(T));
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())), int(text.size()));
  gzclose(file);
}

bool have_numpy() {
  return test::run_command(std::string(kPython) + " -c 'import numpy'").exit_code == 0;
}

// Runs a numpy script (its first line imports numpy as np and math) in `dir`.
void run_python(const std::string& dir, const std::string& body) {
  const std::string script = dir + "/make.py";
  test::write_text(script, "import numpy as np, math\n" + body);
  const auto result = test::run_command("cd " + dir + " && " + kPython + " make.py");
  ASSERT_EQ(result.exit_code, 0) << result.output;
}

// The 4-vertex graph of every test, as OGB's edge_index (2, E): 0->1, 1->2, 2->3, 3->0, 0->2,
// and 0->2 again (a duplicate). In-edge rows: 0: [3], 1: [0], 2: [0, 1], 3: [2].
const char* kEdgeIndex = "np.array([[0, 1, 2, 3, 0, 0], [1, 2, 3, 0, 2, 2]], dtype=np.int64)";
const std::vector<edge_t> kIndptr = {0, 1, 2, 4, 5};
const std::vector<vertex_t> kIndices = {3, 0, 0, 1, 2};

// An OGB NumPy layout under dir: data.npz written by `save` (np.savez or np.savez_compressed)
// with the arrays given (python keyword arguments), node-label.npz and split/time.
void write_ogb_npz(const std::string& dir, const std::string& save, const std::string& arrays,
                   bool labels = true) {
  ASSERT_EQ(test::run_command("mkdir -p " + dir + "/raw " + dir + "/split/time").exit_code, 0);
  std::string body = save + "('" + dir + "/raw/data.npz', " + arrays + ")\n";
  if (labels)
    body += save + "('" + dir +
            "/raw/node-label.npz', node_label=np.array([[1.0], [math.nan], [0.0], [2.0]]))\n";
  run_python(dir, body);
  write_gzip(dir + "/split/time/train.csv.gz", "0\n3\n");
  write_gzip(dir + "/split/time/valid.csv.gz", "2\n");
  write_gzip(dir + "/split/time/test.csv.gz", "1\n");
}

std::string standard_arrays() {
  return std::string("edge_index=") + kEdgeIndex +
         ", node_feat=np.arange(12, dtype=np.float32).reshape(4, 3) / 4, "
         "node_year=np.array([[2019]] "
         "* 4, dtype=np.int64), num_nodes_list=np.array([4], dtype=np.int64), "
         "num_edges_list=np.array([6], dtype=np.int64)";
}

ImportOptions ogb_options(const std::string& dir) {
  ImportOptions o;
  o.format = "ogb";
  o.input = dir;
  return o;
}

std::string import_error(const ImportOptions& o) {
  ImportReport report;
  try {
    import_dataset(o, report);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no error)";
}

class OgbNpz : public ::testing::TestWithParam<const char*> {};

TEST_P(OgbNpz, ImportsGraphFeaturesLabelsAndTimeSplit) {
  if (!have_numpy()) GTEST_SKIP() << kPython << " has no numpy: cannot write .npz test files";
  test::ScratchDir scratch;
  const std::string dir = scratch.file("papers");
  write_ogb_npz(dir, GetParam(), standard_arrays());
  ImportReport report;
  const Dataset d = import_dataset(ogb_options(dir), report);
  EXPECT_EQ(d.name, "papers");
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(d.indptr, kIndptr);
  EXPECT_EQ(d.indices, kIndices);
  EXPECT_EQ(report.input_edges, 6);
  EXPECT_EQ(report.duplicates_removed, 1);
  EXPECT_EQ(d.feature_dim, 3);
  std::vector<float> features;
  for (int i = 0; i < 12; ++i) features.push_back(i / 4.0f);
  EXPECT_EQ(d.features, features);
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{1, -1, 0, 2}));
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(d.train, (std::vector<vertex_t>{0, 3}));
  EXPECT_EQ(d.valid, (std::vector<vertex_t>{2}));
  EXPECT_EQ(d.test, (std::vector<vertex_t>{1}));
  EXPECT_NE(d.options.find("\"split\":\"time\""), std::string::npos) << d.options;
}

INSTANTIATE_TEST_SUITE_P(Archives, OgbNpz, ::testing::Values("np.savez", "np.savez_compressed"),
                         [](const auto& info) {
                           return std::string(info.param) == "np.savez" ? "Stored" : "Deflated";
                         });

TEST(OgbNpzTypes, HalfFeaturesUint32EdgesAndNoLabels) {
  if (!have_numpy()) GTEST_SKIP() << kPython << " has no numpy: cannot write .npz test files";
  test::ScratchDir scratch;
  const std::string dir = scratch.file("half");
  write_ogb_npz(dir, "np.savez_compressed",
                std::string("edge_index=") + kEdgeIndex +
                    ".astype(np.uint32), node_feat=np.array([[0.5], [-1.25], [2048], [0]], "
                    "dtype=np.float16), num_nodes_list=np.array([4]), num_edges_list=np.array([6])",
                false);
  ImportOptions o = ogb_options(dir);
  o.graph.symmetrize = true;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.indptr, (std::vector<edge_t>{0, 3, 5, 8, 10}));
  EXPECT_EQ(d.indices, (std::vector<vertex_t>{1, 2, 3, 0, 2, 0, 1, 3, 0, 2}));
  EXPECT_EQ(d.features, (std::vector<float>{0.5f, -1.25f, 2048.0f, 0.0f}));
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(d.num_classes, 0);
}

TEST(OgbNpzErrors, NameTheFileAndArray) {
  if (!have_numpy()) GTEST_SKIP() << kPython << " has no numpy: cannot write .npz test files";
  test::ScratchDir scratch;
  const std::string counts =
      "num_nodes_list=np.array([4]), num_edges_list=np.array([6]), node_feat=np.zeros((4, 2), "
      "dtype=np.float32)";
  struct Case {
    std::string name, arrays, expected;
  };
  const std::vector<Case> cases = {
      {"missing", counts, "raw/data.npz: no array 'edge_index' (holds: node_feat, num_edges_list"},
      {"shape", counts + ", edge_index=np.zeros((3, 6), dtype=np.int64)",
       "raw/data.npz:edge_index: shape (3, 6), expected (2, E)"},
      {"dtype", counts + ", edge_index=np.zeros((2, 6), dtype=np.float32)",
       "raw/data.npz:edge_index: dtype <f4 holds no vertex ids"},
      {"range", counts + ", edge_index=" + kEdgeIndex + " * 2",
       "raw/data.npz:edge_index: element 2: vertex id 4 out of range [0, 4)"},
      {"negative", counts + ", edge_index=" + kEdgeIndex + " - 1",
       "raw/data.npz:edge_index: element 0: negative vertex id -1"},
      {"count",
       "num_nodes_list=np.array([4]), num_edges_list=np.array([5]), edge_index=" +
           std::string(kEdgeIndex),
       "raw/data.npz:edge_index: 6 edges, but num_edges_list declares 5"},
      {"features",
       "num_nodes_list=np.array([4]), num_edges_list=np.array([6]), edge_index=" +
           std::string(kEdgeIndex) + ", node_feat=np.zeros((3, 2), dtype=np.float32)",
       "raw/data.npz:node_feat: shape (3, 2), expected (4, D)"},
      {"bigendian", counts + ", edge_index=" + kEdgeIndex + ".astype('>i8')",
       "raw/data.npz:edge_index: dtype '>i8' is big-endian"},
      {"fortran", counts + ", edge_index=np.asfortranarray(" + kEdgeIndex + ")",
       "raw/data.npz:edge_index: fortran_order True is not supported"},
  };
  for (const auto& c : cases) {
    const std::string dir = scratch.file(c.name);
    write_ogb_npz(dir, "np.savez_compressed", c.arrays);
    const std::string message = import_error(ogb_options(dir));
    EXPECT_NE(message.find(c.expected), std::string::npos) << c.name << ": " << message;
    EXPECT_NE(message.find(dir), std::string::npos) << c.name << ": " << message;
  }

  // Labels of the wrong shape and non-integral labels.
  const std::string labels_dir = scratch.file("labels");
  write_ogb_npz(labels_dir, "np.savez", standard_arrays(), false);
  run_python(labels_dir, "np.savez('" + labels_dir +
                             "/raw/node-label.npz', node_label=np.array([[1.0], [0.5], [0.0]]))\n");
  EXPECT_NE(import_error(ogb_options(labels_dir))
                .find("raw/node-label.npz:node_label: shape (3, 1), expected (4, 1) or (4,)"),
            std::string::npos);
  run_python(labels_dir, "np.savez('" + labels_dir +
                             "/raw/node-label.npz', node_label=np.array([1.0, 0.5, 0.0, 1.0]))\n");
  EXPECT_NE(import_error(ogb_options(labels_dir))
                .find("raw/node-label.npz:node_label: element 1: label 0.5 is not an integer"),
            std::string::npos);

  // A truncated archive (its central directory cut off).
  const std::string cut_dir = scratch.file("cut");
  write_ogb_npz(cut_dir, "np.savez", standard_arrays());
  ASSERT_EQ(test::run_command("truncate -s -200 " + cut_dir + "/raw/data.npz").exit_code, 0);
  EXPECT_NE(import_error(ogb_options(cut_dir))
                .find(cut_dir + "/raw/data.npz: cannot open as a .npz (zip) archive"),
            std::string::npos)
      << import_error(ogb_options(cut_dir));
}

ImportOptions npy_options(const std::string& input) {
  ImportOptions o;
  o.format = "npy";
  o.input = input;
  return o;
}

TEST(ImportNpy, EdgeArrayLayouts) {
  test::ScratchDir scratch;
  const std::vector<std::int64_t> rows = {0, 1, 2, 3, 0, 0, 1, 2, 3, 0, 2, 2};   // (2, 6)
  const std::vector<std::int32_t> pairs = {0, 1, 1, 2, 2, 3, 3, 0, 0, 2, 0, 2};  // (6, 2)
  const std::vector<std::uint32_t> src = {0, 1, 2, 3, 0, 0}, dst = {1, 2, 3, 0, 2, 2};
  write_npy(scratch.file("rows.npy"), "<i8", "(2, 6)", rows);
  write_npy(scratch.file("pairs.npy"), "<i4", "(6, 2)", pairs);
  write_npy(scratch.file("src.npy"), "<u4", "(6,)", src);
  write_npy(scratch.file("dst.npy"), "<u4", "(6,)", dst);
  for (const std::string& input : {scratch.file("rows.npy"), scratch.file("pairs.npy"),
                                   scratch.file("src.npy") + "," + scratch.file("dst.npy")}) {
    ImportReport report;
    const Dataset d = import_dataset(npy_options(input), report);
    EXPECT_EQ(d.num_nodes, 4) << input;
    EXPECT_EQ(d.indptr, kIndptr) << input;
    EXPECT_EQ(d.indices, kIndices) << input;
    EXPECT_EQ(report.input_edges, 6) << input;
    EXPECT_EQ(report.duplicates_removed, 1) << input;
  }
  // --num-nodes adds isolated vertices; random features and labels attach as for binary input.
  ImportOptions o = npy_options(scratch.file("rows.npy"));
  o.num_nodes = 6;
  o.random_features = 2;
  o.random_labels = 3;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.num_nodes, 6);
  EXPECT_EQ(d.indptr, (std::vector<edge_t>{0, 1, 2, 4, 5, 5, 5}));
  EXPECT_EQ(d.features.size(), 12u);
  EXPECT_EQ(d.num_classes, 3);
}

TEST(ImportNpy, ErrorsNameTheFile) {
  test::ScratchDir scratch;
  const std::vector<std::int64_t> rows = {0, 1, 2, 3, 0, 0, 1, 2, 3, 0, 2, 2};
  const std::string truncated = scratch.file("truncated.npy");
  write_npy(truncated, "<i8", "(2, 6)", rows.data(), 11 * 8);
  EXPECT_NE(import_error(npy_options(truncated))
                .find(truncated + ": truncated: shape (2, 6) needs 12 elements of 8 bytes"),
            std::string::npos)
      << import_error(npy_options(truncated));

  const std::string wide = scratch.file("wide.npy");
  write_npy(wide, "<i8", "(3, 4)", rows);
  EXPECT_NE(import_error(npy_options(wide))
                .find(wide + ": shape (3, 4), expected (2, E) or (E, 2) edges"),
            std::string::npos);

  const std::string floats = scratch.file("floats.npy");
  write_npy(floats, "<f8", "(2, 6)", rows);
  EXPECT_NE(import_error(npy_options(floats)).find(floats + ": dtype <f8 holds no vertex ids"),
            std::string::npos);

  const std::string bytes = scratch.file("bytes.npy");
  write_npy(bytes, "|u1", "(2, 6)", rows.data(), 12);
  EXPECT_NE(import_error(npy_options(bytes)).find(bytes + ": dtype '|u1' is not supported"),
            std::string::npos)
      << import_error(npy_options(bytes));

  ImportOptions small = npy_options(scratch.file("rows.npy"));
  write_npy(small.input, "<i8", "(2, 6)", rows);
  small.num_nodes = 3;
  EXPECT_NE(import_error(small).find(small.input + ": element 3: vertex id 3 out of range [0, 3)"),
            std::string::npos)
      << import_error(small);

  const std::string src = scratch.file("src.npy"), dst = scratch.file("dst.npy");
  write_npy(src, "<i8", "(6,)", rows.data(), 6 * 8);
  write_npy(dst, "<i8", "(5,)", rows.data(), 5 * 8);
  EXPECT_NE(
      import_error(npy_options(src + "," + dst)).find(src + " holds 6 ids but " + dst + " holds 5"),
      std::string::npos);

  const std::string text = scratch.file("text.npy");
  test::write_text(text, "0 1\n1 2\n");
  EXPECT_NE(import_error(npy_options(text)).find(text + ": not a .npy array"), std::string::npos);
}

// A header may declare more data than its file holds (a damaged or forged file). Where the
// data's length is known (a plain .npy, an entry of a .npz, stored or deflated) the import fails
// as truncated when it reads the header, before anything is sized by the shape; where it is not
// (.npy.gz) it fails when the shape's data would not fit in host memory, naming the array and
// both sizes; a shape of 2^63 bytes or more is refused as the header is read.
TEST(ImportNpy, ForgedShapesFailBeforeAnythingIsSizedByThem) {
  test::ScratchDir scratch;
  const std::vector<std::int64_t> rows = {0, 1, 1, 2};
  const std::string huge = "(2, 100000000000)";
  const std::string truncated =
      ": truncated: shape (2, 100000000000) needs 200000000000 elements of 8 bytes, the data "
      "ends after 4";
  const std::string plain = scratch.file("plain.npy"), packed = scratch.file("packed.npy.gz");
  write_npy(plain, "<i8", huge, rows);
  write_gzip(packed, npy_bytes("<i8", huge, rows.data(), rows.size() * 8));
  EXPECT_NE(import_error(npy_options(plain)).find(plain + truncated), std::string::npos)
      << import_error(npy_options(plain));
  const std::string message = import_error(npy_options(packed));
  EXPECT_NE(
      message.find(packed + ": shape (2, 100000000000): reading its 100000000000 edges needs about "
                            "745.06 GiB of host memory, but only"),
      std::string::npos)
      << message;
  const std::string overflow = scratch.file("overflow.npy");
  write_npy(overflow, "<i4", "(4611686018427387904, 2)", rows);  // 2^62 x 2 x 4 bytes
  EXPECT_NE(import_error(npy_options(overflow))
                .find(overflow +
                      ": shape (4611686018427387904, 2) of 4-byte elements holds 2^63 bytes or "
                      "more"),
            std::string::npos)
      << import_error(npy_options(overflow));

  if (!have_numpy()) GTEST_SKIP() << kPython << " has no numpy: cannot write .npz test files";
  for (const std::string compression : {"ZIP_STORED", "ZIP_DEFLATED"}) {
    const std::string dir = scratch.file(compression);
    ASSERT_EQ(test::run_command("mkdir -p " + dir + "/raw").exit_code, 0);
    write_npy(dir + "/nodes.npy", "<i8", "(1,)", std::vector<std::int64_t>{4});
    write_npy(dir + "/edges.npy", "<i8", "(1,)", std::vector<std::int64_t>{100000000000});
    write_npy(dir + "/edge_index.npy", "<i8", huge, rows);
    run_python(dir, "import zipfile\nwith zipfile.ZipFile('raw/data.npz', 'w', zipfile." +
                        compression +
                        ") as z:\n"
                        "    z.write('nodes.npy', 'num_nodes_list.npy')\n"
                        "    z.write('edges.npy', 'num_edges_list.npy')\n"
                        "    z.write('edge_index.npy', 'edge_index.npy')\n");
    EXPECT_NE(import_error(ogb_options(dir)).find(dir + "/raw/data.npz:edge_index" + truncated),
              std::string::npos)
        << compression << ": " << import_error(ogb_options(dir));
  }
}

// Arrays large enough for the parallel paths the npy and binary importers share: reads of
// 4 MiB and more in parallel pieces, and the id check of a block over several threads, which
// reports the first bad id of the block whatever the thread count. The same pairs as a (2, E)
// .npy array and as a binary pair file give the same errors' ids and the same graph.
TEST(ImportNpy, LargeArraysShareTheBinaryImportersBlockReads) {
  test::ScratchDir scratch;
  const std::int64_t edges = 600000, n = 1000;  // one row: 4.8 MB of int64 ids
  std::vector<std::int64_t> rows(2 * edges);
  for (std::int64_t i = 0; i < edges; ++i) {
    rows[i] = i % n;
    rows[edges + i] = (7 * i + 3) % n;
  }
  const auto write_both = [&] {
    write_npy(scratch.file("rows.npy"), "<i8", "(2, " + std::to_string(edges) + ")", rows);
    std::vector<std::int64_t> pairs(2 * edges);
    for (std::int64_t i = 0; i < edges; ++i) {
      pairs[2 * i] = rows[i];
      pairs[2 * i + 1] = rows[edges + i];
    }
    test::write_text(scratch.file("pairs.bin"),
                     std::string(reinterpret_cast<const char*>(pairs.data()), pairs.size() * 8));
  };
  ImportOptions npy = npy_options(scratch.file("rows.npy"));
  npy.num_nodes = n;
  ImportOptions binary = npy;
  binary.format = "binary";
  binary.input = scratch.file("pairs.bin");
  binary.binary_id_bytes = 8;

  rows[400000] = 5000;  // the first bad id, then another later in the block
  rows[500000] = -2;
  write_both();
  const int threads = omp_get_max_threads();
  for (const int t : {1, 3, 4}) {
    omp_set_num_threads(t);
    EXPECT_NE(import_error(npy).find(npy.input + ": element 400000: vertex id 5000 out of range "
                                                 "[0, 1000)"),
              std::string::npos)
        << t << " threads: " << import_error(npy);
    EXPECT_NE(import_error(binary).find(binary.input + ": pair 400000 (byte offset 6400000): "
                                                       "vertex id 5000 out of range [0, 1000)"),
              std::string::npos)
        << t << " threads: " << import_error(binary);
  }
  rows[400000] = 0;
  write_both();
  for (const int t : {1, 4}) {
    omp_set_num_threads(t);
    EXPECT_NE(import_error(npy).find(npy.input + ": element 500000: negative vertex id -2"),
              std::string::npos)
        << t << " threads: " << import_error(npy);
    EXPECT_NE(import_error(binary).find(binary.input + ": pair 500000 (byte offset 8000000): "
                                                       "negative vertex id -2"),
              std::string::npos)
        << t << " threads: " << import_error(binary);
  }
  omp_set_num_threads(threads);

  rows[500000] = 1;
  write_both();
  ImportReport npy_report, binary_report;
  const Dataset from_npy = import_dataset(npy, npy_report);
  const Dataset from_binary = import_dataset(binary, binary_report);
  EXPECT_EQ(npy_report.input_edges, edges);
  EXPECT_EQ(binary_report.input_edges, edges);
  EXPECT_EQ(from_npy.num_nodes, n);
  EXPECT_EQ(from_npy.indptr, from_binary.indptr);
  EXPECT_EQ(from_npy.indices, from_binary.indices);
  // Edge i is r -> (7r + 3) % n with r = i % n: n distinct edges, 600 times each, no self-loop
  // (6r = -3 mod 1000 has no solution); edge 500000 became 1 -> 3, one more distinct edge.
  EXPECT_EQ(from_npy.num_edges(), n + 1);
  EXPECT_EQ(npy_report.duplicates_removed, edges - n - 1);
  EXPECT_EQ(std::vector<vertex_t>(from_npy.indices.begin() + from_npy.indptr[3],
                                  from_npy.indices.begin() + from_npy.indptr[4]),
            (std::vector<vertex_t>{0, 1}));
}

TEST(ImportNpy, CommandLine) {
  test::ScratchDir scratch;
  const std::vector<std::int64_t> rows = {0, 1, 2, 3, 0, 0, 1, 2, 3, 0, 2, 2};
  write_npy(scratch.file("edges.npy"), "<i8", "(2, 6)", rows);
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " import --quiet --format npy --input " +
                        scratch.file("edges.npy") + " --output " + scratch.file("g.h5") +
                        " --symmetrize --random-features 4 --random-labels 2");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const Dataset d = read_dataset(scratch.file("g.h5"));
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(d.indptr, (std::vector<edge_t>{0, 3, 5, 8, 10}));
  EXPECT_EQ(d.source, "npy:" + scratch.file("edges.npy"));
}

// Plain .npy edge inputs are streamed block by block from the file (formats/block_read.hpp);
// these build the same edges in every layout and id type and compare with the binary import.
enum class EdgeLayout { kPairs, kRows, kColumns };  // (E, 2), (2, E), SRC.npy,DST.npy

// Ids as little-endian bytes of the .npy type `descr` (<i4, <i8, <u4, <u8).
std::string id_bytes_of(const std::vector<std::int64_t>& ids, const std::string& descr) {
  const std::size_t width = descr[2] - '0';
  std::string bytes(ids.size() * width, '\0');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t narrow = static_cast<std::int32_t>(ids[i]);
    std::memcpy(&bytes[i * width], width == 4 ? static_cast<const void*>(&narrow) : &ids[i], width);
  }
  return bytes;
}

// Writes interleaved (src, dst) pairs as .npy input of `layout`; returns the --input text.
std::string write_edge_npy(const test::ScratchDir& scratch, const std::vector<std::int64_t>& pairs,
                           EdgeLayout layout, const std::string& descr) {
  const std::size_t edges = pairs.size() / 2;
  std::vector<std::int64_t> src(edges), dst(edges);
  for (std::size_t i = 0; i < edges; ++i) {
    src[i] = pairs[2 * i];
    dst[i] = pairs[2 * i + 1];
  }
  const std::string e = std::to_string(edges), tag = descr.substr(1);
  if (layout == EdgeLayout::kColumns) {
    const std::string src_path = scratch.file("src-" + tag + ".npy");
    const std::string dst_path = scratch.file("dst-" + tag + ".npy");
    const std::string src_bytes = id_bytes_of(src, descr), dst_bytes = id_bytes_of(dst, descr);
    write_npy(src_path, descr, "(" + e + ",)", src_bytes.data(), src_bytes.size());
    write_npy(dst_path, descr, "(" + e + ",)", dst_bytes.data(), dst_bytes.size());
    return src_path + "," + dst_path;
  }
  const bool rows = layout == EdgeLayout::kRows;
  std::vector<std::int64_t> ids = pairs;
  if (rows) {
    ids = src;
    ids.insert(ids.end(), dst.begin(), dst.end());
  }
  const std::string path = scratch.file((rows ? "rows-" : "pairs-") + tag + ".npy");
  const std::string bytes = id_bytes_of(ids, descr);
  write_npy(path, descr, rows ? "(2, " + e + ")" : "(" + e + ", 2)", bytes.data(), bytes.size());
  return path;
}

// Edges i -> j with duplicates and self-loops; the largest id is n - 1.
std::vector<std::int64_t> drawn_pairs(std::int64_t edges, std::int64_t n) {
  std::vector<std::int64_t> pairs(static_cast<std::size_t>(2 * edges));
  for (std::int64_t i = 0; i < edges; ++i) {
    pairs[2 * i] = (i * 7919) % n;
    pairs[2 * i + 1] = (i * i + 3) % n;
  }
  pairs[edges] = n - 1;
  return pairs;
}

const EdgeLayout kLayouts[] = {EdgeLayout::kPairs, EdgeLayout::kRows, EdgeLayout::kColumns};

TEST(ImportNpy, StreamedLayoutsMatchTheBinaryImport) {
  test::ScratchDir scratch;
  const std::int64_t edges = 30000, n = 2500;
  const std::vector<std::int64_t> pairs = drawn_pairs(edges, n);
  const std::string binary_bytes = id_bytes_of(pairs, "<i4");
  test::write_text(scratch.file("pairs.bin"), binary_bytes);
  ImportOptions defaults;
  defaults.random_features = 3;
  defaults.random_labels = 4;
  ImportOptions sized = defaults;
  sized.num_nodes = n + 5;
  sized.graph.symmetrize = true;
  sized.graph.self_loops = SelfLoops::kRemove;
  for (ImportOptions options : {defaults, sized}) {
    options.format = "binary";
    options.input = scratch.file("pairs.bin");
    ImportReport binary_report;
    const Dataset binary = import_dataset(options, binary_report);
    ASSERT_EQ(binary.num_nodes, options.num_nodes > 0 ? n + 5 : n);
    ASSERT_GT(binary_report.duplicates_removed, 0);
    const std::string fingerprint = compute_fingerprint(binary);
    options.format = "npy";
    for (const char* descr : {"<i4", "<i8", "<u4", "<u8"})
      for (const EdgeLayout layout : kLayouts) {
        options.input = write_edge_npy(scratch, pairs, layout, descr);
        ImportReport report;
        const Dataset d = import_dataset(options, report);
        EXPECT_EQ(d.num_nodes, binary.num_nodes) << options.input;
        EXPECT_EQ(d.indptr, binary.indptr) << options.input;
        EXPECT_EQ(d.indices, binary.indices) << options.input;
        EXPECT_EQ(report.input_edges, edges) << options.input;
        EXPECT_EQ(report.duplicates_removed, binary_report.duplicates_removed) << options.input;
        EXPECT_EQ(report.self_loops_removed, binary_report.self_loops_removed) << options.input;
        EXPECT_EQ(compute_fingerprint(d), fingerprint) << options.input;
      }
    // A gzip .npy can only be read front to back: the in-memory path gives the same graph.
    const std::string rows = write_edge_npy(scratch, pairs, EdgeLayout::kRows, "<i8");
    std::FILE* file = std::fopen(rows.c_str(), "rb");
    ASSERT_NE(file, nullptr);
    std::string content(std::size_t(1) << 20, '\0');
    content.resize(std::fread(content.data(), 1, content.size(), file));
    std::fclose(file);
    options.input = scratch.file("rows.npy.gz");
    write_gzip(options.input, content);
    ImportReport report;
    EXPECT_EQ(compute_fingerprint(import_dataset(options, report)), fingerprint);
  }
}

// A .npy from a pipe is read front to back into memory; the same graph as from the file.
TEST(ImportNpy, PipedArrayIsReadInMemory) {
  test::ScratchDir scratch;
  const std::vector<std::int64_t> pairs = drawn_pairs(5000, 300);
  const std::string rows = write_edge_npy(scratch, pairs, EdgeLayout::kRows, "<i8");
  const std::string tool = test::bin("sluice-preprocess") + " import --quiet --format npy";
  const auto piped = test::run_command("cat " + rows + " | " + tool +
                                       " --input /dev/stdin --output " + scratch.file("piped.h5"));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  const auto direct =
      test::run_command(tool + " --input " + rows + " --output " + scratch.file("direct.h5"));
  ASSERT_EQ(direct.exit_code, 0) << direct.output;
  const Dataset from_pipe = read_dataset(scratch.file("piped.h5"));
  const Dataset from_file = read_dataset(scratch.file("direct.h5"));
  EXPECT_EQ(from_pipe.num_nodes, 300);
  EXPECT_EQ(from_pipe.indptr, from_file.indptr);
  EXPECT_EQ(from_pipe.indices, from_file.indices);
  EXPECT_EQ(read_dataset_info(scratch.file("piped.h5")).fingerprint,
            read_dataset_info(scratch.file("direct.h5")).fingerprint);
}

TEST(ImportNpy, StreamedBadIdsNameTheFileAndElement) {
  test::ScratchDir scratch;
  const std::int64_t edges = 200, n = 100;
  std::vector<std::int64_t> pairs = drawn_pairs(edges, n);
  // The element holding edge 37's destination / edge 12's source, in each layout.
  const auto element = [&](EdgeLayout layout, std::int64_t edge, int end) {
    return layout == EdgeLayout::kPairs  ? 2 * edge + end
           : layout == EdgeLayout::kRows ? end * edges + edge
                                         : edge;
  };
  const auto file_of = [](EdgeLayout layout, const std::string& input, int end) {
    const auto comma = input.find(',');
    return layout != EdgeLayout::kColumns ? input
           : end == 0                     ? input.substr(0, comma)
                                          : input.substr(comma + 1);
  };
  for (const EdgeLayout layout : kLayouts) {
    // Known vertex count: checked while the first CSR pass reads the ids.
    pairs[2 * 37 + 1] = n;
    ImportOptions o = npy_options(write_edge_npy(scratch, pairs, layout, "<i8"));
    o.num_nodes = n;
    EXPECT_NE(import_error(o).find(file_of(layout, o.input, 1) + ": element " +
                                   std::to_string(element(layout, 37, 1)) +
                                   ": vertex id 100 out of range [0, 100)"),
              std::string::npos)
        << import_error(o);
    // Vertex count from the largest id: checked by the scan before the build.
    pairs[2 * 37 + 1] = 1;
    pairs[2 * 12] = -5;
    o = npy_options(write_edge_npy(scratch, pairs, layout, "<i4"));
    EXPECT_NE(
        import_error(o).find(file_of(layout, o.input, 0) + ": element " +
                             std::to_string(element(layout, 12, 0)) + ": negative vertex id -5"),
        std::string::npos)
        << import_error(o);
    pairs[2 * 12] = 0;
  }
  // A uint64 id beyond the int64 range is named with its own value.
  std::vector<std::uint64_t> huge = {0, 1, 2, 1, (std::uint64_t(1) << 63) + 5, 0};
  const std::string path = scratch.file("huge.npy");
  write_npy(path, "<u8", "(3, 2)", huge);
  EXPECT_NE(import_error(npy_options(path))
                .find(path + ": element 4: vertex id 9223372036854775813 out of range [0, "),
            std::string::npos)
      << import_error(npy_options(path));
}

TEST(ImportNpy, TruncatedArrayFailsWithoutOutput) {
  test::ScratchDir scratch;
  const std::vector<std::int32_t> pairs = {0, 1, 1, 2, 2, 3, 3, 0, 0, 2, 0, 2};
  const std::string cut = scratch.file("cut.npy"), whole = scratch.file("whole.npy");
  const std::string cut_column = scratch.file("cut-column.npy");
  write_npy(cut, "<i4", "(6, 2)", pairs.data(), 11 * 4);
  write_npy(whole, "<i4", "(6,)", pairs.data(), 6 * 4);
  write_npy(cut_column, "<i4", "(6,)", pairs.data(), 5 * 4 + 2);
  const std::string tool = test::bin("sluice-preprocess") + " import --format npy --output " +
                           scratch.file("g.h5") + " --input ";
  struct Case {
    std::string input, message;
  };
  for (const Case& c :
       {Case{cut, cut + ": truncated: shape (6, 2) needs 12 elements of 4 bytes, the data "
                        "ends after 11"},
        Case{whole + "," + cut_column, cut_column + ": truncated: shape (6,) needs 6 elements "
                                                    "of 4 bytes, the data ends after 5"}}) {
    const auto result = test::run_command(tool + c.input);
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_NE(result.output.find(c.message), std::string::npos) << result.output;
    EXPECT_FALSE(test::file_exists(scratch.file("g.h5")));
  }
}

// The reader over many small blocks: every layout delivers the same pairs, in order, and names
// a bad id in a later block by its element.
TEST(EdgeBlockReader, SmallBlocksInEveryLayout) {
  test::ScratchDir scratch;
  const std::int64_t edges = 1000, n = 321, block = 64;
  std::vector<std::int64_t> pairs = drawn_pairs(edges, n);
  for (const char* descr : {"<i4", "<u8"})
    for (const EdgeLayout layout : kLayouts) {
      const std::string input = write_edge_npy(scratch, pairs, layout, descr);
      const auto comma = input.find(',');
      InputFile src(input.substr(0, comma));
      InputFile dst(comma == std::string::npos ? input : input.substr(comma + 1));
      const IdType type = descr[1] == 'i' ? IdType::kInt32 : IdType::kUint64;
      const std::uint64_t bytes = id_bytes(type);
      // The data ends the file.
      const std::uint64_t header =
          src.size_on_disk() - (layout == EdgeLayout::kColumns ? 1 : 2) * edges * bytes;
      IdColumn from{&src, header, bytes, type}, to{&dst, header, bytes, type};
      if (layout == EdgeLayout::kPairs) {
        from.stride = 2 * bytes;
        to = {&src, header + bytes, 2 * bytes, type};
      } else if (layout == EdgeLayout::kRows) {
        to = {&src, header + edges * bytes, bytes, type};
      }
      EdgeBlockReader reader(
          from, to, edges,
          [](std::int64_t edge, int end) {
            return "edge " + std::to_string(edge) + " end " + std::to_string(end) + ": ";
          },
          block);
      std::int64_t count = 0;
      EXPECT_EQ(reader.scan(n, count), n - 1);
      EXPECT_EQ(count, edges);
      for (const std::int64_t limit : {n, std::int64_t(0)}) {
        std::vector<std::int64_t> delivered;
        int blocks = 0;
        std::int64_t counted = 0;
        reader.deliver(
            [&](const vertex_t* block_pairs, std::size_t block_count) {
              ++blocks;
              delivered.insert(delivered.end(), block_pairs, block_pairs + 2 * block_count);
            },
            limit, &counted);
        EXPECT_EQ(blocks, 16) << input;
        EXPECT_EQ(counted, edges) << input;
        EXPECT_EQ(delivered, pairs) << input << " limit " << limit;
      }
      EXPECT_EQ(reader.load_all(), pairs);
      // With the limit at the largest id, its first occurrence is the error.
      const auto first = std::find(pairs.begin(), pairs.end(), n - 1) - pairs.begin();
      ASSERT_GE(first, 2 * block);
      try {
        reader.scan(n - 1, count);
        ADD_FAILURE() << input << ": no error";
      } catch (const InputError& error) {
        EXPECT_NE(std::string(error.what())
                      .find("edge " + std::to_string(first / 2) + " end " +
                            std::to_string(first % 2) + ": vertex id 320 out of range [0, 320)"),
                  std::string::npos)
            << error.what();
      }
    }
}
}  // namespace
}  // namespace sluice
