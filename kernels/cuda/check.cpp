// Error reporting behind the checking macros of kernels/cuda/check.hpp.
#include "kernels/cuda/check.hpp"

#include <cstdio>

namespace sluice::cuda {

const char* cublas_status_string(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void throw_library_error(const char* library, const char* call, const char* file, int line,
                         const std::string& message) {
  throw Error(cat(library, " call failed: ", call, " -> ", message, " (", file, ":", line, ")"));
}

void report_library_error(const char* library, const char* call, const char* file, int line,
                          const std::string& message) {
  std::fprintf(stderr, "%s call failed (ignored in a destructor): %s -> %s (%s:%d)\n", library,
               call, message.c_str(), file, line);
}

}  // namespace sluice::cuda
