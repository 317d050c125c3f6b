// Move-only owners of every CUDA resource Sluice creates: device memory, pinned host memory,
// streams, events, cuBLAS handles and NCCL communicators.
// Nothing outside these types frees or destroys a CUDA resource. Destructors never throw; they
// make the owning GPU current while they release (handles are per device).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"

namespace sluice::cuda {

// Makes `device` current for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    SLUICE_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device) SLUICE_CUDA(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current != previous_)
      SLUICE_CUDA_NOTHROW(cudaSetDevice(previous_));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// A generic move-only owner: Traits provides `using type`, `static void destroy(type)`.
template <typename Traits>
class Owner {
 public:
  using type = typename Traits::type;
  Owner() = default;
  Owner(type value, int device) : value_(value), device_(device) {}
  ~Owner() { reset(); }
  Owner(Owner&& other) noexcept
      : value_(std::exchange(other.value_, type{})), device_(other.device_) {}
  Owner& operator=(Owner&& other) noexcept {
    if (this != &other) {
      reset();
      value_ = std::exchange(other.value_, type{});
      device_ = other.device_;
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;

  type get() const { return value_; }
  int device() const { return device_; }
  explicit operator bool() const { return value_ != type{}; }
  void reset() noexcept {
    if (value_ == type{}) return;
    int previous = -1;
    const bool switched = device_ >= 0 && cudaGetDevice(&previous) == cudaSuccess &&
                          previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    Traits::destroy(value_);
    if (switched) SLUICE_CUDA_NOTHROW(cudaSetDevice(previous));
    value_ = type{};
  }

 private:
  type value_{};
  int device_ = -1;
};

struct DeviceMemoryTraits {
  using type = void*;
  static void destroy(void* p) { SLUICE_CUDA_NOTHROW(cudaFree(p)); }
};
struct PinnedMemoryTraits {
  using type = void*;
  static void destroy(void* p) { SLUICE_CUDA_NOTHROW(cudaFreeHost(p)); }
};
struct StreamTraits {
  using type = cudaStream_t;
  static void destroy(cudaStream_t s) { SLUICE_CUDA_NOTHROW(cudaStreamDestroy(s)); }
};
struct EventTraits {
  using type = cudaEvent_t;
  static void destroy(cudaEvent_t e) { SLUICE_CUDA_NOTHROW(cudaEventDestroy(e)); }
};
struct CublasTraits {
  using type = cublasHandle_t;
  static void destroy(cublasHandle_t h) { SLUICE_CUBLAS_NOTHROW(cublasDestroy(h)); }
};

// Device memory of `bytes` bytes on `device` (cudaMalloc; 256-byte aligned).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes) {
    if (bytes == 0) return;
    DeviceGuard guard(device);
    void* p = nullptr;
    SLUICE_CUDA(cudaMalloc(&p, bytes));
    memory_ = Owner<DeviceMemoryTraits>(p, device);
  }
  // Takes ownership of memory from cudaMalloc on `device`.
  static DeviceBuffer adopt(void* pointer, std::size_t bytes, int device) {
    DeviceBuffer buffer;
    buffer.memory_ = Owner<DeviceMemoryTraits>(pointer, device);
    buffer.bytes_ = bytes;
    return buffer;
  }
  void* get() const { return memory_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(memory_.get());
  }
  std::size_t bytes() const { return bytes_; }

 private:
  Owner<DeviceMemoryTraits> memory_;
  std::size_t bytes_ = 0;
};

// Anonymous pages registered with CUDA (cudaHostRegister), released by unregistering and
// unmapping them.
class RegisteredPages {
 public:
  RegisteredPages() = default;
  RegisteredPages(void* pages, std::size_t bytes) : pages_(pages), bytes_(bytes) {}
  ~RegisteredPages() { reset(); }
  RegisteredPages(RegisteredPages&& other) noexcept
      : pages_(std::exchange(other.pages_, nullptr)), bytes_(other.bytes_) {}
  RegisteredPages& operator=(RegisteredPages&& other) noexcept {
    if (this != &other) {
      reset();
      pages_ = std::exchange(other.pages_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  RegisteredPages(const RegisteredPages&) = delete;
  RegisteredPages& operator=(const RegisteredPages&) = delete;
  void* get() const { return pages_; }
  void reset() noexcept;

 private:
  void* pages_ = nullptr;
  std::size_t bytes_ = 0;
};

// Pages of `bytes` (at least kRegisteredBytes) mapped, faulted in by every OpenMP thread (huge
// pages where the kernel gives them) and registered mapped and portable with CUDA: the driver's
// own allocation (cudaHostAlloc) faults them in on one thread, a cost setup would pay for every
// chunk structure that stays in host memory. Null when any step fails (the caller falls back to
// cudaHostAlloc).
inline constexpr std::size_t kRegisteredBytes = std::size_t(2) << 20;
RegisteredPages register_pages(std::size_t bytes);

// Pinned, mapped, portable host memory: visible to every GPU through device_pointer().
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    if (bytes >= kRegisteredBytes) pages_ = register_pages(bytes);
    void* p = pages_.get();
    if (!p) {
      SLUICE_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
      memory_ = Owner<PinnedMemoryTraits>(p, -1);
    }
    SLUICE_CUDA(cudaHostGetDevicePointer(&device_pointer_, p, 0));
  }
  void* get() const { return pages_.get() ? pages_.get() : memory_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }
  void* device_pointer() const { return device_pointer_; }
  std::size_t bytes() const { return bytes_; }
  // Fresh anonymous pages (register_pages) read as zero; cudaHostAlloc memory need not.
  bool zero_filled() const { return pages_.get() != nullptr; }

 private:
  RegisteredPages pages_;
  Owner<PinnedMemoryTraits> memory_;
  void* device_pointer_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() = default;
  // priority: 0 = default; a lower number is a higher priority (cudaDeviceGetStreamPriorityRange).
  explicit Stream(int device, int priority = 0) {
    DeviceGuard guard(device);
    cudaStream_t s = nullptr;
    SLUICE_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    stream_ = Owner<StreamTraits>(s, device);
  }
  cudaStream_t get() const { return stream_.get(); }

 private:
  Owner<StreamTraits> stream_;
};

// Whether an event records a time (cudaEventElapsedTime) or only orders work (cheaper).
enum class EventTiming { kOff, kOn };

class Event {
 public:
  Event() = default;
  explicit Event(int device, EventTiming timing = EventTiming::kOff) {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    SLUICE_CUDA(cudaEventCreateWithFlags(
        &e, timing == EventTiming::kOn ? cudaEventDefault : cudaEventDisableTiming));
    event_ = Owner<EventTraits>(e, device);
  }
  cudaEvent_t get() const { return event_.get(); }

 private:
  Owner<EventTraits> event_;
};

class CublasHandle {
 public:
  CublasHandle() = default;
  CublasHandle(int device, cudaStream_t stream) {
    DeviceGuard guard(device);
    cublasHandle_t h = nullptr;
    SLUICE_CUBLAS(cublasCreate(&h));
    handle_ = Owner<CublasTraits>(h, device);
    SLUICE_CUBLAS(cublasSetStream(h, stream));
  }
  cublasHandle_t get() const { return handle_.get(); }

 private:
  Owner<CublasTraits> handle_;
};

#if defined(SLUICE_HAVE_NCCL)
// One NCCL communicator per listed GPU, created in one process with ncclCommInitAll.
class NcclCommunicators {
 public:
  NcclCommunicators() = default;
  explicit NcclCommunicators(const std::vector<int>& devices);
  ~NcclCommunicators();
  NcclCommunicators(NcclCommunicators&& other) noexcept : comms_(std::exchange(other.comms_, {})) {}
  NcclCommunicators& operator=(NcclCommunicators&& other) noexcept;
  NcclCommunicators(const NcclCommunicators&) = delete;
  NcclCommunicators& operator=(const NcclCommunicators&) = delete;
  ncclComm_t get(std::size_t i) const { return comms_.at(i); }
  std::size_t size() const { return comms_.size(); }

 private:
  void destroy() noexcept;
  std::vector<ncclComm_t> comms_;
};
#endif

}  // namespace sluice::cuda
