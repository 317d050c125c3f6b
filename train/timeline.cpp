// Implementation of train/timeline.hpp.
#include "train/timeline.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {
namespace {
constexpr int kHostIssueThread = 1;  // the host process's second track
}  // namespace

TraceRecorder::TraceRecorder(int devices, double run_start)
    : devices_(devices), run_start_(run_start) {}

void TraceRecorder::add_device_ranges(const std::vector<TimelineRange>& ranges, double origin) {
  const double shift = origin - run_start_;
  for (const TimelineRange& r : ranges) {
    if (r.operation) {  // on a track of its own below the lane's
      events_.push_back(Event{r.operation, cat("op ", pass_kind_name(r.pass), " ", r.layer),
                              r.device, kLanes + int(r.lane), shift + r.begin, shift + r.end,
                              r.batch});
      continue;
    }
    events_.push_back(Event{cat(phase_name(r.phase), " ", r.batch),
                            cat(pass_kind_name(r.pass), " ", r.layer), r.device, int(r.lane),
                            shift + r.begin, shift + r.end, r.batch});
  }
}

void TraceRecorder::add_host_range(const std::string& name, double begin, double end) {
  events_.push_back(Event{name, "host", devices_, 0, begin - run_start_, end - run_start_, -1});
}

void TraceRecorder::add_host_issues(const std::vector<HostIssueRange>& issues) {
  for (const HostIssueRange& r : issues)
    events_.push_back(Event{cat("issue ", r.batch),
                            cat("issue ", pass_kind_name(r.pass), " ", r.layer), devices_,
                            kHostIssueThread, r.begin - run_start_, r.end - run_start_, r.batch});
}

void TraceRecorder::write(const std::string& path) const {
  using json = nlohmann::json;
  json events = json::array();
  for (int p = 0; p <= devices_; ++p) {
    const std::string process = p < devices_ ? cat("device ", p) : std::string("host");
    events.push_back(
        {{"name", "process_name"}, {"ph", "M"}, {"pid", p}, {"args", {{"name", process}}}});
    events.push_back(
        {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", p}, {"args", {{"sort_index", p}}}});
    if (p == devices_) {
      for (const auto& [tid, name] : {std::pair<int, const char*>{0, "host"},
                                      std::pair<int, const char*>{kHostIssueThread, "batch issue"}})
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", p},
                          {"tid", tid},
                          {"args", {{"name", name}}}});
      continue;
    }
    for (int lane = 0; lane < kLanes; ++lane)
      for (const bool ops : {false, true})
        events.push_back(
            {{"name", "thread_name"},
             {"ph", "M"},
             {"pid", p},
             {"tid", ops ? kLanes + lane : lane},
             {"args", {{"name", cat(lane_name(Lane(lane)), ops ? " lane operations" : " lane")}}}});
  }
  for (const Event& e : events_) {
    json event{{"name", e.name},
               {"cat", e.category},
               {"ph", "X"},
               {"pid", e.process},
               {"tid", e.thread},
               {"ts", e.begin * 1e6},
               {"dur", (e.end - e.begin) * 1e6}};
    if (e.batch >= 0) event["args"] = {{"batch", e.batch}};
    events.push_back(std::move(event));
  }
  AtomicTextFile output(path, "trace");
  output.stream() << json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump()
                  << "\n";
  output.commit();
}

}  // namespace sluice
