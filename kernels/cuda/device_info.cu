// Small device queries used by the backends and by tests to decide whether a GPU is present.
#include "kernels/cuda/device_info.hpp"

#include <cuda_runtime.h>

namespace sluice::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace sluice::cuda
