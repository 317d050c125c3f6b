// GPU tests of the CUDA backend (kernels/cuda): every CudaDevice operator against a plain
// double-precision host reference of docs/model-math.md on random inputs; transfers between
// logical devices sharing one GPU (direct and host-staged); the memory budget. Without a GPU
// every test skips and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "kernels/bfloat16.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/row_spmm.hpp"
#include "kernels/cuda_memory_rules.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"

namespace sluice {
namespace {

using Host = std::vector<float>;

// A dense host matrix (row-major, ld = cols) for references.
struct HostMatrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> v;
  HostMatrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), v(r * c, 0.0) {}
  double& at(std::int64_t r, std::int64_t c) { return v[r * cols + c]; }
  double at(std::int64_t r, std::int64_t c) const { return v[r * cols + c]; }
};

Host random_floats(std::size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Host out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// Norm-wise relative error ||a - b|| / max(||b||, tiny).
double relative_error(const Host& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}
std::vector<double> to_double(const Host& h) {
  return std::vector<double>(h.begin(), h.end());
}

constexpr double kTolerance = 1e-5;

// Reads a (possibly strided) device matrix into a dense host vector.
Host download_matrix(Device& d, Mat m) {
  d.synchronize();
  Host full(m.rows == 0 ? 0 : (m.rows - 1) * m.ld + m.cols);
  if (!full.empty()) d.read(m.data, static_cast<std::int64_t>(full.size()), full.data());
  Host out(m.rows * m.cols);
  for (std::int64_t r = 0; r < m.rows; ++r)
    for (std::int64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = full[r * m.ld + c];
  return out;
}

// Best of 5 host-clock timings of f (after one warm-up call), each up to d.synchronize(), in ms.
template <typename F>
double best_ms(Device& d, F&& f) {
  f();
  d.synchronize();
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    d.synchronize();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available())
      GTEST_SKIP() << "no CUDA GPU on this machine: the CUDA backend tests run on the GPU "
                      "machine (scripts/device-test.sh)";
    backend_ = make_backend(1);
  }
  static test::BackendOptionsBuilder one_gpu(int partitions) {
    return test::backend_options(partitions).gpus(1);
  }
  static std::unique_ptr<Backend> make_backend(int partitions, std::int64_t budget = 0) {
    return make_cuda_backend(one_gpu(partitions).memory_budget(budget));
  }
  Device& dev() { return backend_->device(0); }

  // Device matrix of the given shape filled with `values` (rows x cols, row-major).
  static Mat upload(Device& d, std::int64_t rows, std::int64_t cols, const Host& values) {
    Mat m = d.alloc(rows, cols, "test matrix");
    if (!values.empty()) d.write(values.data(), rows * cols, m.data);
    return m;
  }
  Mat upload(std::int64_t rows, std::int64_t cols, const Host& values) {
    return upload(dev(), rows, cols, values);
  }
  Host download(Mat m) { return download_matrix(dev(), m); }
  // A pinned host matrix of random values, and the values (rows x ld, row-major).
  struct RandomHost {
    HostMat matrix;
    Host values;
  };
  RandomHost random_host(std::int64_t rows, std::int64_t cols, const char* what) {
    HostMat h = backend_->alloc_host(rows, cols, what);
    Host values = random_floats(rows * h.ld, rng_);
    std::copy(values.begin(), values.end(), h.fp32());
    return {h, std::move(values)};
  }

  std::unique_ptr<Backend> backend_;
  std::mt19937 rng_{12345};
};

// ---------------------------------------------------------------------------------------------
// Transfers

TEST_F(CudaOps, LoadRowsZeroCopyMatchesHostGather) {
  for (std::int64_t cols : {64, 37, 3, 130}) {
    const std::int64_t host_rows = 500;
    const auto [h, values] = random_host(host_rows, cols, "features");
    std::vector<vertex_t> src_rows, dst_rows;
    for (vertex_t r = 0; r < host_rows; r += 3) src_rows.push_back(r);  // sorted subset
    dst_rows.resize(src_rows.size());
    std::iota(dst_rows.begin(), dst_rows.end(), 0);
    std::shuffle(dst_rows.begin(), dst_rows.end(), rng_);
    Mat dst = dev().alloc(static_cast<std::int64_t>(dst_rows.size()), cols, "dst");
    dev().reset_counters();
    dev().load_rows(h, dev().upload(src_rows, "src"), dev().upload(dst_rows, "dst rows"), dst);
    const Host got = download(dst);
    for (std::size_t i = 0; i < src_rows.size(); ++i)
      for (std::int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[dst_rows[i] * cols + c], values[src_rows[i] * cols + c])
            << "cols " << cols << " row " << i;
    EXPECT_EQ(dev().counters().h2d_gather_rows, static_cast<std::int64_t>(src_rows.size()));
    EXPECT_EQ(dev().counters().h2d_gather_bytes,
              static_cast<std::int64_t>(src_rows.size()) * cols * 4);
  }
}

// Transfers over the host link on their capped grids: load_rows gives a warp tiles of rows (the
// tile grows with the row count) and a row to 8, 16 or 32 lanes by its width; flush_add_rows and
// flush_store_rows a warp per row. Every width class, aligned and scalar rows, and row counts
// from one to several tiles a warp, with partial tiles and partial steps at the end.
TEST_F(CudaOps, HostLinkTransfersCoverEveryWidthAndRowCount) {
  for (const std::int64_t cols : {4, 8, 30, 48, 64, 100, 37}) {
    for (const std::int64_t n : {1, 7, 3001, 70001}) {
      SCOPED_TRACE(testing::Message() << "cols " << cols << ", rows " << n);
      const std::int64_t host_rows = 2 * n + 5;
      const auto [h, values] = random_host(host_rows, cols, "host rows");
      std::vector<vertex_t> host_ids(static_cast<std::size_t>(n)), device_ids(host_ids.size());
      for (std::int64_t i = 0; i < n; ++i) host_ids[i] = static_cast<vertex_t>(2 * i + 1);
      std::iota(device_ids.begin(), device_ids.end(), 0);
      std::shuffle(device_ids.begin(), device_ids.end(), rng_);
      const Idx host_idx = dev().upload(host_ids, "host ids");
      const Idx device_idx = dev().upload(device_ids, "device ids");
      Mat dst = dev().alloc(n, cols, "loaded");
      dev().load_rows(h, host_idx, device_idx, dst);
      const Host loaded = download(dst);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(loaded[device_ids[i] * cols + c], values[host_ids[i] * h.ld + c])
              << "load_rows, position " << i << ", column " << c;
      // The loaded rows added back where they came from double them; the rows between stay.
      dev().flush_add_rows(dst, device_idx, host_idx, h);
      dev().synchronize();
      for (std::int64_t r = 0; r < host_rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const float before = values[r * h.ld + c];
          ASSERT_EQ(h.fp32()[r * h.ld + c], r % 2 == 1 && r < 2 * n ? before + before : before)
              << "flush_add_rows, host row " << r << ", column " << c;
        }
      // Stored into the even rows, shifted down by one.
      std::vector<vertex_t> even(host_ids);
      for (auto& r : even) --r;
      dev().flush_store_rows(dst, device_idx, dev().upload(even, "even ids"), h);
      dev().synchronize();
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(h.fp32()[even[i] * h.ld + c], values[host_ids[i] * h.ld + c])
              << "flush_store_rows, position " << i << ", column " << c;
    }
  }
}
TEST_F(CudaOps, LoadAndStoreBlocks) {
  const std::int64_t rows = 40, cols = 19;
  const auto [h, values] = random_host(rows, cols, "h");
  Mat d = dev().alloc(10, cols, "block");
  dev().load_block(h, 7, d);
  const Host got = download(d);
  for (std::int64_t i = 0; i < 10 * cols; ++i) ASSERT_EQ(got[i], values[7 * cols + i]);
  HostMat out = backend_->alloc_host(rows, cols, "out");
  dev().store_block(d, out, 30);
  dev().synchronize();
  for (std::int64_t i = 0; i < 10 * cols; ++i) ASSERT_EQ(out.fp32()[30 * cols + i], got[i]);
  EXPECT_EQ(out.fp32()[0], 0.f);  // alloc_host zeroes
  EXPECT_EQ(dev().counters().h2d_block_bytes, 10 * cols * 4);
  EXPECT_EQ(dev().counters().d2h_bytes, 10 * cols * 4);
}

// Device-local indexed copies and adds (the kept backward tail).
// bf16 host matrices (HostPrecision::kBf16): every transfer agrees bit for bit with the shared
// conversion of kernels/bfloat16.hpp that the CPU backend uses: loads and blocks widen, stores
// and flushes round on the GPU, flush additions round the row and then the sum (on CPU threads),
// and the rounding operations. Widths of 64 and 130 take the vector path, 37 and 3 the scalar
// tail, and a column block starting at column 1 the unaligned path; values include exact ties.
TEST_F(CudaOps, Bf16HostRowsMatchTheSharedConversion) {
  for (const std::int64_t width : {64, 37, 3, 130})
    for (const std::int64_t first_col : {0, 1}) {
      SCOPED_TRACE(cat("width ", width, " from column ", first_col));
      const std::int64_t rows = 60, cols = width - first_col;
      if (cols <= 0) continue;
      Host values = random_floats(std::size_t(rows * cols), rng_, -4.f, 4.f);
      // Every seventh value halfway between two bf16 values.
      for (std::size_t i = 0; i < values.size(); i += 7)
        values[i] = fp32_from_bits((fp32_bits(values[i]) & 0xffff0000u) | 0x8000u);
      const HostMat full = backend_->alloc_host(rows, width, HostPrecision::kBf16, "bf16 host");
      const HostMat h = full.col_block(first_col, cols);
      auto host_value = [&](std::int64_t r, std::int64_t c) { return h.bf16()[r * h.ld + c]; };
      // Stores: store_block rounds rows 10..29; flush_store_rows rows 40..49 from 0..9.
      const Mat d = upload(rows, cols, values);
      dev().store_block(d.row_block(10, 20), h, 10);
      std::vector<vertex_t> src(10), dst(10);
      std::iota(src.begin(), src.end(), 0);
      std::iota(dst.begin(), dst.end(), 40);
      dev().flush_store_rows(d, dev().upload(src, "src"), dev().upload(dst, "dst"), h);
      dev().synchronize();
      for (std::int64_t r = 0; r < 20; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(host_value(10 + r, c), bf16_from_float(values[(10 + r) * cols + c]));
      for (std::int64_t r = 0; r < 10; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(host_value(40 + r, c), bf16_from_float(values[r * cols + c]));
      // Flush adds into rows 10..19 from device rows 50..59.
      std::vector<bf16_t> before(std::size_t(10 * cols));
      for (std::int64_t r = 0; r < 10; ++r)
        for (std::int64_t c = 0; c < cols; ++c) before[r * cols + c] = host_value(10 + r, c);
      std::iota(src.begin(), src.end(), 50);
      std::iota(dst.begin(), dst.end(), 10);
      dev().flush_add_rows(d, dev().upload(src, "src"), dev().upload(dst, "dst"), h);
      dev().synchronize();
      for (std::int64_t r = 0; r < 10; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(host_value(10 + r, c),
                    bf16_from_float(float_from_bf16(before[r * cols + c]) +
                                    round_to_bf16(values[(50 + r) * cols + c])));
      // Loads widen exactly: rows 10..29 as a block, rows 40, 43, ... by index.
      Mat block = dev().alloc(20, cols, "block");
      dev().load_block(h, 10, block);
      Host got = download(block);
      for (std::int64_t r = 0; r < 20; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(got[r * cols + c], float_from_bf16(host_value(10 + r, c)));
      const std::vector<vertex_t> picked = {40, 43, 46, 49};
      Mat gathered = dev().alloc(4, cols, "gathered");
      dev().load_rows(h, dev().upload(picked, "picked"), Idx{}, gathered);
      got = download(gathered);
      for (std::size_t i = 0; i < picked.size(); ++i)
        for (std::int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(got[i * cols + c], float_from_bf16(host_value(picked[i], c)));
      // Rounding on the device: rows 3 and 5, then all.
      Mat m = upload(rows, cols, values);
      dev().round_rows_to_host_precision(m, dev().upload({3, 5}, "rounded rows"),
                                         HostPrecision::kBf16);
      got = download(m);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const float v = values[r * cols + c];
          ASSERT_EQ(got[r * cols + c], r == 3 || r == 5 ? round_to_bf16(v) : v);
        }
      dev().round_to_host_precision(m, HostPrecision::kBf16);
      got = download(m);
      for (std::int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(got[i], round_to_bf16(values[i]));
    }
  // Link bytes count 2 per element.
  dev().reset_counters();
  const HostMat h = backend_->alloc_host(8, 16, HostPrecision::kBf16, "counted");
  Mat d = dev().alloc(8, 16, "counted rows");
  dev().load_block(h, 0, d);
  dev().store_block(d, h, 0);
  dev().load_rows(h, dev().upload({1, 2, 3}, "three"), Idx{}, d);
  dev().synchronize();
  EXPECT_EQ(dev().counters().h2d_block_bytes, 8 * 16 * 2);
  EXPECT_EQ(dev().counters().d2h_bytes, 8 * 16 * 2);
  EXPECT_EQ(dev().counters().h2d_gather_bytes, 3 * 16 * 2);
}

// A matrix moved into device memory (try_make_resident) holds what the host matrix held, and every
// transfer of a vertex matrix (stores, first flushes, flush additions, block loads, gathers) leaves
// it with the same elements as the same transfers leave a host matrix, in fp32 and bf16, bit for
// bit; its bytes count as resident, not as host-link bytes.
TEST_F(CudaOps, ResidentMatricesTakeTheSameTransfersAsHostOnes) {
  for (const HostPrecision precision : {HostPrecision::kFp32, HostPrecision::kBf16})
    for (const std::int64_t cols : {64, 37}) {
      SCOPED_TRACE(cat(host_precision_name(precision), ", width ", cols));
      const std::int64_t rows = 80;
      const HostMat host = backend_->alloc_host(rows, cols, precision, "host copy");
      HostMat moved = backend_->alloc_host(rows, cols, precision, "moved copy");
      const Host start = random_floats(std::size_t(rows * cols), rng_, -4.f, 4.f);
      for (const HostMat& m : {host, moved})
        for (std::int64_t i = 0; i < rows * cols; ++i) {
          if (precision == HostPrecision::kBf16)
            m.bf16()[i] = bf16_from_float(start[std::size_t(i)]);
          else
            m.fp32()[i] = start[std::size_t(i)];
        }
      moved = dev().try_make_resident(moved, "moved copy");
      ASSERT_EQ(moved.residence, Residence::kDevice);
      const Mat d = upload(rows, cols, random_floats(std::size_t(rows * cols), rng_, -4.f, 4.f));
      std::vector<vertex_t> src(12), dst(12);
      std::iota(src.begin(), src.end(), 3);
      for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = vertex_t(79 - 5 * i);
      const Idx src_rows = dev().upload(src, "src"), dst_rows = dev().upload(dst, "dst");
      const std::vector<vertex_t> picked = {0, 7, 13, 40, 79};
      const Idx picked_rows = dev().upload(picked, "picked");
      std::vector<Host> loaded;
      std::vector<TransferCounters> counted;
      for (const HostMat& m : {host, moved}) {
        dev().reset_counters();
        dev().store_block(d.row_block(20, 10), m, 30);
        dev().flush_store_rows(d, src_rows, dst_rows, m);
        dev().flush_add_rows(d, dst_rows, src_rows, m);
        dev().flush_add_rows(d, src_rows, src_rows, m);
        dev().join_host_adds();  // the loads below read added rows
        const Mat block = dev().alloc(25, cols, "block");
        dev().load_block(m, 28, block);
        const Mat gathered = dev().alloc(std::int64_t(picked.size()), cols, "gathered");
        dev().load_rows(m, picked_rows, Idx{}, gathered);
        Host got = download(block);
        const Host rows_got = download(gathered);
        got.insert(got.end(), rows_got.begin(), rows_got.end());
        std::vector<char> elements(std::size_t(rows * cols * m.element_bytes()));
        dev().read_matrix(m, elements.data());
        for (std::size_t i = 0; i < elements.size(); i += 4) {
          float word = 0;
          std::memcpy(&word, elements.data() + i, 4);
          got.push_back(word);
        }
        loaded.push_back(got);
        counted.push_back(dev().counters());
      }
      ASSERT_EQ(loaded[0].size(), loaded[1].size());
      for (std::size_t i = 0; i < loaded[0].size(); ++i)
        ASSERT_EQ(fp32_bits(loaded[1][i]), fp32_bits(loaded[0][i])) << "value " << i;
      const std::int64_t element = element_bytes(precision);
      const TransferCounters& on_host = counted[0];
      const TransferCounters& resident = counted[1];
      EXPECT_EQ(on_host.h2d_gather_bytes, std::int64_t(picked.size()) * cols * element);
      EXPECT_EQ(on_host.h2d_block_bytes, 25 * cols * element);
      EXPECT_EQ(on_host.d2h_bytes, (10 + 3 * 12) * cols * element);
      // The two additions into the host matrix copy their host rows' ids (device memory).
      EXPECT_EQ(on_host.d2h_index_bytes, 2 * 12 * std::int64_t(sizeof(vertex_t)));
      EXPECT_EQ(resident.h2d_gather_rows + resident.h2d_gather_bytes + resident.h2d_block_bytes +
                    resident.d2h_bytes + resident.d2h_index_bytes,
                0);
      EXPECT_EQ(resident.resident_bytes,
                on_host.h2d_gather_bytes + on_host.h2d_block_bytes + on_host.d2h_bytes);
    }
}

// try_make_resident places a matrix, or a block of its rows, only within the budget, with the
// constants' headroom left; refused, the host matrix comes back as it was.
TEST_F(CudaOps, ResidentMatricesKeepTheBudget) {
  const std::int64_t budget = std::int64_t(8) << 20;  // headroom: 1 MiB
  auto backend = make_backend(1, budget);
  Device& d = backend->device(0);
  const HostMat big = backend->alloc_host(1 << 16, 30, "7.5 MiB");  // + 1 MiB > budget
  const HostMat kept = d.try_make_resident(big, "7.5 MiB");
  EXPECT_EQ(kept.residence, Residence::kHost);
  EXPECT_EQ(kept.data, big.data);
  EXPECT_EQ(d.bytes_in_use(), 0);
  const HostMat small = backend->alloc_host(1 << 16, 16, "4 MiB");
  small.fp32()[17] = 2.5f;
  const HostMat moved = d.try_make_resident(small, "4 MiB");
  ASSERT_EQ(moved.residence, Residence::kDevice);
  EXPECT_EQ(d.bytes_in_use(), std::int64_t(4) << 20);
  float value = 0;
  d.read(moved.fp32() + 17, 1, &value);
  EXPECT_EQ(value, 2.5f);
  EXPECT_THROW(d.try_make_resident(backend->alloc_host(8, 8, "view").col_block(0, 4), "view"),
               std::exception);
  // A block of rows (a partition's range) is copied alone; the host matrix stays until freed.
  const HostMat whole = backend->alloc_host(100, 4, "whole");
  for (std::int64_t i = 0; i < 400; ++i) whole.fp32()[i] = float(i);
  const std::int64_t before = d.bytes_in_use();
  const HostMat rows = d.try_make_resident(whole.row_block(60, 30), "rows 60..89");
  ASSERT_EQ(rows.residence, Residence::kDevice);
  EXPECT_EQ(rows.rows, 30);
  EXPECT_EQ(d.bytes_in_use() - before, cuda::rounded(30 * 4 * 4));
  EXPECT_EQ(whole.fp32()[399], 399.f);
  backend->release_host(whole);
  std::vector<float> copied(30 * 4);
  d.read_matrix(rows, copied.data());
  for (std::int64_t i = 0; i < 120; ++i) ASSERT_EQ(copied[std::size_t(i)], float(240 + i));
  // A released working matrix gives its bytes back.
  const std::int64_t kept_bytes = d.bytes_in_use();
  const Mat scratch = d.try_alloc(1000, 16, "released");
  ASSERT_FALSE(scratch.empty());
  EXPECT_GT(d.bytes_in_use(), kept_bytes);
  d.release(scratch);
  EXPECT_EQ(d.bytes_in_use(), kept_bytes);
}

// Wide rows a warp each; narrow ones (at most 16 words) a group of lanes each, several rows a
// warp: 16-byte words (rows of a multiple of 4 floats) or single floats.
TEST_F(CudaOps, CopyRowsCopiesOrAddsIndexedRows) {
  for (std::int64_t cols : {64, 37, 1, 3, 5, 8, 12, 16, 17, 64 + 4}) {
    const std::int64_t block_rows = 20;
    Host want = random_floats(block_rows * cols, rng_);
    Mat block = upload(block_rows, cols, want);
    dev().reset_counters();
    const std::int64_t src_rows = 30;
    const Host src_values = random_floats(src_rows * cols, rng_);
    Mat src = upload(src_rows, cols, src_values);
    const std::vector<vertex_t> from = {29, 2, 7}, to = {1, 19, 0};
    dev().copy_rows(src, dev().upload(from, "from"), dev().upload(to, "to"), block,
                    RowCopy::kOverwrite);
    for (std::size_t i = 0; i < from.size(); ++i)
      for (std::int64_t c = 0; c < cols; ++c)
        want[to[i] * cols + c] = src_values[from[i] * cols + c];
    EXPECT_EQ(download(block), want) << cols;
    const std::vector<vertex_t> add_from = {5, 5}, add_to = {3, 19};
    dev().copy_rows(src, dev().upload(add_from, "from"), dev().upload(add_to, "to"), block,
                    RowCopy::kAdd);
    for (std::size_t i = 0; i < add_from.size(); ++i)
      for (std::int64_t c = 0; c < cols; ++c)
        want[add_to[i] * cols + c] += src_values[add_from[i] * cols + c];
    EXPECT_EQ(download(block), want) << cols;  // one addition per element: exact
    EXPECT_EQ(dev().counters().d2h_bytes, 0);
    EXPECT_EQ(dev().counters().p2p_bytes, 0);
  }
}

TEST_F(CudaOps, GatherScatterZeroFillCopy) {
  const std::int64_t rows = 300, cols = 45;
  const Host values = random_floats(rows * cols, rng_);
  Mat src = upload(rows, cols, values);
  std::vector<vertex_t> idx;
  std::uniform_int_distribution<int> pick(0, rows - 1);
  for (int i = 0; i < 200; ++i) idx.push_back(pick(rng_));  // repeats on purpose
  Idx index = dev().upload(idx, "idx");
  Mat compact = dev().alloc(200, cols, "compact");
  dev().gather_rows(src, index, compact);
  const Host gathered = download(compact);
  for (int i = 0; i < 200; ++i)
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(gathered[i * cols + c], values[idx[i] * cols + c]);

  Mat acc = upload(rows, cols, values);
  dev().scatter_add_rows(compact, index, acc);
  std::vector<double> want = to_double(values);
  for (int i = 0; i < 200; ++i)
    for (std::int64_t c = 0; c < cols; ++c) want[idx[i] * cols + c] += gathered[i * cols + c];
  EXPECT_LT(relative_error(download(acc), want), kTolerance);

  std::vector<vertex_t> zero_idx = {0, 5, 299};
  dev().zero_rows(acc, dev().upload(zero_idx, "z"));
  const Host zeroed = download(acc);
  for (vertex_t r : zero_idx)
    for (std::int64_t c = 0; c < cols; ++c) ASSERT_EQ(zeroed[r * cols + c], 0.f);

  Mat block = src.col_block(3, 20);  // strided view
  dev().fill(block, 2.5f);
  const Host filled = download(src);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(filled[r * cols + c], (c >= 3 && c < 23) ? 2.5f : values[r * cols + c]);

  Mat copy = dev().alloc(rows, 20, "copy");
  dev().copy(block, copy);
  for (float x : download(copy)) ASSERT_EQ(x, 2.5f);
}

std::string line_with(const std::string& text, const std::string& what) {
  const std::size_t at = text.find(what);
  if (at == std::string::npos) return "";
  const std::size_t begin = text.rfind('\n', at) + 1, end = text.find('\n', at);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// BackendOptions::op_times: every operation is timed per name; the first pass sequence (warm-up)
// is left out, and the sums are logged when the device goes away. Off: nothing is logged.
TEST_F(CudaOps, OperationTimesLeaveOutTheWarmUp) {
  auto log_of = [](bool op_times) {
    const LogLevel level = log_level();
    set_log_level(LogLevel::kInfo);
    testing::internal::CaptureStderr();
    {
      auto backend = make_cuda_backend(one_gpu(1).op_times(op_times));
      Device& d = backend->device(0);
      Mat a = d.alloc(64, 32, "a"), b = d.alloc(32, 16, "b"), c = d.alloc(64, 16, "c");
      double seconds[kPhases] = {};
      d.gemm(Transpose::kNo, Transpose::kNo, 1.f, a, b, 0.f, c);  // the warm-up pass sequence
      d.synchronize();
      d.take_phase_times(seconds, nullptr);
      for (int i = 0; i < 3; ++i) d.gemm(Transpose::kNo, Transpose::kNo, 1.f, a, b, 0.f, c);
      d.gemm(Transpose::kYes, Transpose::kNo, 1.f, a, c, 0.f, b);
      d.synchronize();
      d.take_phase_times(seconds, nullptr);
    }
    std::string log = testing::internal::GetCapturedStderr();
    set_log_level(level);
    return log;
  };
  const std::string on = log_of(true);
  EXPECT_NE(line_with(on, "compute  gemm A B ").find(" 3 calls"), std::string::npos) << on;
  EXPECT_NE(line_with(on, "compute  gemm A^T B ").find(" 1 calls"), std::string::npos) << on;
  EXPECT_EQ(log_of(false).find("op times"), std::string::npos);
}

// flush_add_rows into a host matrix: the GPU stages the rows, CPU threads add them. Ten flushes
// (more than the staging slots) into overlapping rows land in order, bit for bit the sums of a
// loop in issue order, at widths 33 and 48, with the host rows' ids in device memory and in
// pinned host memory; the other rows stay as they were. A block load on the transfer lane after
// join_host_adds() reads the sums with no synchronize() between them (without the join it would
// read the rows before the additions). The link counts the staged rows and the ids it copied.
TEST_F(CudaOps, FlushAddRowsLandInOrderBeforeAJoinedLoad) {
  const std::int64_t rows = 30000, n = 12000;
  for (const std::int64_t cols : {33, 48}) {
    SCOPED_TRACE(cols);
    dev().synchronize();
    dev().reset_counters();
    const auto [g, initial] = random_host(rows, cols, "gradients");
    const Host values = random_floats(std::size_t(n * cols), rng_);
    const Mat src = upload(n, cols, values);
    Host want = initial;
    std::vector<bool> touched(std::size_t(rows), false);
    std::vector<HostMat> pinned_ids;  // constants: alive until the additions ran
    for (int f = 0; f < 10; ++f) {
      std::vector<vertex_t> src_rows(static_cast<std::size_t>(n)), host_rows(src_rows.size());
      for (std::int64_t i = 0; i < n; ++i) {
        src_rows[i] = vertex_t((i * 7 + f) % n);  // a permutation: 7 and n are coprime
        host_rows[i] = vertex_t(2 * i + f);       // unique in a flush, shared across flushes
      }
      Idx host_idx = dev().upload(host_rows, "host rows");
      if (f % 2 == 1) {
        pinned_ids.push_back(backend_->alloc_host(n, 1, "pinned ids"));
        std::memcpy(pinned_ids.back().fp32(), host_rows.data(),
                    host_rows.size() * sizeof(vertex_t));
        host_idx = Idx{reinterpret_cast<const vertex_t*>(pinned_ids.back().fp32()), n};
      }
      dev().flush_add_rows(src, dev().upload(src_rows, "src rows"), host_idx, g);
      for (std::int64_t i = 0; i < n; ++i) {
        touched[host_rows[i]] = true;
        for (std::int64_t c = 0; c < cols; ++c)
          want[host_rows[i] * g.ld + c] += values[src_rows[i] * cols + c];
      }
    }
    Mat loaded = dev().alloc(rows, cols, "loaded");
    {
      LaneScope lane(dev(), Lane::kTransfer);
      dev().join_host_adds();
      dev().load_block(g, 0, loaded);
    }
    dev().synchronize();  // the load ran when the transfer lane reached it
    const Host got = download(loaded);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(got[r * cols + c], want[r * g.ld + c]) << "row " << r << " column " << c;
        ASSERT_EQ(g.fp32()[r * g.ld + c], want[r * g.ld + c]);
        if (!touched[r]) {
          ASSERT_EQ(g.fp32()[r * g.ld + c], initial[r * g.ld + c]);
        }
      }
    EXPECT_EQ(dev().counters().d2h_bytes, 10 * n * cols * 4);
    EXPECT_EQ(dev().counters().d2h_index_bytes, 5 * n * 4);  // the ids in device memory
    EXPECT_EQ(dev().counters().h2d_block_bytes, rows * cols * 4);
  }
}

TEST_F(CudaOps, FlushStoreRowsWritesHostRowsFromTheGpu) {
  const std::int64_t rows = 1000, cols = 37;  // odd width: the scalar tail path too
  const auto [g, initial] = random_host(rows, cols, "gradients");
  const Host dvals = random_floats(50 * cols, rng_);
  Mat src = upload(50, cols, dvals);
  std::vector<vertex_t> src_rows(20), host_rows(20);
  for (int i = 0; i < 20; ++i) src_rows[i] = 49 - 2 * i, host_rows[i] = 41 * i + 3;
  dev().flush_store_rows(src, dev().upload(src_rows, "s"), dev().upload(host_rows, "h"), g);
  dev().synchronize();
  Host want = initial;
  for (int i = 0; i < 20; ++i)
    for (std::int64_t c = 0; c < cols; ++c)
      want[host_rows[i] * cols + c] = dvals[src_rows[i] * cols + c];
  for (std::int64_t k = 0; k < rows * cols; ++k) ASSERT_EQ(g.fp32()[k], want[k]) << "at " << k;
  EXPECT_EQ(dev().counters().d2h_bytes, 20 * cols * 4);
}

TEST_F(CudaOps, ScatterRowsPlacesCompactRows) {
  const std::int64_t cols = 12;
  const Host compact = random_floats(4 * cols, rng_), before = random_floats(10 * cols, rng_);
  Mat src = upload(4, cols, compact);
  Mat dst = upload(10, cols, before);
  const std::vector<vertex_t> rows = {9, 0, 4, 5};
  dev().scatter_rows(src, dev().upload(rows, "rows"), dst);
  const Host got = download(dst);
  Host want = before;
  for (int i = 0; i < 4; ++i)
    for (std::int64_t c = 0; c < cols; ++c) want[rows[i] * cols + c] = compact[i * cols + c];
  EXPECT_EQ(got, want);
}

// Work on the transfer and store lanes runs concurrently with the compute lane; markers order it:
// a load on the transfer lane, a scatter on the compute lane after it, a store on the store
// lane after that, all issued without host synchronization, give the right host rows.
TEST_F(CudaOps, LanesOrderedByMarkers) {
  const std::int64_t rows = 4096, cols = 64;
  HostMat source = backend_->alloc_host(rows, cols, "source");
  HostMat target = backend_->alloc_host(rows, cols, "target");
  const Host values = random_floats(rows * cols, rng_);
  std::copy(values.begin(), values.end(), source.fp32());
  std::vector<vertex_t> picked, placed;
  for (std::int64_t r = 0; r < rows; r += 3) picked.push_back(vertex_t(r));
  for (std::size_t i = 0; i < picked.size(); ++i) placed.push_back(vertex_t(picked.size() - 1 - i));
  const auto n = static_cast<std::int64_t>(picked.size());
  Idx picked_idx = dev().upload(picked, "picked"), placed_idx = dev().upload(placed, "placed");
  Mat stage = dev().alloc(n, cols, "stage"), x = dev().alloc(n, cols, "x");
  backend_->synchronize_all();
  dev().set_time_origin();
  for (int round = 0; round < 3; ++round) {
    {
      LaneScope lane(dev(), Lane::kTransfer);
      dev().wait(1);  // the previous round's scatter has read the stage
      dev().phase_begin(Phase::kLoad, round);
      dev().load_rows(source, picked_idx, Idx{}, stage);
      dev().phase_end(Phase::kLoad);
      dev().mark(0);
    }
    dev().wait(0);
    dev().phase_begin(Phase::kCompute, round);
    dev().scatter_rows(stage, placed_idx, x);
    dev().phase_end(Phase::kCompute);
    dev().mark(1);
    {
      LaneScope lane(dev(), Lane::kStore);
      dev().wait(1);
      dev().phase_begin(Phase::kStore, round);
      dev().store_block(x, target, 0);
      dev().phase_end(Phase::kStore);
    }
  }
  EXPECT_EQ(dev().lane(), Lane::kCompute);
  backend_->synchronize_all();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(target.fp32()[placed[i] * cols + c], values[picked[i] * cols + c]);
  double seconds[kPhases] = {};
  std::vector<PhaseRange> timeline;
  dev().take_phase_times(seconds, &timeline);
  EXPECT_GT(seconds[int(Phase::kLoad)], 0.0);
  EXPECT_GT(seconds[int(Phase::kCompute)], 0.0);
  EXPECT_GT(seconds[int(Phase::kStore)], 0.0);
  EXPECT_EQ(seconds[int(Phase::kFlush)], 0.0);
  // The timeline: 3 rounds of load (transfer lane) -> scatter (compute) -> store (store lane),
  // each ordered by its markers, all after the origin; the ranges add up to the phase times.
  ASSERT_EQ(timeline.size(), 9u);
  double summed[kPhases] = {};
  for (int round = 0; round < 3; ++round) {
    const PhaseRange& load = timeline[std::size_t(round) * 3];
    const PhaseRange& scatter = timeline[std::size_t(round) * 3 + 1];
    const PhaseRange& store = timeline[std::size_t(round) * 3 + 2];
    EXPECT_EQ(load.lane, Lane::kTransfer);
    EXPECT_EQ(scatter.lane, Lane::kCompute);
    EXPECT_EQ(store.lane, Lane::kStore);
    for (const PhaseRange* r : {&load, &scatter, &store}) {
      EXPECT_EQ(r->tag, round);
      EXPECT_GE(r->begin, 0.0);
      EXPECT_GT(r->end, r->begin);
      summed[int(r->phase)] += r->end - r->begin;
    }
    EXPECT_LE(load.end, scatter.begin + 1e-6);
    EXPECT_LE(scatter.end, store.begin + 1e-6);
  }
  for (int k = 0; k < kPhases; ++k) EXPECT_NEAR(summed[k], seconds[k], 1e-5);
  double again[kPhases] = {};
  dev().take_phase_times(again, &timeline);  // taken: nothing left
  for (double t : again) EXPECT_EQ(t, 0.0);
  EXPECT_EQ(timeline.size(), 9u);
}

// With operation times on (--op-times), take_phase_times() hands out each operation's range too
// (PhaseRange::operation): named, on the lane that ran it, tagged with that lane's phase, inside
// the phase's range; the phase ranges stay as they were.
TEST_F(CudaOps, OperationRangesJoinTheTimeline) {
  auto backend = make_cuda_backend(one_gpu(1).op_times(true));
  Device& d = backend->device(0);
  const std::int64_t rows = 2048, cols = 32;
  HostMat source = backend->alloc_host(rows, cols, "source");
  const Host values = random_floats(rows * cols, rng_);
  std::copy(values.begin(), values.end(), source.fp32());
  const std::vector<vertex_t> picked = test::id_sequence(rows / 2, 0, 2);
  const Idx picked_idx = d.upload(picked, "picked");
  Mat x = d.alloc(rows / 2, cols, "x"), y = d.alloc(rows, cols, "y");
  backend->synchronize_all();
  d.set_time_origin();
  {
    LaneScope lane(d, Lane::kTransfer);
    d.phase_begin(Phase::kLoad, 8);
    d.load_rows(source, picked_idx, Idx{}, x);
    d.phase_end(Phase::kLoad);
    d.mark(0);
  }
  d.wait(0);
  d.phase_begin(Phase::kCompute, 7);
  d.fill(y, 0.f);
  d.scatter_rows(x, picked_idx, y);
  d.phase_end(Phase::kCompute);
  backend->synchronize_all();
  double seconds[kPhases] = {};
  std::vector<PhaseRange> timeline;
  d.take_phase_times(seconds, &timeline);
  std::vector<const PhaseRange*> phases, operations;
  for (const PhaseRange& r : timeline) (r.operation ? operations : phases).push_back(&r);
  ASSERT_EQ(phases.size(), 2u);
  ASSERT_EQ(operations.size(), 3u);
  const auto phase_of = [&](Lane lane) {
    for (const PhaseRange* r : phases)
      if (r->lane == lane) return r;
    return static_cast<const PhaseRange*>(nullptr);
  };
  const std::pair<const char*, Lane> expected[] = {
      {"load_rows", Lane::kTransfer}, {"fill", Lane::kCompute}, {"scatter_rows", Lane::kCompute}};
  for (const auto& [name, lane] : expected) {
    SCOPED_TRACE(name);
    const auto found = std::find_if(operations.begin(), operations.end(), [&](const PhaseRange* r) {
      return std::string(r->operation) == name;
    });
    ASSERT_NE(found, operations.end());
    const PhaseRange& op = **found;
    const PhaseRange* phase = phase_of(lane);
    ASSERT_NE(phase, nullptr);
    EXPECT_EQ(op.lane, lane);
    EXPECT_EQ(op.tag, phase->tag);
    EXPECT_GT(op.end, op.begin);
    EXPECT_GE(op.begin, phase->begin - 1e-6);
    EXPECT_LE(op.end, phase->end + 1e-6);
  }
}

TEST_F(CudaOps, ComputeOperationsRefuseOtherLanes) {
  Mat a = upload(4, 4, random_floats(16, rng_));
  LaneScope lane(dev(), Lane::kTransfer);
  EXPECT_THROW(dev().gemm(Transpose::kNo, Transpose::kNo, 1.f, a, a, 0.f, a), Error);
}

TEST_F(CudaOps, TryAllocKeepsTheHeadroom) {
  const std::int64_t budget = std::int64_t(64) << 20;
  auto backend = make_backend(1, budget);
  Device& d = backend->device(0);
  // The headroom is budget / 8: 60 MiB leave less than that, 40 MiB do not.
  EXPECT_TRUE(d.try_alloc(60 << 18, 1, "too big for the headroom").empty());
  EXPECT_EQ(d.bytes_in_use(), 0);
  EXPECT_FALSE(d.try_alloc(40 << 18, 1, "fits").empty());
  EXPECT_EQ(d.bytes_in_use(), std::int64_t(40) << 20);
}

// Pulls of `moved` rows of an owner buffer of `rows` x `cols`: the row kernels' word
// and float paths (cols a multiple of 4 or not), each lane-group width (8, 16 and 32 lanes a
// row: up to 8, 16 and more words) and, with many rows, more than one tile of ids a warp.
void pull_rows_from_owner(Backend& backend, std::mt19937& rng, std::int64_t rows, std::int64_t cols,
                          std::int64_t moved) {
  SCOPED_TRACE(testing::Message() << rows << " x " << cols << ", " << moved << " rows moved");
  Device& owner = backend.device(0);
  Device& reader = backend.device(1);
  const std::int64_t pulled_before = reader.counters().p2p_rows;
  const Host values = random_floats(rows * cols, rng);
  Mat owner_buf = owner.alloc(rows, cols, "owner transition buffer");
  owner.write(values.data(), rows * cols, owner_buf.data);
  // Distinct owner rows in a random order, into a permutation of the local rows.
  std::vector<vertex_t> all(static_cast<std::size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<vertex_t> owner_rows(all.begin(), all.begin() + moved), dst_rows(moved);
  std::iota(dst_rows.begin(), dst_rows.end(), 0);
  std::shuffle(dst_rows.begin(), dst_rows.end(), rng);
  Mat remote = reader.alloc(moved, cols, "remote rows");
  owner.synchronize();
  reader.pull_rows(owner, owner_buf, reader.upload(owner_rows, "o"), reader.upload(dst_rows, "d"),
                   remote);
  reader.synchronize();
  Host got(moved * cols);
  reader.read(remote.data, moved * cols, got.data());
  for (std::int64_t i = 0; i < moved; ++i)
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(got[dst_rows[i] * cols + c], values[owner_rows[i] * cols + c]);
  EXPECT_EQ(reader.counters().p2p_rows - pulled_before, moved);
}

void pull_rows_from_owner(Backend& backend, std::mt19937& rng) {
  pull_rows_from_owner(backend, rng, 200, 24, 5);
}

// Device 1 puts rows into device 0's buffer (Device::put_block, put_rows), as push_phase() fills
// an owner's receive buffer: a block of consecutive rows and gathered rows, into a strided view.
void put_rows_into_peer(Backend& backend, std::mt19937& rng, std::int64_t rows, std::int64_t cols) {
  SCOPED_TRACE(testing::Message() << rows << " x " << cols);
  Device& owner = backend.device(0);
  Device& sender = backend.device(1);
  const Host values = random_floats(rows * cols, rng);
  Mat src = sender.alloc(rows, cols, "sent rows");
  sender.write(values.data(), rows * cols, src.data);
  const std::int64_t ld = cols + 5, half = rows / 2;
  Mat received = owner.alloc(rows, ld, "receive buffer");
  owner.fill(received, -1.f);
  owner.synchronize();
  std::vector<vertex_t> gathered(static_cast<std::size_t>(rows - half));
  for (std::size_t i = 0; i < gathered.size(); ++i)
    gathered[i] = vertex_t((i * 7919) % std::size_t(rows));
  const std::int64_t before = sender.counters().p2p_rows;
  sender.put_block(src.row_block(rows - half, half), owner,
                   received.row_block(0, half).col_block(0, cols));
  sender.put_rows(src, sender.upload(gathered, "gathered"), owner,
                  received.row_block(half, rows - half).col_block(0, cols));
  sender.synchronize();
  Host got(rows * ld);
  owner.read(received.data, rows * ld, got.data());
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t from = i < half ? rows - half + i : gathered[std::size_t(i - half)];
    for (std::int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(got[i * ld + c], values[from * cols + c]) << "row " << i << ", column " << c;
    for (std::int64_t c = cols; c < ld; ++c) ASSERT_EQ(got[i * ld + c], -1.f) << "row " << i;
  }
  EXPECT_EQ(sender.counters().p2p_rows - before, rows);
}

TEST_F(CudaOps, PutsIntoAPeersBuffer) {
  auto one_gpu_devices = make_backend(2);
  auto staged = make_cuda_backend(one_gpu(2).peer_access(PeerAccess::kOff));
  for (Backend* backend : {one_gpu_devices.get(), staged.get()})
    for (const std::int64_t cols : {23, 48, 150}) put_rows_into_peer(*backend, rng_, 3000, cols);
  std::unique_ptr<Backend> two_gpus;
  try {
    two_gpus = make_cuda_backend(test::backend_options(2).gpus(2));
  } catch (const InputError& e) {
    GTEST_SKIP() << "the two-GPU case needs two GPUs: " << e.what();
  }
  for (const std::int64_t cols : {23, 48, 150}) put_rows_into_peer(*two_gpus, rng_, 3000, cols);
}

TEST_F(CudaOps, PullsBetweenLogicalDevicesOnOneGpu) {
  auto backend = make_backend(2);
  pull_rows_from_owner(*backend, rng_);
  for (const std::int64_t cols : {23, 48, 64, 150})
    pull_rows_from_owner(*backend, rng_, 5000, cols, 3000);
}

// The same across two GPUs: the pulls read the peer's memory over the link.
TEST_F(CudaOps, PullsBetweenTwoGpus) {
  std::unique_ptr<Backend> backend;
  try {
    backend = make_cuda_backend(test::backend_options(2).gpus(2));
  } catch (const InputError& e) {
    GTEST_SKIP() << "needs two GPUs: " << e.what();
  }
  pull_rows_from_owner(*backend, rng_);
  for (const std::int64_t cols : {23, 48, 64, 150})
    pull_rows_from_owner(*backend, rng_, 5000, cols, 3000);
}

// PeerAccess::kOff: the same results through the host-staged path, which stages the owner's
// whole buffer (200 x 24 floats) in the reader's accounted scratch; the direct path does not.
TEST_F(CudaOps, PullsThroughHostStagedFallback) {
  auto direct = make_backend(2);
  pull_rows_from_owner(*direct, rng_);
  auto staged = make_cuda_backend(one_gpu(2).peer_access(PeerAccess::kOff));
  pull_rows_from_owner(*staged, rng_);
  EXPECT_EQ(staged->device(1).peak_bytes() - direct->device(1).peak_bytes(), 200 * 24 * 4);
}

TEST_F(CudaOps, UnknownPeerAccessModeIsRejected) {
  EXPECT_THROW(make_cuda_backend(one_gpu(1).peer_access(static_cast<PeerAccess>(7))), InputError);
  EXPECT_EQ(parse_peer_access("off", "--peer-access"), PeerAccess::kOff);
  EXPECT_EQ(parse_peer_access("auto", "--peer-access"), PeerAccess::kAuto);
  EXPECT_THROW(parse_peer_access("on", "--peer-access"), InputError);
}

// ---------------------------------------------------------------------------------------------
// Dense operators

// At 50 and 300 columns: the kernels read four of a lane's columns (128 a warp) before writing,
// so 300 takes two whole batches and a partial one.
TEST_F(CudaOps, DropoutRowsMatchesHashMask) {
  for (const std::int64_t cols : {50, 300}) {
    SCOPED_TRACE(cat(cols, " columns"));
    const std::int64_t rows = 64;
    const Host values = random_floats(rows * cols, rng_);
    Mat m = upload(rows, cols, values);
    std::vector<vertex_t> sel = {3, 9, 10, 63}, keys = {1000, 7, 123456, 42};
    DropoutKey key{99, 3, 1, 0.4f};
    dev().dropout_rows(m, dev().upload(sel, "rows"), dev().upload(keys, "keys"), key);
    const Host got = download(m);
    Host want = values;
    for (std::size_t i = 0; i < sel.size(); ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const bool keep = hash_to_unit(key_hash(key.seed, 1, key.epoch * 1024 + key.layer, keys[i],
                                                j)) >= key.rate;
        float& x = want[sel[i] * cols + j];
        x = keep ? x * (1.f / (1.f - key.rate)) : 0.f;
      }
    for (std::int64_t i = 0; i < rows * cols; ++i) ASSERT_FLOAT_EQ(got[i], want[i]) << i;
  }
}

// The fused backward of H = dropout(act(Z)) gives exactly what its four parts give on the GPU,
// and what the CPU backend's fused operation gives (within float rounding of expf), for every
// activation, with and without dropout, on a strided view of 45 and of 300 columns.
TEST_F(CudaOps, DropoutActivationBackwardEqualsItsParts) {
  for (const auto& [cols, ld] : {std::pair<std::int64_t, std::int64_t>{45, 48}, {300, 304}}) {
    SCOPED_TRACE(cat(cols, " columns"));
    const std::int64_t rows = 300;
    const Host gradient = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
    const Host value = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
    const std::vector<vertex_t> keys = test::id_sequence(rows, 1000, 7);
    const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
    auto cpu = make_cpu_backend(test::backend_options(1));
    Device& reference = cpu->device(0);
    for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kElu})
      for (const float rate : {0.f, 0.5f}) {
        SCOPED_TRACE(cat("activation ", int(act), ", rate ", rate));
        const DropoutKey key{42, 3, 1, rate};
        std::vector<Host> results;
        for (Device* d : {&dev(), &dev(), &reference}) {
          const bool parts = results.size() == 1;
          const Mat dh = upload(*d, rows, ld, gradient).col_block(0, cols);
          const Mat z = upload(*d, rows, ld, value).col_block(0, cols);
          const Idx key_rows = d->upload(keys, "keys");
          if (parts) {
            const Idx rows_idx = d->upload(positions, "positions");
            if (rate > 0) d->dropout_rows(dh, rows_idx, key_rows, key);
            d->activation_backward(dh, z, act, dh);
            d->bias_activation(z, nullptr, act, z);
            if (rate > 0) d->dropout_rows(z, rows_idx, key_rows, key);
          } else {
            d->dropout_activation_backward(dh, z, act, key_rows, key);
          }
          Host got = download_matrix(*d, dh);
          const Host got_z = download_matrix(*d, z);
          got.insert(got.end(), got_z.begin(), got_z.end());
          results.push_back(got);
        }
        for (std::size_t i = 0; i < results[0].size(); ++i) {
          ASSERT_EQ(fp32_bits(results[0][i]), fp32_bits(results[1][i])) << i;
          ASSERT_NEAR(results[0][i], results[2][i], 1e-6 * (1 + std::fabs(results[2][i]))) << i;
        }
      }
  }
}

// The ReLU backward from the forward's kept H = dropout(relu(Z)) gives the fused backward's dh
// from Z bit for bit (signed zeros included) and leaves H as it was, with and without dropout.
TEST_F(CudaOps, DropoutReluBackwardFromOutputMatchesTheOneFromZ) {
  const std::int64_t rows = 300, cols = 45, ld = 48;
  const Host gradient = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
  const Host value = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
  const std::vector<vertex_t> keys = test::id_sequence(rows, 1000, 7);
  const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
  Device& d = dev();
  const Idx key_rows = d.upload(keys, "keys"), rows_idx = d.upload(positions, "positions");
  for (const float rate : {0.f, 0.5f}) {
    SCOPED_TRACE(cat("rate ", rate));
    const DropoutKey key{42, 3, 1, rate};
    const Mat dh_from_z = upload(d, rows, ld, gradient).col_block(0, cols);
    const Mat z = upload(d, rows, ld, value).col_block(0, cols);
    d.dropout_activation_backward(dh_from_z, z, Activation::kRelu, key_rows, key);
    const Mat dh = upload(d, rows, ld, gradient).col_block(0, cols);
    const Mat h = upload(d, rows, ld, value).col_block(0, cols);  // the forward's relu, dropout
    d.bias_activation(h, nullptr, Activation::kRelu, h);
    if (rate > 0) d.dropout_rows(h, rows_idx, key_rows, key);
    const Host kept = download_matrix(d, h);
    d.dropout_relu_backward_from_output(dh, h, key_rows, key);
    const Host got = download_matrix(d, dh), want = download_matrix(d, dh_from_z);
    ASSERT_EQ(got.size(), want.size());
    std::int64_t zeros = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(fp32_bits(got[i]), fp32_bits(want[i])) << i;
      zeros += got[i] == 0.f;
    }
    EXPECT_EQ(download_matrix(d, h), kept);
    EXPECT_EQ(download_matrix(d, z), kept);  // the fused backward's H
    EXPECT_GT(zeros, rows * cols / (rate > 0 ? 2 : 4));
  }
}

// The fused forward passes give what their parts give on the GPU, bit for bit (bias + activation
// + dropout for every activation, a scatter with dropout, a copy between indexed rows with
// dropout, rates 0 and 0.5), and what the CPU backend's fused passes give (within float rounding
// of expm1f).
TEST_F(CudaOps, FusedDropoutPassesEqualTheirParts) {
  for (const auto& [cols, ld] : {std::pair<std::int64_t, std::int64_t>{45, 48}, {300, 304}}) {
    const std::int64_t rows = 300;
    const Host value = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
    const Host bias = random_floats(std::size_t(cols), rng_, -1.f, 1.f);
    const std::vector<vertex_t> keys = test::id_sequence(rows, 2000, 3);
    const std::vector<vertex_t> positions = test::id_sequence(rows, 0, 1);
    std::vector<vertex_t> targets = test::id_sequence(rows, 0, 7);
    for (vertex_t& t : targets) t %= vertex_t(rows);  // a permutation of the rows
    const std::vector<vertex_t> sources(targets.rbegin(), targets.rend());  // another one
    auto cpu = make_cpu_backend(test::backend_options(1));
    Device& reference = cpu->device(0);
    for (const float rate : {0.f, 0.5f}) {
      const DropoutKey key{42, 3, 1, rate};
      // bias + activation + dropout per activation, scatter, copy between indexed rows
      for (int op = 0; op < 5; ++op) {
        const Activation act = op == 0   ? Activation::kNone
                               : op == 1 ? Activation::kRelu
                                         : Activation::kElu;
        SCOPED_TRACE(cat(op == 3   ? "scatter"
                         : op == 4 ? "copy"
                                   : "bias activation",
                         " ", op, ", rate ", rate, ", ", cols, " columns"));
        std::vector<Host> results;
        for (Device* d : {&dev(), &dev(), &reference}) {
          const bool parts = results.size() == 1;
          const Mat in = upload(*d, rows, ld, value).col_block(0, cols);
          const Mat out =
              upload(*d, rows, ld, Host(std::size_t(rows * ld), 9.f)).col_block(0, cols);
          const Idx key_rows = d->upload(keys, "keys");
          const Idx positions_idx = d->upload(positions, "positions");
          const Idx targets_idx = d->upload(targets, "targets");
          const float* dbias = upload(*d, 1, cols, bias).data;
          if (op == 4 && parts) {
            d->copy_rows(in, d->upload(sources, "sources"), targets_idx, out, RowCopy::kOverwrite);
            d->dropout_rows(out, targets_idx, key_rows, key);
          } else if (op == 4) {
            d->copy_dropout_rows(in, d->upload(sources, "sources"), targets_idx, out, key_rows,
                                 key);
          } else if (op == 3 && parts) {
            d->scatter_rows(in, targets_idx, out);
            d->dropout_rows(out, targets_idx, key_rows, key);
          } else if (op == 3) {
            d->scatter_dropout_rows(in, targets_idx, out, key_rows, key);
          } else if (parts) {
            d->bias_activation(in, dbias, act, out);
            d->dropout_rows(out, positions_idx, key_rows, key);
          } else {
            d->bias_activation_dropout(in, dbias, act, out, key_rows, key);
          }
          results.push_back(download_matrix(*d, out));
        }
        for (std::size_t i = 0; i < results[0].size(); ++i) {
          ASSERT_EQ(fp32_bits(results[0][i]), fp32_bits(results[1][i])) << i;
          ASSERT_NEAR(results[0][i], results[2][i], 1e-6 * (1 + std::fabs(results[2][i]))) << i;
        }
      }
    }
  }
}

// scatter_arrivals gives what scatter_dropout_rows then zero_rows of the gradient twin give, bit
// for bit, with and without dropout, at widths 48 (gradient 48) and 37 (gradient 100, padded
// rows), the other rows of both untouched, and what the CPU backend gives.
TEST_F(CudaOps, ScatterArrivalsEqualsScatterThenZero) {
  const std::int64_t rows = 500, n = 200;
  std::vector<vertex_t> targets = test::id_sequence(rows, 0, 7);
  for (vertex_t& t : targets) t %= vertex_t(rows);  // a permutation of the rows
  targets.resize(std::size_t(n));
  const std::vector<vertex_t> keys = test::id_sequence(n, 1000, 3);
  auto cpu = make_cpu_backend(test::backend_options(1));
  for (const float rate : {0.f, 0.5f})
    for (const auto& [cols, gradient_cols] : {std::pair<std::int64_t, std::int64_t>{48, 48},
                                              std::pair<std::int64_t, std::int64_t>{37, 100}}) {
      SCOPED_TRACE(cat("rate ", rate, ", width ", cols, ", gradient width ", gradient_cols));
      const DropoutKey key{42, 3, 1, rate};
      const Host in = random_floats(std::size_t(n * cols), rng_, -2.f, 2.f);
      const Host out = random_floats(std::size_t(rows * cols), rng_, -2.f, 2.f);
      const Host gradient = random_floats(std::size_t(rows * gradient_cols), rng_, -2.f, 2.f);
      std::vector<Host> outs, gradients;
      for (Device* d : {&dev(), &dev(), &cpu->device(0)}) {
        const Mat x = upload(*d, n, cols, in), y = upload(*d, rows, cols, out);
        const Mat g = upload(*d, rows, gradient_cols, gradient);
        const Idx t = d->upload(targets, "targets"), k = d->upload(keys, "keys");
        if (outs.size() == 1) {
          d->scatter_dropout_rows(x, t, y, k, key);
          d->zero_rows(g, t);
        } else {
          d->scatter_arrivals(x, t, y, k, key, g);
        }
        outs.push_back(download_matrix(*d, y));
        gradients.push_back(download_matrix(*d, g));
      }
      EXPECT_EQ(outs[0], outs[1]);
      EXPECT_EQ(outs[0], outs[2]);
      EXPECT_EQ(gradients[0], gradients[1]);
      EXPECT_EQ(gradients[0], gradients[2]);
      std::int64_t zeroed = 0;
      for (float v : gradients[0]) zeroed += v == 0.f;
      EXPECT_EQ(zeroed, n * gradient_cols);
    }
}

// The backward of H = dropout(act(O + b)) from GAT's kept head outputs O in one pass equals
// bias_activation into H, then dropout_activation_backward, bit for bit (and the CPU backend's
// to rounding); O stays as it was. The head dots it takes on the way are head_dots' bits: fused
// in heads of whole multiples of 32 columns (256 columns in 4 heads, 1024 in 2), in a pass of
// their own otherwise (45 columns in 3 heads).
TEST_F(CudaOps, FusedBiasActivationBackwardEqualsItsParts) {
  const std::int64_t rows = 300;
  auto cpu = make_cpu_backend(test::backend_options(1));
  Device& reference = cpu->device(0);
  for (const auto& [cols, heads] :
       {std::pair<std::int64_t, std::int64_t>{45, 3}, {256, 4}, {1024, 2}}) {
    const std::int64_t ld = (cols + 3) / 4 * 4;
    const Host value = random_floats(std::size_t(rows * ld), rng_, -2.f, 2.f);
    const Host grad = random_floats(std::size_t(rows * ld), rng_, -1.f, 1.f);
    const Host bias = random_floats(std::size_t(cols), rng_, -1.f, 1.f);
    const std::vector<vertex_t> keys = test::id_sequence(rows, 2000, 3);
    for (const float rate : {0.f, 0.5f})
      for (const Activation act : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
        SCOPED_TRACE(cat(cols, " columns, activation ", int(act), ", rate ", rate));
        const DropoutKey key{42, 3, 1, rate};
        std::vector<Host> dh, h, in_after, dots;
        for (Device* d : {&dev(), &dev(), &reference}) {
          const bool parts = dh.size() == 1;
          const Mat in = upload(*d, rows, ld, value).col_block(0, cols);
          const Mat g = upload(*d, rows, ld, grad).col_block(0, cols);
          const Mat out =
              upload(*d, rows, ld, Host(std::size_t(rows * ld), 9.f)).col_block(0, cols);
          const Mat head_dots =
              upload(*d, rows, heads + 1, Host(std::size_t(rows * (heads + 1)), 7.f))
                  .col_block(0, heads);
          const Idx key_rows = d->upload(keys, "keys");
          const float* dbias = upload(*d, 1, cols, bias).data;
          if (parts) {
            d->bias_activation(in, dbias, Activation::kNone, out);
            d->dropout_activation_backward(g, out, act, key_rows, key);
            d->head_dots(g, in, head_dots);
          } else {
            d->dropout_bias_activation_backward(g, in, dbias, act, key_rows, key, out, head_dots);
          }
          dh.push_back(download_matrix(*d, g));
          h.push_back(download_matrix(*d, out));
          in_after.push_back(download_matrix(*d, in));
          dots.push_back(download_matrix(*d, head_dots));
        }
        for (std::size_t i = 0; i < dh[0].size(); ++i) {
          ASSERT_EQ(fp32_bits(dh[0][i]), fp32_bits(dh[1][i])) << i;
          ASSERT_EQ(fp32_bits(h[0][i]), fp32_bits(h[1][i])) << i;
          ASSERT_NEAR(dh[0][i], dh[2][i], 1e-6 * (1 + std::fabs(dh[2][i]))) << i;
          ASSERT_NEAR(h[0][i], h[2][i], 1e-6 * (1 + std::fabs(h[2][i]))) << i;
        }
        for (std::size_t i = 0; i < dots[0].size(); ++i) {
          ASSERT_EQ(fp32_bits(dots[0][i]), fp32_bits(dots[1][i])) << i;
          ASSERT_NEAR(dots[0][i], dots[2][i], 1e-5 * (1 + std::fabs(dots[2][i]))) << i;
        }
        EXPECT_EQ(in_after[0], in_after[2]);  // O unchanged (the CPU's is the upload)
      }
  }
}

TEST_F(CudaOps, GemmAllTransposeCombinations) {
  const std::int64_t m = 37, n = 29, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const Host a = random_floats(m * k, rng_), b = random_floats(k * n, rng_),
                 c0 = random_floats(m * n, rng_);
      Mat da = ta ? upload(k, m, a) : upload(m, k, a);
      Mat db = tb ? upload(n, k, b) : upload(k, n, b);
      Mat dc = upload(m, n, c0);
      const float alpha = 0.7f, beta = -1.3f;
      dev().gemm(ta ? Transpose::kYes : Transpose::kNo, tb ? Transpose::kYes : Transpose::kNo,
                 alpha, da, db, beta, dc);
      std::vector<double> want(m * n);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            const double av = ta ? a[p * m + i] : a[i * k + p];
            const double bv = tb ? b[j * k + p] : b[p * n + j];
            s += av * bv;
          }
          want[i * n + j] = alpha * s + beta * c0[i * n + j];
        }
      EXPECT_LT(relative_error(download(dc), want), kTolerance) << "ta " << ta << " tb " << tb;
    }
}

// Weight gradients over many rows (C = alpha A^T B + beta C with 200k rows, strided A).
TEST_F(CudaOps, WeightGradientGemmOverManyRows) {
  const std::int64_t k = 200003, m = 33, n = 47;
  const Host a = random_floats(k * (m + 3), rng_), b = random_floats(k * n, rng_),
             c0 = random_floats(m * n, rng_);
  Mat a_view = upload(k, m + 3, a).col_block(1, m);  // k x m, ld m + 3
  Mat db = upload(k, n, b);
  for (const float beta : {0.f, -1.3f}) {
    Mat dc = upload(m, n, c0);
    const float alpha = 0.7f;
    dev().gemm(Transpose::kYes, Transpose::kNo, alpha, a_view, db, beta, dc);
    std::vector<double> want(m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += double(a[p * (m + 3) + 1 + i]) * b[p * n + j];
        want[i * n + j] = alpha * sum + beta * c0[i * n + j];
      }
    EXPECT_LT(relative_error(download(dc), want), kTolerance) << "beta " << beta;
  }
}

TEST_F(CudaOps, GemmOnStridedViews) {
  const Host a = random_floats(20 * 30, rng_), b = random_floats(16 * 40, rng_);
  Mat da = upload(20, 30, a), db = upload(16, 40, b);
  Mat a_view = da.col_block(2, 16);  // 20 x 16, ld 30
  Mat b_view = db.col_block(5, 11);  // 16 x 11, ld 40
  Mat c = dev().alloc(20, 11, "c");
  dev().gemm(Transpose::kNo, Transpose::kNo, 1.f, a_view, b_view, 0.f, c);
  std::vector<double> want(20 * 11, 0.0);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 11; ++j)
      for (int p = 0; p < 16; ++p)
        want[i * 11 + j] += double(a[i * 30 + 2 + p]) * b[p * 40 + 5 + j];
  EXPECT_LT(relative_error(download(c), want), kTolerance);
}

// 16-byte rows take the word path of bias_activation (a row's last word column by column where
// the width is not a multiple of 4), which gives exactly what the element path gives.
TEST_F(CudaOps, BiasActivationAndBackward) {
  const std::int64_t rows = 77;
  for (const std::int64_t cols : {21, 24, 64})
    for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kElu}) {
      SCOPED_TRACE(cat("width ", cols, ", activation ", int(act)));
      const Host z = random_floats(rows * cols, rng_, -3, 3), bias = random_floats(cols, rng_),
                 dout = random_floats(rows * cols, rng_);
      Mat dz_in = upload(rows, cols, z);
      Mat dbias = upload(1, cols, bias);
      Mat out = dev().alloc(rows, cols, "out");
      dev().bias_activation(dz_in, dbias.data, act, out);
      Mat ddout = upload(rows, cols, dout);
      Mat grad = dev().alloc(rows, cols, "grad");
      dev().activation_backward(ddout, dz_in, act, grad);
      std::vector<double> want_out(rows * cols), want_grad(rows * cols);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) {
          const double x = double(z[r * cols + c]) + bias[c];
          const double zz = z[r * cols + c];
          double y = x, slope = 1;
          if (act == Activation::kRelu) y = x > 0 ? x : 0, slope = zz > 0 ? 1 : 0;
          if (act == Activation::kElu)
            y = x > 0 ? x : std::expm1(x), slope = zz > 0 ? 1 : std::exp(zz);
          want_out[r * cols + c] = y;
          want_grad[r * cols + c] = dout[r * cols + c] * slope;
        }
      EXPECT_LT(relative_error(download(out), want_out), kTolerance);
      EXPECT_LT(relative_error(download(grad), want_grad), kTolerance);
      // The same rows in views of other strides, in place: ld = cols + 1 (the element path) and
      // the multiple of 4 above cols (16-byte rows: the word path, whose last word may hold
      // fewer than 4 columns); both give out's bits, and the columns past the view keep theirs.
      const Host expected = download(out);
      for (const std::int64_t ld : {cols + 1, (cols + 4) / 4 * 4}) {
        SCOPED_TRACE(cat("ld ", ld));
        Host wide(std::size_t(rows * ld), 7.f);
        for (std::int64_t r = 0; r < rows; ++r)
          std::copy(z.begin() + r * cols, z.begin() + (r + 1) * cols, wide.begin() + r * ld);
        const Mat full = upload(rows, ld, wide);
        const Mat strided = full.col_block(0, cols);
        dev().bias_activation(strided, dbias.data, act, strided);
        const Host got = download(full);
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < ld; ++c) {
            const float want = c < cols ? expected[std::size_t(r * cols + c)] : 7.f;
            ASSERT_EQ(fp32_bits(got[std::size_t(r * ld + c)]), fp32_bits(want)) << r << ", " << c;
          }
      }
      // In place: out aliases z.
      dev().bias_activation(dz_in, nullptr, act, dz_in);
      dev().synchronize();
    }
}

TEST_F(CudaOps, ColumnSumsAxpyHeadMean) {
  const std::int64_t rows = 5000, cols = 70;
  const Host m = random_floats(rows * cols, rng_), base = random_floats(cols, rng_);
  Mat dm = upload(rows, cols, m);
  Mat out = upload(1, cols, base);
  dev().add_column_sums(dm, out.data);
  std::vector<double> want = to_double(base);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) want[c] += m[r * cols + c];
  EXPECT_LT(relative_error(download(out), want), kTolerance);

  const Host x = random_floats(1000, rng_), y = random_floats(1000, rng_);
  Mat dx = upload(1, 1000, x), dy = upload(1, 1000, y);
  dev().axpy(1000, -0.25f, dx.data, dy.data);
  std::vector<double> want_y(1000);
  for (int i = 0; i < 1000; ++i) want_y[i] = y[i] - 0.25 * x[i];
  EXPECT_LT(relative_error(download(dy), want_y), kTolerance);

  const int heads = 3;
  const std::int64_t width = 7;
  const Host in = random_floats(rows * heads * width, rng_);
  Mat din = upload(rows, heads * width, in);
  Mat mean = dev().alloc(rows, width, "mean");
  dev().head_mean(din, heads, mean);
  std::vector<double> want_mean(rows * width, 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (std::int64_t f = 0; f < width; ++f)
        want_mean[r * width + f] += in[r * heads * width + h * width + f] / double(heads);
  EXPECT_LT(relative_error(download(mean), want_mean), kTolerance);
  Mat back = dev().alloc(rows, heads * width, "back");
  dev().head_mean_backward(mean, heads, back);
  const Host got_back = download(back);
  const Host got_mean = download(mean);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (std::int64_t f = 0; f < width; ++f)
        ASSERT_FLOAT_EQ(got_back[r * heads * width + h * width + f],
                        got_mean[r * width + f] / heads);
}

// Every kernel layout of the loss (loss.cu): lane groups of 4, 8, 16 and 32 lanes, and a warp
// per row above 256 classes.
class CudaLoss : public CudaOps, public ::testing::WithParamInterface<std::int64_t> {};

TEST_P(CudaLoss, SoftmaxCrossEntropyLossGradPredictions) {
  const std::int64_t rows = 1001, classes = GetParam();  // 1001: groups past the last row
  Host logits = random_floats(rows * classes, rng_, -4, 4);
  // Ties: row 0 has its maximum at classes 2 and 5 -> prediction 2; row 1 at classes 1 and
  // classes - 1 (another lane, another slot) -> prediction 1.
  for (int c = 0; c < classes; ++c) logits[c] = logits[classes + c] = 0.f;
  logits[2] = logits[5] = 3.f;
  logits[classes + 1] = logits[classes + classes - 1] = 5.f;
  std::vector<vertex_t> labels(rows), mask(rows);
  // Mask bits: 1 train (the loss rows), 2 valid, 4 test.
  std::uniform_int_distribution<int> label(-1, classes - 1), bits(0, 7);
  for (std::int64_t i = 0; i < rows; ++i) labels[i] = label(rng_), mask[i] = bits(rng_);
  Mat dl = upload(rows, classes, logits);
  Mat grad = dev().alloc(rows, classes, "grad");
  dev().fill(grad, 7.f);
  const float scale = 1.f / 300.f;
  double loss = 1.5;  // accumulates
  std::vector<std::int32_t> predictions(rows, -7);
  SplitCounts counts;
  dev().softmax_cross_entropy(dl, dev().upload(labels, "l"), dev().upload(mask, "m"), scale, grad,
                              LossOutputs{&loss, predictions.data(), &counts});
  dev().synchronize();
  double want_loss = 1.5;
  std::vector<double> want_grad(rows * classes, 0.0);
  SplitCounts want_counts;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* x = &logits[i * classes];
    const std::int32_t argmax = static_cast<std::int32_t>(std::max_element(x, x + classes) - x);
    ASSERT_EQ(predictions[i], argmax) << "row " << i;
    for (int k = 0; k < 3; ++k)
      if (labels[i] >= 0 && ((mask[i] >> k) & 1)) {
        ++want_counts.labeled[k];
        want_counts.correct[k] += argmax == labels[i];
      }
    if (labels[i] < 0 || !(mask[i] & 1)) continue;
    double mx = *std::max_element(x, x + classes), s = 0;
    for (int c = 0; c < classes; ++c) s += std::exp(x[c] - mx);
    want_loss += -(x[labels[i]] - mx - std::log(s));
    for (int c = 0; c < classes; ++c)
      want_grad[i * classes + c] = scale * (std::exp(x[c] - mx) / s - (c == labels[i] ? 1 : 0));
  }
  EXPECT_EQ(predictions[0], 2);
  EXPECT_EQ(predictions[1], 1);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(counts.labeled[k], want_counts.labeled[k]) << "split " << k;
    EXPECT_EQ(counts.correct[k], want_counts.correct[k]) << "split " << k;
  }
  EXPECT_GT(want_counts.correct[1], 0);
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss));
  EXPECT_LT(relative_error(download(grad), want_grad), kTolerance);
  // Evaluation: no grad, no mask.
  double eval_loss = 0;
  dev().softmax_cross_entropy(dl, dev().upload(labels, "l"), Idx{}, 1.f, Mat{},
                              LossOutputs{&eval_loss, predictions.data()});
  dev().synchronize();
  EXPECT_GT(eval_loss, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Classes, CudaLoss, ::testing::Values(7, 32, 47, 100, 172, 256, 300),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) {
                           return "classes" + std::to_string(info.param);
                         });

// softmax_cross_entropy's host-visible results may wait on the device until synchronize(): more
// targets than the device keeps accumulators for, targets that come back, and predictions of
// calls that outgrow their staging, with no synchronize between the calls, give what the same
// calls give with a synchronize after each.
TEST_F(CudaOps, LossResultsArriveAtSynchronize) {
  const std::int64_t classes = 5;
  const std::vector<std::int64_t> sizes = {3, 10, 40, 200, 700, 1500, 64, 2200};
  const std::int64_t rows = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  const Host logits = random_floats(rows * classes, rng_, -4, 4);
  std::vector<vertex_t> labels(rows), mask(rows);
  std::uniform_int_distribution<int> label(-1, classes - 1), bits(0, 7);
  for (std::int64_t i = 0; i < rows; ++i) labels[i] = label(rng_), mask[i] = bits(rng_);
  const Mat dl = upload(rows, classes, logits);
  const Idx dlabels = dev().upload(labels, "labels"), dmask = dev().upload(mask, "mask");
  constexpr int kTargets = 6;
  struct Results {
    std::vector<double> loss = std::vector<double>(kTargets, 0.5);
    std::vector<SplitCounts> counts = std::vector<SplitCounts>(kTargets);
    std::vector<std::int32_t> predictions;
  };
  const auto run = [&](bool synchronize_each) {
    Results r;
    r.predictions.assign(rows, -1);
    std::int64_t first = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::size_t t = i % kTargets;  // the last two calls add to targets 0 and 1 again
      dev().softmax_cross_entropy(
          dl.row_block(first, sizes[i]), Idx{dlabels.data + first, sizes[i]},
          Idx{dmask.data + first, sizes[i]}, 1.f, Mat{},
          LossOutputs{&r.loss[t], r.predictions.data() + first, &r.counts[t]});
      if (synchronize_each) dev().synchronize();
      first += sizes[i];
    }
    dev().synchronize();
    return r;
  };
  const Results once = run(false), each = run(true);  // once first: its calls grow the staging
  for (int t = 0; t < kTargets; ++t) {
    EXPECT_GT(each.loss[t], 0.5) << "target " << t;
    EXPECT_NEAR(once.loss[t], each.loss[t], 1e-9 * each.loss[t]) << "target " << t;
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(once.counts[t].labeled[k], each.counts[t].labeled[k]) << "target " << t;
      EXPECT_EQ(once.counts[t].correct[k], each.counts[t].correct[k]) << "target " << t;
    }
  }
  EXPECT_GT(each.counts[0].labeled[0], 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* x = &logits[i * classes];
    ASSERT_EQ(once.predictions[i], std::max_element(x, x + classes) - x) << "row " << i;
    ASSERT_EQ(each.predictions[i], once.predictions[i]) << "row " << i;
  }
}

TEST_F(CudaOps, SgdAndAdamStepsFollowPyTorch) {
  const std::int64_t n = 3000;
  const Host w0 = random_floats(n, rng_), g0 = random_floats(n, rng_),
             m0 = random_floats(n, rng_, -0.1f, 0.1f), v0 = random_floats(n, rng_, 0.f, 0.01f);
  Mat w = upload(1, n, w0), g = upload(1, n, g0), m = upload(1, n, m0), v = upload(1, n, v0);
  const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 5e-4f;
  const std::int64_t step = 3;
  dev().adam_step(n, lr, b1, b2, eps, wd, step, w.data, g.data, m.data, v.data);
  std::vector<double> want_w(n), want_m(n), want_v(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double grad = g0[i] + double(wd) * w0[i];
    want_m[i] = b1 * double(m0[i]) + (1 - double(b1)) * grad;
    want_v[i] = b2 * double(v0[i]) + (1 - double(b2)) * grad * grad;
    const double mh = want_m[i] / (1 - std::pow(double(b1), step));
    const double vh = want_v[i] / (1 - std::pow(double(b2), step));
    want_w[i] = w0[i] - lr * mh / (std::sqrt(vh) + eps);
  }
  EXPECT_LT(relative_error(download(w), want_w), kTolerance);
  EXPECT_LT(relative_error(download(m), want_m), kTolerance);
  EXPECT_LT(relative_error(download(v), want_v), 1e-4);

  Mat w2 = upload(1, n, w0), g2 = upload(1, n, g0);
  dev().sgd_step(n, lr, wd, w2.data, g2.data);
  std::vector<double> want_sgd(n);
  for (std::int64_t i = 0; i < n; ++i) want_sgd[i] = w0[i] - lr * (g0[i] + double(wd) * w0[i]);
  EXPECT_LT(relative_error(download(w2), want_sgd), kTolerance);
}

// ---------------------------------------------------------------------------------------------
// Sparse operators

void check_spmm(Backend& backend, std::mt19937& rng) {
  Device& d = backend.device(0);
  const test::ChunkCsr a = test::random_chunk_csr(400, 650, 40, test::EmptyRows::kSome, rng);
  const std::int64_t nnz = a.indptr.back(), f = 19;
  Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "A");
  const Host values = random_floats(nnz, rng);
  Mat dvalues = d.alloc(1, nnz, "values");
  d.write(values.data(), nnz, dvalues.data);
  // x is a strided view (ld 25) of a wider matrix.
  const Host xs = random_floats(a.cols * 25, rng);
  Mat xwide = d.alloc(a.cols, 25, "x");
  d.write(xs.data(), a.cols * 25, xwide.data);
  Mat x = xwide.col_block(3, f);
  Mat y = d.alloc(a.rows, f, "y");
  d.fill(y, 123.f);  // overwritten (beta = 0)
  d.spmm(csr, dvalues.data, x, y);
  std::vector<double> want(a.rows * f, 0.0);
  for (std::int64_t r = 0; r < a.rows; ++r)
    for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
      for (std::int64_t c = 0; c < f; ++c)
        want[r * f + c] += double(values[e]) * xs[a.columns[e] * 25 + 3 + c];
  d.synchronize();
  Host got(a.rows * f);
  d.read(y.data, a.rows * f, got.data());
  EXPECT_LT(relative_error(got, want), kTolerance);

  // dx += A^T dy, accumulating into a strided view.
  const Host dys = random_floats(a.rows * f, rng);
  Mat dy = d.alloc(a.rows, f, "dy");
  d.write(dys.data(), a.rows * f, dy.data);
  const Host dx0 = random_floats(a.cols * 25, rng);
  Mat dxwide = d.alloc(a.cols, 25, "dx");
  d.write(dx0.data(), a.cols * 25, dxwide.data);
  d.spmm_transpose_add(csr, dvalues.data, dy, dxwide.col_block(6, f));
  // base's view columns [6, 6 + f) += A^T dy, in double.
  const auto add_reference = [&](std::vector<double>& base) {
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        for (std::int64_t c = 0; c < f; ++c)
          base[a.columns[e] * 25 + 6 + c] += double(values[e]) * dys[r * f + c];
  };
  std::vector<double> want_dx = to_double(dx0);
  add_reference(want_dx);
  d.synchronize();
  Host got_dx(a.cols * 25);
  d.read(dxwide.data, a.cols * 25, got_dx.data());
  EXPECT_LT(relative_error(got_dx, want_dx), kTolerance);

  // dx = A^T dy into the same strided view: the sums alone, zeros in the columns without
  // entries, the columns beside the view untouched.
  d.spmm_transpose(csr, dvalues.data, dy, dxwide.col_block(6, f));
  std::vector<double> want_stored = to_double(got_dx);
  for (std::int64_t c = 0; c < a.cols; ++c)
    for (std::int64_t j = 0; j < f; ++j) want_stored[c * 25 + 6 + j] = 0.0;
  add_reference(want_stored);
  d.synchronize();
  Host got_stored(a.cols * 25);
  d.read(dxwide.data, a.cols * 25, got_stored.data());
  EXPECT_LT(relative_error(got_stored, want_stored), kTolerance);
}

// The transposed product is the row SpMM's (here on strided rows that are not 16-byte
// aligned, which it reads a float at a time).
TEST_F(CudaOps, SpmmAndTransposedProduct) {
  check_spmm(*backend_, rng_);
}

// Matrices of derived weights (GCN's symmetric norm, SAGE's mean) give what the same matrix
// gives with those weights, written out on the host, passed per call, and both products match a
// double reference (the CPU backend's test checks the weights bit for bit). The hub rows take
// the long-row paths of the row SpMM.
TEST_F(CudaOps, DerivedWeightsMatchTheirValuesPassedPerCall) {
  Device& d = dev();
  test::ChunkCsr a = test::random_chunk_csr(900, 1300, 30, test::EmptyRows::kSome, rng_);
  // Hub rows: every 50th row takes 1500 more distinct columns after its self entry.
  {
    test::ChunkCsr hub{{0}, {}, a.rows, a.cols};
    for (std::int64_t r = 0; r < a.rows; ++r) {
      std::vector<vertex_t> row(a.columns.begin() + a.indptr[r],
                                a.columns.begin() + a.indptr[r + 1]);
      if (r % 50 == 7 && !row.empty())
        for (vertex_t c = 0; c < 1300 && row.size() < 1500; ++c)
          if (std::find(row.begin(), row.end(), c) == row.end()) row.push_back(c);
      hub.columns.insert(hub.columns.end(), row.begin(), row.end());
      hub.indptr.push_back(edge_t(hub.columns.size()));
    }
    a = hub;
  }
  std::vector<std::int32_t> degrees(std::size_t(a.cols));
  for (std::int32_t& degree : degrees) degree = 1 + std::int32_t(rng_() % 80);
  const std::int64_t nnz = a.indptr.back(), f = 32;
  const Host xs = random_floats(a.cols * f, rng_), dys = random_floats(a.rows * f, rng_);
  Mat x = d.alloc(a.cols, f, "x"), dy = d.alloc(a.rows, f, "dy");
  d.write(xs.data(), a.cols * f, x.data);
  d.write(dys.data(), a.rows * f, dy.data);
  for (CsrWeights kind : {CsrWeights::kSymmetricNorm, CsrWeights::kNeighborMean}) {
    SCOPED_TRACE(csr_weights_name(kind));
    Host w(std::size_t(nnz), 0.f);
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        w[e] = kind == CsrWeights::kSymmetricNorm
                   ? float(1.0 / std::sqrt(double(degrees[a.columns[a.indptr[r]]]) *
                                           double(degrees[a.columns[e]])))
               : e == a.indptr[r] ? 0.f
                                  : float(1.0 / double(a.indptr[r + 1] - a.indptr[r] - 1));
    Csr derived = d.upload_csr(
        a.indptr, a.columns, a.cols,
        CsrWeighting{kind,
                     kind == CsrWeights::kSymmetricNorm ? degrees : std::vector<std::int32_t>{}},
        "derived");
    Csr given = d.upload_csr(a.indptr, a.columns, a.cols, "given");
    Mat values = d.alloc(1, nnz, "values");
    d.write(w.data(), nnz, values.data);
    Mat y1 = d.alloc(a.rows, f, "y1"), y2 = d.alloc(a.rows, f, "y2");
    d.spmm(derived, nullptr, x, y1);
    d.spmm(given, values.data, x, y2);
    d.synchronize();
    Host got1(a.rows * f), got2(a.rows * f);
    d.read(y1.data, a.rows * f, got1.data());
    d.read(y2.data, a.rows * f, got2.data());
    std::vector<double> want_y(std::size_t(a.rows * f), 0.0);
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        for (std::int64_t c = 0; c < f; ++c)
          want_y[r * f + c] += double(w[e]) * xs[a.columns[e] * f + c];
    EXPECT_LT(relative_error(got1, want_y), kTolerance);
    EXPECT_LT(relative_error(got2, want_y), kTolerance);
    // Twice: each call adds once.
    std::vector<double> want(std::size_t(a.cols * f), 0.0);
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        for (std::int64_t c = 0; c < f; ++c)
          want[a.columns[e] * f + c] += 2.0 * double(w[e]) * dys[r * f + c];
    Mat dx = d.alloc(a.cols, f, "dx");
    d.fill(dx, 0.f);
    d.spmm_transpose_add(derived, nullptr, dy, dx);
    d.spmm_transpose_add(derived, nullptr, dy, dx);
    d.synchronize();
    Host got_dx(a.cols * f);
    d.read(dx.data, a.cols * f, got_dx.data());
    EXPECT_LT(relative_error(got_dx, want), kTolerance);
    EXPECT_ANY_THROW(d.spmm(derived, values.data, x, y1));
  }
}

// Row r: its self column r % cols first, each of the hub columns 1..hubs with probability 0.9,
// then distinct random columns up to degree_of(r) entries (drawn after the hub entries).
template <typename Degree>
test::ChunkCsr chunk_with_hubs(std::int64_t rows, std::int64_t cols, vertex_t hubs,
                               Degree degree_of, std::mt19937& rng) {
  test::ChunkCsr a{{0}, {}, rows, cols};
  std::uniform_int_distribution<vertex_t> column(0, static_cast<vertex_t>(cols - 1));
  std::bernoulli_distribution hub_entry(0.9);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<vertex_t> row{static_cast<vertex_t>(r % cols)};
    for (vertex_t hub = 1; hub <= hubs; ++hub)
      if (hub_entry(rng) && row.front() != hub) row.push_back(hub);
    const int d = degree_of(r);
    std::vector<char> used(static_cast<std::size_t>(cols), 0);
    for (vertex_t c : row) used[std::size_t(c)] = 1;
    while (static_cast<int>(row.size()) < d) {
      const vertex_t c = column(rng);
      if (!used[std::size_t(c)]) used[std::size_t(c)] = 1, row.push_back(c);
    }
    a.columns.insert(a.columns.end(), row.begin(), row.end());
    a.indptr.push_back(static_cast<edge_t>(a.columns.size()));
  }
  return a;
}

// A chunk with hub rows and hub columns: every 4th row holds 129..1100 entries (more than the
// long-row threshold of a matrix this size, 128) and columns 1..8 appear in most rows, so the
// GAT kernels and the row SpMM put those rows (and transposed rows) on a block of
// warps, over several rounds of its 16 warps.
test::ChunkCsr hub_csr(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  std::uniform_int_distribution<int> short_degree(0, 40), long_degree(129, 1100);
  return chunk_with_hubs(
      rows, cols, 8,
      [&](std::int64_t r) { return r % 4 == 1 ? long_degree(rng) : short_degree(rng); }, rng);
}

// Rows and transposed rows of `a` over the CUDA backend's long-row threshold.
std::pair<std::int64_t, std::int64_t> long_rows_of(const test::ChunkCsr& a) {
  const std::int64_t threshold = cuda::long_degree_for(a.indptr.back());
  std::vector<std::int64_t> column_count(static_cast<std::size_t>(a.cols), 0);
  std::int64_t rows = 0;
  for (std::int64_t r = 0; r < a.rows; ++r) rows += a.indptr[r + 1] - a.indptr[r] > threshold;
  for (vertex_t c : a.columns) ++column_count[std::size_t(c)];
  const auto columns = std::count_if(column_count.begin(), column_count.end(),
                                     [&](std::int64_t n) { return n > threshold; });
  return {rows, static_cast<std::int64_t>(columns)};
}

// Every call adds A^T dy once; at several widths, on rows that are not 16-byte aligned (ld 41:
// the row SpMM's scalar reads), and on a matrix with long rows and long transposed rows (the row
// SpMM's block-per-row path).
TEST_F(CudaOps, TransposedProductAddsOncePerCall) {
  Device& d = dev();
  const test::ChunkCsr plain = test::random_chunk_csr(300, 500, 30, test::EmptyRows::kSome, rng_);
  const test::ChunkCsr hubs = hub_csr(200, 1500, rng_);
  const auto [long_rows, long_columns] = long_rows_of(hubs);
  ASSERT_GE(long_rows, 40);
  ASSERT_GE(long_columns, 8);
  for (const test::ChunkCsr* matrix : {&plain, &hubs}) {
    const test::ChunkCsr& a = *matrix;
    const char* what = matrix == &hubs ? "hub matrix" : "plain matrix";
    const std::int64_t nnz = a.indptr.back();
    const Host values = random_floats(nnz, rng_);
    Mat dvalues = upload(1, nnz, values);
    for (const std::int64_t f : {8, 40, 39}) {
      Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "A");
      const Host dys = random_floats(a.rows * f, rng_);
      Mat dy = f == 39 ? upload(a.rows, 41, random_floats(a.rows * 41, rng_)).col_block(1, f)
                       : upload(a.rows, f, dys);
      if (f == 39)
        for (std::int64_t r = 0; r < a.rows; ++r)
          d.write(dys.data() + r * f, f, dy.data + r * dy.ld);
      Mat dx = d.alloc(a.cols, f, "dx");
      d.fill(dx, 0.f);
      std::vector<double> once(a.cols * f, 0.0);
      for (std::int64_t r = 0; r < a.rows; ++r)
        for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
          for (std::int64_t c = 0; c < f; ++c)
            once[a.columns[e] * f + c] += double(values[e]) * dys[r * f + c];
      for (int call = 1; call <= 4; ++call) {
        d.spmm_transpose_add(csr, dvalues.data, dy, dx);
        std::vector<double> want(once);
        for (double& w : want) w *= call;
        EXPECT_LT(relative_error(download(dx), want), kTolerance)
            << what << ", width " << f << " call " << call;
      }
    }
  }
}

// A transpose of short rows (at most kRowSpmmShortMean entries a row on average, as a small
// chunk's) takes a lane group per row of at most 32 entries at up to 128 columns, the warp for
// its rows of 33..128 entries, a block for the longer ones: most columns appear in a few rows,
// columns 3990..3999 in every 40th row besides (75 entries or a few more), column 1 in nine rows of
// ten (a transposed row split into segments). The transposed product (added on every call), and the
// product (stored; a warp per row) and its repeat bit for bit, at widths on either side of the 8-
// and 16-lane groups' spans and on rows that are not 16-byte aligned (ld 41).
TEST_F(CudaOps, ShortTransposedRowsTakeALaneGroupEach) {
  Device& d = dev();
  std::uniform_int_distribution<int> tiny(0, 3), wider(9, 24);
  const test::ChunkCsr hubs = chunk_with_hubs(
      3000, 4000, 1, [&](std::int64_t r) { return r % 4 == 1 ? wider(rng_) : tiny(rng_); }, rng_);
  test::ChunkCsr a{{0}, {}, hubs.rows, hubs.cols};
  for (std::int64_t r = 0; r < hubs.rows; ++r) {
    std::vector<vertex_t> row(hubs.columns.begin() + hubs.indptr[r],
                              hubs.columns.begin() + hubs.indptr[r + 1]);
    if (r % 40 == 0)
      for (vertex_t c = 3990; c < 4000; ++c)
        if (std::find(row.begin(), row.end(), c) == row.end()) row.push_back(c);
    a.columns.insert(a.columns.end(), row.begin(), row.end());
    a.indptr.push_back(edge_t(a.columns.size()));
  }
  const std::int64_t nnz = a.indptr.back();
  ASSERT_LE(nnz, cuda::kRowSpmmShortMean * a.cols);
  ASSERT_GT(std::count(a.columns.begin(), a.columns.end(), vertex_t(1)),
            cuda::long_segment_entries(nnz));
  const auto medium = std::count(a.columns.begin(), a.columns.end(), vertex_t(3990));
  ASSERT_GT(medium, 32);
  ASSERT_LE(medium, cuda::long_degree_for(nnz));
  const Host values = random_floats(nnz, rng_);
  Mat dvalues = upload(1, nnz, values);
  Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "short rows");
  for (const std::int64_t f : {8, 40, 39, 47, 64, 65, 100, 128}) {
    SCOPED_TRACE(testing::Message() << "width " << f);
    const Host xs = random_floats(a.cols * f, rng_), dys = random_floats(a.rows * f, rng_);
    // Width 39 reads and writes rows of ld 41 (not 16-byte aligned).
    const auto matrix = [&](std::int64_t rows, const Host& h) {
      if (f != 39) return upload(rows, f, h);
      Mat m = upload(rows, 41, random_floats(rows * 41, rng_)).col_block(1, f);
      for (std::int64_t r = 0; r < rows; ++r) d.write(h.data() + r * f, f, m.data + r * m.ld);
      return m;
    };
    Mat x = matrix(a.cols, xs), dy = matrix(a.rows, dys);
    Mat y = matrix(a.rows, random_floats(a.rows * f, rng_));
    Mat dx = matrix(a.cols, Host(std::size_t(a.cols * f), 0.f));
    std::vector<double> want_y(std::size_t(a.rows * f), 0.0), want_dx(std::size_t(a.cols * f), 0.0);
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        for (std::int64_t c = 0; c < f; ++c) {
          want_y[r * f + c] += double(values[e]) * xs[a.columns[e] * f + c];
          want_dx[a.columns[e] * f + c] += double(values[e]) * dys[r * f + c];
        }
    d.spmm(csr, dvalues.data, x, y);
    const Host first_y = download(y);
    EXPECT_LT(relative_error(first_y, want_y), kTolerance);
    d.spmm(csr, dvalues.data, x, y);
    EXPECT_EQ(download(y), first_y);
    d.spmm_transpose_add(csr, dvalues.data, dy, dx);
    const Host first_dx = download(dx);
    EXPECT_LT(relative_error(first_dx, want_dx), kTolerance);
    for (double& w : want_dx) w *= 2;
    d.spmm_transpose_add(csr, dvalues.data, dy, dx);
    EXPECT_LT(relative_error(download(dx), want_dx), kTolerance);
  }
}

// A chunk whose longest rows and columns the row SpMM splits into segments (more than
// long_segment_entries(nnz) entries, 2048 at this size): rows 7, 507, ... hold 2100..5900
// entries, columns 1..3 appear in nine rows of ten (about 2340 entries each); every 4th row is a
// long row of 129..1100 entries taken whole by a block, the others short.
test::ChunkCsr split_hub_csr(std::mt19937& rng) {
  std::uniform_int_distribution<int> short_degree(0, 20), long_degree(129, 1100),
      split_degree(2100, 5900);
  return chunk_with_hubs(
      2600, 6000, 3,
      [&](std::int64_t r) {
        return r % 500 == 7 ? split_degree(rng) : r % 4 == 1 ? long_degree(rng) : short_degree(rng);
      },
      rng);
}

// Rows longer than a segment take a block per segment, their sums added in segment order: the
// forward product (stored), the transposed product (stored, and added on every call) and their
// repeat bit for bit, for per-call values and both derived weights (the neighbor mean's self
// entry sits in a row's first segment only), at widths of one and two column passes and with
// rows that are not 16-byte aligned.
TEST_F(CudaOps, LongRowsSplitIntoSegments) {
  Device& d = dev();
  const test::ChunkCsr a = split_hub_csr(rng_);
  const std::int64_t nnz = a.indptr.back(), segment = cuda::long_segment_entries(nnz);
  std::vector<std::int64_t> column_count(std::size_t(a.cols), 0);
  for (vertex_t c : a.columns) ++column_count[std::size_t(c)];
  std::int64_t split_rows = 0;
  for (std::int64_t r = 0; r < a.rows; ++r) split_rows += a.indptr[r + 1] - a.indptr[r] > segment;
  ASSERT_EQ(split_rows, 6);
  ASSERT_EQ(std::count_if(column_count.begin(), column_count.end(),
                          [&](std::int64_t n) { return n > segment; }),
            3);
  std::vector<std::int32_t> degrees(std::size_t(a.cols));
  for (std::int32_t& degree : degrees) degree = 1 + std::int32_t(rng_() % 80);
  const Host given = random_floats(nnz, rng_);
  Mat given_values = upload(1, nnz, given);
  for (CsrWeights kind :
       {CsrWeights::kPerCall, CsrWeights::kSymmetricNorm, CsrWeights::kNeighborMean}) {
    Host w(static_cast<std::size_t>(nnz));
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
        w[e] = kind == CsrWeights::kPerCall ? given[e]
               : kind == CsrWeights::kSymmetricNorm
                   ? float(1.0 / std::sqrt(double(degrees[a.columns[a.indptr[r]]]) *
                                           double(degrees[a.columns[e]])))
               : e == a.indptr[r] ? 0.f
                                  : float(1.0 / double(a.indptr[r + 1] - a.indptr[r] - 1));
    const float* values = kind == CsrWeights::kPerCall ? given_values.data : nullptr;
    Csr csr = kind == CsrWeights::kPerCall
                  ? d.upload_csr(a.indptr, a.columns, a.cols, "A")
                  : d.upload_csr(a.indptr, a.columns, a.cols,
                                 CsrWeighting{kind, kind == CsrWeights::kSymmetricNorm
                                                        ? degrees
                                                        : std::vector<std::int32_t>{}},
                                 "A");
    for (const std::int64_t f : {48, 100, 39, 700}) {
      SCOPED_TRACE(std::string(csr_weights_name(kind)) + ", width " + std::to_string(f));
      const std::int64_t ld = f == 39 ? 41 : (f + 3) / 4 * 4;
      const Host xs = random_floats(a.cols * ld, rng_), dys = random_floats(a.rows * ld, rng_);
      Mat x = upload(a.cols, ld, xs).col_block(0, f), dy = upload(a.rows, ld, dys).col_block(0, f);
      std::vector<double> want_y(std::size_t(a.rows * f), 0.0), want_dx(std::size_t(a.cols * f));
      for (std::int64_t r = 0; r < a.rows; ++r)
        for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
          for (std::int64_t c = 0; c < f; ++c) {
            want_y[r * f + c] += double(w[e]) * xs[a.columns[e] * ld + c];
            want_dx[a.columns[e] * f + c] += double(w[e]) * dys[r * ld + c];
          }
      Mat y = d.alloc(a.rows, f, "y"), dx = d.alloc(a.cols, f, "dx");
      d.fill(y, 123.f);
      d.spmm(csr, values, x, y);
      const Host first_y = download(y);
      EXPECT_LT(relative_error(first_y, want_y), kTolerance);
      d.fill(y, -5.f);
      d.spmm(csr, values, x, y);
      EXPECT_EQ(download(y), first_y);
      d.fill(dx, 123.f);
      d.spmm_transpose(csr, values, dy, dx);
      const Host stored_dx = download(dx);
      EXPECT_LT(relative_error(stored_dx, want_dx), kTolerance);
      d.spmm_transpose_add(csr, values, dy, dx);
      std::vector<double> twice(want_dx);
      for (double& v : twice) v *= 2;
      EXPECT_LT(relative_error(download(dx), twice), kTolerance);
      d.fill(dx, 0.f);
      d.spmm_transpose_add(csr, values, dy, dx);
      EXPECT_EQ(download(dx), stored_dx);
      // In two row ranges (the schedule's remote region first), the same bits, stored or added;
      // a range leaves the other rows as they were.
      const std::int64_t split = a.cols / 3;
      d.fill(dx, 7.f);
      d.spmm_transpose_rows(csr, values, dy, dx, RowRange{split, a.cols}, RowCopy::kOverwrite);
      const Host upper = download(dx);
      for (std::int64_t i = 0; i < split * f; ++i) ASSERT_EQ(upper[i], 7.f) << i;
      d.spmm_transpose_rows(csr, values, dy, dx, RowRange{0, split}, RowCopy::kOverwrite);
      EXPECT_EQ(download(dx), stored_dx);
      d.fill(dx, 0.f);
      d.spmm_transpose_rows(csr, values, dy, dx, RowRange{split, a.cols}, RowCopy::kAdd);
      d.spmm_transpose_rows(csr, values, dy, dx, RowRange{0, split}, RowCopy::kAdd);
      EXPECT_EQ(download(dx), stored_dx);
    }
  }
}

// The sparse products repeat bit for bit: the forward and the transposed product, for derived
// weights and per-call values, on a fresh upload each time.
TEST_F(CudaOps, SparseProductsRepeatBitForBit) {
  Device& d = dev();
  const test::ChunkCsr a = hub_csr(400, 1500, rng_);
  const std::int64_t nnz = a.indptr.back();
  Mat dvalues = upload(1, nnz, random_floats(nnz, rng_));
  std::vector<std::int32_t> degrees(std::size_t(a.cols));
  for (std::int32_t& degree : degrees) degree = 1 + std::int32_t(rng_() % 80);
  for (const std::int64_t f : {47, 256}) {
    Mat x = upload(a.cols, f, random_floats(a.cols * f, rng_));
    Mat dy = upload(a.rows, f, random_floats(a.rows * f, rng_));
    for (CsrWeights kind : {CsrWeights::kPerCall, CsrWeights::kSymmetricNorm}) {
      SCOPED_TRACE(std::string(csr_weights_name(kind)) + ", width " + std::to_string(f));
      const float* values = kind == CsrWeights::kPerCall ? dvalues.data : nullptr;
      Host first_y, first_dx;
      for (int run = 0; run < 2; ++run) {
        Csr csr = kind == CsrWeights::kPerCall
                      ? d.upload_csr(a.indptr, a.columns, a.cols, "A")
                      : d.upload_csr(a.indptr, a.columns, a.cols, CsrWeighting{kind, degrees}, "A");
        Mat y = d.alloc(a.rows, f, "y"), dx = d.alloc(a.cols, f, "dx");
        d.spmm(csr, values, x, y);
        d.fill(dx, 0.f);
        for (int call = 0; call < 3; ++call) d.spmm_transpose_add(csr, values, dy, dx);
        const Host got_y = download(y), got_dx = download(dx);
        if (run == 0) {
          first_y = got_y;
          first_dx = got_dx;
        } else {
          EXPECT_EQ(got_y, first_y);
          EXPECT_EQ(got_dx, first_dx);
        }
      }
    }
  }
}

// Column sums (bias gradients) over many rows: per-slice partial sums added in a fixed order,
// so two runs give the same bits, and the sums match a double reference.
TEST_F(CudaOps, ColumnSumsAreReproducible) {
  Device& d = dev();
  const std::int64_t rows = 200000, cols = 67;
  const Host values = random_floats(rows * cols, rng_);
  Mat m = upload(rows, cols, values);
  Mat first = upload(1, cols, Host(cols, 0.5f)), second = upload(1, cols, Host(cols, 0.5f));
  d.add_column_sums(m, first.data);
  d.add_column_sums(m, second.data);
  std::vector<double> want(cols, 0.5);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) want[c] += values[r * cols + c];
  const Host got = download(first);
  EXPECT_LT(relative_error(got, want), kTolerance);
  EXPECT_EQ(download(second), got);
}

// The forward product stores A x on every call. Widths cover every lane layout of the row SpMM
// (groups of 8, 16 and 32 lanes, several column passes, a last word reaching into the padding),
// rows that are not 16-byte aligned (the scalar path), and a matrix whose long rows take the
// block-per-row kernel.
TEST_F(CudaOps, SpmmStoresTheProductEveryCall) {
  Device& d = dev();
  const test::ChunkCsr plain = test::random_chunk_csr(300, 500, 30, test::EmptyRows::kSome, rng_);
  const test::ChunkCsr hubs = hub_csr(200, 1500, rng_);
  ASSERT_GE(long_rows_of(hubs).first, 40);
  for (const test::ChunkCsr* matrix : {&plain, &hubs}) {
    const test::ChunkCsr& a = *matrix;
    const char* what = matrix == &hubs ? "hub matrix" : "plain matrix";
    const std::int64_t nnz = a.indptr.back();
    const Host values = random_floats(nnz, rng_);
    Mat dvalues = upload(1, nnz, values);
    for (const std::int64_t f : {1, 5, 8, 12, 16, 30, 47, 64, 100, 128, 256, 602, 39, 7}) {
      Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "A");  // a fresh choice per case
      // Leading dimensions: padded to 4 floats, or 41 and 9 (rows not 16-byte aligned) at widths
      // 39 and 7.
      const std::int64_t ld = f == 39 ? 41 : f == 7 ? 9 : (f + 3) / 4 * 4;
      const Host xs = random_floats(a.cols * ld, rng_);
      Mat x = upload(a.cols, ld, xs).col_block(0, f);
      Mat ywide = d.alloc(a.rows, ld, "y");
      d.fill(ywide, 7.f);  // the padding columns keep this
      Mat y = ywide.col_block(0, f);
      std::vector<double> want(a.rows * f, 0.0);
      for (std::int64_t r = 0; r < a.rows; ++r)
        for (edge_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e)
          for (std::int64_t c = 0; c < f; ++c)
            want[r * f + c] += double(values[e]) * xs[a.columns[e] * ld + c];
      for (int call = 1; call <= 3; ++call) {
        d.fill(y, 123.f);  // overwritten
        d.spmm(csr, dvalues.data, x, y);
        d.synchronize();
        Host got(a.rows * f);
        for (std::int64_t r = 0; r < a.rows; ++r) d.read(y.data + r * y.ld, f, got.data() + r * f);
        EXPECT_LT(relative_error(got, want), kTolerance)
            << what << ", width " << f << " call " << call;
      }
      const Host all = download(ywide);
      std::int64_t padding_changed = 0;
      for (std::int64_t r = 0; r < a.rows; ++r)
        for (std::int64_t c = f; c < ld; ++c) padding_changed += all[r * ld + c] != 7.f;
      EXPECT_EQ(padding_changed, 0) << what << ", width " << f;
    }
  }
}

// Double-precision GAT reference (docs/model-math.md) used by the GPU test and checked against
// finite differences below.
struct GatReference {
  const test::ChunkCsr& a;
  int heads;
  std::int64_t width;
  DropoutKey key;
  std::vector<vertex_t> row_keys;

  double mask(std::int64_t row, std::int64_t k, int h) const {
    if (key.rate <= 0) return 1.0;
    const bool keep = hash_to_unit(key_hash(key.seed, 2, key.epoch * 1024 + key.layer,
                                            row_keys[row], k * 256 + h)) >= key.rate;
    return keep ? 1.0 / (1.0 - key.rate) : 0.0;
  }
  // out (rows x K*F), alpha (nnz x K), el (cols x K), er (rows x K).
  void forward(const std::vector<double>& z, const std::vector<double>& as,
               const std::vector<double>& ad, std::vector<double>& el, std::vector<double>& er,
               std::vector<double>& alpha, std::vector<double>& out) const {
    const std::int64_t kf = heads * width, nnz = a.indptr.back();
    el.assign(a.cols * heads, 0);
    er.assign(a.rows * heads, 0);
    alpha.assign(nnz * heads, 0);
    out.assign(a.rows * kf, 0);
    for (std::int64_t u = 0; u < a.cols; ++u)
      for (int h = 0; h < heads; ++h)
        for (std::int64_t f = 0; f < width; ++f)
          el[u * heads + h] += z[u * kf + h * width + f] * as[h * width + f];
    for (std::int64_t v = 0; v < a.rows; ++v) {
      if (a.indptr[v + 1] == a.indptr[v]) continue;
      const std::int64_t self = a.columns[a.indptr[v]];
      for (int h = 0; h < heads; ++h)
        for (std::int64_t f = 0; f < width; ++f)
          er[v * heads + h] += z[self * kf + h * width + f] * ad[h * width + f];
    }
    for (std::int64_t v = 0; v < a.rows; ++v)
      for (int h = 0; h < heads; ++h) {
        double mx = -INFINITY;
        const auto e_of = [&](edge_t e) {
          const double s = el[a.columns[e] * heads + h] + er[v * heads + h];
          return s > 0 ? s : 0.2 * s;
        };
        for (edge_t e = a.indptr[v]; e < a.indptr[v + 1]; ++e) mx = std::max(mx, e_of(e));
        double sum = 0;
        for (edge_t e = a.indptr[v]; e < a.indptr[v + 1]; ++e) sum += std::exp(e_of(e) - mx);
        for (edge_t e = a.indptr[v]; e < a.indptr[v + 1]; ++e) {
          alpha[e * heads + h] = std::exp(e_of(e) - mx) / sum;
          const double at = alpha[e * heads + h] * mask(v, e - a.indptr[v], h);
          for (std::int64_t f = 0; f < width; ++f)
            out[v * kf + h * width + f] += at * z[a.columns[e] * kf + h * width + f];
        }
      }
  }
  // Scalar objective sum(out * r) for finite differences.
  double objective(const std::vector<double>& z, const std::vector<double>& as,
                   const std::vector<double>& ad, const std::vector<double>& r) const {
    std::vector<double> el, er, alpha, out;
    forward(z, as, ad, el, er, alpha, out);
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
    return s;
  }
  // Gradients of sum(out * dout) w.r.t. z, as, ad (analytic).
  void backward(const std::vector<double>& z, const std::vector<double>& as,
                const std::vector<double>& ad, const std::vector<double>& dout,
                std::vector<double>& dz, std::vector<double>& das, std::vector<double>& dad) const {
    const std::int64_t kf = heads * width;
    std::vector<double> el, er, alpha, out;
    forward(z, as, ad, el, er, alpha, out);
    dz.assign(a.cols * kf, 0);
    das.assign(kf, 0);
    dad.assign(kf, 0);
    std::vector<double> del(a.cols * heads, 0), der(a.rows * heads, 0);
    for (std::int64_t v = 0; v < a.rows; ++v)
      for (int h = 0; h < heads; ++h) {
        std::vector<double> dalpha;
        double weighted = 0;
        for (edge_t e = a.indptr[v]; e < a.indptr[v + 1]; ++e) {
          const std::int64_t u = a.columns[e];
          const double mk = mask(v, e - a.indptr[v], h);
          double dot = 0;
          for (std::int64_t f = 0; f < width; ++f) {
            dot += dout[v * kf + h * width + f] * z[u * kf + h * width + f];
            dz[u * kf + h * width + f] += alpha[e * heads + h] * mk * dout[v * kf + h * width + f];
          }
          dalpha.push_back(dot * mk);
          weighted += alpha[e * heads + h] * dot * mk;
        }
        for (edge_t e = a.indptr[v]; e < a.indptr[v + 1]; ++e) {
          const std::int64_t u = a.columns[e];
          const double de = alpha[e * heads + h] * (dalpha[e - a.indptr[v]] - weighted);
          const double s = el[u * heads + h] + er[v * heads + h];
          const double ds = s > 0 ? de : 0.2 * de;
          del[u * heads + h] += ds;
          der[v * heads + h] += ds;
        }
      }
    for (std::int64_t u = 0; u < a.cols; ++u)
      for (std::int64_t c = 0; c < kf; ++c) {
        dz[u * kf + c] += del[u * heads + c / width] * as[c];
        das[c] += del[u * heads + c / width] * z[u * kf + c];
      }
    for (std::int64_t v = 0; v < a.rows; ++v) {
      if (a.indptr[v + 1] == a.indptr[v]) continue;
      const std::int64_t self = a.columns[a.indptr[v]];
      for (std::int64_t c = 0; c < kf; ++c) {
        dz[self * kf + c] += der[v * heads + c / width] * ad[c];
        dad[c] += der[v * heads + c / width] * z[self * kf + c];
      }
    }
  }
};

// Runs without a GPU: validates the reference's backward (the GPU test's oracle) by central
// finite differences.
TEST(GatReferenceTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(7);
  const test::ChunkCsr a = test::random_chunk_csr(12, 15, 5, test::EmptyRows::kNone, rng);
  GatReference ref{a, 2, 3, DropoutKey{5, 1, 0, 0.3f}, {}};
  for (std::int64_t v = 0; v < a.rows; ++v)
    ref.row_keys.push_back(static_cast<vertex_t>(v * 7 + 1));
  const std::int64_t kf = 6;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> z(a.cols * kf), as(kf), ad(kf), r(a.rows * kf);
  for (auto* v : {&z, &as, &ad, &r})
    for (double& x : *v) x = u(rng);
  std::vector<double> dz, das, dad;
  ref.backward(z, as, ad, r, dz, das, dad);
  const double h = 1e-6;
  auto check = [&](std::vector<double>& param, const std::vector<double>& grad, const char* what) {
    for (std::size_t i = 0; i < param.size(); ++i) {
      const double saved = param[i];
      param[i] = saved + h;
      const double up = ref.objective(z, as, ad, r);
      param[i] = saved - h;
      const double down = ref.objective(z, as, ad, r);
      param[i] = saved;
      ASSERT_NEAR(grad[i], (up - down) / (2 * h), 1e-5) << what << "[" << i << "]";
    }
  };
  check(z, dz, "dz");
  check(as, das, "d_att_src");
  check(ad, dad, "d_att_dst");
}

void check_gat(Device& d, const test::ChunkCsr& a, std::mt19937& rng, int heads, std::int64_t width,
               float rate) {
  const std::int64_t kf = heads * width, nnz = a.indptr.back();
  GatReference ref{a, heads, width, DropoutKey{11, 4, 2, rate}, {}};
  for (std::int64_t v = 0; v < a.rows; ++v)
    ref.row_keys.push_back(static_cast<vertex_t>(v * 13 + 2));
  const Host z = random_floats(a.cols * kf, rng), as = random_floats(kf, rng),
             ad = random_floats(kf, rng), dout = random_floats(a.rows * kf, rng),
             dz0 = random_floats(a.cols * kf, rng), das0 = random_floats(kf, rng),
             dad0 = random_floats(kf, rng);
  Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "chunk");
  auto up = [&](std::int64_t r, std::int64_t c, const Host& v) {
    Mat m = d.alloc(r, c, "gat");
    d.write(v.data(), r * c, m.data);
    return m;
  };
  Mat dzm = up(a.cols, kf, z), dasm = up(1, kf, as), dadm = up(1, kf, ad);
  Mat el = d.alloc(a.cols, heads, "el"), er = d.alloc(a.rows, heads, "er"),
      alpha = d.alloc(nnz, heads, "alpha"), out = d.alloc(a.rows, kf, "out");
  Idx keys = d.upload(ref.row_keys, "keys");
  d.gat_forward(csr, dzm, dasm.data, dadm.data, heads, keys, ref.key, el, er, alpha, out,
                SourceScores::kCompute);
  std::vector<double> zd = to_double(z), asd = to_double(as), add = to_double(ad);
  std::vector<double> w_el, w_er, w_alpha, w_out;
  ref.forward(zd, asd, add, w_el, w_er, w_alpha, w_out);
  EXPECT_LT(relative_error(download_matrix(d, el), w_el), kTolerance);
  EXPECT_LT(relative_error(download_matrix(d, er), w_er), kTolerance);
  EXPECT_LT(relative_error(download_matrix(d, alpha), w_alpha), kTolerance);
  EXPECT_LT(relative_error(download_matrix(d, out), w_out), kTolerance);
  // gat_coefficients: the same el, er and alpha bit for bit, without the weighted sums.
  {
    Mat el2 = d.alloc(a.cols, heads, "el (coefficients)"),
        er2 = d.alloc(a.rows, heads, "er (coefficients)"),
        alpha2 = d.alloc(nnz, heads, "alpha (coefficients)");
    d.gat_coefficients(csr, dzm, dasm.data, dadm.data, heads, el2, er2, alpha2,
                       SourceScores::kCompute);
    EXPECT_EQ(download_matrix(d, el2), download_matrix(d, el));
    EXPECT_EQ(download_matrix(d, er2), download_matrix(d, er));
    EXPECT_EQ(download_matrix(d, alpha2), download_matrix(d, alpha));
  }

  Mat ddout = up(a.rows, kf, dout), ddz = up(a.cols, kf, dz0), ddas = up(1, kf, das0),
      ddad = up(1, kf, dad0);
  d.gat_backward(csr, dzm, dasm.data, dadm.data, heads, keys, ref.key, el, er, alpha, out, ddout,
                 ddz, ddas.data, ddad.data);
  std::vector<double> gz, gas, gad;
  ref.backward(zd, asd, add, to_double(dout), gz, gas, gad);
  for (std::size_t i = 0; i < gz.size(); ++i) gz[i] += dz0[i];
  for (std::int64_t i = 0; i < kf; ++i) gas[i] += das0[i], gad[i] += dad0[i];
  EXPECT_LT(relative_error(download_matrix(d, ddz), gz), kTolerance);
  EXPECT_LT(relative_error(download_matrix(d, ddas), gas), kTolerance);
  EXPECT_LT(relative_error(download_matrix(d, ddad), gad), kTolerance);
  // The backward by source sums without atomics: a second run gives the same bits.
  if (cuda::gat_backward_by_source(heads, width)) {
    Mat ddz2 = up(a.cols, kf, dz0), ddas2 = up(1, kf, das0), ddad2 = up(1, kf, dad0);
    d.gat_backward(csr, dzm, dasm.data, dadm.data, heads, keys, ref.key, el, er, alpha, out, ddout,
                   ddz2, ddas2.data, ddad2.data);
    EXPECT_EQ(download_matrix(d, ddz2), download_matrix(d, ddz));
    EXPECT_EQ(download_matrix(d, ddas2), download_matrix(d, ddas));
    EXPECT_EQ(download_matrix(d, ddad2), download_matrix(d, ddad));
  }
}

// On a random chunk of 300 rows (1..46 entries, every row on one warp).
void check_gat(Device& d, std::mt19937& rng, int heads, std::int64_t width, float rate) {
  const test::ChunkCsr a = test::random_chunk_csr(300, 420, 45, test::EmptyRows::kNone, rng);
  check_gat(d, a, rng, heads, width, rate);
}

TEST_F(CudaOps, GatForwardBackwardHiddenLayerShape) {
  check_gat(dev(), rng_, 8, 8, 0.f);
}
TEST_F(CudaOps, GatForwardBackwardWithAttentionDropout) {
  check_gat(dev(), rng_, 4, 16, 0.5f);
}
TEST_F(CudaOps, GatForwardBackwardWideSingleHead) {
  check_gat(dev(), rng_, 1, 300, 0.2f);
}
// Up to 8 heads of 256 columns in all take the backward by source: 16-byte words with heads
// summed over lane groups (the benchmark's 4 x 64) or over the warp (2 x 96), scalar columns
// with lane groups (8 x 8), the warp head by head (3 x 10) or at once (one head of 100). One
// head of at most 64 columns takes groups of 16 lanes per entry (1 x 47, the benchmark's output
// layer; 1 x 64), of 8 (1 x 32, 1 x 20) or of 4 (1 x 16, 1 x 7). Wider layers take the edge and
// transposed kernels: lane per entry (1 x 300, 2 x 160), warp-cooperative for more heads of a
// power of two (16 x 8). The one-head forward reads 16-byte words where the rows are aligned
// (1 x 64, 32, 20, 16) and single columns where they are not (1 x 47, 1 x 7).
TEST_F(CudaOps, GatForwardBackwardEveryBackwardKernel) {
  check_gat(dev(), rng_, 4, 64, 0.3f);
  check_gat(dev(), rng_, 1, 47, 0.2f);
  check_gat(dev(), rng_, 1, 64, 0.f);
  check_gat(dev(), rng_, 1, 32, 0.f);
  check_gat(dev(), rng_, 1, 20, 0.3f);
  check_gat(dev(), rng_, 1, 16, 0.2f);
  check_gat(dev(), rng_, 1, 7, 0.f);
  check_gat(dev(), rng_, 1, 100, 0.2f);
  check_gat(dev(), rng_, 2, 96, 0.f);
  check_gat(dev(), rng_, 3, 10, 0.2f);
  check_gat(dev(), rng_, 2, 160, 0.2f);
  check_gat(dev(), rng_, 16, 8, 0.3f);
}

// GAT's layer 0 attending over its input rows (gat_input_forward, gat_input_backward), checked
// through the identity it rests on: with Z = X W and the scores the caller gives (el = Z a_src,
// er = Z_self a_dst per head), its coefficients are GatReference's, O^h = agg^h W^h is its
// output, and the gradients it leads to, dW^h = agg^hT dO^h + s_h^T a_src^h + s_{K+h}^T a_dst^h,
// d a_src^h = s_h W^h and d a_dst^h = s_{K+h} W^h, are X^T dZ and the reference's. A second
// backward gives the same bits (its sums are added in a fixed order).
void check_gat_inputs(Device& d, const test::ChunkCsr& a, std::mt19937& rng, int heads,
                      std::int64_t in_width, std::int64_t width, float rate) {
  const std::int64_t K = heads, D = in_width, F = width, kf = K * F, nnz = a.indptr.back();
  SCOPED_TRACE(cat(K, " heads, D = ", D, ", F = ", F, ", dropout ", rate));
  GatReference ref{a, heads, width, DropoutKey{11, 4, 2, rate}, {}};
  for (std::int64_t v = 0; v < a.rows; ++v)
    ref.row_keys.push_back(static_cast<vertex_t>(v * 13 + 2));
  const Host x = random_floats(a.cols * D, rng), w = random_floats(D * kf, rng),
             as = random_floats(kf, rng), ad = random_floats(kf, rng),
             dout = random_floats(a.rows * kf, rng);
  std::vector<double> z(a.cols * kf, 0.0);
  for (std::int64_t u = 0; u < a.cols; ++u)
    for (std::int64_t j = 0; j < D; ++j)
      for (std::int64_t c = 0; c < kf; ++c) z[u * kf + c] += double(x[u * D + j]) * w[j * kf + c];
  std::vector<double> w_el, w_er, w_alpha, w_out;
  ref.forward(z, to_double(as), to_double(ad), w_el, w_er, w_alpha, w_out);

  Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "chunk");
  auto up = [&](std::int64_t r, std::int64_t c, const Host& v) {
    Mat m = d.alloc(r, c, "gat inputs");
    d.write(v.data(), r * c, m.data);
    return m;
  };
  // x in rows of a multiple of 4 floats, as the transition buffer.
  const std::int64_t ldx = (D + 3) / 4 * 4;
  Host x_padded(a.cols * ldx, 0.f);
  for (std::int64_t u = 0; u < a.cols; ++u)
    std::copy_n(x.begin() + u * D, D, x_padded.begin() + u * ldx);
  const Mat xm = up(a.cols, ldx, x_padded).col_block(0, D);
  const Mat el = up(a.cols, K, Host(w_el.begin(), w_el.end())),
            er = up(a.rows, K, Host(w_er.begin(), w_er.end()));
  const Mat alpha = d.alloc(nnz, K, "alpha"), agg = d.alloc(a.rows, K * D, "agg");
  const Idx keys = d.upload(ref.row_keys, "keys");
  d.gat_input_forward(csr, xm, heads, keys, ref.key, el, er, alpha, agg);
  EXPECT_LT(relative_error(download_matrix(d, alpha), w_alpha), kTolerance);
  const Host agg_host = download_matrix(d, agg);
  std::vector<double> out(a.rows * kf, 0.0);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t h = 0; h < K; ++h)
      for (std::int64_t j = 0; j < D; ++j)
        for (std::int64_t f = 0; f < F; ++f)
          out[i * kf + h * F + f] +=
              double(agg_host[i * K * D + h * D + j]) * w[j * kf + h * F + f];
  EXPECT_LT(relative_error(Host(out.begin(), out.end()), w_out), kTolerance);

  // g^h = dO^h W^hT; the backward.
  Host g(a.rows * K * D, 0.f);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t h = 0; h < K; ++h)
      for (std::int64_t j = 0; j < D; ++j) {
        double sum = 0;
        for (std::int64_t f = 0; f < F; ++f)
          sum += double(dout[i * kf + h * F + f]) * w[j * kf + h * F + f];
        g[i * K * D + h * D + j] = float(sum);
      }
  const Mat outm = up(a.rows, kf, Host(w_out.begin(), w_out.end())), doutm = up(a.rows, kf, dout),
            gm = up(a.rows, K * D, g);
  const Mat sums = d.alloc(2 * K, D, "sums"), dots = d.alloc(a.rows, K, "head dots");
  d.head_dots(doutm, outm, dots);
  d.gat_input_backward(csr, xm, heads, keys, ref.key, el, er, alpha, dots, gm, sums);
  const Host s = download_matrix(d, sums);
  std::vector<double> gz, gas, gad;
  ref.backward(z, to_double(as), to_double(ad), to_double(dout), gz, gas, gad);
  std::vector<double> dw_want(D * kf, 0.0), dw(D * kf, 0.0), das(kf, 0.0), dad(kf, 0.0);
  for (std::int64_t u = 0; u < a.cols; ++u)
    for (std::int64_t j = 0; j < D; ++j)
      for (std::int64_t c = 0; c < kf; ++c)
        dw_want[j * kf + c] += double(x[u * D + j]) * gz[u * kf + c];
  for (std::int64_t h = 0; h < K; ++h)
    for (std::int64_t j = 0; j < D; ++j)
      for (std::int64_t f = 0; f < F; ++f) {
        const std::int64_t c = h * F + f;
        double sum = double(s[h * D + j]) * as[c] + double(s[(K + h) * D + j]) * ad[c];
        for (std::int64_t i = 0; i < a.rows; ++i)
          sum += double(agg_host[i * K * D + h * D + j]) * dout[i * kf + c];
        dw[j * kf + c] = sum;
        das[c] += double(s[h * D + j]) * w[j * kf + c];
        dad[c] += double(s[(K + h) * D + j]) * w[j * kf + c];
      }
  EXPECT_LT(relative_error(Host(dw.begin(), dw.end()), dw_want), kTolerance);
  EXPECT_LT(relative_error(Host(das.begin(), das.end()), gas), kTolerance);
  EXPECT_LT(relative_error(Host(dad.begin(), dad.end()), gad), kTolerance);
  const Mat again = d.alloc(2 * K, D, "sums again");
  d.gat_input_backward(csr, xm, heads, keys, ref.key, el, er, alpha, dots, gm, again);
  EXPECT_EQ(download_matrix(d, again), s);
}

// Every kernel variant: 4 padded heads of one 16-byte word a lane (the benchmark's 4 heads of
// 100 columns; 2 x 12; one head of 20, whose last word is partial in the forward's lane layout),
// of two (3 x 200), and 8 heads (8 x 128); with and without attention dropout; on a chunk with
// hub rows of 1500 entries (a block of warps each in the forward and in the backward's sums by
// destination and by source, many warps' entries in the backward's dot products); and with empty
// rows (no self entry to weight, no d_er).
TEST_F(CudaOps, GatOverInputRowsMatchesTheTransformFirstReference) {
  const test::ChunkCsr a = test::random_chunk_csr(300, 420, 45, test::EmptyRows::kNone, rng_);
  check_gat_inputs(dev(), a, rng_, 4, 100, 64, 0.3f);
  check_gat_inputs(dev(), a, rng_, 2, 12, 8, 0.f);
  check_gat_inputs(dev(), a, rng_, 1, 20, 8, 0.2f);
  check_gat_inputs(dev(), a, rng_, 3, 200, 32, 0.2f);
  check_gat_inputs(dev(), a, rng_, 8, 128, 16, 0.f);
  check_gat_inputs(dev(), hub_csr(200, 1500, rng_), rng_, 4, 100, 64, 0.3f);
  check_gat_inputs(dev(), test::random_chunk_csr(300, 420, 45, test::EmptyRows::kSome, rng_), rng_,
                   4, 100, 64, 0.3f);
}

// GAT's layer-0 scores in one read of x: el = x times the folded source vectors and er = x's
// first rows times the folded destination ones, as the two products give them, for head counts
// that take each of the kernel's reduction widths (2K = 2, 4, 8, 16, 32 after rounding up),
// rows of 100 floats, a view of 7 columns of a wider matrix, more rows than the warps take in
// one sweep, and rows past one pass (130 floats: two GEMMs instead).
TEST_F(CudaOps, GatInputScoresEqualTheirProducts) {
  struct Shape {
    std::int64_t rows, width, ld;
    int heads;
    std::int64_t er_rows;
  };
  for (const Shape& sh :
       {Shape{1000, 100, 100, 4, 700}, Shape{333, 7, 12, 1, 333}, Shape{257, 64, 64, 3, 100},
        Shape{300, 128, 128, 8, 300}, Shape{90, 130, 132, 2, 50}, Shape{40, 32, 32, 16, 40},
        Shape{20000, 24, 24, 2, 19999}}) {
    SCOPED_TRACE(cat(sh.rows, " rows of ", sh.width, " floats, ", sh.heads, " heads"));
    const std::int64_t K = sh.heads, N = 2 * K;
    const Host x = random_floats(std::size_t(sh.rows * sh.ld), rng_);
    const Host f = random_floats(std::size_t(sh.width * N), rng_);
    const Mat dx = upload(sh.rows, sh.ld, x).col_block(0, sh.width);
    const Mat df = upload(sh.width, N, f);
    const Mat el = dev().alloc(sh.rows, K, "el"), er = dev().alloc(sh.er_rows, K, "er");
    dev().gat_input_scores(dx, df, sh.heads, el, er);
    std::vector<double> want_el(std::size_t(sh.rows * K)), want_er(std::size_t(sh.er_rows * K));
    for (std::int64_t r = 0; r < sh.rows; ++r)
      for (std::int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (std::int64_t c = 0; c < sh.width; ++c)
          sum += double(x[std::size_t(r * sh.ld + c)]) * f[std::size_t(c * N + j)];
        if (j < K)
          want_el[std::size_t(r * K + j)] = sum;
        else if (r < sh.er_rows)
          want_er[std::size_t(r * K + j - K)] = sum;
      }
    EXPECT_LT(relative_error(download(el), want_el), kTolerance);
    EXPECT_LT(relative_error(download(er), want_er), kTolerance);
  }
}

// Rows with more entries than the long-row threshold (and transposed rows with more) get a block
// of warps each: the hub chunk puts a quarter of its rows and its hub columns on that path, in
// every kernel variant (backward by source with lane-group, warp and narrow-head reductions,
// warp-cooperative and lane-per-entry backward, scalar and 16-byte reads, several column passes),
// and must still match the reference.
TEST_F(CudaOps, GatLongRowsSplitAcrossWarps) {
  const test::ChunkCsr hubs = hub_csr(200, 1500, rng_);
  const auto [long_rows, long_columns] = long_rows_of(hubs);
  ASSERT_GE(long_rows, 40);
  ASSERT_GE(long_columns, 8);
  struct Shape {
    int heads;
    std::int64_t width;
    float rate;
  };
  for (const Shape& shape :
       {Shape{8, 8, 0.f}, Shape{8, 8, 0.5f}, Shape{4, 16, 0.5f}, Shape{1, 300, 0.2f},
        Shape{2, 12, 0.f}, Shape{4, 64, 0.3f}, Shape{2, 96, 0.f}, Shape{16, 8, 0.3f},
        Shape{2, 160, 0.f}, Shape{1, 47, 0.2f}, Shape{1, 20, 0.f}, Shape{1, 7, 0.3f},
        Shape{1, 100, 0.2f}}) {
    SCOPED_TRACE(cat(shape.heads, " heads x ", shape.width, ", attention dropout ", shape.rate));
    check_gat(dev(), hubs, rng_, shape.heads, shape.width, shape.rate);
  }
}

// ---------------------------------------------------------------------------------------------
// Against the CPU backend (the project's numerical reference): one GCN-style SpMM pair and one
// GAT layer pass with feature dropout, run through both backends on the same inputs.

std::vector<Host> layer_pipeline(Backend& backend, const test::ChunkCsr& a, const Host& values,
                                 const Host& z, const Host& as, const Host& ad, const Host& dout,
                                 const std::vector<vertex_t>& keys, int heads, std::int64_t width) {
  Device& d = backend.device(0);
  const std::int64_t kf = heads * width, nnz = a.indptr.back();
  auto up = [&](std::int64_t r, std::int64_t c, const Host& v) {
    Mat m = d.alloc(r, c, "pipeline");
    d.write(v.data(), r * c, m.data);
    return m;
  };
  Csr csr = d.upload_csr(a.indptr, a.columns, a.cols, "chunk");
  Idx key_idx = d.upload(keys, "keys");
  std::vector<vertex_t> all_rows(static_cast<std::size_t>(a.cols));
  std::iota(all_rows.begin(), all_rows.end(), 0);
  std::vector<vertex_t> col_keys(all_rows.begin(), all_rows.end());
  for (auto& k : col_keys) k = k * 3 + 1;
  Mat x = up(a.cols, kf, z);
  d.dropout_rows(x, d.upload(all_rows, "rows"), d.upload(col_keys, "ck"),
                 DropoutKey{3, 2, 1, 0.25f});
  Mat w = up(1, nnz, values);
  Mat agg = d.alloc(a.rows, kf, "agg");
  d.spmm(csr, w.data, x, agg);
  Mat back = d.alloc(a.cols, kf, "back");
  d.fill(back, 0.5f);
  d.spmm_transpose_add(csr, w.data, agg, back);
  Mat mas = up(1, kf, as), mad = up(1, kf, ad), mdout = up(a.rows, kf, dout);
  Mat el = d.alloc(a.cols, heads, "el"), er = d.alloc(a.rows, heads, "er"),
      alpha = d.alloc(nnz, heads, "alpha"), out = d.alloc(a.rows, kf, "out");
  const DropoutKey attention{9, 2, 1, 0.3f};
  d.gat_forward(csr, x, mas.data, mad.data, heads, key_idx, attention, el, er, alpha, out,
                SourceScores::kCompute);
  Mat dz = d.alloc(a.cols, kf, "dz"), das = d.alloc(1, kf, "das"), dad = d.alloc(1, kf, "dad");
  d.gat_backward(csr, x, mas.data, mad.data, heads, key_idx, attention, el, er, alpha, out, mdout,
                 dz, das.data, dad.data);
  std::vector<Host> results;
  for (Mat m : {x, agg, back, el, er, alpha, out, dz, das, dad})
    results.push_back(download_matrix(d, m));
  return results;
}

TEST_F(CudaOps, MatchesCpuBackendOnGcnAndGatPasses) {
  const test::ChunkCsr a = test::random_chunk_csr(250, 330, 30, test::EmptyRows::kNone, rng_);
  const int heads = 4;
  const std::int64_t width = 6, kf = heads * width, nnz = a.indptr.back();
  const Host values = random_floats(nnz, rng_), z = random_floats(a.cols * kf, rng_),
             as = random_floats(kf, rng_), ad = random_floats(kf, rng_),
             dout = random_floats(a.rows * kf, rng_);
  std::vector<vertex_t> keys(static_cast<std::size_t>(a.rows));
  for (std::int64_t v = 0; v < a.rows; ++v) keys[v] = static_cast<vertex_t>(v * 5 + 3);
  auto cpu = make_cpu_backend(test::backend_options(1));
  const auto want = layer_pipeline(*cpu, a, values, z, as, ad, dout, keys, heads, width);
  const auto got = layer_pipeline(*backend_, a, values, z, as, ad, dout, keys, heads, width);
  const char* names[] = {"dropout", "spmm", "spmm_transpose_add", "el",       "er", "alpha",
                         "gat out", "dz",   "d_att_src",          "d_att_dst"};
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(relative_error(got[i], to_double(want[i])), kTolerance) << names[i];
}

// ---------------------------------------------------------------------------------------------
// Backend

TEST_F(CudaOps, MemoryBudgetOverflowThrows) {
  auto backend = make_backend(1, 1 << 20);  // 1 MiB
  Device& d = backend->device(0);
  Mat ok = d.alloc(100, 100, "small matrix");
  EXPECT_NE(ok.data, nullptr);
  EXPECT_GE(d.bytes_in_use(), 40000);
  try {
    d.alloc(1000, 1000, "transition buffer");
    FAIL() << "expected OutOfDeviceMemory";
  } catch (const OutOfDeviceMemory& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("transition buffer"), std::string::npos) << message;
    EXPECT_NE(message.find("budget"), std::string::npos) << message;
    EXPECT_NE(message.find("chunks"), std::string::npos) << message;
  }
  EXPECT_EQ(d.peak_bytes(), d.bytes_in_use());
}

TEST_F(CudaOps, AllReduceAcrossLogicalDevicesOnOneGpu) {
  auto backend = make_backend(3);
  const std::int64_t n = 777;
  std::vector<float*> buffers;
  std::vector<double> want(n, 0.0);
  for (int d = 0; d < 3; ++d) {
    const Host v = random_floats(n, rng_);
    Mat m = backend->device(d).alloc(1, n, "grad");
    backend->device(d).write(v.data(), n, m.data);
    for (std::int64_t i = 0; i < n; ++i) want[i] += v[i];
    buffers.push_back(m.data);
  }
  backend->all_reduce_sum(buffers, n);
  backend->synchronize_all();
  for (int d = 0; d < 3; ++d) {
    Host got(n);
    backend->device(d).read(buffers[d], n, got.data());
    EXPECT_LT(relative_error(got, want), kTolerance) << "device " << d;
  }
}

bool gpus_read_each_other() {
  int forward = 0, back = 0;
  SLUICE_CUDA(cudaDeviceCanAccessPeer(&forward, 0, 1));
  SLUICE_CUDA(cudaDeviceCanAccessPeer(&back, 1, 0));
  return forward != 0 && back != 0;
}

// Across GPUs: with peer access each GPU adds a slice of every buffer in device order and copies
// the others' slices, so every device holds the CPU backend's sums bit for bit; without it NCCL
// adds them (to rounding). Three logical devices on two GPUs add the third into GPU 0's first.
TEST_F(CudaOps, AllReduceAcrossTwoGpus) {
  for (const int partitions : {2, 3}) {
    for (const PeerAccess peers : {PeerAccess::kAuto, PeerAccess::kOff}) {
      std::unique_ptr<Backend> backend;
      try {
        backend = make_cuda_backend(test::backend_options(partitions).gpus(2).peer_access(peers));
      } catch (const InputError& e) {
        GTEST_SKIP() << "needs two GPUs: " << e.what();
      }
      for (const std::int64_t n : {std::int64_t(1), std::int64_t(7), std::int64_t(100003)}) {
        std::vector<float*> buffers;
        std::vector<Host> values;
        for (int d = 0; d < partitions; ++d) {
          values.push_back(random_floats(n, rng_));
          Mat m = backend->device(d).alloc(1, n, "grad");
          backend->device(d).write(values.back().data(), n, m.data);
          buffers.push_back(m.data);
        }
        // The leaders' sums in device order: GPU 0 holds devices 0 and 2, GPU 1 device 1.
        Host want(n);
        for (std::int64_t i = 0; i < n; ++i) {
          const float gpu0 = partitions == 3 ? values[0][i] + values[2][i] : values[0][i];
          want[i] = 0.f + gpu0 + values[1][i];
        }
        backend->all_reduce_sum(buffers, n);
        backend->synchronize_all();
        for (int d = 0; d < partitions; ++d) {
          Host got(n);
          backend->device(d).read(buffers[d], n, got.data());
          if (peers == PeerAccess::kAuto && gpus_read_each_other()) {
            EXPECT_EQ(got, want) << "device " << d << " of " << partitions << ", n = " << n;
          } else {
            EXPECT_LT(relative_error(got, std::vector<double>(want.begin(), want.end())),
                      kTolerance)
                << "device " << d << ", n = " << n;
          }
        }
      }
    }
  }
}

// Throughput of the transfer paths, printed (not asserted); runs only with SLUICE_GPU_BENCH=1
// (scripts/device-test.sh --bench). Sorted 25% subset of a 1 GiB pinned host matrix.
TEST_F(CudaOps, TransferBandwidthReport) {
  if (!std::getenv("SLUICE_GPU_BENCH")) GTEST_SKIP() << "set SLUICE_GPU_BENCH=1 to measure";
  const auto seconds = [](auto&& f, Device& d) { return best_ms(d, f) * 1e-3; };
  for (std::int64_t cols : {48, 64, 100, 128, 256}) {
    const std::int64_t host_rows = (std::int64_t(1) << 30) / (cols * 4);
    HostMat h = backend_->alloc_host(host_rows, cols, "bench host");
    std::vector<vertex_t> sorted;
    for (std::int64_t r = 0; r < host_rows; r += 4) sorted.push_back(static_cast<vertex_t>(r));
    std::vector<vertex_t> shuffled = sorted;
    std::shuffle(shuffled.begin(), shuffled.end(), rng_);
    const std::int64_t n = static_cast<std::int64_t>(sorted.size());
    Idx s_idx = dev().upload(sorted, "sorted"), r_idx = dev().upload(shuffled, "random");
    Mat dst = dev().alloc(n, cols, "bench dst");
    const double bytes = double(n) * cols * 4;
    const double t_sorted = seconds([&] { dev().load_rows(h, s_idx, Idx{}, dst); }, dev());
    const double t_random = seconds([&] { dev().load_rows(h, r_idx, Idx{}, dst); }, dev());
    Mat local = dev().alloc(host_rows / 4, cols, "bench local");
    std::vector<vertex_t> local_rows(shuffled.begin(), shuffled.end());
    for (auto& x : local_rows) x /= 4;
    Idx l_idx = dev().upload(local_rows, "local");
    const double t_local = seconds([&] { dev().gather_rows(local, l_idx, dst); }, dev());
    const double t_block = seconds([&] { dev().load_block(h, 0, dst); }, dev());
    std::vector<vertex_t> positions(sorted.size());
    std::iota(positions.begin(), positions.end(), 0);
    Idx p_idx = dev().upload(positions, "positions");
    const double t_store = seconds([&] { dev().flush_store_rows(dst, p_idx, s_idx, h); }, dev());
    const double t_add = seconds([&] { dev().flush_add_rows(dst, p_idx, s_idx, h); }, dev());
    // The same with the host rows' index list in pinned host memory, read zero-copy, as a
    // run's index lists are where its chunk structures exceed the budget (mapped pinned memory
    // has the same address on the device under unified addressing).
    HostMat ids = backend_->alloc_host(n, 1, "bench host ids");
    std::memcpy(ids.fp32(), sorted.data(), sorted.size() * sizeof(vertex_t));
    const Idx h_idx{reinterpret_cast<const vertex_t*>(ids.fp32()), n};
    const double t_host_ids = seconds([&] { dev().load_rows(h, h_idx, Idx{}, dst); }, dev());
    const double t_add_host_ids =
        seconds([&] { dev().flush_add_rows(dst, p_idx, h_idx, h); }, dev());
    std::printf(
        "[bench] width %3lld: zero-copy sorted %.1f GB/s (ids in host memory %.1f), random "
        "%.1f GB/s; device gather %.0f GB/s; load_block %.1f GB/s; flush store %.1f GB/s, flush "
        "add %.1f GB/s each way (ids in host memory %.1f) (%.0f MB)\n",
        static_cast<long long>(cols), bytes / t_sorted / 1e9, bytes / t_host_ids / 1e9,
        bytes / t_random / 1e9, bytes / t_local / 1e9, bytes / t_block / 1e9, bytes / t_store / 1e9,
        bytes / t_add / 1e9, bytes / t_add_host_ids / 1e9, bytes / 1e6);
  }
}

// Host-link throughput of each transfer path on one GPU alone and on two GPUs at once (and
// both directions at once on one GPU), printed, not asserted; SLUICE_GPU_BENCH=1 and two GPUs.
// Each device moves its own quarter of the rows of a shared 2 GiB pinned host matrix.
TEST_F(CudaOps, TwoGpuTransferConcurrencyReport) {
  if (!std::getenv("SLUICE_GPU_BENCH")) GTEST_SKIP() << "set SLUICE_GPU_BENCH=1 to measure";
  std::unique_ptr<Backend> backend;
  try {
    backend = make_cuda_backend(test::backend_options(2).gpus(2));
  } catch (const InputError& e) {
    GTEST_SKIP() << "needs two GPUs: " << e.what();
  }
  const std::int64_t cols = 256, host_rows = (std::int64_t(2) << 30) / (cols * 4);
  HostMat h = backend->alloc_host(host_rows, cols, "bench host");
  HostMat out = backend->alloc_host(host_rows, cols, "bench host out");
  struct PerDevice {
    Idx rows, iota;
    Mat dst;
    std::int64_t n = 0;
  };
  std::vector<PerDevice> per(2);
  for (int d = 0; d < 2; ++d) {
    std::vector<vertex_t> rows;
    for (std::int64_t r = d; r < host_rows; r += 4) rows.push_back(vertex_t(r));
    per[d].n = std::int64_t(rows.size());
    per[d].rows = backend->device(d).upload(rows, "rows");
    std::iota(rows.begin(), rows.end(), 0);
    per[d].iota = backend->device(d).upload(rows, "iota");
    per[d].dst = backend->device(d).alloc(per[d].n, cols, "dst");
  }
  const double bytes = double(per[0].n) * cols * 4;  // per device
  // Best of 5 (after a warm-up) of issuing `op` on the chosen devices and waiting for all.
  auto measure = [&](const std::vector<int>& devices, auto&& op) {
    double best = 1e30;
    for (int rep = 0; rep < 6; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int d : devices) op(backend->device(d), per[d], d);
      for (int d : devices) backend->device(d).synchronize();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep > 0) best = std::min(best, t);
    }
    return bytes * double(devices.size()) / best / 1e9;
  };
  auto report = [&](const char* what, auto&& op) {
    const double a = measure({0}, op), b = measure({1}, op), both = measure({0, 1}, op);
    std::printf("[bench] %-44s GPU0 %5.1f GB/s, GPU1 %5.1f GB/s, both together %5.1f GB/s\n", what,
                a, b, both);
  };
  report("zero-copy sorted gather (load_rows)",
         [&](Device& dev, PerDevice& p, int) { dev.load_rows(h, p.rows, Idx{}, p.dst); });
  report("DMA host->GPU (load_block)",
         [&](Device& dev, PerDevice& p, int d) { dev.load_block(h, d * p.n, p.dst); });
  report("DMA GPU->host (store_block)",
         [&](Device& dev, PerDevice& p, int d) { dev.store_block(p.dst, out, d * p.n); });
  report("zero-copy scatter write (flush_store_rows)",
         [&](Device& dev, PerDevice& p, int) { dev.flush_store_rows(p.dst, p.iota, p.rows, out); });
  report("load_rows + store_block, two lanes", [&](Device& dev, PerDevice& p, int d) {
    {
      LaneScope lane(dev, Lane::kTransfer);
      dev.load_rows(h, p.rows, Idx{}, p.dst);
    }
    LaneScope lane(dev, Lane::kStore);
    dev.store_block(p.dst, out, d * p.n);
  });
}

// The dense operators of a GCN chunk at products-like shapes (nd rows; widths 100, 256, 47):
// cuBLAS on tall, skinny weight-gradient products (printed, not asserted; SLUICE_GPU_BENCH=1).
TEST_F(CudaOps, ChunkGemmTimingReport) {
  if (!std::getenv("SLUICE_GPU_BENCH")) GTEST_SKIP() << "set SLUICE_GPU_BENCH=1 to measure";
  Device& d = dev();
  for (const std::int64_t nd : {131072, 524288, 1048576}) {
    Mat a256 = d.alloc(nd, 256, "A"), a100 = d.alloc(nd, 100, "A0"), dz47 = d.alloc(nd, 47, "dZ"),
        dz256 = d.alloc(nd, 256, "dZ0"), w = d.alloc(256, 47, "W"), w0 = d.alloc(100, 256, "W0");
    for (Mat x : {a256, a100, dz47, dz256, w, w0}) d.fill(x, 0.01f);
    const double dw1 =
        best_ms(d, [&] { d.gemm(Transpose::kYes, Transpose::kNo, 1.f, a256, dz47, 1.f, w); });
    const double dw0 =
        best_ms(d, [&] { d.gemm(Transpose::kYes, Transpose::kNo, 1.f, a100, dz256, 1.f, w0); });
    const double da1 =
        best_ms(d, [&] { d.gemm(Transpose::kNo, Transpose::kYes, 1.f, dz47, w, 0.f, a256); });
    const double z1 =
        best_ms(d, [&] { d.gemm(Transpose::kNo, Transpose::kNo, 1.f, a256, w, 0.f, dz47); });
    std::printf(
        "[bench] GEMM nd %lld: dW1 = A(256)^T dZ(47) %.2f ms, dW0 = A(100)^T dZ(256) %.2f ms, "
        "dA = dZ W^T %.2f ms, Z = A W %.2f ms\n",
        static_cast<long long>(nd), dw1, dw0, da1, z1);
  }
}

// The loss on a products-like output (2.1 M rows, 47 classes; printed, not asserted;
// SLUICE_GPU_BENCH=1): its time against the bytes it must read and write.
TEST_F(CudaOps, LossTimingReport) {
  if (!std::getenv("SLUICE_GPU_BENCH")) GTEST_SKIP() << "set SLUICE_GPU_BENCH=1 to measure";
  const std::int64_t rows = std::int64_t(1) << 21;
  for (const std::int64_t classes : {std::int64_t(47), std::int64_t(41), std::int64_t(172)}) {
    Mat logits = dev().alloc(rows, classes, "logits");
    Mat grad_block = dev().alloc(rows, 2 * classes, "grad");
    const Mat grad = grad_block.col_block(0, classes);
    dev().fill(logits, 0.25f);
    std::vector<vertex_t> labels(static_cast<std::size_t>(rows)), mask(labels.size());
    for (std::int64_t i = 0; i < rows; ++i) {
      labels[std::size_t(i)] = vertex_t(i % classes);
      mask[std::size_t(i)] = vertex_t(1 + i % 7);
    }
    const Idx l = dev().upload(labels, "labels"), m = dev().upload(mask, "mask");
    double loss = 0;
    SplitCounts counts;
    const double train = best_ms(dev(), [&] {
      dev().softmax_cross_entropy(logits, l, m, 1.f, grad, LossOutputs{&loss, nullptr, nullptr});
    });
    std::vector<std::int32_t> predictions(static_cast<std::size_t>(rows));
    const double eval = best_ms(dev(), [&] {
      dev().softmax_cross_entropy(logits, l, m, 1.f, Mat{},
                                  LossOutputs{&loss, predictions.data(), &counts});
    });
    const double bytes = double(rows) * double(classes) * 4;
    std::printf(
        "[bench] loss %lld x %lld: with gradient %.3f ms (%.0f GB/s), evaluation with "
        "predictions %.3f ms\n",
        static_cast<long long>(rows), static_cast<long long>(classes), train,
        2 * bytes / train * 1e-6, eval);
  }
}

// Operator timings on a large random chunk (printed, not asserted; SLUICE_GPU_BENCH=1).
TEST_F(CudaOps, SparseAndGatTimingReport) {
  if (!std::getenv("SLUICE_GPU_BENCH")) GTEST_SKIP() << "set SLUICE_GPU_BENCH=1 to measure";
  const std::int64_t rows = 500000, cols = 800000;
  const test::ChunkCsr a = test::random_chunk_csr(rows, cols, 40, test::EmptyRows::kNone, rng_);
  const std::int64_t nnz = a.indptr.back();
  Csr csr = dev().upload_csr(a.indptr, a.columns, a.cols, "bench chunk");
  Mat values = dev().alloc(1, nnz, "values");
  dev().fill(values, 0.1f);
  for (std::int64_t f : {64, 128, 256}) {
    Mat x = dev().alloc(cols, f, "x"), y = dev().alloc(rows, f, "y");
    dev().fill(x, 1.f);
    const double t_fwd = best_ms(dev(), [&] { dev().spmm(csr, values.data, x, y); });
    const double t_bwd = best_ms(dev(), [&] { dev().spmm_transpose_add(csr, values.data, y, x); });
    std::printf(
        "[bench] SpMM %lld x %lld, nnz %lld, width %lld: forward %.2f ms, transpose-add "
        "%.2f ms\n",
        static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(nnz),
        static_cast<long long>(f), t_fwd, t_bwd);
  }
  const int heads = 8;
  const std::int64_t width = 8, kf = heads * width;
  const Host zs = random_floats(cols * kf, rng_), att = random_floats(2 * kf, rng_);
  Mat z = upload(cols, kf, zs), atts = upload(1, 2 * kf, att);
  Mat el = dev().alloc(cols, heads, "el"), er = dev().alloc(rows, heads, "er"),
      alpha = dev().alloc(nnz, heads, "alpha"), out = dev().alloc(rows, kf, "out"),
      dz = dev().alloc(cols, kf, "dz"), datt = dev().alloc(1, 2 * kf, "datt");
  std::vector<vertex_t> keys(static_cast<std::size_t>(rows));
  std::iota(keys.begin(), keys.end(), 0);
  Idx key_idx = dev().upload(keys, "keys");
  const DropoutKey drop{1, 1, 0, 0.5f};
  const double t_gat_fwd = best_ms(dev(), [&] {
    dev().gat_forward(csr, z, atts.data, atts.data + kf, heads, key_idx, drop, el, er, alpha, out,
                      SourceScores::kCompute);
  });
  const double t_gat_bwd = best_ms(dev(), [&] {
    dev().gat_backward(csr, z, atts.data, atts.data + kf, heads, key_idx, drop, el, er, alpha, out,
                       out, dz, datt.data, datt.data + kf);
  });
  std::printf("[bench] GAT 8 heads x 8, nnz %lld: forward %.2f ms, backward %.2f ms\n",
              static_cast<long long>(nnz), t_gat_fwd, t_gat_bwd);
}

}  // namespace
}  // namespace sluice
