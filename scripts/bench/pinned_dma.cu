// Host-to-GPU DMA copies (cudaMemcpyAsync, the chunk CSRs' staging) from three kinds of pinned
// host memory: cudaHostAlloc; anonymous pages with MADV_HUGEPAGE, faulted in and registered
// (kernels/cuda/resources.cpp, register_pages(): what sluice-train pins large buffers with); the
// same pages without the huge-page hint. Each copies 108 MB (a 1 B-edge chunk's CSR columns) 20
// times and prints GB/s, then the share of the registered buffers the kernel backs with huge
// pages (AnonHugePages of /proc/self/smaps_rollup against the bytes mapped).
// Standalone, run on the GPU machine (kernels/cuda/NOTES.md, "Transfers"):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o pinned_dma scripts/bench/pinned_dma.cu && ./pinned_dma
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "cuda_check.cuh"

namespace {

constexpr std::size_t kBytes = std::size_t(108) << 20;
constexpr int kCopies = 20;

void* registered_pages(std::size_t bytes, bool huge) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    printf("mmap failed\n");
    exit(1);
  }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 1, bytes);
  CK(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  return p;
}

double copy_rate(const void* host, void* device, cudaStream_t stream) {
  CK(cudaMemcpyAsync(device, host, kBytes, cudaMemcpyHostToDevice, stream));  // warm-up
  CK(cudaStreamSynchronize(stream));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCopies; ++i)
    CK(cudaMemcpyAsync(device, host, kBytes, cudaMemcpyHostToDevice, stream));
  CK(cudaStreamSynchronize(stream));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(kBytes) * kCopies / seconds / 1e9;
}

long anon_huge_kib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  long value = 0;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "AnonHugePages:") return value;
  return -1;
}

}  // namespace

int main() {
  void* device = nullptr;
  CK(cudaMalloc(&device, kBytes));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* allocated = nullptr;
  CK(cudaHostAlloc(&allocated, kBytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(allocated, 1, kBytes);
  const long huge_before = anon_huge_kib();
  void* huge = registered_pages(kBytes, true);
  const long huge_after = anon_huge_kib();
  void* small = registered_pages(kBytes, false);
  printf("H2D DMA, %zu MB a copy, %d copies:\n", kBytes >> 20, kCopies);
  printf("  cudaHostAlloc                          %6.1f GB/s\n",
         copy_rate(allocated, device, stream));
  printf("  registered, MADV_HUGEPAGE              %6.1f GB/s (huge pages: %ld of %zu KiB)\n",
         copy_rate(huge, device, stream), huge_after - huge_before, kBytes >> 10);
  printf("  registered, no hint                    %6.1f GB/s\n", copy_rate(small, device, stream));
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  printf("transparent_hugepage/enabled: %s\n", mode.c_str());
  CK(cudaHostUnregister(huge));
  CK(cudaHostUnregister(small));
  munmap(huge, kBytes);
  munmap(small, kBytes);
  CK(cudaFreeHost(allocated));
  CK(cudaFree(device));
  return 0;
}
