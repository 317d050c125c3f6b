// H^0 from the dataset's features (train/host_features.hpp): a dataset read without its
// features (sluice-train's way) fills the host matrix from the file, slab by slab, with exactly
// the values of one read with them, in both host precisions and with row scaling; a value that
// is not finite in the file is an input error naming the file, vertex and column.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "formats/hdf5.hpp"
#include "kernels/bfloat16.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/random_graph.hpp"
#include "train/host_features.hpp"

namespace sluice {
namespace {

// The matrix's values as floats, row by row.
std::vector<float> values_of(const HostMat& m) {
  std::vector<float> out;
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t j = 0; j < m.cols; ++j)
      out.push_back(m.precision == HostPrecision::kBf16 ? float_from_bf16(m.bf16()[i * m.ld + j])
                                                        : m.fp32()[i * m.ld + j]);
  return out;
}

// A permutation of n vertices (new_to_old) and its inverse.
void shuffled_ids(vertex_t n, std::vector<vertex_t>& new_to_old,
                  std::vector<vertex_t>& old_to_new) {
  new_to_old.resize(std::size_t(n));
  for (vertex_t v = 0; v < n; ++v)
    new_to_old[std::size_t(v)] = vertex_t((std::int64_t(v) * 7919) % n);
  old_to_new.assign(std::size_t(n), -1);
  for (vertex_t v = 0; v < n; ++v) old_to_new[std::size_t(new_to_old[std::size_t(v)])] = v;
}

TEST(HostFeatures, FromTheFileEqualsFromMemoryInEverySlabSize) {
  test::ScratchDir dir;
  const vertex_t n = 1000;  // 7919 is prime, so the ids are a permutation
  const Dataset d = test::random_dataset(n, 4, 13, 3, 5, test::ReverseEdgesIntoSources::kAdd);
  write_dataset(dir.file("d.h5"), d);
  DatasetReadOptions without;
  without.features = false;
  const Dataset in_memory = read_dataset(dir.file("d.h5"));
  const Dataset on_file = read_dataset(dir.file("d.h5"), without);
  ASSERT_TRUE(on_file.features.empty());
  ASSERT_EQ(on_file.features_file, dir.file("d.h5"));
  std::vector<vertex_t> new_to_old, old_to_new;
  shuffled_ids(n, new_to_old, old_to_new);
  auto backend = make_cpu_backend(test::backend_options(1));
  for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16})
    for (const FeatureScaling scaling : {FeatureScaling::kNone, FeatureScaling::kRowL1}) {
      const HostMat expected = backend->alloc_host(n, 13, precision, "expected");
      fill_features(in_memory, new_to_old, old_to_new, scaling, expected);
      // One row of the file at a time, 77 rows, and all of them in one slab.
      for (const std::int64_t slab_bytes :
           {std::int64_t(1), std::int64_t(77 * 13 * 4), kFeatureSlabBytes}) {
        SCOPED_TRACE(slab_bytes);
        const HostMat got = backend->alloc_host(n, 13, precision, "got");
        fill_features(on_file, new_to_old, old_to_new, scaling, got, slab_bytes);
        EXPECT_EQ(values_of(got), values_of(expected));
      }
    }
  // Row v holds dataset row new_to_old[v].
  const HostMat plain = backend->alloc_host(n, 13, HostPrecision::kFp32, "plain");
  fill_features(on_file, new_to_old, old_to_new, FeatureScaling::kNone, plain, 4096);
  for (const vertex_t v : {vertex_t(0), vertex_t(1), vertex_t(517), vertex_t(n - 1)})
    EXPECT_EQ(std::memcmp(plain.fp32() + std::int64_t(v) * plain.ld,
                          in_memory.feature_row(new_to_old[std::size_t(v)]), 13 * sizeof(float)),
              0)
        << v;
}

TEST(HostFeatures, NonFiniteValueInTheFileNamesFileVertexAndColumn) {
  test::ScratchDir dir;
  Dataset d = test::random_dataset(300, 3, 6, 2, 8, test::ReverseEdgesIntoSources::kAdd);
  write_dataset(dir.file("bad.h5"), d);
  {
    d.features[std::size_t(211) * 6 + 4] = std::numeric_limits<float>::quiet_NaN();
    h5::Handle file = h5::open_file(dir.file("bad.h5"), true);
    SLUICE_H5(H5Ldelete(file, "features", H5P_DEFAULT));
    h5::write_matrix(file, "features", d.features.data(), 300, 6);
  }
  DatasetReadOptions without;
  without.features = false;
  const Dataset on_file = read_dataset(dir.file("bad.h5"), without);
  std::vector<vertex_t> new_to_old, old_to_new;
  shuffled_ids(300, new_to_old, old_to_new);
  auto backend = make_cpu_backend(test::backend_options(1));
  const HostMat m = backend->alloc_host(300, 6, HostPrecision::kFp32, "H");
  try {
    fill_features(on_file, new_to_old, old_to_new, FeatureScaling::kNone, m, 1000);
    FAIL() << "a NaN feature was accepted";
  } catch (const InputError& error) {
    const std::string text = error.what();
    EXPECT_NE(text.find(dir.file("bad.h5")), std::string::npos) << text;
    EXPECT_NE(text.find("vertex 211, column 4"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace sluice
