// GPU tests of read-only constants kept in pinned host memory (kernels/cuda ConstantStore):
// when chunk constants (upload, upload_csr, upload_constant) do not fit the device budget with
// its headroom free, they stay in pinned, mapped host memory, read zero-copy (index lists) or
// staged into device scratch before use (CSR arrays and entry values). Budgets sized around a
// working-buffer ballast put all or part of them there; every operator that reads a constant
// must give the same results as with device-resident constants. Without a GPU every test skips
// and says why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"

namespace sluice {
namespace {

using Host = std::vector<float>;

Host random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Host out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

std::vector<vertex_t> random_rows(std::size_t n, std::int64_t range, std::mt19937& rng) {
  std::uniform_int_distribution<vertex_t> dist(0, static_cast<vertex_t>(range - 1));
  std::vector<vertex_t> out(n);
  for (vertex_t& x : out) x = dist(rng);
  return out;
}

// `n` distinct rows of [0, range), in random order.
std::vector<vertex_t> distinct_rows(std::size_t n, std::int64_t range, std::mt19937& rng) {
  std::vector<vertex_t> all(static_cast<std::size_t>(range));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

// The inputs of one run: a chunk CSR whose row r starts with its self entry (column r, as
// rows < cols) followed by up to 120 drawn columns, and everything the operators read.
struct Problem {
  std::int64_t rows = 3000, cols = 5000, f = 32, heads = 4, width = 8;
  test::ChunkCsr csr;
  Host values, host_x, dy, dx, z, att_src, att_dst, dout;
  std::vector<std::int32_t> degrees;  // per column, for the GCN-weighted copy of the CSR
  std::vector<vertex_t> load_src, load_dst, gather, keys, all_rows, zero, flush_src, flush_host;
  std::vector<vertex_t> pull_owner, pull_local, push_src;

  explicit Problem(std::mt19937& rng) {
    csr = test::random_chunk_csr(rows, cols, 120, test::EmptyRows::kNone, rng);
    const std::int64_t nnz = csr.indptr.back(), kf = heads * width;
    values = random_floats(std::size_t(nnz), rng);
    degrees.resize(std::size_t(cols));
    for (std::int32_t& degree : degrees) degree = 1 + std::int32_t(rng() % 50);
    host_x = random_floats(std::size_t(cols * f), rng);
    dy = random_floats(std::size_t(rows * f), rng);
    dx = random_floats(std::size_t(cols * f), rng);
    z = random_floats(std::size_t(cols * kf), rng);
    att_src = random_floats(std::size_t(kf), rng);
    att_dst = random_floats(std::size_t(kf), rng);
    dout = random_floats(std::size_t(rows * kf), rng);
    load_src.resize(std::size_t(cols));
    std::iota(load_src.begin(), load_src.end(), 0);  // every host row, ascending
    load_dst = distinct_rows(std::size_t(cols), cols, rng);
    gather = random_rows(2500, cols, rng);  // repeats allowed
    keys.resize(std::size_t(rows));
    for (std::int64_t r = 0; r < rows; ++r) keys[std::size_t(r)] = static_cast<vertex_t>(7 * r + 1);
    all_rows.resize(std::size_t(rows));
    std::iota(all_rows.begin(), all_rows.end(), 0);
    zero = distinct_rows(700, cols, rng);
    flush_src = distinct_rows(1200, cols, rng);
    flush_host = distinct_rows(1200, cols, rng);
    pull_owner = distinct_rows(900, cols, rng);
    pull_local = distinct_rows(900, 900, rng);
    push_src = distinct_rows(600, 900, rng);
  }
};

struct Outcome {
  std::vector<Host> results;
  std::int64_t working_bytes = 0;  // device 0 after its working buffers
  std::int64_t setup_bytes = 0;    // device 0 after its constants
  std::int64_t peak_bytes = 0;     // device 0 at the end
  std::int64_t host_constant_bytes = 0;
  std::int64_t device_constant_bytes = 0;  // setup_bytes - working_bytes
};

const char* const kNames[] = {"load_rows",
                              "gather_rows",
                              "spmm + dropout_rows",
                              "spmm_transpose_add + flush + push",
                              "el",
                              "er",
                              "alpha",
                              "gat out",
                              "dz",
                              "d_att_src",
                              "d_att_dst",
                              "scatter_add_rows + zero_rows",
                              "flush_add_rows host",
                              "pull_rows",
                              "GCN-weighted spmm",
                              "GCN-weighted spmm_transpose_add",
                              "SAGE-weighted spmm",
                              "SAGE-weighted spmm_transpose_add"};

Host download(Device& d, Mat m) {
  Host out(std::size_t(m.rows * m.cols));
  if (!out.empty()) d.read(m.data, m.rows * m.cols, out.data());
  return out;
}

Mat upload_working(Device& d, std::int64_t rows, std::int64_t cols, const Host& values,
                   const char* what) {
  Mat m = d.alloc(rows, cols, what);
  d.write(values.data(), rows * cols, m.data);
  return m;
}

// The settings of one run besides the problem.
struct RunOptions {
  std::int64_t budget = 0;  // per device (0: the whole GPU)
  // A working buffer of this many bytes (a multiple of 256) allocated first on device 0: with
  // the budget it decides how much of the budget the constants find left.
  std::int64_t ballast_bytes = 0;
  PeerAccess peer_access = PeerAccess::kAuto;
};

// Runs every operator that reads constants on two logical devices of one GPU.
Outcome run(const Problem& p, const RunOptions& settings) {
  auto backend = make_cuda_backend(test::backend_options(2)
                                       .gpus(1)
                                       .memory_budget(settings.budget)
                                       .peer_access(settings.peer_access));
  Device& d0 = backend->device(0);
  Device& d1 = backend->device(1);
  const std::int64_t nnz = p.csr.indptr.back(), kf = p.heads * p.width;

  // Working buffers first (as the schedule does).
  if (settings.ballast_bytes > 0) d0.alloc(settings.ballast_bytes / 4, 1, "ballast");
  HostMat hx = backend->alloc_host(p.cols, p.f, "host X");
  std::copy(p.host_x.begin(), p.host_x.end(), hx.fp32());
  HostMat hg = backend->alloc_host(p.cols, p.f, "host G");  // zero-initialized
  Mat x = d0.alloc(p.cols, p.f, "X");
  Mat y = d0.alloc(p.rows, p.f, "Y");
  Mat g = d0.alloc(std::int64_t(p.gather.size()), p.f, "gathered");
  Mat s = upload_working(d0, p.cols, p.f, p.dx, "scatter target");
  Mat dy = upload_working(d0, p.rows, p.f, p.dy, "dY");
  Mat dx = upload_working(d0, p.cols, p.f, p.dx, "dX");
  Mat z = upload_working(d0, p.cols, kf, p.z, "Z");
  Mat as = upload_working(d0, 1, kf, p.att_src, "att_src");
  Mat ad = upload_working(d0, 1, kf, p.att_dst, "att_dst");
  Mat dout = upload_working(d0, p.rows, kf, p.dout, "dO");
  Mat el = d0.alloc(p.cols, p.heads, "el");
  Mat er = d0.alloc(p.rows, p.heads, "er");
  Mat alpha = d0.alloc(nnz, p.heads, "alpha");
  Mat out = d0.alloc(p.rows, kf, "gat out");
  Mat dz = upload_working(d0, p.cols, kf, Host(std::size_t(p.cols * kf), 0.f), "dZ");
  Mat das = upload_working(d0, 1, kf, Host(std::size_t(kf), 0.f), "d att_src");
  Mat dad = upload_working(d0, 1, kf, Host(std::size_t(kf), 0.f), "d att_dst");
  Mat b1 = d1.alloc(std::int64_t(p.pull_local.size()), p.f, "pulled");
  Mat y_gcn = d0.alloc(p.rows, p.f, "GCN Y"), y_sage = d0.alloc(p.rows, p.f, "SAGE Y");
  Mat dx_gcn = upload_working(d0, p.cols, p.f, p.dx, "GCN dX");
  Mat dx_sage = upload_working(d0, p.cols, p.f, p.dx, "SAGE dX");
  Outcome outcome;
  outcome.working_bytes = d0.bytes_in_use();

  // Constants.
  Csr csr = d0.upload_csr(p.csr.indptr, p.csr.columns, p.cols, "chunk CSR");
  Mat values = d0.upload_constant(p.values, 1, nnz, "entry values");
  Idx load_src = d0.upload(p.load_src, "load vertices");
  Idx load_dst = d0.upload(p.load_dst, "load slots");
  Idx gather = d0.upload(p.gather, "gather rows");
  Idx keys = d0.upload(p.keys, "keys");
  Idx all_rows = d0.upload(p.all_rows, "all rows");
  Idx zero = d0.upload(p.zero, "zero rows");
  Idx flush_src = d0.upload(p.flush_src, "flush slots");
  Idx flush_host = d0.upload(p.flush_host, "flush vertices");
  Idx pull_owner = d1.upload(p.pull_owner, "pull owner slots");
  Idx pull_local = d1.upload(p.pull_local, "pull local slots");
  Idx push_src = d1.upload(p.push_src, "push local slots");
  // The same structure with derived weights: no values, no permutation; GCN's column degrees.
  Csr gcn = d0.upload_csr(p.csr.indptr, p.csr.columns, p.cols,
                          CsrWeighting{CsrWeights::kSymmetricNorm, p.degrees}, "GCN CSR");
  Csr sage = d0.upload_csr(p.csr.indptr, p.csr.columns, p.cols,
                           CsrWeighting{CsrWeights::kNeighborMean, {}}, "SAGE CSR");
  outcome.setup_bytes = d0.bytes_in_use();

  const DropoutKey feature_key{11, 3, 1, 0.25f};
  const DropoutKey attention_key{11, 3, 1, 0.2f};
  d0.load_rows(hx, load_src, load_dst, x);
  d0.gather_rows(x, gather, g);
  d0.spmm(csr, values.data, x, y);
  d0.dropout_rows(y, all_rows, keys, feature_key);
  d0.spmm_transpose_add(csr, values.data, dy, dx);
  d0.gat_forward(csr, z, as.data, ad.data, int(p.heads), keys, attention_key, el, er, alpha, out,
                 SourceScores::kCompute);
  d0.gat_backward(csr, z, as.data, ad.data, int(p.heads), keys, attention_key, el, er, alpha, out,
                  dout, dz, das.data, dad.data);
  d0.scatter_add_rows(g, gather, s);
  d0.zero_rows(s, zero);
  d0.flush_add_rows(dx, flush_src, flush_host, hg);
  backend->synchronize_all();
  d1.pull_rows(d0, x, pull_owner, pull_local, b1);
  d1.put_rows(b1, push_src, d0, dx.row_block(0, std::int64_t(p.push_src.size())));
  d0.spmm(gcn, nullptr, x, y_gcn);
  d0.spmm_transpose_add(gcn, nullptr, dy, dx_gcn);
  d0.spmm(sage, nullptr, x, y_sage);
  d0.spmm_transpose_add(sage, nullptr, dy, dx_sage);
  backend->synchronize_all();

  outcome.results = {download(d0, x),
                     download(d0, g),
                     download(d0, y),
                     download(d0, dx),
                     download(d0, el),
                     download(d0, er),
                     download(d0, alpha),
                     download(d0, out),
                     download(d0, dz),
                     download(d0, das),
                     download(d0, dad),
                     download(d0, s),
                     Host(hg.fp32(), hg.fp32() + p.cols * p.f),
                     download(d1, b1),
                     download(d0, y_gcn),
                     download(d0, dx_gcn),
                     download(d0, y_sage),
                     download(d0, dx_sage)};
  outcome.peak_bytes = d0.peak_bytes();
  outcome.host_constant_bytes = dynamic_cast<cuda::CudaDevice&>(d0).host_constant_bytes();
  outcome.device_constant_bytes = outcome.setup_bytes - outcome.working_bytes;
  return outcome;
}

double relative_error(const Host& got, const Host& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

void expect_same(const Outcome& got, const Outcome& want) {
  ASSERT_EQ(got.results.size(), want.results.size());
  for (std::size_t i = 0; i < got.results.size(); ++i) {
    ASSERT_EQ(got.results[i].size(), want.results[i].size()) << kNames[i];
    EXPECT_LT(relative_error(got.results[i], want.results[i]), 1e-5) << kNames[i];
  }
  // Plain copies are exact.
  EXPECT_EQ(got.results[0], want.results[0]) << kNames[0];
  EXPECT_EQ(got.results[1], want.results[1]) << kNames[1];
  EXPECT_EQ(got.results[13], want.results[13]) << kNames[13];
}

class CudaSpill : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_backend_available())
      GTEST_SKIP() << "no CUDA GPU on this machine: the CUDA backend tests run on the GPU "
                      "machine (scripts/device-test.sh)";
  }
  std::mt19937 rng_{2024};
};

// Device scratch that device 0 sizes on first use when its constants live in host memory: the
// reference run's (constants on the device), the staging slots of the spilled CSRs
// (CudaDevice::resident_csr: each at most every CSR array, the values and their 256-byte
// granules), and a MiB to spare.
std::int64_t scratch_with_host_constants(const Problem& p, const Outcome& reference) {
  const std::int64_t nnz = std::int64_t(p.csr.indptr.back());
  const std::int64_t slot = 4 * (2 * (p.rows + 1) + 2 * (p.cols + 1) + 4 * nnz) + 9 * 256;
  return reference.peak_bytes - reference.setup_bytes + cuda::kStagedCsrSlots * slot +
         (std::int64_t(1) << 20);
}

// A budget that leaves every constant of device 0 in host memory: a ballast makes the working
// buffers 7/8 of it, so that no constant fits while leaving the headroom (budget / 8) free, and
// the headroom holds the scratch.
RunOptions all_constants_on_host(const Problem& p, const Outcome& reference) {
  const std::int64_t scratch = cuda::rounded(scratch_with_host_constants(p, reference));
  RunOptions settings;
  settings.ballast_bytes =
      cuda::rounded(std::max<std::int64_t>(0, 7 * scratch - reference.working_bytes));
  settings.budget = reference.working_bytes + settings.ballast_bytes + scratch;
  return settings;
}

TEST_F(CudaSpill, ConstantsOverAFullBudgetGiveDeviceResults) {
  const Problem p(rng_);
  const Outcome reference = run(p, RunOptions{});
  EXPECT_EQ(reference.host_constant_bytes, 0);
  EXPECT_GT(reference.device_constant_bytes, 0);
  const RunOptions settings = all_constants_on_host(p, reference);
  const Outcome got = run(p, settings);
  const std::int64_t nnz = std::int64_t(p.csr.indptr.back());
  EXPECT_GT(got.host_constant_bytes, 0);
  // No constant is on the device after setup.
  EXPECT_EQ(got.device_constant_bytes, 0) << "budget " << settings.budget;
  EXPECT_GE(got.host_constant_bytes, nnz * 16);
  EXPECT_LE(got.peak_bytes, settings.budget);
  expect_same(got, reference);
  // The CSR (columns, transposed columns and permutation) and its values are staged into
  // device scratch before the operators read them.
  EXPECT_GE(got.peak_bytes - got.setup_bytes,
            reference.peak_bytes - reference.setup_bytes + nnz * 16);
}

TEST_F(CudaSpill, HostConstantsWithStagedPeerCopies) {
  const Problem p(rng_);
  RunOptions staged;
  staged.peer_access = PeerAccess::kOff;
  const Outcome reference = run(p, staged);
  EXPECT_EQ(reference.host_constant_bytes, 0);
  RunOptions settings = all_constants_on_host(p, reference);
  settings.peer_access = PeerAccess::kOff;
  const Outcome got = run(p, settings);
  EXPECT_GT(got.host_constant_bytes, 0);
  expect_same(got, reference);
}

TEST_F(CudaSpill, ConstantsOverTheBudgetSpillAndWorkingBuffersStillThrow) {
  const Problem p(rng_);
  const Outcome reference = run(p, RunOptions{});
  // About half of the constants fit: constants go to the device while 7/8 of the budget holds
  // them, so budget = 8/7 (working buffers + half the constants); the ballast makes the
  // headroom (budget / 8) hold the scratch.
  const std::int64_t scratch = scratch_with_host_constants(p, reference);
  const std::int64_t half = reference.device_constant_bytes / 2;
  RunOptions settings;
  settings.ballast_bytes =
      cuda::rounded(std::max<std::int64_t>(0, 7 * scratch - half - reference.working_bytes));
  settings.budget = (8 * (reference.working_bytes + settings.ballast_bytes + half) + 6) / 7;
  const Outcome got = run(p, settings);
  EXPECT_GT(got.host_constant_bytes, 0) << "budget " << settings.budget;
  EXPECT_GT(got.device_constant_bytes, 0) << "some constants should still fit the device";
  EXPECT_LE(got.peak_bytes, settings.budget);
  expect_same(got, reference);

  // Working buffers never spill.
  auto backend = make_cuda_backend(test::backend_options(1).memory_budget(1 << 20));
  Device& d = backend->device(0);
  EXPECT_THROW(d.alloc(1000, 1000, "transition buffer"), OutOfDeviceMemory);
  // Constants do: 20 MiB of index list (a slab of its own) and 4 MiB of values (in a shared
  // slab) in a 1 MiB budget.
  std::vector<vertex_t> list(5 << 20);
  std::iota(list.begin(), list.end(), 0);
  Idx idx = d.upload(list, "big list");
  Mat values = d.upload_constant(Host(1 << 20, 0.5f), 1, 1 << 20, "big values");
  ASSERT_NE(idx.data, nullptr);
  ASSERT_NE(values.data, nullptr);
  EXPECT_EQ(idx.size, std::int64_t(list.size()));
  EXPECT_EQ(dynamic_cast<cuda::CudaDevice&>(d).host_constant_bytes(), std::int64_t(24) << 20);
  EXPECT_LE(d.bytes_in_use(), std::int64_t(1) << 20);
  Host back(4);
  d.read(values.data + 1000, 4, back.data());  // reads of host-resident constants
  EXPECT_EQ(back, Host(4, 0.5f));
  std::vector<vertex_t> ids(4);
  d.read(reinterpret_cast<const float*>(idx.data + 4000000), 4,
         reinterpret_cast<float*>(ids.data()));
  EXPECT_EQ(ids, (std::vector<vertex_t>{4000000, 4000001, 4000002, 4000003}));
}

}  // namespace
}  // namespace sluice
