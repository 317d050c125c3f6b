// Out-of-line parts of the CUDA resource owners (NCCL communicators).
#include "kernels/cuda/resources.hpp"

#include <cstdlib>

namespace sluice::cuda {

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
