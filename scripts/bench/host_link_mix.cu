// How host-link reads and writes share the link: a zero-copy gather of 1 M sorted random rows
// of 100 floats from pinned, mapped host memory (load_rows' kernel shape: a warp per row, a
// block of 8 warps per SM), 400 MB of zero-copy writes into mapped memory (flush_store_rows'
// direction), DMA copies both ways, each alone and the gather beside each of the others.
// Standalone, run on the GPU machine (docs/benchmarks.md, "Host link"):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o host_link_mix scripts/bench/host_link_mix.cu
//   ./host_link_mix
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda_check.cuh"

__global__ void warp_gather(const float* __restrict__ src, int64_t ld, const int* __restrict__ rows,
                            float* __restrict__ dst, int64_t n, int cols) {
  int lane = threadIdx.x & 31;
  int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32;
  int64_t nw = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t i = w; i < n; i += nw) {
    const float4* f = reinterpret_cast<const float4*>(src + (int64_t)rows[i] * ld);
    float4* t = reinterpret_cast<float4*>(dst + i * ld);
    int v4 = cols / 4;
    int v = lane;
    for (; v + 32 < v4; v += 64) {
      float4 a = f[v], b = f[v + 32];
      t[v] = a;
      t[v + 32] = b;
    }
    for (; v < v4; v += 32) t[v] = f[v];
  }
}
// contiguous write of device rows into mapped host memory
__global__ void host_write(const float4* __restrict__ src, float4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

int main() {
  const int cols = 100;
  const int64_t N = 2400000, n = 1000000;
  float* h;
  CK(cudaHostAlloc(&h, N * cols * 4, cudaHostAllocMapped));
  for (int64_t i = 0; i < N * cols; ++i) h[i] = (float)(i % 977);
  float* hd;
  CK(cudaHostGetDevicePointer(&hd, h, 0));
  std::vector<int> idx(n);
  std::mt19937 rng(1);
  for (auto& v : idx) v = rng() % N;
  std::sort(idx.begin(), idx.end());
  int* rows;
  CK(cudaMalloc(&rows, n * 4));
  CK(cudaMemcpy(rows, idx.data(), n * 4, cudaMemcpyHostToDevice));
  float* d;
  CK(cudaMalloc(&d, n * cols * 4));
  const int64_t wbytes = 400ll << 20;  // 400 MB of writes
  float* wsrc;
  CK(cudaMalloc(&wsrc, wbytes));
  CK(cudaMemset(wsrc, 0, wbytes));
  float* wh;
  CK(cudaHostAlloc(&wh, wbytes, cudaHostAllocMapped));
  float* whd;
  CK(cudaHostGetDevicePointer(&whd, wh, 0));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t a0, a1, b0, b1;
  for (cudaEvent_t* event : {&a0, &a1, &b0, &b1}) CK(cudaEventCreate(event));
  const double rbytes = (double)n * cols * 4;
  // What each traffic queues on stream s.
  auto gather = [&](cudaStream_t s) {
    warp_gather<<<132, 256, 0, s>>>(hd, cols, rows, d, n, cols);
    CK(cudaGetLastError());
  };
  auto zwrite = [&](cudaStream_t s, int blocks) {
    host_write<<<blocks, 256, 0, s>>>((const float4*)wsrc, (float4*)whd, wbytes / 16);
    CK(cudaGetLastError());
  };
  auto mwrite = [&](cudaStream_t s) {
    CK(cudaMemcpyAsync(wh, wsrc, wbytes, cudaMemcpyDeviceToHost, s));
  };
  auto mread = [&](cudaStream_t s) {
    CK(cudaMemcpyAsync(wsrc, wh, wbytes, cudaMemcpyHostToDevice, s));
  };
  // Milliseconds between events e0 and e1 recorded around `launch` on s.
  auto bracket = [&](cudaStream_t s, cudaEvent_t e0, cudaEvent_t e1, auto launch) {
    CK(cudaEventRecord(e0, s));
    launch(s);
    CK(cudaEventRecord(e1, s));
  };
  auto elapsed = [&](cudaEvent_t e0, cudaEvent_t e1) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  };
  auto alone = [&](const char* name, double bytes, auto launch) {
    bracket(s2, b0, b1, launch);
    CK(cudaDeviceSynchronize());
    const float ms = elapsed(b0, b1);
    printf("%-28s %.3f ms %.1f GB/s\n", name, ms, bytes / ms / 1e6);
  };
  for (int rep = 0; rep < 2; ++rep) {
    alone("gather alone", rbytes, gather);
    alone("zero-copy write alone g=132", wbytes, [&](cudaStream_t s) { zwrite(s, 132); });
    alone("zero-copy write alone g=528", wbytes, [&](cudaStream_t s) { zwrite(s, 528); });
    alone("memcpy D2H alone", wbytes, mwrite);
    alone("memcpy H2D alone", wbytes, mread);
    const char* names[] = {"zero-copy write g=132", "zero-copy write g=32", "memcpy D2H",
                           "memcpy H2D"};
    for (int mode = 0; mode < 4; ++mode) {
      bracket(s1, a0, a1, gather);
      bracket(s2, b0, b1, [&](cudaStream_t s) {
        if (mode == 0)
          zwrite(s, 132);
        else if (mode == 1)
          zwrite(s, 32);
        else if (mode == 2)
          mwrite(s);
        else
          mread(s);
      });
      CK(cudaDeviceSynchronize());
      const float t1 = elapsed(a0, a1), t2 = elapsed(b0, b1);
      printf("gather + %-21s gather %.3f ms %.1f GB/s | other %.3f ms %.1f GB/s\n", names[mode], t1,
             rbytes / t1 / 1e6, t2, wbytes / t2 / 1e6);
    }
  }
}
