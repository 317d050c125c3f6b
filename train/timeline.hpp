// The device timeline of a training run (sluice-train --trace FILE) as a Chrome trace ("Trace
// Event Format", JSON; opens in Perfetto or chrome://tracing): one process per device, one
// thread per lane, one complete event per timed phase range (named "<phase> <batch>", category
// "<pass> <layer>"), plus a host track with the epochs' training steps and evaluations and one
// with the host's issue of each batch. With
// operation times on (--op-times) each lane gets a second thread (lane + kLanes) of one event per
// operation (named after it, category "op <pass> <layer>").
#pragma once

#include <string>
#include <vector>

#include "train/schedule.hpp"

namespace sluice {

class TraceRecorder {
 public:
  // Times are kept relative to `run_start` (host seconds, now_seconds()).
  TraceRecorder(int devices, double run_start);
  // The ranges of one forward_backward() or evaluate(), whose time origin was the host time
  // `origin` (Schedule::timeline_origin()).
  void add_device_ranges(const std::vector<TimelineRange>& ranges, double origin);
  // A host range [begin, end] in host seconds.
  void add_host_range(const std::string& name, double begin, double end);
  // The host's issue of each batch (Schedule::host_issues()), on a host track of their own
  // (named "issue <batch>", category "issue <pass> <layer>").
  void add_host_issues(const std::vector<HostIssueRange>& issues);
  std::size_t size() const { return events_.size(); }
  // Writes the trace atomically (temporary file, then rename).
  void write(const std::string& path) const;

 private:
  struct Event {
    std::string name, category;
    int process = 0, thread = 0;
    double begin = 0, end = 0;  // seconds since run_start
    std::int64_t batch = -1;
  };
  int devices_;
  double run_start_;
  std::vector<Event> events_;
};

}  // namespace sluice
