// Checking macros for the CUDA libraries: one per library (runtime, cuBLAS, NCCL),
// each throwing sluice::Error with the call text, file:line and the library's error string.
// The *_NOTHROW variants log instead of throwing (for destructors). SLUICE_CUDA_LAUNCH_CHECK()
// follows every kernel launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "common/error.hpp"
#if defined(SLUICE_HAVE_NCCL)
#include <nccl.h>
#endif

namespace sluice::cuda {

const char* cublas_status_string(cublasStatus_t status);

// Throws sluice::Error "<library> call failed: <call> -> <message> (file:line)".
[[noreturn]] void throw_library_error(const char* library, const char* call, const char* file,
                                      int line, const std::string& message);
// Writes the same text to stderr (for destructors, which must not throw).
void report_library_error(const char* library, const char* call, const char* file, int line,
                          const std::string& message);

}  // namespace sluice::cuda

#define SLUICE_CUDA(call)                                                                        \
  do {                                                                                           \
    const cudaError_t sluice_status_ = (call);                                                   \
    if (sluice_status_ != cudaSuccess)                                                           \
      ::sluice::cuda::throw_library_error("CUDA", #call, __FILE__, __LINE__,                     \
                                          std::string(cudaGetErrorName(sluice_status_)) + ": " + \
                                              cudaGetErrorString(sluice_status_));               \
  } while (0)

#define SLUICE_CUDA_NOTHROW(call)                                                                 \
  do {                                                                                            \
    const cudaError_t sluice_status_ = (call);                                                    \
    if (sluice_status_ != cudaSuccess)                                                            \
      ::sluice::cuda::report_library_error("CUDA", #call, __FILE__, __LINE__,                     \
                                           std::string(cudaGetErrorName(sluice_status_)) + ": " + \
                                               cudaGetErrorString(sluice_status_));               \
  } while (0)

// After every kernel launch: reports launch-configuration errors at the launch site.
#define SLUICE_CUDA_LAUNCH_CHECK() SLUICE_CUDA(cudaPeekAtLastError())

#define SLUICE_CUBLAS(call)                                                                      \
  do {                                                                                           \
    const cublasStatus_t sluice_status_ = (call);                                                \
    if (sluice_status_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::sluice::cuda::throw_library_error("cuBLAS", #call, __FILE__, __LINE__,                   \
                                          ::sluice::cuda::cublas_status_string(sluice_status_)); \
  } while (0)

#define SLUICE_CUBLAS_NOTHROW(call)                                                               \
  do {                                                                                            \
    const cublasStatus_t sluice_status_ = (call);                                                 \
    if (sluice_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::sluice::cuda::report_library_error("cuBLAS", #call, __FILE__, __LINE__,                   \
                                           ::sluice::cuda::cublas_status_string(sluice_status_)); \
  } while (0)

#if defined(SLUICE_HAVE_NCCL)
#define SLUICE_NCCL(call)                                                      \
  do {                                                                         \
    const ncclResult_t sluice_status_ = (call);                                \
    if (sluice_status_ != ncclSuccess)                                         \
      ::sluice::cuda::throw_library_error("NCCL", #call, __FILE__, __LINE__,   \
                                          ncclGetErrorString(sluice_status_)); \
  } while (0)

#define SLUICE_NCCL_NOTHROW(call)                                               \
  do {                                                                          \
    const ncclResult_t sluice_status_ = (call);                                 \
    if (sluice_status_ != ncclSuccess)                                          \
      ::sluice::cuda::report_library_error("NCCL", #call, __FILE__, __LINE__,   \
                                           ncclGetErrorString(sluice_status_)); \
  } while (0)
#endif
