// Implementation of kernels/cuda/memory.hpp.
#include "kernels/cuda/memory.hpp"

#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

AccountedBuffer& AccountedBuffer::operator=(AccountedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::move(other.buffer_);
    account_ = std::exchange(other.account_, nullptr);
    charged_ = std::exchange(other.charged_, 0);
  }
  return *this;
}

void AccountedBuffer::release() noexcept {
  buffer_ = DeviceBuffer();
  if (account_) account_->release(charged_);
  account_ = nullptr;
  charged_ = 0;
}

AccountedBuffer MemoryAccount::allocate(std::int64_t bytes, const std::string& what) {
  SLUICE_EXPECTS(bytes >= 0, "negative allocation of ", bytes, " bytes for ", what);
  if (bytes == 0) return AccountedBuffer();
  const std::int64_t charge = rounded(bytes);
  const auto fail = [&](const std::string& reason) {
    throw OutOfDeviceMemory(
        cat(device_name_, ": cannot allocate ", what, " (", format_bytes(double(bytes)),
            "): ", reason, "; in use ", format_bytes(double(in_use_)), ", budget ",
            budget_ > 0 ? format_bytes(double(budget_)) : std::string("the whole GPU"),
            ". Use more chunks per partition (a plan with a larger C) or a larger memory budget."));
  };
  if (budget_ > 0 && in_use_ + charge > budget_) fail("over the device memory budget");
  DeviceGuard guard(gpu_);
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, static_cast<std::size_t>(bytes));
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the failure is reported as an exception instead
    fail("the GPU is out of memory");
  }
  SLUICE_CUDA(status);
  in_use_ += charge;
  if (in_use_ > peak_) peak_ = in_use_;
  return AccountedBuffer(DeviceBuffer::adopt(pointer, static_cast<std::size_t>(bytes), gpu_), this,
                         charge);
}

namespace {
constexpr std::int64_t kSlabBytes = std::int64_t(64) << 20;
}  // namespace

bool ConstantStore::leaves_headroom(std::int64_t bytes) const {
  const std::int64_t charge = rounded(bytes);
  const std::int64_t budget = account_.budget();
  if (budget > 0) return account_.in_use() + charge + budget / kBudgetHeadroomDivisor <= budget;
  // No budget: the physical GPU (shared by the logical devices on it).
  DeviceGuard guard(account_.gpu());
  std::size_t free = 0, total = 0;
  SLUICE_CUDA(cudaMemGetInfo(&free, &total));
  return charge + std::int64_t(total) / kGpuHeadroomDivisor <= std::int64_t(free);
}

void* ConstantStore::host_allocate(std::int64_t bytes, void** host) {
  const std::int64_t aligned = rounded(bytes);
  DeviceGuard guard(account_.gpu());  // cudaHostGetDevicePointer needs a current device
  PinnedBuffer* slab = nullptr;
  std::int64_t offset = 0;
  if (aligned > kSlabBytes / 4) {  // large: a slab of its own, the shared slab stays current
    large_.emplace_back(static_cast<std::size_t>(aligned));
    slab = &large_.back();
  } else {
    if (slabs_.empty() || slab_used_ + aligned > static_cast<std::int64_t>(slabs_.back().bytes())) {
      slabs_.emplace_back(static_cast<std::size_t>(kSlabBytes));
      slab_used_ = 0;
    }
    slab = &slabs_.back();
    offset = slab_used_;
    slab_used_ += aligned;
  }
  *host = static_cast<char*>(slab->get()) + offset;
  return static_cast<char*>(slab->device_pointer()) + offset;
}

ConstantBuffer ConstantStore::place(const void* data, std::int64_t bytes, const std::string& what,
                                    cudaStream_t stream) {
  SLUICE_EXPECTS(bytes >= 0, "negative constant of ", bytes, " bytes for ", what);
  if (bytes == 0) return ConstantBuffer();
  AccountedBuffer buffer;
  if (leaves_headroom(bytes)) {
    try {
      buffer = account_.allocate(bytes, what);
    } catch (const OutOfDeviceMemory&) {
      // the GPU itself is full: the constant goes to host memory below
    }
  }
  double start = now_seconds();
  if (buffer.get()) {
    DeviceGuard guard(account_.gpu());
    SLUICE_CUDA(cudaMemcpyAsync(buffer.get(), data, static_cast<std::size_t>(bytes),
                                cudaMemcpyHostToDevice, stream));
    SLUICE_CUDA(cudaStreamSynchronize(stream));
    copy_seconds_ += now_seconds() - start;
    return ConstantBuffer(std::move(buffer), bytes);
  }
  void* host = nullptr;
  void* device = host_allocate(bytes, &host);
  pin_seconds_ += now_seconds() - start;
  start = now_seconds();
  // Large constants are copied by every OpenMP thread, a slice each.
  constexpr std::int64_t kSlice = std::int64_t(16) << 20;
  const std::int64_t slices = (bytes + kSlice - 1) / kSlice;
#pragma omp parallel for schedule(static) if (slices > 1)
  for (std::int64_t i = 0; i < slices; ++i)
    std::memcpy(static_cast<char*>(host) + i * kSlice, static_cast<const char*>(data) + i * kSlice,
                static_cast<std::size_t>(std::min(kSlice, bytes - i * kSlice)));
  copy_seconds_ += now_seconds() - start;
  host_bytes_ += bytes;
  return ConstantBuffer(device, bytes);
}

void* Scratch::ensure(std::int64_t bytes, MemoryAccount& account, cudaStream_t stream,
                      const std::string& what) {
  if (bytes <= buffer_.bytes()) return buffer_.get();
  SLUICE_CUDA(cudaStreamSynchronize(stream));
  buffer_ = AccountedBuffer();
  buffer_ = account.allocate(bytes, what);
  return buffer_.get();
}

void* PinnedScratch::ensure(std::int64_t bytes, cudaStream_t stream) {
  if (bytes <= static_cast<std::int64_t>(buffer_.bytes())) return buffer_.get();
  SLUICE_CUDA(cudaStreamSynchronize(stream));
  buffer_ = PinnedBuffer();
  buffer_ = PinnedBuffer(static_cast<std::size_t>(bytes));
  return buffer_.get();
}

void* PinnedRegistry::allocate(std::int64_t bytes) {
  if (bytes == 0) return nullptr;
  PinnedBuffer buffer(static_cast<std::size_t>(bytes));
  if (!buffer.zero_filled()) std::memset(buffer.get(), 0, static_cast<std::size_t>(bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[static_cast<const char*>(buffer.get())] =
      Entry{bytes, static_cast<char*>(buffer.device_pointer())};
  void* host = buffer.get();
  buffers_.push_back(std::move(buffer));
  return host;
}

void PinnedRegistry::release(const void* host) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto entry = entries_.find(static_cast<const char*>(host));
  SLUICE_EXPECTS(entry != entries_.end(), "host matrix at ", host,
                 " is not an allocation of this backend's alloc_host");
  entries_.erase(entry);
  const auto buffer = std::find_if(buffers_.begin(), buffers_.end(),
                                   [host](const PinnedBuffer& b) { return b.get() == host; });
  if (buffer != buffers_.end()) buffers_.erase(buffer);
}

const void* PinnedRegistry::device_pointer(const void* host, std::int64_t bytes) const {
  const char* p = static_cast<const char*>(host);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.upper_bound(p);
  SLUICE_EXPECTS(it != entries_.begin(), "host matrix at ", host,
                 " was not allocated by this backend's alloc_host");
  --it;
  const std::int64_t offset = p - it->first;
  SLUICE_EXPECTS(offset + bytes <= it->second.bytes, "host range at ", host, " (", bytes,
                 " bytes) runs past its alloc_host allocation (", it->second.bytes, " bytes)");
  return it->second.device + offset;
}

}  // namespace sluice::cuda
