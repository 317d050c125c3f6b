// Small device queries used by the backends and by tests to decide whether a GPU is present.
#pragma once

namespace sluice::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

}  // namespace sluice::cuda
