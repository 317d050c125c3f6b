// Implementation of kernels/cuda/memory.hpp.
#include "kernels/cuda/memory.hpp"

#include <cstring>

#include "common/log.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

namespace {
// Allocation granularity used for accounting (cudaMalloc aligns to 256 bytes).
std::int64_t rounded(std::int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}
}  // namespace

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

float* PinnedRegistry::allocate(std::int64_t floats) {
  const std::int64_t bytes = floats * static_cast<std::int64_t>(sizeof(float));
  if (bytes == 0) return nullptr;
  PinnedBuffer buffer(static_cast<std::size_t>(bytes));
  std::memset(buffer.get(), 0, static_cast<std::size_t>(bytes));
  std::lock_guard<std::mutex> lock(mutex_);
  entries_[static_cast<const char*>(buffer.get())] =
      Entry{bytes, static_cast<char*>(buffer.device_pointer())};
  float* host = buffer.as<float>();
  buffers_.push_back(std::move(buffer));
  return host;
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
