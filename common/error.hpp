// Errors and checking macros. Two kinds of failure:
//  - InputError: the user's data or options are at fault. The message is shown as is and must
//    name the file/line/dataset; no source location is added.
//  - Error: a failed call or a broken invariant inside Sluice; carries file:line and the call.
// Library-specific checks (HDF5, METIS, CUDA, ...) live next to the code that includes the
// library: formats/hdf5.hpp, preprocess/metis_check.hpp, kernels/cuda/check.hpp.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace sluice {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InputError : public Error {
 public:
  using Error::Error;
};

// Concatenates any streamable arguments into one string.
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throw_internal(const char* file, int line, const std::string& what);

}  // namespace sluice

// Precondition / invariant check; throws sluice::Error with file:line. Never compiled out.
#define SLUICE_EXPECTS(cond, ...)                                                        \
  do {                                                                                   \
    if (!(cond))                                                                         \
      ::sluice::throw_internal(__FILE__, __LINE__,                                       \
                               ::sluice::cat("check failed: " #cond ": ", __VA_ARGS__)); \
  } while (0)

// Bad input: throws sluice::InputError with the message only (it must name file/line).
#define SLUICE_INPUT_CHECK(cond, ...)                                    \
  do {                                                                   \
    if (!(cond)) throw ::sluice::InputError(::sluice::cat(__VA_ARGS__)); \
  } while (0)

#define SLUICE_FAIL(...) ::sluice::throw_internal(__FILE__, __LINE__, ::sluice::cat(__VA_ARGS__))
