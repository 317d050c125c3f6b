// Backend-independent parts of kernels/ops.hpp: names of phases, lanes, peer-access modes and host
// precisions, and the CUDA entry points when CUDA is not built.
#include "kernels/ops.hpp"

namespace sluice {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kLoad:
      return "load";
    case Phase::kP2p:
      return "p2p";
    case Phase::kCompute:
      return "compute";
    case Phase::kStore:
      return "store";
    case Phase::kFlush:
      return "flush";
  }
  return "?";
}

const char* lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return "compute";
    case Lane::kTransfer:
      return "transfer";
    case Lane::kStore:
      return "store";
  }
  return "?";
}

const char* peer_access_name(PeerAccess access) {
  switch (access) {
    case PeerAccess::kAuto:
      return "auto";
    case PeerAccess::kOff:
      return "off";
  }
  return "?";
}

PeerAccess parse_peer_access(const std::string& text, const std::string& option) {
  if (text == "auto") return PeerAccess::kAuto;
  if (text == "off") return PeerAccess::kOff;
  throw InputError(cat("unknown ", option, " '", text, "' (expected auto or off)"));
}

const char* host_precision_name(HostPrecision precision) {
  switch (precision) {
    case HostPrecision::kFp32:
      return "fp32";
    case HostPrecision::kBf16:
      return "bf16";
  }
  return "?";
}

HostPrecision parse_host_precision(const std::string& text, const std::string& option) {
  if (text == "fp32") return HostPrecision::kFp32;
  if (text == "bf16") return HostPrecision::kBf16;
  throw InputError(cat("unknown ", option, " '", text, "' (expected fp32 or bf16)"));
}

#ifndef SLUICE_HAVE_CUDA
bool cuda_backend_available() {
  return false;
}
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions&) {
  throw InputError("this build of Sluice has no CUDA backend (configure with -DSLUICE_CUDA=ON)");
}
#endif

}  // namespace sluice
