// Checking macro for METIS calls: every METIS entry point returns METIS_OK on success; any other
// code throws sluice::Error naming the call, the code's meaning and file:line.
#pragma once

#include <metis.h>

#include "common/error.hpp"

namespace sluice::metis {

inline const char* status_text(int status) {
  switch (status) {
    case METIS_OK:
      return "METIS_OK";
    case METIS_ERROR_INPUT:
      return "METIS_ERROR_INPUT (invalid input graph or options)";
    case METIS_ERROR_MEMORY:
      return "METIS_ERROR_MEMORY (out of memory)";
    case METIS_ERROR:
      return "METIS_ERROR (unspecified error)";
    default:
      return "unknown METIS status";
  }
}

}  // namespace sluice::metis

#define SLUICE_METIS(call)                                                                        \
  do {                                                                                            \
    const int sluice_metis_status = (call);                                                       \
    if (sluice_metis_status != METIS_OK)                                                          \
      ::sluice::throw_internal(__FILE__, __LINE__,                                                \
                               ::sluice::cat("METIS call failed: " #call ": ",                    \
                                             ::sluice::metis::status_text(sluice_metis_status))); \
  } while (0)
