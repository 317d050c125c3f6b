// The CPU backend's operators (kernels/cpu/) against hand-computed values, naive loops and finite
// differences; memory accounting and transfer counters exact.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/hash.hpp"
#include "formats/dataset.hpp"
#include "kernels/bfloat16.hpp"
#include "kernels/cpu/cpu_device.hpp"
#include "kernels/csr_transpose.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/reference_model.hpp"

namespace sluice {
namespace {

using Floats = std::vector<float>;

// Reads a (possibly strided) matrix row by row (CPU devices hold host memory).
Floats get(const Mat& m) {
  Floats out;
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t j = 0; j < m.cols; ++j) out.push_back(m.data[i * m.ld + j]);
  return out;
}
// The same for an fp32 host matrix.
Floats get(const HostMat& m) {
  return get(Mat{m.fp32(), m.rows, m.cols, m.ld});
}

class CpuOps : public ::testing::Test {
 protected:
  void make(int partitions, std::int64_t budget = 0) {
    backend = make_cpu_backend(test::backend_options(partitions).memory_budget(budget));
  }
  void SetUp() override { make(1); }
  Device& dev(int d = 0) { return backend->device(d); }

  Mat mat(std::int64_t rows, std::int64_t cols, const Floats& values, int d = 0) {
    Mat m = dev(d).alloc(rows, cols, "test matrix");
    if (!values.empty()) {
      EXPECT_EQ(std::int64_t(values.size()), rows * cols);
      dev(d).write(values.data(), rows * cols, m.data);
    }
    return m;
  }
  Idx idx(const std::vector<vertex_t>& values, int d = 0) { return dev(d).upload(values, "test"); }

  std::unique_ptr<Backend> backend;
};

Floats random_floats(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void expect_near_all(const Floats& actual, const Floats& expected, double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tolerance * (1.0 + std::fabs(expected[i]))) << "at " << i;
}

// ---------------------------------------------------------------- memory

// The backends' CSR transpose (kernels/csr_transpose.hpp) equals a counting sort by column over
// the rows in order, at any thread count (a row range per thread, several column buckets), also
// with a column that holds most entries and with empty rows and columns, with and without the
// entry positions.
TEST(CsrTranspose, EqualsTheSerialCountingSortAtAnyThreadCount) {
  std::mt19937 random(7);
  const std::int64_t rows = 30000, cols = 3 * kTransposeBucketColumns + 1700;
  std::vector<edge_t> indptr{0};
  std::vector<vertex_t> columns;
  for (std::int64_t r = 0; r < rows; ++r) {
    const int degree = r % 11 == 0 ? 0 : int(random() % 9);
    for (int k = 0; k < degree; ++k)
      columns.push_back(random() % 3 == 0 ? 5 : vertex_t(random() % (cols - 100)));
    indptr.push_back(edge_t(columns.size()));
  }
  std::vector<edge_t> want_offsets(std::size_t(cols) + 1, 0);
  for (vertex_t c : columns) ++want_offsets[std::size_t(c) + 1];
  for (std::int64_t c = 0; c < cols; ++c) want_offsets[std::size_t(c) + 1] += want_offsets[c];
  std::vector<vertex_t> want_rows(columns.size());
  std::vector<edge_t> want_entries(columns.size());
  std::vector<edge_t> next(want_offsets.begin(), want_offsets.end() - 1);
  for (std::int64_t r = 0; r < rows; ++r)
    for (edge_t e = indptr[r]; e < indptr[r + 1]; ++e) {
      const edge_t k = next[std::size_t(columns[std::size_t(e)])]++;
      want_rows[std::size_t(k)] = vertex_t(r);
      want_entries[std::size_t(k)] = e;
    }
  for (const int threads : {1, 3, 8}) {
    SCOPED_TRACE(cat(threads, " threads"));
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<edge_t> offsets, entries;
    std::vector<vertex_t> t_rows, rows_only;
    std::vector<std::int32_t> offsets_only;
    transpose_csr(indptr, columns, cols, offsets, t_rows, entries);
    transpose_csr<std::int32_t, vertex_t, edge_t>(indptr, columns, cols, offsets_only, rows_only,
                                                  nullptr);
    omp_set_num_threads(saved);
    EXPECT_EQ(offsets, want_offsets);
    EXPECT_EQ(t_rows, want_rows);
    EXPECT_EQ(entries, want_entries);
    EXPECT_EQ(std::vector<edge_t>(offsets_only.begin(), offsets_only.end()), want_offsets);
    EXPECT_EQ(rows_only, want_rows);
  }
  // Called inside another parallel region, where the inner team has one thread although more
  // are allowed: the result is the same.
  std::vector<edge_t> offsets, entries;
  std::vector<vertex_t> t_rows;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
#pragma omp parallel num_threads(2) if (rows > 0)
  {
#pragma omp single
    transpose_csr(indptr, columns, cols, offsets, t_rows, entries);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(offsets, want_offsets);
  EXPECT_EQ(t_rows, want_rows);
  EXPECT_EQ(entries, want_entries);
}

TEST_F(CpuOps, MemoryIsAccountedAndPeakKept) {
  Device& d = dev();
  EXPECT_EQ(d.bytes_in_use(), 0);
  Mat m = d.alloc(10, 3, "features");
  EXPECT_EQ(m.rows, 10);
  EXPECT_EQ(m.ld, 3);
  EXPECT_EQ(d.bytes_in_use(), 120);
  for (std::int64_t i = 0; i < 30; ++i) EXPECT_EQ(m.data[i], 0.f);  // zero-initialized
  d.upload({1, 2, 3}, "rows");
  EXPECT_EQ(d.bytes_in_use(), 132);
  // 3 rows, 4 entries: 4 offsets * 8 bytes + 4 columns * 4 bytes.
  Csr a = d.upload_csr({0, 1, 3, 4}, {0, 1, 2, 0}, 3, "chunk");
  EXPECT_EQ(a.rows, 3);
  EXPECT_EQ(a.cols, 3);
  EXPECT_EQ(a.nnz, 4);
  EXPECT_EQ(d.bytes_in_use(), 132 + 32 + 16);
  EXPECT_EQ(d.peak_bytes(), d.bytes_in_use());
}

TEST_F(CpuOps, BudgetOverflowThrowsNamingTheAllocation) {
  make(1, 1000);
  Device& d = dev();
  d.alloc(200, 1, "first");  // 800 bytes
  try {
    d.alloc(100, 1, "transition buffer");
    FAIL() << "expected OutOfDeviceMemory";
  } catch (const OutOfDeviceMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("transition buffer"), std::string::npos) << what;
    EXPECT_NE(what.find("400"), std::string::npos) << what;
    EXPECT_NE(what.find("800"), std::string::npos) << what;
    EXPECT_NE(what.find("1000"), std::string::npos) << what;
  }
  EXPECT_EQ(d.bytes_in_use(), 800);
  d.alloc(50, 1, "fits exactly");
  EXPECT_EQ(d.bytes_in_use(), 1000);
  EXPECT_THROW(d.alloc(1, 1, "one more float"), OutOfDeviceMemory);
  // Read-only constants never fail: over the budget they are kept outside it (as the CUDA
  // backend keeps them in pinned host memory), and they stay readable.
  const Idx index = d.upload({7, 9}, "one more index");
  ASSERT_EQ(index.size, 2);
  EXPECT_EQ(index.data[1], 9);
  const Mat values = d.upload_constant({1.5f, 2.5f}, 1, 2, "entry values");
  EXPECT_EQ(values.data[1], 2.5f);
  EXPECT_EQ(d.bytes_in_use(), 1000);
  EXPECT_EQ(static_cast<CpuDevice&>(d).host_constant_bytes(), 8 + 8);
}

// ---------------------------------------------------------------- transfers

TEST_F(CpuOps, LoadsStoresAndCountersAreExact) {
  Device& d = dev();
  HostMat host = backend->alloc_host(5, 2, "H");
  for (int i = 0; i < 10; ++i) host.fp32()[i] = float(i);  // row r = [2r, 2r+1]
  Mat buf = d.alloc(4, 2, "buffer");
  d.load_rows(host, idx({1, 3, 4}), idx({2, 0, 3}), buf);
  EXPECT_EQ(get(buf), (Floats{6, 7, 0, 0, 2, 3, 8, 9}));
  EXPECT_EQ(d.counters().h2d_gather_rows, 3);
  EXPECT_EQ(d.counters().h2d_gather_bytes, 24);

  Mat block = d.alloc(2, 2, "block");
  d.load_block(host, 3, block);
  EXPECT_EQ(get(block), (Floats{6, 7, 8, 9}));
  EXPECT_EQ(d.counters().h2d_block_bytes, 16);

  d.store_block(block, host, 0);  // host rows 0..1 = [6,7],[8,9]
  EXPECT_EQ(get(host), (Floats{6, 7, 8, 9, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(d.counters().d2h_bytes, 16);

  // host[4] += buf[0], host[1] += buf[3] (unique host rows). The additions land at the next
  // flush_add_rows, join_host_adds() or synchronize(), not before (as on CUDA, where CPU threads
  // add them later): a schedule that reads the rows without the join fails on the CPU too.
  const Floats before_add = get(host);
  d.flush_add_rows(buf, idx({0, 3}), idx({4, 1}), host);
  EXPECT_EQ(get(host), before_add);
  d.join_host_adds();
  EXPECT_EQ(get(host), (Floats{6, 7, 16, 18, 4, 5, 6, 7, 14, 16}));
  EXPECT_EQ(d.counters().d2h_bytes, 32);
  EXPECT_EQ(d.counters().d2h_index_bytes, 8);  // the added rows' ids
  EXPECT_EQ(d.counters().p2p_bytes, 0);
  // host[2] = buf[2], host[0] = buf[1] (first flushes: stored, the old rows not read).
  d.flush_store_rows(buf, idx({2, 1}), idx({2, 0}), host);
  EXPECT_EQ(get(host), (Floats{0, 0, 16, 18, 2, 3, 6, 7, 14, 16}));
  EXPECT_EQ(d.counters().d2h_bytes, 48);
  // An empty dst_rows gathers into compact rows.
  Mat compact = d.alloc(2, 2, "compact");
  d.load_rows(host, idx({4, 2}), Idx{}, compact);
  EXPECT_EQ(get(compact), (Floats{14, 16, 2, 3}));
  Mat too_small = d.alloc(1, 2, "too small");
  EXPECT_THROW(d.load_rows(host, idx({4, 2}), Idx{}, too_small), Error);
  d.reset_counters();
  EXPECT_EQ(d.counters().h2d_gather_rows, 0);
  EXPECT_EQ(d.counters().d2h_bytes, 0);
}

// bf16 host matrices: rows round to nearest even when stored or flushed (a flush addition rounds
// the row, then the sum) and widen exactly when loaded; link bytes count 2 per element. Values:
// 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (to even: 1), 1 + 3 * 2^-8 a tie between 1 + 2^-7 and
// 1 + 2^-6 (to even: 1 + 2^-6), 1 + 2^-8 + 2^-12 is just above a tie (up: 1 + 2^-7).
TEST_F(CpuOps, Bf16HostRowsRoundOnTheWayOutAndWidenOnTheWayIn) {
  Device& d = dev();
  constexpr float e7 = 1.f / 128, e8 = 1.f / 256, e12 = 1.f / 4096;
  HostMat host = backend->alloc_host(4, 2, HostPrecision::kBf16, "H");
  ASSERT_EQ(host.precision, HostPrecision::kBf16);
  EXPECT_THROW(host.fp32(), Error);
  Mat out = mat(2, 2, {1 + e8, 1 + 3 * e8, 1 + e8 + e12, -3.14159265f});
  d.store_block(out, host, 1);  // host rows 1..2
  EXPECT_EQ(d.counters().d2h_bytes, 8);
  const bf16_t* h = host.bf16();
  EXPECT_EQ(h[2], 0x3f80);  // 1
  EXPECT_EQ(h[3], 0x3f82);  // 1 + 2^-6
  EXPECT_EQ(h[4], 0x3f81);  // 1 + 2^-7
  EXPECT_EQ(h[5], 0xc049);  // -3.140625
  Mat block = d.alloc(2, 2, "block");
  d.load_block(host, 1, block);
  EXPECT_EQ(get(block), (Floats{1, 1 + 2 * e7, 1 + e7, -3.140625f}));
  EXPECT_EQ(d.counters().h2d_block_bytes, 8);
  Mat rows = d.alloc(3, 2, "rows");
  d.load_rows(host, idx({2, 0}), idx({0, 2}), rows);
  EXPECT_EQ(get(rows), (Floats{1 + e7, -3.140625f, 0, 0, 0, 0}));
  EXPECT_EQ(d.counters().h2d_gather_bytes, 8);
  // Flushes: store host[3] = round(src[0]); add host[1] += src[1]: round(1 + 3 * 2^-8) is a tie,
  // to even 1 + 2^-6; round((1 + 2^-6) + round(2^-8 + 2^-20)) = round(1 + 5 * 2^-8) is a tie, to
  // even 1 + 2^-6 (without rounding the flushed value first it would round up); host[2] += src[2]:
  // round(1 + 3 * 2^-8) = 1 + 2^-6.
  Mat src = mat(3, 2, {1 + 3 * e8, 7, 3 * e8, e8 + e8 * e12, e8, 0});
  d.flush_store_rows(src, idx({0}), idx({3}), host);
  EXPECT_EQ(h[6], 0x3f82);
  EXPECT_EQ(h[7], 0x40e0);  // 7
  d.flush_add_rows(src, idx({1, 2}), idx({1, 2}), host);
  d.synchronize();
  EXPECT_EQ(float_from_bf16(h[2]), 1 + 2 * e7);
  EXPECT_EQ(float_from_bf16(h[3]), 1 + 2 * e7);
  EXPECT_EQ(float_from_bf16(h[4]), 1 + 2 * e7);
  EXPECT_EQ(float_from_bf16(h[5]), -3.140625f);
  EXPECT_EQ(d.counters().d2h_bytes, 8 + 4 + 8);
  EXPECT_EQ(d.counters().d2h_index_bytes, 8);
  // Rows rounded in place on the device: all of a matrix, or the listed rows; fp32 keeps them.
  Mat m = mat(2, 2, {1 + e8 + e12, 1 + e8, 1 + 3 * e8, 2});
  d.round_to_host_precision(m, HostPrecision::kFp32);
  EXPECT_EQ(get(m), (Floats{1 + e8 + e12, 1 + e8, 1 + 3 * e8, 2}));
  d.round_rows_to_host_precision(m, idx({1}), HostPrecision::kBf16);
  EXPECT_EQ(get(m), (Floats{1 + e8 + e12, 1 + e8, 1 + 2 * e7, 2}));
  d.round_to_host_precision(m, HostPrecision::kBf16);
  EXPECT_EQ(get(m), (Floats{1 + e7, 1, 1 + 2 * e7, 2}));
  EXPECT_THROW(d.round_rows_to_host_precision(m, idx({2}), HostPrecision::kBf16), Error);
}

// Device-local indexed copies and adds (the kept backward tail: G^1 blocks take the rows kept
// on the device).
TEST_F(CpuOps, CopyRowsCopiesOrAddsIndexedRows) {
  Device& d = dev();
  Mat block = mat(3, 2, {-1, -1, -1, -1, 8, 9});
  Mat src = mat(3, 2, {10, 11, 20, 21, 30, 31});
  d.copy_rows(src, idx({2, 0}), idx({1, 0}), block,
              RowCopy::kOverwrite);  // block[1] = src[2], [0] = src[0]
  EXPECT_EQ(get(block), (Floats{10, 11, 30, 31, 8, 9}));
  d.copy_rows(src, idx({1}), idx({2}), block, RowCopy::kAdd);  // block[2] += src[1]
  EXPECT_EQ(get(block), (Floats{10, 11, 30, 31, 28, 30}));
  EXPECT_THROW(d.copy_rows(src, idx({1, 2}), idx({0}), block, RowCopy::kOverwrite), Error);
  EXPECT_THROW(d.copy_rows(src, idx({3}), idx({0}), block, RowCopy::kAdd), Error);
  // Device-local: no host-link or peer bytes.
  EXPECT_EQ(d.counters().h2d_block_bytes, 0);
  EXPECT_EQ(d.counters().d2h_bytes, 0);
  EXPECT_EQ(d.counters().p2p_bytes, 0);
}

TEST_F(CpuOps, ScatterRowsAndPhaseTimers) {
  Device& d = dev();
  Mat dst = mat(4, 2, {1, 1, 2, 2, 3, 3, 4, 4});
  d.set_time_origin();
  d.phase_begin(Phase::kLoad, 7);
  d.scatter_rows(mat(2, 2, {10, 20, 30, 40}), idx({3, 0}), dst);
  d.phase_end(Phase::kLoad);
  EXPECT_EQ(get(dst), (Floats{30, 40, 2, 2, 3, 3, 10, 20}));
  // Lanes and markers are accepted and change nothing on the CPU (operations run at issue).
  {
    LaneScope lane(d, Lane::kStore);
    d.mark(3);
    d.wait(3);
  }
  EXPECT_EQ(d.lane(), Lane::kCompute);
  double seconds[kPhases] = {};
  std::vector<PhaseRange> timeline;
  d.take_phase_times(seconds, &timeline);
  EXPECT_GE(seconds[int(Phase::kLoad)], 0.0);
  EXPECT_EQ(seconds[int(Phase::kFlush)], 0.0);
  ASSERT_EQ(timeline.size(), 1u);
  EXPECT_EQ(timeline[0].phase, Phase::kLoad);
  EXPECT_EQ(timeline[0].tag, 7);
  EXPECT_GE(timeline[0].begin, 0.0);
  EXPECT_DOUBLE_EQ(timeline[0].end - timeline[0].begin, seconds[int(Phase::kLoad)]);
  d.take_phase_times(seconds, &timeline);  // taken: nothing left
  EXPECT_EQ(timeline.size(), 1u);
  EXPECT_STREQ(phase_name(Phase::kFlush), "flush");
  EXPECT_STREQ(lane_name(Lane::kTransfer), "transfer");
  // An optional allocation over the budget is empty instead of an error.
  make(1, 100);
  EXPECT_TRUE(dev().try_alloc(30, 1, "over").empty());
  EXPECT_FALSE(dev().try_alloc(20, 1, "fits").empty());
  EXPECT_EQ(dev().bytes_in_use(), 80);
}

TEST_F(CpuOps, PullCopiesAnOwnersRows) {
  make(2);
  Mat owner = mat(3, 2, {1, 1, 2, 2, 3, 3}, 0);
  Mat local = mat(3, 2, {}, 1);
  dev(1).pull_rows(dev(0), owner, idx({1, 0}, 1), idx({2, 0}, 1), local);
  EXPECT_EQ(get(local), (Floats{1, 1, 0, 0, 2, 2}));
  EXPECT_EQ(dev(1).counters().p2p_rows, 2);
  EXPECT_EQ(dev(1).counters().p2p_bytes, 16);
  EXPECT_EQ(dev(0).counters().p2p_bytes, 0);
}

// put_block and put_rows write a device's rows into a peer's buffer (the push_phase() copies
// into an owner's receive buffer), each row once, and count them as peer traffic.
TEST_F(CpuOps, PutsCopyRowsIntoAPeersBuffer) {
  make(2);
  Mat src = mat(3, 2, {1, 2, 3, 4, 5, 6}, 1);
  Mat received = mat(4, 3, Floats(12, 0.f), 0);  // wider rows than the puts
  dev(1).put_block(src.row_block(1, 2), dev(0), received.row_block(2, 2).col_block(0, 2));
  dev(1).put_rows(src, idx({2, 0}, 1), dev(0), received.row_block(0, 2).col_block(0, 2));
  EXPECT_EQ(get(received), (Floats{5, 6, 0, 1, 2, 0, 3, 4, 0, 5, 6, 0}));
  EXPECT_EQ(dev(1).counters().p2p_rows, 4);
  EXPECT_EQ(dev(1).counters().p2p_bytes, 32);
  EXPECT_EQ(dev(0).counters().p2p_bytes, 0);
  EXPECT_THROW(dev(1).put_rows(src, idx({0}, 1), dev(0), received.row_block(0, 2)), Error);
}

TEST_F(CpuOps, LargeScatterAddWithRepeatsMatchesNaive) {
  const std::int64_t n = 5000, cols = 40, rows = 97;
  const Floats src_values = random_floats(std::size_t(n * cols), 7);
  Mat src = mat(n, cols, src_values);
  Mat dst = mat(rows, cols, {});
  std::vector<vertex_t> target(n);
  for (std::int64_t i = 0; i < n; ++i) target[i] = vertex_t((i * 31) % rows);
  dev().scatter_add_rows(src, idx(target), dst);
  std::vector<double> expected(std::size_t(rows * cols), 0.0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      expected[target[i] * cols + j] += src_values[i * cols + j];
  const Floats got = get(dst);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-4);
}

TEST_F(CpuOps, GatherScatterZeroFillCopy) {
  Device& d = dev();
  Mat src = mat(3, 2, {1, 2, 3, 4, 5, 6});
  Mat g = d.alloc(4, 2, "g");
  d.gather_rows(src, idx({2, 0, 2, 1}), g);
  EXPECT_EQ(get(g), (Floats{5, 6, 1, 2, 5, 6, 3, 4}));
  Mat acc = mat(3, 2, {});
  d.scatter_add_rows(g, idx({0, 0, 2, 1}), acc);  // row 0 repeats
  EXPECT_EQ(get(acc), (Floats{6, 8, 3, 4, 5, 6}));
  d.zero_rows(acc, idx({1}));
  EXPECT_EQ(get(acc), (Floats{6, 8, 0, 0, 5, 6}));
  d.fill(acc.col_block(1, 1), 9.f);  // strided view
  EXPECT_EQ(get(acc), (Floats{6, 9, 0, 9, 5, 9}));
  d.copy(src.col_block(0, 1), acc.col_block(1, 1));
  EXPECT_EQ(get(acc), (Floats{6, 1, 0, 3, 5, 5}));
  EXPECT_THROW(d.gather_rows(src, idx({3, 0, 0, 0}), g), Error);  // row 3 out of range
}

// ---------------------------------------------------------------- dropout

TEST_F(CpuOps, DropoutFollowsTheCounterBasedMask) {
  const std::int64_t rows = 6, cols = 50;
  Floats ones(std::size_t(rows * cols), 1.f);
  Mat m = mat(rows, cols, ones);
  const std::vector<vertex_t> keys = {11, 12, 13, 14};
  DropoutKey key{42, 3, 1, 0.25f};
  dev().dropout_rows(m, idx({0, 2, 3, 5}), idx(keys), key);
  const Floats got = get(m);
  const std::vector<int> dropped_rows = {0, 2, 3, 5};
  int zeros = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    int k = -1;
    for (int i = 0; i < 4; ++i)
      if (dropped_rows[i] == r) k = i;
    for (std::int64_t j = 0; j < cols; ++j) {
      float expected = 1.f;
      if (k >= 0) {
        const float u = hash_to_unit(key_hash(42, 1, 3 * 1024 + 1, std::uint64_t(keys[k]), j));
        expected = u >= 0.25f ? 1.f / 0.75f : 0.f;
        zeros += expected == 0.f;
      }
      EXPECT_FLOAT_EQ(got[r * cols + j], expected) << r << "," << j;
    }
  }
  EXPECT_GT(zeros, 20);  // about 50 of 200
  EXPECT_LT(zeros, 80);
  // Rate 0 leaves everything untouched.
  dev().dropout_rows(m, idx({1}), idx({99}), DropoutKey{42, 3, 1, 0.f});
  EXPECT_EQ(get(m)[cols], 1.f);
}

// The fused backward of H = dropout(act(Z)) gives exactly what its four parts give, for every
// activation, with and without dropout, on a strided view.
TEST_F(CpuOps, DropoutActivationBackwardEqualsItsParts) {
  const std::int64_t rows = 37, cols = 45, ld = 48;
  const Floats gradient = random_floats(std::size_t(rows * ld), 3, -2.f, 2.f);
  const Floats value = random_floats(std::size_t(rows * ld), 4, -2.f, 2.f);
  const std::vector<vertex_t> keys = test::id_sequence(rows, 1000, 7);
  const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
  for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kElu})
    for (const float rate : {0.f, 0.5f}) {
      SCOPED_TRACE(cat("activation ", int(act), ", rate ", rate));
      const DropoutKey key{42, 3, 1, rate};
      const Mat dh = mat(rows, ld, gradient).col_block(0, cols);
      const Mat z = mat(rows, ld, value).col_block(0, cols);
      dev().dropout_activation_backward(dh, z, act, idx(keys), key);
      const Mat dh_parts = mat(rows, ld, gradient).col_block(0, cols);
      const Mat z_parts = mat(rows, ld, value).col_block(0, cols);
      if (rate > 0) dev().dropout_rows(dh_parts, idx(positions), idx(keys), key);
      dev().activation_backward(dh_parts, z_parts, act, dh_parts);
      dev().bias_activation(z_parts, nullptr, act, z_parts);
      if (rate > 0) dev().dropout_rows(z_parts, idx(positions), idx(keys), key);
      const Floats got_dh = get(dh), got_z = get(z);
      const Floats want_dh = get(dh_parts), want_z = get(z_parts);
      ASSERT_EQ(got_dh.size(), want_dh.size());
      for (std::size_t i = 0; i < got_dh.size(); ++i) {
        ASSERT_EQ(got_dh[i], want_dh[i]) << i;
        ASSERT_EQ(got_z[i], want_z[i]) << i;
      }
      if (rate > 0) {  // the mask took some rows' entries
        std::int64_t zeros = 0;
        for (const float x : got_z) zeros += x == 0.f;
        EXPECT_GT(zeros, rows * cols / 4);
      }
    }
}

// The ReLU backward from the forward's kept H = dropout(relu(Z)) gives the fused backward's dh
// from Z bit for bit (signed zeros included), with and without dropout, and leaves H as it was.
TEST_F(CpuOps, DropoutReluBackwardFromOutputMatchesTheOneFromZ) {
  const std::int64_t rows = 37, cols = 45, ld = 48;
  const Floats gradient = random_floats(std::size_t(rows * ld), 5, -2.f, 2.f);
  const Floats value = random_floats(std::size_t(rows * ld), 6, -2.f, 2.f);
  const std::vector<vertex_t> keys = test::id_sequence(rows, 1000, 7);
  const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
  for (const float rate : {0.f, 0.5f}) {
    SCOPED_TRACE(cat("rate ", rate));
    const DropoutKey key{42, 3, 1, rate};
    const Mat dh_from_z = mat(rows, ld, gradient).col_block(0, cols);
    const Mat z = mat(rows, ld, value).col_block(0, cols);
    dev().dropout_activation_backward(dh_from_z, z, Activation::kRelu, idx(keys), key);
    const Mat dh = mat(rows, ld, gradient).col_block(0, cols);
    const Mat h = mat(rows, ld, value).col_block(0, cols);  // the forward: relu, then dropout
    dev().bias_activation(h, nullptr, Activation::kRelu, h);
    if (rate > 0) dev().dropout_rows(h, idx(positions), idx(keys), key);
    const Floats kept = get(h);
    dev().dropout_relu_backward_from_output(dh, h, idx(keys), key);
    const Floats got = get(dh), want = get(dh_from_z);
    ASSERT_EQ(got.size(), want.size());
    std::int64_t zeros = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
      ASSERT_EQ(got[i], want[i]) << i;
      zeros += got[i] == 0.f;
    }
    EXPECT_EQ(get(h), kept);
    EXPECT_EQ(get(z), kept);  // the fused backward's H
    EXPECT_GT(zeros, rows * cols / (rate > 0 ? 2 : 4));
  }
}

// The fused forward passes give what their parts give, bit for bit: bias + activation + dropout
// (for every activation) and a scatter with dropout, with dropout and without (rate 0).
TEST_F(CpuOps, FusedDropoutPassesEqualTheirParts) {
  const std::int64_t rows = 37, cols = 45, ld = 48;
  const Floats value = random_floats(std::size_t(rows * ld), 7, -2.f, 2.f);
  const Floats bias = random_floats(std::size_t(cols), 8, -1.f, 1.f);
  const std::vector<vertex_t> keys = test::id_sequence(rows, 2000, 3);
  const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
  std::vector<vertex_t> targets = test::id_sequence(rows, 0, 7);
  for (vertex_t& t : targets) t %= vertex_t(rows);  // a permutation of the rows
  for (const float rate : {0.f, 0.5f}) {
    const DropoutKey key{42, 3, 1, rate};
    for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
      SCOPED_TRACE(cat("activation ", int(act), ", rate ", rate));
      const Mat fused = mat(rows, ld, Floats(std::size_t(rows * ld), 9.f)).col_block(0, cols);
      dev().bias_activation_dropout(mat(rows, ld, value).col_block(0, cols), bias.data(), act,
                                    fused, idx(keys), key);
      const Mat parts = mat(rows, ld, value).col_block(0, cols);
      dev().bias_activation(parts, bias.data(), act, parts);
      dev().dropout_rows(parts, idx(positions), idx(keys), key);
      EXPECT_EQ(get(fused), get(parts));
    }
    SCOPED_TRACE(cat("scatter, rate ", rate));
    const Mat fused = mat(rows, ld, Floats(std::size_t(rows * ld), 9.f)).col_block(0, cols);
    dev().scatter_dropout_rows(mat(rows, ld, value).col_block(0, cols), idx(targets), fused,
                               idx(keys), key);
    const Mat parts = mat(rows, ld, Floats(std::size_t(rows * ld), 9.f)).col_block(0, cols);
    dev().scatter_rows(mat(rows, ld, value).col_block(0, cols), idx(targets), parts);
    dev().dropout_rows(parts, idx(targets), idx(keys), key);
    const Floats got = get(fused);
    EXPECT_EQ(got, get(parts));
    std::int64_t zeros = 0;
    for (const float x : got) zeros += x == 0.f;
    if (rate > 0) {
      EXPECT_GT(zeros, rows * cols / 4);
    }
  }
}

// The activation backward from in + bias (GAT's kept head outputs) gives bias_activation and
// dropout_activation_backward's bits, leaves `in` as it was, and takes each row's head dots
// dh^h . in^h of the dh it writes, as computed here by hand; head_dots alone gives the same dots.
TEST_F(CpuOps, ActivationBackwardFromBiasedInputTakesItsHeadDots) {
  const std::int64_t rows = 37, heads = 3, cols = 45, ld = 48, width = cols / heads;
  const Floats gradient = random_floats(std::size_t(rows * ld), 11, -2.f, 2.f);
  const Floats value = random_floats(std::size_t(rows * ld), 12, -2.f, 2.f);
  const Floats bias = random_floats(std::size_t(cols), 13, -1.f, 1.f);
  const std::vector<vertex_t> keys = test::id_sequence(rows, 1000, 7);
  for (const float rate : {0.f, 0.5f}) {
    SCOPED_TRACE(cat("rate ", rate));
    const DropoutKey key{42, 3, 1, rate};
    const Mat dh = mat(rows, ld, gradient).col_block(0, cols);
    const Mat in = mat(rows, ld, value).col_block(0, cols);
    const Mat h = mat(rows, cols, {});
    const Mat dots =
        mat(rows, heads + 2, Floats(std::size_t(rows * (heads + 2)), 9.f)).col_block(0, heads);
    dev().dropout_bias_activation_backward(dh, in, bias.data(), Activation::kElu, idx(keys), key, h,
                                           dots);
    const Mat dh_parts = mat(rows, ld, gradient).col_block(0, cols);
    const Mat z = mat(rows, cols, {});
    dev().bias_activation(mat(rows, ld, value).col_block(0, cols), bias.data(), Activation::kNone,
                          z);
    dev().dropout_activation_backward(dh_parts, z, Activation::kElu, idx(keys), key);
    const Floats got = get(dh);
    ASSERT_EQ(got, get(dh_parts));
    EXPECT_EQ(get(h), get(z));
    EXPECT_EQ(get(in), get(mat(rows, ld, value).col_block(0, cols)));
    const Floats got_dots = get(dots);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t k = 0; k < heads; ++k) {
        double dot = 0.0;
        for (std::int64_t f = 0; f < width; ++f) {
          const std::int64_t j = k * width + f;
          dot += double(got[std::size_t(i * cols + j)]) * value[std::size_t(i * ld + j)];
        }
        EXPECT_NEAR(got_dots[std::size_t(i * heads + k)], dot, 1e-5 * (1 + std::fabs(dot)))
            << i << ", head " << k;
      }
    const Mat again = mat(rows, heads, {});
    dev().head_dots(dh, in, again);
    EXPECT_EQ(get(again), got_dots);
  }
}

// ---------------------------------------------------------------- sparse

// A (3 x 4), entries (column, value):
//   row 0: (0, 1)  (2, 2)
//   row 1: (1, -1)
//   row 2: (0, .5) (3, 1) (1, 3)
// x = [[1,2],[3,4],[5,6],[7,8]]  =>  A x = [[11,14],[-3,-4],[16.5,21]]
TEST_F(CpuOps, SpmmAndTransposeOnAHandDrawnMatrix) {
  Device& d = dev();
  Csr a = d.upload_csr({0, 2, 3, 6}, {0, 2, 1, 0, 3, 1}, 4, "A");
  Mat values = mat(6, 1, {1, 2, -1, .5f, 1, 3});
  Mat x = mat(4, 2, {1, 2, 3, 4, 5, 6, 7, 8});
  Mat y = mat(3, 2, {9, 9, 9, 9, 9, 9});  // overwritten
  d.spmm(a, values.data, x, y);
  EXPECT_EQ(get(y), (Floats{11, 14, -3, -4, 16.5f, 21}));
  // dx (ones) += A^T dy with dy = [[1,0],[0,1],[1,1]]:
  //   col 0: 1*[1,0] + .5*[1,1] = [1.5,.5];  col 1: -1*[0,1] + 3*[1,1] = [3,2]
  //   col 2: 2*[1,0] = [2,0];                col 3: 1*[1,1] = [1,1]
  Mat dy = mat(3, 2, {1, 0, 0, 1, 1, 1});
  Mat dx = mat(4, 2, Floats(8, 1.f));
  d.spmm_transpose_add(a, values.data, dy, dx);
  EXPECT_EQ(get(dx), (Floats{2.5f, 1.5f, 4, 3, 3, 1, 2, 2}));
  // The storing transposed product overwrites what dx held: the sums alone.
  d.spmm_transpose(a, values.data, dy, dx);
  EXPECT_EQ(get(dx), (Floats{1.5f, .5f, 3, 2, 2, 0, 1, 1}));
}

// A column without entries gets a row of zeros from the storing transposed product, whatever
// dx held there; the other rows are what the adding product gives into zeros.
TEST_F(CpuOps, StoringTransposedProductWritesEveryRow) {
  Device& d = dev();
  // A (2 x 3): row 0: (0, 2) (2, 1); row 1: (2, -1). Column 1 has no entry.
  Csr a = d.upload_csr({0, 2, 3}, {0, 2, 2}, 3, "A");
  Mat values = mat(3, 1, {2, 1, -1});
  Mat dy = mat(2, 2, {1, 2, 3, 4});
  Mat stored = mat(3, 2, Floats(6, 7.f));
  Mat added = mat(3, 2, Floats(6, 0.f));
  d.spmm_transpose(a, values.data, dy, stored);
  d.spmm_transpose_add(a, values.data, dy, added);
  EXPECT_EQ(get(stored), (Floats{2, 4, 0, 0, -2, -2}));
  EXPECT_EQ(get(stored), get(added));
}

// The weights the derived kinds stand for, written out independently of
// kernels/entry_weights.hpp: GCN's 1 / sqrt(deg(self) deg(column)) and SAGE's mean over the
// entries after the self entry.
Floats derived_weights(const test::ChunkCsr& a, CsrWeights kind,
                       const std::vector<std::int32_t>& degrees) {
  Floats w(a.columns.size());
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const edge_t first = a.indptr[std::size_t(r)], end = a.indptr[std::size_t(r) + 1];
    for (edge_t e = first; e < end; ++e)
      w[std::size_t(e)] =
          kind == CsrWeights::kSymmetricNorm
              ? float(1.0 / std::sqrt(double(degrees[std::size_t(a.columns[std::size_t(first)])]) *
                                      double(degrees[std::size_t(a.columns[std::size_t(e)])])))
          : e == first ? 0.f
                       : float(1.0 / double(end - first - 1));
  }
  return w;
}

// A matrix of derived weights multiplies exactly as the same matrix with those weights passed
// per call, in both products: the weights are bit for bit the ones written out.
TEST_F(CpuOps, DerivedWeightsEqualTheirValuesPassedPerCall) {
  std::mt19937 rng(11);
  const test::ChunkCsr a = test::random_chunk_csr(300, 220, 30, test::EmptyRows::kSome, rng);
  std::vector<std::int32_t> degrees(std::size_t(a.cols));
  for (std::int32_t& degree : degrees) degree = 1 + std::int32_t(rng() % 60);
  const std::int64_t width = 5, nnz = a.indptr.back();
  const Floats xv = random_floats(std::size_t(a.cols * width), 8);
  const Floats dyv = random_floats(std::size_t(a.rows * width), 9);
  for (CsrWeights kind : {CsrWeights::kSymmetricNorm, CsrWeights::kNeighborMean}) {
    SCOPED_TRACE(csr_weights_name(kind));
    const std::vector<std::int32_t> given_degrees =
        kind == CsrWeights::kSymmetricNorm ? degrees : std::vector<std::int32_t>{};
    Csr derived =
        dev().upload_csr(a.indptr, a.columns, a.cols, CsrWeighting{kind, given_degrees}, "derived");
    Csr given = dev().upload_csr(a.indptr, a.columns, a.cols, "given");
    Mat values = mat(nnz, 1, derived_weights(a, kind, degrees));
    Mat x = mat(a.cols, width, xv), dy = mat(a.rows, width, dyv);
    Mat y1 = mat(a.rows, width, {}), y2 = mat(a.rows, width, {});
    Mat dx1 = mat(a.cols, width, {}), dx2 = mat(a.cols, width, {});
    dev().spmm(derived, nullptr, x, y1);
    dev().spmm(given, values.data, x, y2);
    dev().spmm_transpose_add(derived, nullptr, dy, dx1);
    dev().spmm_transpose_add(given, values.data, dy, dx2);
    EXPECT_EQ(get(y1), get(y2));
    EXPECT_EQ(get(dx1), get(dx2));
    EXPECT_NE(get(y1), Floats(std::size_t(a.rows * width), 0.f));
    // Values belong to matrices of per-call values only.
    EXPECT_ANY_THROW(dev().spmm(derived, values.data, x, y1));
  }
  // A hand value: degrees 4 and 9 give 1/6 (row 0: self column 0, then column 1).
  Csr small = dev().upload_csr({0, 2}, {0, 1}, 2, CsrWeighting{CsrWeights::kSymmetricNorm, {4, 9}},
                               "small");
  Mat y = mat(1, 1, {});
  dev().spmm(small, nullptr, mat(2, 1, {0, 6}), y);
  EXPECT_FLOAT_EQ(get(y)[0], 1.f);
}

// A weighting that does not fit its matrix is refused at upload, naming the matrix.
TEST_F(CpuOps, UploadRefusesAWeightingThatDoesNotFit) {
  const auto upload = [&](std::vector<vertex_t> columns, std::int64_t cols, CsrWeighting w) {
    dev().upload_csr({0, std::int64_t(columns.size())}, columns, cols, w, "matrix M");
  };
  const auto message = [&](std::vector<vertex_t> columns, std::int64_t cols, CsrWeighting w) {
    try {
      upload(std::move(columns), cols, std::move(w));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using W = CsrWeights;
  EXPECT_NE(message({0, 1}, 2, {W::kSymmetricNorm, {3}}).find("matrix M: 1 column degrees for 2"),
            std::string::npos);
  EXPECT_NE(message({0, 1}, 2, {W::kSymmetricNorm, {3, 0}})
                .find("matrix M: entry 1 reads column 1 of degree 0"),
            std::string::npos);
  EXPECT_NE(message({0, 1, 0}, 2, {W::kNeighborMean, {}}).find("holds its self column twice"),
            std::string::npos);
  EXPECT_NE(message({0, 1}, 2, {W::kPerCall, {1, 1}}).find("column degrees given"),
            std::string::npos);
  EXPECT_NE(message({0, 1}, 2, {W::kNeighborMean, {1, 1}}).find("column degrees given"),
            std::string::npos);
  // An unused column may have degree 0; a neighbor row may repeat a non-self column.
  EXPECT_NO_THROW(upload({0, 1}, 3, {W::kSymmetricNorm, {2, 2, 0}}));
  EXPECT_NO_THROW(upload({0, 1, 1}, 2, {W::kNeighborMean, {}}));
}

TEST_F(CpuOps, LargeSpmmAndTransposeMatchNaive) {
  const std::int64_t rows = 700, cols = 500, width = 24;
  std::mt19937 gen(3);
  std::vector<edge_t> indptr = {0};
  std::vector<vertex_t> columns;
  for (std::int64_t r = 0; r < rows; ++r) {
    const int degree = int(gen() % 12);
    for (int k = 0; k < degree; ++k) columns.push_back(vertex_t(gen() % cols));
    indptr.push_back(edge_t(columns.size()));
  }
  const std::int64_t nnz = indptr.back();
  Csr a = dev().upload_csr(indptr, columns, cols, "A");
  const Floats w = random_floats(std::size_t(nnz), 4);
  const Floats xv = random_floats(std::size_t(cols * width), 5);
  const Floats dyv = random_floats(std::size_t(rows * width), 6);
  Mat values = mat(nnz, 1, w), x = mat(cols, width, xv), y = mat(rows, width, {});
  Mat dy = mat(rows, width, dyv), dx = mat(cols, width, {});
  dev().spmm(a, values.data, x, y);
  dev().spmm_transpose_add(a, values.data, dy, dx);
  std::vector<double> ey(std::size_t(rows * width), 0.0), edx(std::size_t(cols * width), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (edge_t e = indptr[r]; e < indptr[r + 1]; ++e)
      for (std::int64_t j = 0; j < width; ++j) {
        ey[r * width + j] += double(w[e]) * xv[columns[e] * width + j];
        edx[columns[e] * width + j] += double(w[e]) * dyv[r * width + j];
      }
  const Floats gy = get(y), gdx = get(dx);
  for (std::size_t i = 0; i < gy.size(); ++i) ASSERT_NEAR(gy[i], ey[i], 1e-5);
  for (std::size_t i = 0; i < gdx.size(); ++i) ASSERT_NEAR(gdx[i], edx[i], 1e-5);
}

// ---------------------------------------------------------------- dense

TEST_F(CpuOps, GemmAllTranspositionsOnStridedViews) {
  const std::int64_t m = 5, n = 4, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // op(a) is m x k, op(b) is k x n; a and b live as column blocks of wider matrices.
      const std::int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      const Floats av = random_floats(std::size_t(ar * (ac + 2)), 10);
      const Floats bv = random_floats(std::size_t(br * (bc + 1)), 11);
      const Floats cv = random_floats(std::size_t(m * n), 12);
      Mat a = mat(ar, ac + 2, av).col_block(1, ac);
      Mat b = mat(br, bc + 1, bv).col_block(0, bc);
      Mat c = mat(m, n, cv);
      dev().gemm(ta ? Transpose::kYes : Transpose::kNo, tb ? Transpose::kYes : Transpose::kNo, 1.5f,
                 a, b, -0.5f, c);
      Floats expected(std::size_t(m * n));
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t q = 0; q < k; ++q) {
            const double x = ta ? a.data[q * a.ld + i] : a.data[i * a.ld + q];
            const double y = tb ? b.data[j * b.ld + q] : b.data[q * b.ld + j];
            s += x * y;
          }
          expected[i * n + j] = float(1.5 * s - 0.5 * cv[i * n + j]);
        }
      expect_near_all(get(c), expected, 1e-5);
    }
  }
  // Empty inner dimension: c = beta * c.
  Mat c = mat(2, 2, {1, 2, 3, 4});
  dev().gemm(Transpose::kNo, Transpose::kNo, 1.f, mat(2, 0, {}), mat(0, 2, {}), 2.f, c);
  EXPECT_EQ(get(c), (Floats{2, 4, 6, 8}));
}

// GAT's layer-0 scores over input rows: el = x times the folded source vectors (columns 0..K-1),
// er = x's first rows times the destination ones (K..2K-1), on a view of a wider x; shapes that
// do not fit are refused.
TEST_F(CpuOps, GatInputScoresAreTheTwoProducts) {
  const std::int64_t rows = 6, width = 3, K = 2;
  const Floats xv = random_floats(std::size_t(rows * (width + 1)), 21);
  const Floats fv = random_floats(std::size_t(width * 2 * K), 22);
  const Mat x = mat(rows, width + 1, xv).col_block(1, width);
  const Mat folded = mat(width, 2 * K, fv);
  Mat el = dev().alloc(rows, K, "el"), er = dev().alloc(4, K, "er");
  dev().gat_input_scores(x, folded, int(K), el, er);
  Floats want_el(std::size_t(rows * K)), want_er(std::size_t(4 * K));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < 2 * K; ++j) {
      double sum = 0;
      for (std::int64_t c = 0; c < width; ++c)
        sum += double(x.data[r * x.ld + c]) * folded.data[c * folded.ld + j];
      if (j < K)
        want_el[std::size_t(r * K + j)] = float(sum);
      else if (r < 4)
        want_er[std::size_t(r * K + j - K)] = float(sum);
    }
  expect_near_all(get(el), want_el, 1e-5);
  expect_near_all(get(er), want_er, 1e-5);
  EXPECT_THROW(dev().gat_input_scores(x, folded, int(K), el, dev().alloc(rows + 1, K, "er")),
               std::exception);
  EXPECT_THROW(dev().gat_input_scores(x, folded.col_block(0, K), int(K), el, er), std::exception);
}

TEST_F(CpuOps, BiasActivationAndBackward) {
  Device& d = dev();
  Mat z = mat(2, 3, {-1, 0, 2, 0.5f, -2, 1});
  Mat bias = mat(1, 3, {0.5f, 0, -1});
  Mat out = d.alloc(2, 3, "out");
  d.bias_activation(z, bias.data, Activation::kRelu, out);
  EXPECT_EQ(get(out), (Floats{0, 0, 1, 1, 0, 0}));
  d.bias_activation(z, nullptr, Activation::kElu, out);
  expect_near_all(get(out), {std::expm1(-1.f), 0, 2, 0.5f, std::expm1(-2.f), 1}, 1e-6);
  d.bias_activation(z, bias.data, Activation::kNone, out);
  EXPECT_EQ(get(out), (Floats{-0.5f, 0, 1, 1, -2, 0}));
  Mat zz = mat(2, 3, {-1, 0, 2, 0.5f, -2, 1});
  d.bias_activation(zz, bias.data, Activation::kRelu, zz);  // in place
  EXPECT_EQ(get(zz), (Floats{0, 0, 1, 1, 0, 0}));

  Mat dout = mat(2, 3, {1, 2, 3, 4, 5, 6});
  Mat dz = d.alloc(2, 3, "dz");
  d.activation_backward(dout, z, Activation::kRelu, dz);  // 1 where z > 0 (z = 0 gives 0)
  EXPECT_EQ(get(dz), (Floats{0, 0, 3, 4, 0, 6}));
  d.activation_backward(dout, z, Activation::kElu, dz);  // exp(z) where z <= 0
  expect_near_all(get(dz), {std::exp(-1.f), 2, 3, 4, 5 * std::exp(-2.f), 6}, 1e-6);
  d.activation_backward(dout, z, Activation::kNone, dout);  // aliasing
  EXPECT_EQ(get(dout), (Floats{1, 2, 3, 4, 5, 6}));
}

TEST_F(CpuOps, ColumnSumsAxpyHeadMean) {
  Device& d = dev();
  Mat m = mat(3, 2, {1, 2, 3, 4, 5, 6});
  Mat out = mat(1, 2, {10, 20});
  d.add_column_sums(m, out.data);
  EXPECT_EQ(get(out), (Floats{19, 32}));
  d.axpy(2, -2.f, m.data, out.data);
  EXPECT_EQ(get(out), (Floats{17, 28}));
  // Large: 3000 rows of ones plus row index.
  std::vector<float> big(3000 * 3);
  for (int i = 0; i < 3000; ++i) big[i * 3] = 1, big[i * 3 + 1] = float(i), big[i * 3 + 2] = -1;
  Mat bm = mat(3000, 3, big);
  Mat sums = mat(1, 3, {});
  d.add_column_sums(bm, sums.data);
  EXPECT_EQ(get(sums), (Floats{3000, 4498500, -3000}));

  // 2 rows, 2 heads of width 2: mean over heads.
  Mat in = mat(2, 4, {1, 2, 3, 4, -1, 0, 1, 6});
  Mat mean = d.alloc(2, 2, "mean");
  d.head_mean(in, 2, mean);
  EXPECT_EQ(get(mean), (Floats{2, 3, 0, 3}));
  Mat din = d.alloc(2, 4, "din");
  d.head_mean_backward(mean, 2, din);
  EXPECT_EQ(get(din), (Floats{1, 1.5f, 1, 1.5f, 0, 1.5f, 0, 1.5f}));
}

// ---------------------------------------------------------------- loss

TEST_F(CpuOps, SoftmaxCrossEntropyHandValues) {
  Device& d = dev();
  // Row 0: [0, 0], label 0 -> loss ln 2, grad (p - onehot) * scale = [-.5, .5] * .5.
  // Row 1: [ln 3, 0], label 1 -> p = [.75, .25], loss = ln 4, grad = [.75, -.75] * .5.
  // Row 2: label -1 (unlabeled) -> no loss, zero grad. Row 3: not a training row (mask bits:
  // 1 train, 2 valid, 4 test; rows 0-3 are train, train + valid, test, valid).
  Mat logits = mat(4, 2, {0, 0, std::log(3.f), 0, 5, 1, 1, 2});
  Mat grad = mat(4, 2, Floats(8, 7.f));
  double loss = 1.0;
  std::int32_t predictions[4] = {-9, -9, -9, -9};
  SplitCounts counts;
  counts.labeled[2] = 5;  // accumulates
  d.softmax_cross_entropy(logits, idx({0, 1, -1, 0}), idx({1, 3, 4, 2}), 0.5f, grad,
                          LossOutputs{&loss, predictions, &counts});
  d.synchronize();
  EXPECT_NEAR(loss, 1.0 + std::log(2.0) + std::log(4.0), 1e-6);
  expect_near_all(get(grad), {-.25f, .25f, .375f, -.375f, 0, 0, 0, 0}, 1e-6);
  EXPECT_EQ(predictions[0], 0);  // tie -> lowest index
  EXPECT_EQ(predictions[1], 0);
  EXPECT_EQ(predictions[2], 0);
  EXPECT_EQ(predictions[3], 1);
  // Train: rows 0 (right) and 1 (wrong); valid: rows 1 and 3 (both wrong); test: row 2 has no
  // label.
  EXPECT_EQ(counts.labeled[0], 2);
  EXPECT_EQ(counts.correct[0], 1);
  EXPECT_EQ(counts.labeled[1], 2);
  EXPECT_EQ(counts.correct[1], 0);
  EXPECT_EQ(counts.labeled[2], 5);
  EXPECT_EQ(counts.correct[2], 0);
  // Evaluation: empty grad, huge logits stay finite.
  Mat big = mat(1, 3, {1000, -1000, 999});
  double eval_loss = 0;
  d.softmax_cross_entropy(big, idx({2}), Idx{}, 1.f, Mat{}, LossOutputs{&eval_loss, predictions});
  EXPECT_NEAR(eval_loss, 1.0 + std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_EQ(predictions[0], 0);
}

TEST_F(CpuOps, SoftmaxCrossEntropyGradientMatchesFiniteDifferences) {
  Device& d = dev();
  const std::int64_t rows = 5, classes = 4;
  Floats values = random_floats(std::size_t(rows * classes), 21, -2.f, 2.f);
  const std::vector<vertex_t> labels_v = {0, 3, 1, -1, 2};
  Idx labels = idx(labels_v), mask = idx({1, 1, 1, 1, 1});
  Mat logits = mat(rows, classes, values);
  Mat grad = d.alloc(rows, classes, "grad");
  double unused = 0;
  d.softmax_cross_entropy(logits, labels, mask, 1.f, grad, LossOutputs{&unused});
  const Floats g = get(grad);
  const float h = 1e-2f;
  for (std::int64_t i = 0; i < rows * classes; ++i) {
    const float saved = logits.data[i];
    double plus = 0, minus = 0;
    logits.data[i] = saved + h;
    d.softmax_cross_entropy(logits, labels, mask, 1.f, Mat{}, LossOutputs{&plus});
    logits.data[i] = saved - h;
    d.softmax_cross_entropy(logits, labels, mask, 1.f, Mat{}, LossOutputs{&minus});
    logits.data[i] = saved;
    const double step = double(saved + h) - double(saved - h);
    EXPECT_NEAR(g[i], (plus - minus) / step, 2e-4) << "logit " << i;
  }
}

// ---------------------------------------------------------------- GAT

// Chunk CSR, 3 rows over a merged buffer of 5 rows; each row starts with its self entry:
//   row 0: self 0, neighbors 3, 4
//   row 1: self 1, neighbors 0
//   row 2: self 2, neighbors 4, 1, 3
struct GatCase {
  std::vector<edge_t> indptr = {0, 3, 5, 9};
  std::vector<vertex_t> columns = {0, 3, 4, 1, 0, 2, 4, 1, 3};
  std::vector<vertex_t> keys = {7, 8, 9};
  std::int64_t rows = 3, cols = 5, heads = 2, width = 3;
};

// Double-precision GAT forward (concatenated heads) written from docs/model-math.md.
std::vector<double> naive_gat(const GatCase& g, const std::vector<double>& z,
                              const std::vector<double>& src, const std::vector<double>& dst,
                              const DropoutKey& key) {
  const std::int64_t K = g.heads, F = g.width, KF = K * F;
  std::vector<double> out(std::size_t(g.rows * KF), 0.0);
  for (std::int64_t i = 0; i < g.rows; ++i) {
    const edge_t b = g.indptr[i], e_end = g.indptr[i + 1];
    for (std::int64_t h = 0; h < K; ++h) {
      auto el = [&](std::int64_t u) {
        double s = 0;
        for (std::int64_t f = 0; f < F; ++f) s += z[u * KF + h * F + f] * src[h * F + f];
        return s;
      };
      double er = 0;
      for (std::int64_t f = 0; f < F; ++f) er += z[g.columns[b] * KF + h * F + f] * dst[h * F + f];
      std::vector<double> s;
      double top = -1e300;
      for (edge_t e = b; e < e_end; ++e) {
        double x = el(g.columns[e]) + er;
        x = x > 0 ? x : 0.2 * x;
        s.push_back(x);
        top = std::max(top, x);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (edge_t e = b; e < e_end; ++e) {
        double a = s[std::size_t(e - b)] / sum;
        if (key.rate > 0) {
          const float u = hash_to_unit(key_hash(key.seed, 2, key.epoch * 1024 + key.layer,
                                                std::uint64_t(g.keys[i]), (e - b) * 256 + h));
          a = u >= key.rate ? a / (1.0 - key.rate) : 0.0;
        }
        for (std::int64_t f = 0; f < F; ++f)
          out[i * KF + h * F + f] += a * z[g.columns[e] * KF + h * F + f];
      }
    }
  }
  return out;
}

double weighted_sum(const std::vector<double>& out, const Floats& weights) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * weights[i];
  return s;
}

void check_gat(Device& d, const DropoutKey& key) {
  const GatCase g;
  const std::int64_t K = g.heads, KF = g.heads * g.width, nnz = g.indptr.back();
  Csr a = d.upload_csr(g.indptr, g.columns, g.cols, "gat chunk");
  Idx keys = d.upload(g.keys, "keys");
  const Floats zv = random_floats(std::size_t(g.cols * KF), 31, -1.5f, 1.5f);
  const Floats srcv = random_floats(std::size_t(KF), 32), dstv = random_floats(std::size_t(KF), 33);
  const Floats weights = random_floats(std::size_t(g.rows * KF), 34);
  Mat z = d.alloc(g.cols, KF, "z"), src = d.alloc(1, KF, "src"), dst = d.alloc(1, KF, "dst");
  d.write(zv.data(), zv.size(), z.data);
  d.write(srcv.data(), KF, src.data);
  d.write(dstv.data(), KF, dst.data);
  Mat el = d.alloc(g.cols, K, "el"), er = d.alloc(g.rows, K, "er");
  Mat alpha = d.alloc(nnz, K, "alpha"), out = d.alloc(g.rows, KF, "out");
  d.gat_forward(a, z, src.data, dst.data, int(K), keys, key, el, er, alpha, out,
                SourceScores::kCompute);

  std::vector<double> z64(zv.begin(), zv.end()), src64(srcv.begin(), srcv.end()),
      dst64(dstv.begin(), dstv.end());
  const std::vector<double> expected = naive_gat(g, z64, src64, dst64, key);
  const Floats got = get(out);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
  // The source scores of every row by gat_source_scores (rows in reverse order), then a forward
  // that takes el as it is: the same scores and outputs; and it really does not recompute them.
  {
    std::vector<vertex_t> rows(std::size_t(g.cols));
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = vertex_t(rows.size() - 1 - i);
    Mat scores = d.alloc(g.cols, K, "el (given)"), out2 = d.alloc(g.rows, KF, "out (given)");
    Mat er2 = d.alloc(g.rows, K, "er (given)"), alpha2 = d.alloc(nnz, K, "alpha (given)");
    d.fill(scores, -7.f);
    d.gat_source_scores(z, d.upload(rows, "score rows"), src.data, int(K), scores);
    EXPECT_EQ(get(scores), get(el));
    d.gat_forward(a, z, src.data, dst.data, int(K), keys, key, scores, er2, alpha2, out2,
                  SourceScores::kKept);
    EXPECT_EQ(get(out2), got);
    d.fill(scores, 0.f);
    d.gat_forward(a, z, src.data, dst.data, int(K), keys, key, scores, er2, alpha2, out2,
                  SourceScores::kKept);
    EXPECT_EQ(get(scores), Floats(std::size_t(g.cols * K), 0.f));
  }
  // gat_coefficients: the forward's el, er and alpha bit for bit, without the weighted sums (a
  // backward pass that kept out), from scores it computes and from scores given.
  {
    Mat el2 = d.alloc(g.cols, K, "el (coefficients)"), er2 = d.alloc(g.rows, K, "er (coeff.)");
    Mat alpha2 = d.alloc(nnz, K, "alpha (coefficients)");
    d.fill(el2, -7.f);
    d.gat_coefficients(a, z, src.data, dst.data, int(K), el2, er2, alpha2, SourceScores::kCompute);
    EXPECT_EQ(get(el2), get(el));
    EXPECT_EQ(get(er2), get(er));
    EXPECT_EQ(get(alpha2), get(alpha));
    d.fill(alpha2, 0.f);
    d.gat_coefficients(a, z, src.data, dst.data, int(K), el2, er2, alpha2, SourceScores::kKept);
    EXPECT_EQ(get(alpha2), get(alpha));
  }
  // alpha rows of each head sum to 1 per destination row (before dropout).
  for (std::int64_t i = 0; i < g.rows; ++i)
    for (std::int64_t h = 0; h < K; ++h) {
      double s = 0;
      for (edge_t e = g.indptr[i]; e < g.indptr[i + 1]; ++e) s += alpha.data[e * K + h];
      EXPECT_NEAR(s, 1.0, 1e-6);
    }

  // Backward with dout = weights; accumulators start non-zero to check "+=".
  Mat dout = d.alloc(g.rows, KF, "dout");
  d.write(weights.data(), weights.size(), dout.data);
  Mat dz = d.alloc(g.cols, KF, "dz");
  d.fill(dz, 0.5f);
  Floats dsrc(std::size_t(KF), 0.25f), ddst(std::size_t(KF), -0.25f);
  d.gat_backward(a, z, src.data, dst.data, int(K), keys, key, el, er, alpha, out, dout, dz,
                 dsrc.data(), ddst.data());
  const Floats dzv = get(dz);

  // Central differences of L = sum(out * weights) in double.
  const double h = 1e-6;
  auto fd = [&](std::vector<double>& param, std::size_t i) {
    const double saved = param[i];
    param[i] = saved + h;
    const double plus = weighted_sum(naive_gat(g, z64, src64, dst64, key), weights);
    param[i] = saved - h;
    const double minus = weighted_sum(naive_gat(g, z64, src64, dst64, key), weights);
    param[i] = saved;
    return (plus - minus) / (2 * h);
  };
  for (std::size_t i = 0; i < z64.size(); ++i)
    EXPECT_NEAR(dzv[i] - 0.5, fd(z64, i), 2e-5) << "dz " << i;
  for (std::size_t i = 0; i < src64.size(); ++i)
    EXPECT_NEAR(dsrc[i] - 0.25, fd(src64, i), 2e-5) << "d att_src " << i;
  for (std::size_t i = 0; i < dst64.size(); ++i)
    EXPECT_NEAR(ddst[i] + 0.25, fd(dst64, i), 2e-5) << "d att_dst " << i;

  // And against differences of the float forward itself (coarser step, float tolerance).
  const float hf = 1e-2f;
  for (std::int64_t i = 0; i < g.cols * KF; i += 5) {
    const float saved = z.data[i];
    z.data[i] = saved + hf;
    d.gat_forward(a, z, src.data, dst.data, int(K), keys, key, el, er, alpha, out,
                  SourceScores::kCompute);
    Floats o = get(out);
    const double plus = weighted_sum(std::vector<double>(o.begin(), o.end()), weights);
    z.data[i] = saved - hf;
    d.gat_forward(a, z, src.data, dst.data, int(K), keys, key, el, er, alpha, out,
                  SourceScores::kCompute);
    o = get(out);
    const double minus = weighted_sum(std::vector<double>(o.begin(), o.end()), weights);
    z.data[i] = saved;
    EXPECT_NEAR(dzv[i] - 0.5, (plus - minus) / (2 * hf), 2e-3) << "float dz " << i;
  }
}

TEST_F(CpuOps, GatForwardAndBackwardMatchFiniteDifferences) {
  check_gat(dev(), DropoutKey{});
}

TEST_F(CpuOps, GatWithAttentionDropoutMatchesFiniteDifferences) {
  check_gat(dev(), DropoutKey{5, 2, 1, 0.4f});
}

// A random chunk (self entry first in each row) large enough for every parallel path; the
// results must be bitwise identical for 1 and 4 threads (the CPU backend is the reference).
TEST_F(CpuOps, LargeInputsGiveTheSameBitsForAnyThreadCount) {
  const std::int64_t rows = 600, cols = 900, K = 2, F = 16, KF = K * F, narrow = 7;
  std::mt19937 gen(17);
  std::vector<edge_t> indptr = {0};
  std::vector<vertex_t> columns, keys;
  for (std::int64_t r = 0; r < rows; ++r) {
    columns.push_back(vertex_t(r));  // self entry
    const int degree = int(gen() % 20);
    for (int k = 0; k < degree; ++k) columns.push_back(vertex_t(rows + gen() % (cols - rows)));
    indptr.push_back(edge_t(columns.size()));
    keys.push_back(vertex_t(1000 + r));
  }
  const std::int64_t nnz = indptr.back();
  Device& d = dev();
  Csr a = d.upload_csr(indptr, columns, cols, "chunk");
  Idx key_idx = idx(keys);
  Mat z = mat(cols, KF, random_floats(std::size_t(cols * KF), 40));
  Mat src = mat(1, KF, random_floats(std::size_t(KF), 41));
  Mat dst = mat(1, KF, random_floats(std::size_t(KF), 42));
  Mat dout = mat(rows, KF, random_floats(std::size_t(rows * KF), 43));
  Mat el = d.alloc(cols, K, "el"), er = d.alloc(rows, K, "er"), alpha = d.alloc(nnz, K, "a");
  Mat out = d.alloc(rows, KF, "out"), dz = d.alloc(cols, KF, "dz"), dx = d.alloc(cols, KF, "dx");
  Mat small = mat(5000, narrow, random_floats(std::size_t(5000 * narrow), 44));
  Mat acc = d.alloc(50, narrow, "acc");
  std::vector<vertex_t> targets(5000);
  for (auto& t : targets) t = vertex_t(gen() % 50);
  Idx target_idx = idx(targets);
  const DropoutKey key{9, 1, 0, 0.3f};

  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    d.fill(dz, 0.f);
    d.fill(dx, 0.f);
    d.fill(acc, 0.f);
    Floats att_grads(std::size_t(2 * KF), 0.f), sums(std::size_t(KF), 0.f);
    d.gat_forward(a, z, src.data, dst.data, int(K), key_idx, key, el, er, alpha, out,
                  SourceScores::kCompute);
    d.gat_backward(a, z, src.data, dst.data, int(K), key_idx, key, el, er, alpha, out, dout, dz,
                   att_grads.data(), att_grads.data() + KF);
    d.spmm_transpose_add(a, alpha.data, dout.col_block(0, 1), dx.col_block(0, 1));
    d.scatter_add_rows(small, target_idx, acc);
    d.add_column_sums(dz, sums.data());
    Floats all = get(out);
    for (const Mat& m : {dz, dx, acc}) {
      const Floats v = get(m);
      all.insert(all.end(), v.begin(), v.end());
    }
    all.insert(all.end(), att_grads.begin(), att_grads.end());
    all.insert(all.end(), sums.begin(), sums.end());
    return all;
  };
  const int saved = omp_get_max_threads();
  const Floats one = run(1), four = run(4);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  for (std::size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], four[i]) << "value " << i;

  // And the scatter-add is right (sums in double).
  std::vector<double> expected(50 * narrow, 0.0);
  for (std::size_t i = 0; i < targets.size(); ++i)
    for (std::int64_t j = 0; j < narrow; ++j)
      expected[targets[i] * narrow + j] += small.data[i * narrow + j];
  const Floats got = get(acc);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], 1e-4);
}

// ---------------------------------------------------------------- operators vs the reference

// One-layer GCN and GAT (2 heads averaged) composed from the operators on a whole small graph,
// with feature and attention dropout, against the double-precision reference's loss and
// gradients (tests/support/reference_model.hpp): the operators serve docs/model-math.md.
struct WholeGraph {
  Dataset d;
  std::vector<edge_t> indptr = {0};  // N+(v): self first, then dataset order without self loops
  std::vector<vertex_t> columns, ids, mask;
};

WholeGraph whole_graph() {
  WholeGraph g;
  // in-edges: 0<-1,2  1<-0,1(self),3  2<-()  3<-4,5,0  4<-3,6  5<-2,4  6<-0,1,2,3
  g.d = test::graph_from_in_neighbors(
      {{1, 2}, {0, 1, 3}, {}, {4, 5, 0}, {3, 6}, {2, 4}, {0, 1, 2, 3}});
  Dataset& d = g.d;
  d.feature_dim = 4;
  d.features = random_floats(28, 50);
  d.num_classes = 3;
  d.labels = {0, 1, 2, 0, 1, -1, 2};
  d.train = {0, 1, 3, 4, 5, 6};
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    g.columns.push_back(v);
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      if (d.indices[e] != v) g.columns.push_back(d.indices[e]);
    g.indptr.push_back(edge_t(g.columns.size()));
    g.ids.push_back(v);
    g.mask.push_back(v == 2 ? 0 : 1);
  }
  return g;
}

Floats to_floats(const std::vector<double>& v) {
  return Floats(v.begin(), v.end());
}

void expect_close(const Floats& got, const std::vector<double>& expected, const char* what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 2e-5 * (1 + std::fabs(expected[i])))
        << what << "[" << i << "]";
}

TEST_F(CpuOps, OneLayerGcnMatchesTheReference) {
  const WholeGraph g = whole_graph();
  const std::int64_t n = g.d.num_nodes, din = g.d.feature_dim, c = g.d.num_classes;
  test::ReferenceConfig config;
  config.model = "gcn";
  config.layers = 1;
  config.dropout = 0.3;
  config.seed = 12;
  test::ReferenceParameters params = test::init_reference_parameters(g.d, config);
  params.get("layer0.b") = {0.1, -0.2, 0.3};
  const test::ReferenceGradients ref = test::reference_gradients(g.d, config, params, 4);

  Device& d = dev();
  Csr a = d.upload_csr(g.indptr, g.columns, n, "N+");
  Floats norms;
  for (std::int64_t v = 0; v < n; ++v)
    for (edge_t e = g.indptr[v]; e < g.indptr[v + 1]; ++e) {
      const double du = double(g.indptr[g.columns[e] + 1] - g.indptr[g.columns[e]]);
      norms.push_back(float(1.0 / std::sqrt(du * double(g.indptr[v + 1] - g.indptr[v]))));
    }
  Mat values = mat(1, std::int64_t(norms.size()), norms);
  Mat x = mat(n, din, g.d.features), agg = d.alloc(n, din, "A"), z = d.alloc(n, c, "Z");
  Mat w = mat(din, c, to_floats(params.get("layer0.W"))), b = mat(1, c, {0.1f, -0.2f, 0.3f});
  Idx ids = idx(g.ids);
  d.dropout_rows(x, ids, ids, DropoutKey{12, 4, 0, 0.3f});
  d.spmm(a, values.data, x, agg);
  d.gemm(Transpose::kNo, Transpose::kNo, 1.f, agg, w, 0.f, z);
  d.bias_activation(z, b.data, Activation::kNone, z);
  Mat dz = d.alloc(n, c, "dZ"), dw = d.alloc(din, c, "dW"), db = d.alloc(1, c, "db");
  double loss = 0;
  std::vector<std::int32_t> labels(g.d.labels.begin(), g.d.labels.end());
  d.softmax_cross_entropy(z, idx(labels), idx(g.mask), 1.f / float(g.d.train.size()), dz,
                          LossOutputs{&loss});
  d.gemm(Transpose::kYes, Transpose::kNo, 1.f, agg, dz, 1.f, dw);
  d.add_column_sums(dz, db.data);
  EXPECT_NEAR(loss / double(g.d.train.size()), ref.loss, 1e-5);
  expect_close(get(dw), ref.gradients.get("layer0.W"), "dW");
  expect_close(get(db), ref.gradients.get("layer0.b"), "db");
}

TEST_F(CpuOps, OneLayerGatWithTwoHeadsMatchesTheReference) {
  const WholeGraph g = whole_graph();
  const std::int64_t n = g.d.num_nodes, din = g.d.feature_dim, F = g.d.num_classes, K = 2;
  test::ReferenceConfig config;
  config.model = "gat";
  config.layers = 1;
  config.output_heads = int(K);
  config.dropout = 0.3;
  config.attention_dropout = 0.25;
  config.seed = 13;
  const test::ReferenceParameters params = test::init_reference_parameters(g.d, config);
  const test::ReferenceGradients ref = test::reference_gradients(g.d, config, params, 2);

  Device& d = dev();
  Csr a = d.upload_csr(g.indptr, g.columns, n, "N+");
  const std::int64_t nnz = g.indptr.back();
  Mat x = mat(n, din, g.d.features), zm = d.alloc(n, K * F, "Zm");
  Mat w = mat(din, K * F, to_floats(params.get("layer0.W")));
  Mat src = mat(1, K * F, to_floats(params.get("layer0.att_src")));
  Mat dst = mat(1, K * F, to_floats(params.get("layer0.att_dst")));
  Mat b = mat(1, F, to_floats(params.get("layer0.b")));
  Mat el = d.alloc(n, K, "el"), er = d.alloc(n, K, "er"), alpha = d.alloc(nnz, K, "alpha");
  Mat o = d.alloc(n, K * F, "O"), z = d.alloc(n, F, "Z");
  Idx ids = idx(g.ids);
  const DropoutKey attention{13, 2, 0, 0.25f};
  d.dropout_rows(x, ids, ids, DropoutKey{13, 2, 0, 0.3f});
  d.gemm(Transpose::kNo, Transpose::kNo, 1.f, x, w, 0.f, zm);
  d.gat_forward(a, zm, src.data, dst.data, int(K), ids, attention, el, er, alpha, o,
                SourceScores::kCompute);
  d.head_mean(o, int(K), z);
  d.bias_activation(z, b.data, Activation::kNone, z);
  Mat dz = d.alloc(n, F, "dZ"), d_o = d.alloc(n, K * F, "dO"), dzm = d.alloc(n, K * F, "dZm");
  Mat dw = d.alloc(din, K * F, "dW"), db = d.alloc(1, F, "db");
  Mat dsrc = d.alloc(1, K * F, "dsrc"), ddst = d.alloc(1, K * F, "ddst");
  double loss = 0;
  std::vector<std::int32_t> labels(g.d.labels.begin(), g.d.labels.end());
  d.softmax_cross_entropy(z, idx(labels), idx(g.mask), 1.f / float(g.d.train.size()), dz,
                          LossOutputs{&loss});
  d.add_column_sums(dz, db.data);
  d.head_mean_backward(dz, int(K), d_o);
  d.gat_backward(a, zm, src.data, dst.data, int(K), ids, attention, el, er, alpha, o, d_o, dzm,
                 dsrc.data, ddst.data);
  d.gemm(Transpose::kYes, Transpose::kNo, 1.f, x, dzm, 1.f, dw);
  EXPECT_NEAR(loss / double(g.d.train.size()), ref.loss, 1e-5);
  expect_close(get(dw), ref.gradients.get("layer0.W"), "dW");
  expect_close(get(db), ref.gradients.get("layer0.b"), "db");
  expect_close(get(dsrc), ref.gradients.get("layer0.att_src"), "d att_src");
  expect_close(get(ddst), ref.gradients.get("layer0.att_dst"), "d att_dst");
}

// ---------------------------------------------------------------- optimizer, all-reduce

TEST_F(CpuOps, SgdStepWithWeightDecay) {
  Floats w = {1, -2}, g = {0.5f, 0.5f};
  dev().sgd_step(2, 0.1f, 0.1f, w.data(), g.data());
  EXPECT_FLOAT_EQ(g[0], 0.6f);  // g + wd w
  EXPECT_FLOAT_EQ(w[0], 0.94f);
  EXPECT_FLOAT_EQ(w[1], -2.f - 0.1f * 0.3f);
}

TEST_F(CpuOps, AdamTwoStepsMatchHandComputation) {
  // lr .1, betas (.9, .999), eps 1e-8, weight decay .1, w = 1, gradient .5 at both steps:
  //   step 1: g = .6, m = .06, v = .00036, w = 1 - .1 * .6 / (.6 + 1e-8) = 0.90000000166
  //   step 2: g = .5 + .1 * .9 = .59, m = .113, v = .00070774,
  //           w = .9 - .1 * (.113 / .19) / (sqrt(.00070774 / .001999) + 1e-8) = 0.80004734
  float w = 1, m = 0, v = 0, g = 0.5f;
  dev().adam_step(1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1, &w, &g, &m, &v);
  EXPECT_NEAR(w, 0.9000000016666666, 1e-6);
  EXPECT_NEAR(m, 0.06, 1e-7);
  EXPECT_NEAR(v, 0.00036, 1e-8);  // 1 - 0.999f is 0.00099998713 in float
  g = 0.5f;
  dev().adam_step(1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 2, &w, &g, &m, &v);
  EXPECT_NEAR(w, 0.8000473404883316, 2e-6);
  EXPECT_NEAR(m, 0.113, 1e-7);
  EXPECT_NEAR(v, 0.00070774, 2e-8);
}

TEST_F(CpuOps, AllReduceSumsIntoEveryDevice) {
  make(3);
  Mat a = mat(1, 3, {1, 2, 3}, 0), b = mat(1, 3, {10, 20, 30}, 1), c = mat(1, 3, {0, 0, 1}, 2);
  backend->all_reduce_sum({a.data, b.data, c.data}, 3);
  const Floats expected = {11, 22, 34};
  EXPECT_EQ(get(a), expected);
  EXPECT_EQ(get(b), expected);
  EXPECT_EQ(get(c), expected);
  EXPECT_EQ(backend->num_devices(), 3);
  EXPECT_EQ(dev(2).index(), 2);
}

TEST(CpuBackend, ThreadOptionAndBadOptions) {
  BackendOptions options;
  options.threads = 2;
  auto backend = make_cpu_backend(options);
  EXPECT_EQ(backend->name(), "cpu");
  options.partitions = 0;
  EXPECT_THROW(make_cpu_backend(options), InputError);
}

}  // namespace
}  // namespace sluice
