// Host-to-GPU DMA copies (cudaMemcpyAsync, the chunk CSRs' staging) from three kinds of pinned
// host memory: cudaHostAlloc; anonymous pages with MADV_HUGEPAGE, faulted in and registered
// (kernels/cuda/resources.cpp, register_pages(): what sluice-train pins large buffers with); the
// same pages without the huge-page hint. Three patterns, each printing GB/s:
//   repeat   one 108 MB buffer (a 1 B-edge chunk's CSR columns) copied 20 times;
//   walk     36 buffers of 108 MB, each its own allocation as the constant store's large slabs
//            are, copied once each in order (the second of two rounds is timed);
//   busy     the walk while a kernel on another stream gathers random 32-byte rows from a
//            1 GiB device buffer on every SM (a sparse product beside the copy).
// Then the share of the registered buffers the kernel backs with huge pages.
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
#include <vector>

#include "cuda_check.cuh"

namespace {

constexpr std::size_t kBytes = std::size_t(108) << 20;
constexpr int kCopies = 20;
constexpr int kSlabs = 36;

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

enum class Kind { kHostAlloc, kRegisteredHuge, kRegistered };

void* pinned(Kind kind) {
  if (kind != Kind::kHostAlloc) return registered_pages(kBytes, kind == Kind::kRegisteredHuge);
  void* p = nullptr;
  CK(cudaHostAlloc(&p, kBytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(p, 1, kBytes);
  return p;
}

void release(Kind kind, void* p) {
  if (kind == Kind::kHostAlloc) {
    CK(cudaFreeHost(p));
    return;
  }
  CK(cudaHostUnregister(p));
  munmap(p, kBytes);
}

// Random rows of `width` float4s (2: 32 bytes) of `rows` from every SM until *stop turns
// non-zero; consecutive threads read consecutive float4s of a row.
__global__ void gather_until(const float4* rows, std::int64_t count, int width, float4* sink,
                             const volatile int* stop) {
  const int lane = threadIdx.x % width;
  std::uint64_t state =
      0x9e3779b97f4a7c15ull * ((blockIdx.x * blockDim.x + threadIdx.x) / width + 1);
  float4 sum = make_float4(0, 0, 0, 0);
  while (*stop == 0) {
    for (int i = 0; i < 256; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float4 v = rows[width * ((state >> 17) % std::uint64_t(count / width)) + lane];
      sum.x += v.x;
      sum.y += v.y;
    }
  }
  if (sum.x == 12345.f) *sink = sum;
}

// Each slab copied once in order, its copy split evenly over `streams` streams.
double walk_rate(const std::vector<void*>& slabs, void* device, cudaStream_t* streams,
                 int num_streams) {
  double seconds = 0;
  const std::size_t piece = kBytes / std::size_t(num_streams);
  for (int round = 0; round < 2; ++round) {
    for (int s = 0; s < num_streams; ++s) CK(cudaStreamSynchronize(streams[s]));
    const auto start = std::chrono::steady_clock::now();
    for (void* slab : slabs)
      for (int s = 0; s < num_streams; ++s)
        CK(cudaMemcpyAsync(static_cast<char*>(device) + s * piece,
                           static_cast<const char*>(slab) + s * piece, piece,
                           cudaMemcpyHostToDevice, streams[s]));
    for (int s = 0; s < num_streams; ++s) CK(cudaStreamSynchronize(streams[s]));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return double(piece) * num_streams * double(slabs.size()) / seconds / 1e9;
}

}  // namespace

int main() {
  void* device = nullptr;
  CK(cudaMalloc(&device, kBytes));
  cudaStream_t streams[4];
  for (cudaStream_t& s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaStream_t side;
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  const std::size_t table_bytes = std::size_t(1) << 30;
  float4* table = nullptr;
  CK(cudaMalloc(&table, table_bytes));
  CK(cudaMemset(table, 0, table_bytes));
  float4* sink = nullptr;
  CK(cudaMalloc(&sink, sizeof(float4)));
  int* stop = nullptr;
  CK(cudaHostAlloc(&stop, sizeof(int), cudaHostAllocMapped));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::int64_t table_rows = std::int64_t(table_bytes / sizeof(float4));
  // The walk's rate while gather_until runs with `width` float4s a row on `blocks` blocks.
  const auto busy_rate = [&](const std::vector<void*>& slabs, int num_streams, int width,
                             int blocks, std::int64_t rows) {
    *stop = 0;
    gather_until<<<blocks, 256, 0, side>>>(table, rows, width, sink, stop);
    CK(cudaGetLastError());
    const double rate = walk_rate(slabs, device, streams, num_streams);
    *stop = 1;
    CK(cudaStreamSynchronize(side));
    return rate;
  };

  const char* names[] = {"cudaHostAlloc            ", "registered, MADV_HUGEPAGE",
                         "registered, no hint      "};
  printf("H2D DMA, %zu MB a copy (GB/s):\n", kBytes >> 20);
  printf("  %s  %8s %8s %8s\n", "memory                   ", "repeat", "walk", "busy");
  std::vector<void*> kept;
  for (int k = 0; k < 3; ++k) {
    const Kind kind = static_cast<Kind>(k);
    const long huge_before = anon_huge_kib();
    std::vector<void*> slabs;
    for (int i = 0; i < kSlabs; ++i) slabs.push_back(pinned(kind));
    const long huge_kib = anon_huge_kib() - huge_before;
    const double repeat = copy_rate(slabs[0], device, streams[0]);
    const double walk = walk_rate(slabs, device, streams, 1);
    const double busy = busy_rate(slabs, 1, 2, sms * 4, table_rows);
    printf("  %s  %8.1f %8.1f %8.1f", names[k], repeat, walk, busy);
    if (kind != Kind::kHostAlloc)
      printf("  (huge pages: %ld of %zu KiB)", huge_kib, (kBytes >> 10) * kSlabs);
    printf("\n");
    if (kind == Kind::kRegistered) {
      kept = slabs;
    } else {
      for (void* slab : slabs) release(kind, slab);
    }
  }
  printf(
      "The walk from registered pages beside the gather (GB/s), by the gather's row bytes "
      "and blocks (of 256 threads) and the copy's streams:\n");
  printf("  %9s %7s %8s %8s %8s\n", "row bytes", "blocks", "1 stream", "2", "4");
  for (const int width : {2, 8, 32}) {
    for (const int blocks : {sms / 4, sms, sms * 4}) {
      printf("  %9d %7d", width * 16, blocks);
      for (const int num_streams : {1, 2, 4})
        printf(" %8.1f", busy_rate(kept, num_streams, width, blocks, table_rows));
      printf("\n");
    }
  }
  printf("  32-byte rows of a 16 MiB table (L2-resident), %d blocks: %.1f GB/s\n", sms * 4,
         busy_rate(kept, 1, 2, sms * 4, (std::int64_t(16) << 20) / 16));
  for (void* slab : kept) release(Kind::kRegistered, slab);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  printf("transparent_hugepage/enabled: %s\n", mode.c_str());
  CK(cudaFreeHost(stop));
  CK(cudaFree(sink));
  CK(cudaFree(table));
  CK(cudaFree(device));
  return 0;
}
