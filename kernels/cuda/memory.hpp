// Device-memory accounting for one logical device (a byte budget, in-use and peak counters),
// grow-only scratch buffers, and the registry of the backend's pinned host matrices (host
// pointer -> device-visible pointer).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/resources.hpp"
#include "kernels/cuda_memory_rules.hpp"

namespace sluice::cuda {

class MemoryAccount;

// Device memory charged to a MemoryAccount for its lifetime.
class AccountedBuffer {
 public:
  AccountedBuffer() = default;
  AccountedBuffer(DeviceBuffer buffer, MemoryAccount* account, std::int64_t charged)
      : buffer_(std::move(buffer)), account_(account), charged_(charged) {}
  ~AccountedBuffer() { release(); }
  AccountedBuffer(AccountedBuffer&& other) noexcept { *this = std::move(other); }
  AccountedBuffer& operator=(AccountedBuffer&& other) noexcept;
  AccountedBuffer(const AccountedBuffer&) = delete;
  AccountedBuffer& operator=(const AccountedBuffer&) = delete;

  void* get() const { return buffer_.get(); }
  template <typename T>
  T* as() const {
    return buffer_.as<T>();
  }
  std::int64_t bytes() const { return static_cast<std::int64_t>(buffer_.bytes()); }

 private:
  void release() noexcept;
  DeviceBuffer buffer_;
  MemoryAccount* account_ = nullptr;
  std::int64_t charged_ = 0;
};

class MemoryAccount {
 public:
  // budget <= 0: limited by the GPU only.
  MemoryAccount(std::string device_name, int gpu, std::int64_t budget)
      : device_name_(std::move(device_name)), gpu_(gpu), budget_(budget) {}
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  // Throws OutOfDeviceMemory (naming what, requested, in use, budget) when over budget or when
  // the GPU itself is out of memory.
  AccountedBuffer allocate(std::int64_t bytes, const std::string& what);
  void release(std::int64_t bytes) noexcept { in_use_ -= bytes; }
  std::int64_t in_use() const { return in_use_; }
  std::int64_t peak() const { return peak_; }
  int gpu() const { return gpu_; }
  std::int64_t budget() const { return budget_; }

 private:
  std::string device_name_;
  int gpu_;
  std::int64_t budget_;
  std::int64_t in_use_ = 0;
  std::int64_t peak_ = 0;
};

// A read-only constant (index list, CSR array, entry values): device memory charged to a
// MemoryAccount, or pinned, mapped host memory owned by a ConstantStore and read zero-copy.
// get() is the device-visible address either way.
class ConstantBuffer {
 public:
  ConstantBuffer() = default;
  ConstantBuffer(AccountedBuffer device, std::int64_t bytes)
      : device_(std::move(device)), bytes_(bytes) {}
  ConstantBuffer(void* host_device_pointer, std::int64_t bytes)
      : host_(host_device_pointer), bytes_(bytes) {}
  // A non-owning view of device memory (a staged copy of another constant).
  static ConstantBuffer view(void* device_pointer, std::int64_t bytes) {
    ConstantBuffer b;
    b.view_ = device_pointer;
    b.bytes_ = bytes;
    return b;
  }

  void* get() const { return host_ ? host_ : view_ ? view_ : device_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }
  bool on_host() const { return host_ != nullptr; }
  std::int64_t bytes() const { return bytes_; }

 private:
  AccountedBuffer device_;
  void* host_ = nullptr;  // device-visible address inside a ConstantStore slab
  void* view_ = nullptr;
  std::int64_t bytes_ = 0;
};

// Places one logical device's read-only constants: in device memory while they fit the budget
// and leave the headroom free (kBudgetHeadroomDivisor, kGpuHeadroomDivisor of
// kernels/cuda_memory_rules.hpp, which the memory estimate shares), else in pinned, mapped,
// portable host memory (slabs owned here, freed with the store) that kernels and cuSPARSE read
// zero-copy through its device address (UVA).
class ConstantStore {
 public:
  explicit ConstantStore(MemoryAccount& account) : account_(account) {}
  ConstantStore(const ConstantStore&) = delete;
  ConstantStore& operator=(const ConstantStore&) = delete;

  // Copies `bytes` bytes from `data` (pageable host memory) into a new constant; synchronous.
  ConstantBuffer place(const void* data, std::int64_t bytes, const std::string& what,
                       cudaStream_t stream);
  template <typename T>
  ConstantBuffer place(const std::vector<T>& values, const std::string& what, cudaStream_t stream) {
    return place(values.data(), static_cast<std::int64_t>(values.size() * sizeof(T)), what, stream);
  }
  std::int64_t host_bytes() const { return host_bytes_; }  // constants kept in host memory
  // Seconds spent placing constants: pinning host memory, and copying into host or device
  // memory (for the setup log).
  double pin_seconds() const { return pin_seconds_; }
  double copy_seconds() const { return copy_seconds_; }
  // Whether `bytes` more of device memory fit the budget (or the GPU) with the headroom left.
  bool leaves_headroom(std::int64_t bytes) const;

 private:
  // A fresh range of pinned slab memory: returns its device-visible address, *host its host one.
  void* host_allocate(std::int64_t bytes, void** host);

  MemoryAccount& account_;
  std::int64_t host_bytes_ = 0;
  double pin_seconds_ = 0, copy_seconds_ = 0;
  std::deque<PinnedBuffer> slabs_, large_;  // shared 64 MiB slabs; one slab per large constant
  std::int64_t slab_used_ = 0;              // bytes used in slabs_.back()
};

// A grow-only device scratch buffer. Growing first waits for `stream` (queued work may still
// use the old buffer); sized at setup in practice, since every later request fits.
class Scratch {
 public:
  void* ensure(std::int64_t bytes, MemoryAccount& account, cudaStream_t stream,
               const std::string& what);
  template <typename T>
  T* ensure_as(std::int64_t count, MemoryAccount& account, cudaStream_t stream,
               const std::string& what) {
    return static_cast<T*>(
        ensure(count * static_cast<std::int64_t>(sizeof(T)), account, stream, what));
  }
  void* get() const { return buffer_.get(); }

 private:
  AccountedBuffer buffer_;
};

// A grow-only pinned host staging buffer (same growth rule as Scratch).
class PinnedScratch {
 public:
  void* ensure(std::int64_t bytes, cudaStream_t stream);
  void* get() const { return buffer_.get(); }
  void* device_pointer() const { return buffer_.device_pointer(); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(buffer_.bytes()); }
  bool fits(std::int64_t bytes) const {
    return bytes <= static_cast<std::int64_t>(buffer_.bytes());
  }

 private:
  PinnedBuffer buffer_;
};

// Owns the backend's pinned, mapped host matrices and translates host pointers inside them to
// device-visible pointers (zero-copy). Thread-safe.
class PinnedRegistry {
 public:
  // A zero-initialized allocation of `bytes` (nullptr for 0).
  void* allocate(std::int64_t bytes);
  // Frees the allocation that begins at `host` (allocate()'s result); throws if there is none.
  void release(const void* host);
  // The device-visible address of [host, host + bytes); throws if it is not inside one
  // allocation of this registry.
  const void* device_pointer(const void* host, std::int64_t bytes) const;

 private:
  struct Entry {
    std::int64_t bytes = 0;
    char* device = nullptr;
  };
  mutable std::mutex mutex_;
  std::map<const char*, Entry> entries_;  // by host begin
  std::vector<PinnedBuffer> buffers_;
};

}  // namespace sluice::cuda
