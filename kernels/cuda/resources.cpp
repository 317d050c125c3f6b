// Out-of-line parts of the CUDA resource owners (NCCL communicators).
#include "kernels/cuda/resources.hpp"

#include <omp.h>
#include <sys/mman.h>

#include <cstdlib>

#include "common/parallel.hpp"

namespace sluice::cuda {

void RegisteredPages::reset() noexcept {
  if (!pages_) return;
  SLUICE_CUDA_NOTHROW(cudaHostUnregister(pages_));
  munmap(pages_, bytes_);
  pages_ = nullptr;
}

RegisteredPages register_pages(std::size_t bytes) {
  void* pages = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) return RegisteredPages();
  madvise(pages, bytes, MADV_HUGEPAGE);  // a hint: without huge pages the touch below still works
  constexpr std::size_t kPage = 4096;
  const std::int64_t count = std::int64_t((bytes + kPage - 1) / kPage);
  volatile char* bytes_of = static_cast<char*>(pages);
#pragma omp parallel for schedule(static) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i) bytes_of[std::size_t(i) * kPage] = 0;
  if (cudaHostRegister(pages, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
      cudaSuccess) {
    cudaGetLastError();  // clear it: the caller allocates with cudaHostAlloc instead
    munmap(pages, bytes);
    return RegisteredPages();
  }
  return RegisteredPages(pages, bytes);
}

#if defined(SLUICE_HAVE_NCCL)
NcclCommunicators::NcclCommunicators(const std::vector<int>& devices) {
  // NVLink multicast (NVLS) must stay off on the shared machines; respect an explicit setting.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  comms_.assign(devices.size(), nullptr);
  SLUICE_NCCL(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()));
}

NcclCommunicators::~NcclCommunicators() {
  destroy();
}

NcclCommunicators& NcclCommunicators::operator=(NcclCommunicators&& other) noexcept {
  if (this != &other) {
    destroy();
    comms_ = std::exchange(other.comms_, {});
  }
  return *this;
}

void NcclCommunicators::destroy() noexcept {
  for (ncclComm_t comm : comms_)
    if (comm) SLUICE_NCCL_NOTHROW(ncclCommDestroy(comm));
  comms_.clear();
}
#endif

}  // namespace sluice::cuda
