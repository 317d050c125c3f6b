// How much a zero-copy gather over the host link slows a memory-bound kernel beside it, by the
// gather's grid and rows in flight: the gather reads sorted random rows of 100 floats from
// pinned, mapped host memory (load_rows' direction, a warp per row, K rows in flight a warp),
// the other kernel sums 64 random rows of 100 floats from a 1.6 GB device table per output row
// (the shape of a chunk's sparse product), on a stream of higher priority (the compute lane's).
// For each gather shape: its rate alone and beside the product, and the product's time alone and
// beside it. Standalone, run on the GPU machine (kernels/cuda/NOTES.md, "Transfers"):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o link_contention scripts/bench/link_contention.cu
//   ./link_contention
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda_check.cuh"

constexpr int kCols = 100;  // floats a row: 25 16-byte words
constexpr int kWords = kCols / 4;

// Rows [i, i + K) of each warp's stride, K loads in flight a lane before any store.
template <int K>
__global__ void host_gather(const float4* __restrict__ src, const int* __restrict__ rows,
                            float4* __restrict__ dst, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  const int64_t warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t first = warp * K; first < n; first += warps * K) {
    float4 v[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane < kWords && first + k < n) v[k] = src[(int64_t)rows[first + k] * kWords + lane];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (lane < kWords && first + k < n) dst[(first + k) * kWords + lane] = v[k];
  }
}

// y[r] = sum of x[cols[r * 64 + j]] over j: a warp per output row.
__global__ void device_product(const float4* __restrict__ x, const int* __restrict__ cols,
                               float4* __restrict__ y, int64_t rows) {
  const int lane = threadIdx.x & 31;
  const int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  if (r >= rows || lane >= kWords) return;
  float4 s = {0, 0, 0, 0};
  for (int j = 0; j < 64; ++j) {
    const float4 v = x[(int64_t)cols[r * 64 + j] * kWords + lane];
    s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
  }
  y[r * kWords + lane] = s;
}

int main() {
  // Gather about 4 M distinct rows (1.6 GB), ascending, of 16 M (6.4 GB of host memory): no row
  // twice, so none comes from the L2 cache.
  const int64_t host_rows = 16000000;
  const int64_t table_rows = 4000000, out_rows = 200000;
  float4* h;
  CK(cudaHostAlloc(&h, host_rows * kCols * 4, cudaHostAllocMapped));
  for (int64_t i = 0; i < host_rows * kWords; ++i) h[i] = make_float4(i % 7, 1, 2, 3);
  float4* hd;
  CK(cudaHostGetDevicePointer(&hd, h, 0));
  std::mt19937 rng(1);
  std::vector<int> idx;
  for (int64_t r = 0; r < host_rows; ++r)
    if (rng() % 4 == 0) idx.push_back(static_cast<int>(r));
  const int64_t n = static_cast<int64_t>(idx.size());
  int* rows;
  CK(cudaMalloc(&rows, n * 4));
  CK(cudaMemcpy(rows, idx.data(), n * 4, cudaMemcpyHostToDevice));
  float4* dst;
  CK(cudaMalloc(&dst, n * kCols * 4));
  std::vector<int> cols(out_rows * 64);
  for (auto& v : cols) v = rng() % table_rows;
  int* dcols;
  CK(cudaMalloc(&dcols, cols.size() * 4));
  CK(cudaMemcpy(dcols, cols.data(), cols.size() * 4, cudaMemcpyHostToDevice));
  float4 *x, *y;
  CK(cudaMalloc(&x, table_rows * kCols * 4));
  CK(cudaMemset(x, 0, table_rows * kCols * 4));
  CK(cudaMalloc(&y, out_rows * kCols * 4));
  int lowest = 0, highest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  cudaStream_t link, compute;
  CK(cudaStreamCreateWithPriority(&link, cudaStreamNonBlocking, lowest));
  CK(cudaStreamCreateWithPriority(&compute, cudaStreamNonBlocking, highest));
  cudaEvent_t g0, g1, p0, p1;
  CK(cudaEventCreate(&g0));
  CK(cudaEventCreate(&g1));
  CK(cudaEventCreate(&p0));
  CK(cudaEventCreate(&p1));
  auto ms = [](cudaEvent_t a, cudaEvent_t b) {
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    return t;
  };
  const int product_repeats = 4;  // back to back, inside the gather
  auto product = [&](cudaStream_t s) {
    for (int k = 0; k < product_repeats; ++k)
      device_product<<<(out_rows * 32 + 63) / 64, 64, 0, s>>>(x, dcols, y, out_rows);
    CK(cudaGetLastError());
  };
  struct Shape {
    int blocks, warps, in_flight;
  };
  const Shape shapes[] = {{132, 8, 2}, {132, 8, 1}, {132, 4, 2}, {66, 8, 2},   {33, 8, 2},
                          {33, 8, 4},  {33, 8, 8},  {16, 8, 8},  {132, 16, 2}, {132, 2, 8}};
  auto gather = [&](const Shape& sh, cudaStream_t s) {
    const int threads = sh.warps * 32;
    if (sh.in_flight == 1) host_gather<1><<<sh.blocks, threads, 0, s>>>(hd, rows, dst, n);
    if (sh.in_flight == 2) host_gather<2><<<sh.blocks, threads, 0, s>>>(hd, rows, dst, n);
    if (sh.in_flight == 4) host_gather<4><<<sh.blocks, threads, 0, s>>>(hd, rows, dst, n);
    if (sh.in_flight == 8) host_gather<8><<<sh.blocks, threads, 0, s>>>(hd, rows, dst, n);
    CK(cudaGetLastError());
  };
  const double gbytes = double(n) * kCols * 4;
  for (int rep = 0; rep < 2; ++rep) {
    CK(cudaEventRecord(p0, compute));
    product(compute);
    CK(cudaEventRecord(p1, compute));
    CK(cudaDeviceSynchronize());
    printf("product alone: %.3f ms a call\n", ms(p0, p1) / product_repeats);
    for (const Shape& sh : shapes) {
      CK(cudaEventRecord(g0, link));
      gather(sh, link);
      CK(cudaEventRecord(g1, link));
      CK(cudaDeviceSynchronize());
      const float alone = ms(g0, g1);
      CK(cudaEventRecord(g0, link));
      gather(sh, link);
      CK(cudaEventRecord(g1, link));
      CK(cudaEventRecord(p0, compute));
      product(compute);
      CK(cudaEventRecord(p1, compute));
      CK(cudaDeviceSynchronize());
      printf(
          "gather %3d blocks x %2d warps, %d rows in flight a warp (%5.0f KB): alone %.1f GB/s, "
          "beside %.1f GB/s; product beside it %.3f ms a call\n",
          sh.blocks, sh.warps, sh.in_flight, sh.blocks * sh.warps * sh.in_flight * 400.0 / 1024,
          gbytes / alone / 1e6, gbytes / ms(g0, g1) / 1e6, ms(p0, p1) / product_repeats);
    }
  }
}
