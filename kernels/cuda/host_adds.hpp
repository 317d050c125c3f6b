// A device's repeated flushes added into host matrices by CPU threads, off the GPU's lanes.
//
// A row that leaves the GPU a second time in a pass adds its gradient into the host row that its
// first flush wrote. Read back and added by the GPU, each such row crosses the host link twice
// (a round trip a row, beside the lanes' own traffic); here the GPU writes the rows once into
// pinned staging, on the lane that flushes, and CPU threads add them into the host matrix while
// the lanes go on. A host function on a stream of its own runs each addition once its staging is
// written, so every dependency is a CUDA event: the lane that reuses a staging slot waits for the
// addition that read it, and join() orders a lane after every addition queued so far.
#pragma once

#include <cstdint>

#include "kernels/cuda/memory.hpp"
#include "kernels/cuda/resources.hpp"
#include "kernels/ops.hpp"

namespace sluice::cuda {

class HostAdds {
 public:
  // `threads`: the CPU threads of one addition (an OpenMP team on the host-function thread).
  HostAdds(int gpu, int threads);
  ~HostAdds();  // waits for the queued additions
  HostAdds(const HostAdds&) = delete;
  HostAdds& operator=(const HostAdds&) = delete;

  // Queues host[host_rows[i]] (+)= src[src_rows[i]] (src[i] when src_rows is empty) for
  // i < host_rows.size: the rows go into a staging slot on `lane` (rounded to the host
  // precision), then CPU threads add them (bf16: round(host + staged), as the CPU backend adds).
  // host_rows are unique; `host` lies in host memory and is not freed before the addition ran.
  // `blocks` caps the staging kernel's grid. Adds the bytes the lane sends over the host link to
  // `counters` (d2h_bytes, d2h_index_bytes).
  void add(const Mat& src, const Idx& src_rows, const Idx& host_rows, const HostMat& host,
           cudaStream_t lane, unsigned blocks, TransferCounters& counters);
  // Work issued later on `stream` waits for every addition queued so far.
  void join(cudaStream_t stream) const;
  // Blocks the host until every queued addition has run.
  void synchronize() const;

 private:
  // Additions in flight: a lane writes a slot again once the addition that read it ran.
  static constexpr int kSlots = 4;
  struct Slot {
    PinnedScratch values, ids;
    Event staged, added;
  };
  int gpu_;
  int threads_;
  Stream stream_;
  Slot slots_[kSlots];
  std::int64_t queued_ = 0;
};

}  // namespace sluice::cuda
