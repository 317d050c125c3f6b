// Round trip of the HDF5 dataset format and its validation.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "formats/hdf5.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

//   1 <----> 0        in-edge CSR: indptr {0, 1, 3, 4, 4}, indices {1, 0, 2, 3}
//   ^
//   |
//   2 <----- 3
Dataset tiny_dataset() {
  Dataset d = test::graph_from_edges(4, {{1, 0}, {0, 1}, {2, 1}, {3, 2}});
  d.name = "tiny";
  d.source = "test";
  d.feature_dim = 2;
  d.features = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f};
  d.num_classes = 2;
  d.labels = {0, 1, -1, 1};
  d.train = {0, 1};
  d.valid = {3};
  d.test = {2};
  d.original_ids = {10, 20, 30, 40};
  return d;
}

TEST(DatasetFormat, RoundTripKeepsEverything) {
  test::ScratchDir dir;
  const Dataset d = tiny_dataset();
  write_dataset(dir.file("d.h5"), d);
  const Dataset r = read_dataset(dir.file("d.h5"));
  EXPECT_EQ(r.name, "tiny");
  EXPECT_EQ(r.num_nodes, 4);
  EXPECT_EQ(r.indptr, d.indptr);
  EXPECT_EQ(r.indices, d.indices);
  EXPECT_EQ(r.features, d.features);
  EXPECT_EQ(r.labels, d.labels);
  EXPECT_EQ(r.train, d.train);
  EXPECT_EQ(r.valid, d.valid);
  EXPECT_EQ(r.test, d.test);
  EXPECT_EQ(r.original_ids, d.original_ids);
  const DatasetInfo info = read_dataset_info(dir.file("d.h5"));
  EXPECT_EQ(info.num_edges, 4);
  EXPECT_EQ(info.fingerprint, compute_fingerprint(d));
  float rows[4];
  read_feature_rows(dir.file("d.h5"), 1, 3, rows);
  EXPECT_EQ(rows[0], 2.f);
  EXPECT_EQ(rows[3], 5.f);
}

// Arrays of more than 16 MiB are written to and read from their chunks' file offsets on many
// threads (formats/hdf5.cpp): the values are those written, for whole arrays and for row ranges
// that start and end inside chunks (a row of 130 floats: chunks of 2016 rows, the last one
// partial), and HDF5's own reads (ranges below 16 MiB) see the same bytes.
TEST(DatasetFormat, LargeArraysReadBackExactly) {
  test::ScratchDir dir;
  const vertex_t n = 40000;
  std::vector<test::Edge> edges;
  for (vertex_t v = 1; v < n; ++v) edges.push_back({v - 1, v});
  Dataset d = test::graph_from_edges(n, edges);
  d.name = "large";
  d.source = "test";
  d.feature_dim = 130;
  d.features.resize(std::size_t(n) * 130);
  for (std::size_t i = 0; i < d.features.size(); ++i) d.features[i] = float(i % 100003) * 0.5f;
  d.num_classes = 3;
  d.labels.resize(std::size_t(n));
  for (vertex_t v = 0; v < n; ++v) d.labels[std::size_t(v)] = v % 3;
  d.train = {0, 1};
  d.valid = {2};
  d.test = {3};
  write_dataset(dir.file("d.h5"), d);
  const Dataset r = read_dataset(dir.file("d.h5"));
  EXPECT_EQ(r.features, d.features);
  EXPECT_EQ(r.indices, d.indices);
  EXPECT_EQ(r.labels, d.labels);
  std::vector<float> rows(std::size_t(39000 - 1000) * 130);
  read_feature_rows(dir.file("d.h5"), 1000, 39000, rows.data());
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), d.features.begin() + 1000 * 130));
  for (const vertex_t begin : {vertex_t(0), vertex_t(2010), vertex_t(39990)}) {
    std::vector<float> few(std::size_t(10) * 130);
    read_feature_rows(dir.file("d.h5"), begin, begin + 10, few.data());
    EXPECT_TRUE(std::equal(few.begin(), few.end(), d.features.begin() + begin * 130)) << begin;
  }
}

TEST(DatasetFormat, FingerprintChangesWithEdges) {
  Dataset a = tiny_dataset();
  Dataset b = tiny_dataset();
  b.indices[0] = 3;
  EXPECT_NE(compute_fingerprint(a), compute_fingerprint(b));
}

TEST(DatasetFormat, InvalidDatasetIsRefusedAndNoFileLeft) {
  test::ScratchDir dir;
  Dataset d = tiny_dataset();
  d.labels[2] = 5;
  EXPECT_THROW(write_dataset(dir.file("d.h5"), d), InputError);
  EXPECT_TRUE(test::list_dir(dir.path()).empty());
}

TEST(DatasetFormat, MissingOutputDirectoryIsAnInputError) {
  test::ScratchDir dir;
  try {
    write_dataset(dir.file("missing/d.h5"), tiny_dataset());
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

// 4 vertices x 2^62 features wraps around to 0 values in 64 bits: must not pass as "no features".
TEST(DatasetFormat, WrappingFeatureDimensionIsRefused) {
  Dataset d = tiny_dataset();
  d.feature_dim = std::int64_t(1) << 62;
  d.features.clear();
  try {
    validate_dataset(d, "wrap.h5");
    FAIL() << "validate_dataset accepted 4 x 2^62 features held in 0 values";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("wrap.h5: /features hold 0 values"), std::string::npos)
        << e.what();
  }
}

// Attributes that are arrays and arrays of rank 0 are corrupt files, not crashes: H5Aread would
// write 3 values into one.
TEST(DatasetFormat, AttributeArraysAndScalarDatasetsAreInputErrors) {
  test::ScratchDir dir;
  const std::string path = dir.file("d.h5");
  const auto expect_input_error = [&](const std::string& needle) {
    try {
      read_dataset_info(path);
      FAIL() << "read_dataset_info accepted a file with " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const hsize_t three = 3;
  const std::int64_t values[3] = {4, 4, 4};
  for (const char* name : {"num_nodes", "name"}) {
    write_dataset(path, tiny_dataset());
    {
      h5::Handle file = h5::open_file(path, true);
      h5::Handle type(H5Tcopy(name == std::string("name") ? H5T_C_S1 : H5T_NATIVE_INT64));
      if (name == std::string("name")) {
        ASSERT_GE(H5Tset_size(type, 8), 0);
      }
      ASSERT_GE(H5Adelete(file, name), 0);
      h5::Handle space(H5Screate_simple(1, &three, nullptr));
      h5::Handle attribute(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
      ASSERT_GE(attribute.get(), 0);
      std::vector<char> bytes(3 * H5Tget_size(type), 'x');
      if (name != std::string("name")) std::memcpy(bytes.data(), values, sizeof values);
      ASSERT_GE(H5Awrite(attribute, type, bytes.data()), 0);
    }
    expect_input_error(std::string("attribute ") + name + " holds 3 values, expected one");
  }
  write_dataset(path, tiny_dataset());
  {
    h5::Handle file = h5::open_file(path, true);
    ASSERT_GE(H5Ldelete(file, "split/train", H5P_DEFAULT), 0);
    h5::Handle space(H5Screate(H5S_SCALAR));
    h5::Handle train(H5Dcreate2(file, "split/train", H5T_NATIVE_INT32, space, H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_GE(train.get(), 0);
  }
  expect_input_error("/split/train has shape [], expected one dimension");
}

}  // namespace
}  // namespace sluice
