// Placeholder translation unit so sluice_kernels_cpu always has a source; replaced by the
// operator interface implementation.
namespace sluice {}
