// Backend-independent parts of kernels/ops.hpp: the CUDA entry points when CUDA is not built.
#include "kernels/ops.hpp"

namespace sluice {

#ifndef SLUICE_HAVE_CUDA
bool cuda_backend_available() {
  return false;
}
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw InputError("this build of Sluice has no CUDA backend (configure with -DSLUICE_CUDA=ON)");
}
#endif

}  // namespace sluice
