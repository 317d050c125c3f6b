// Implementation of common/log.hpp.
#include "common/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "common/memory.hpp"

namespace sluice {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const double g_start = now_seconds();
std::mutex g_mutex;
std::atomic<int> g_stage_depth{0};
std::mutex g_stages_mutex;
std::vector<std::pair<std::string, double>> g_stages;  // outermost stages, by name prefix
}  // namespace

void set_log_level(LogLevel level) {
  g_level = static_cast<int>(level);
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void log_line(LogLevel level, const std::string& message) {
  if (log_level() < level) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[sluice +%.1fs] %s\n", now_seconds() - g_start, message.c_str());
  std::fflush(stderr);
}

std::string format_number(double value) {
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return buffer;
}

std::int64_t parse_bytes(const std::string& text, const std::string& option) {
  // strtod, not stod: a value out of double's range is inf (reported as too large) or about 0,
  // where stod would throw for both.
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  SLUICE_INPUT_CHECK(end != text.c_str(), option, ": cannot parse '", text,
                     "' as a byte count (use e.g. 80G, 512M or 1000000)");
  const std::size_t used = static_cast<std::size_t>(end - text.c_str());
  std::string suffix = text.substr(used);
  for (auto& ch : suffix) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 1;
  if (suffix.empty() || suffix == "B")
    scale = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB")
    scale = 1024.0;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TB" || suffix == "TIB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw InputError(cat(option, ": unknown unit in '", text, "' (use K, M, G or T)"));
  SLUICE_INPUT_CHECK(!std::isnan(value), option, ": '", text, "' is not a number");
  SLUICE_INPUT_CHECK(value >= 0, option, " must be >= 0 (got '", text, "')");
  // 2^63 bytes and more do not fit the count (and are no machine's memory).
  SLUICE_INPUT_CHECK(value * scale < 9223372036854775808.0, option, " '", text,
                     "' is too large (the limit is 8 EiB)");
  return static_cast<std::int64_t>(value * scale);
}

StageTimer::StageTimer(std::string name)
    : name_(std::move(name)), start_(now_seconds()), top_level_(g_stage_depth.fetch_add(1) == 0) {}
StageTimer::~StageTimer() {
  if (!done_) finish();
}
double StageTimer::elapsed() const {
  return now_seconds() - start_;
}
double StageTimer::finish() {
  const double seconds = elapsed();
  if (!done_) {
    done_ = true;
    g_stage_depth.fetch_sub(1);
    log_debug("stage ", name_, ": ", seconds, " s, memory ", format_bytes(current_rss_bytes()),
              ", peak ", format_bytes(peak_rss_bytes()));
    if (top_level_) {
      const std::string group = name_.substr(0, std::min(name_.find(':'), name_.find(" (")));
      std::lock_guard<std::mutex> lock(g_stages_mutex);
      auto it = std::find_if(g_stages.begin(), g_stages.end(),
                             [&](const auto& stage) { return stage.first == group; });
      if (it == g_stages.end())
        g_stages.emplace_back(group, seconds);
      else
        it->second += seconds;
    }
  }
  return seconds;
}

std::string format_seconds(double seconds) {
  char text[32];
  if (seconds >= 99.95)
    std::snprintf(text, sizeof text, "%.0f s", seconds);
  else if (seconds >= 9.995)
    std::snprintf(text, sizeof text, "%.1f s", seconds);
  else if (seconds >= 0.9995)
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  else
    std::snprintf(text, sizeof text, "%.3f s", seconds);
  return text;
}

std::string stage_summary() {
  std::lock_guard<std::mutex> lock(g_stages_mutex);
  if (g_stages.empty()) return "";
  std::string line;
  for (const auto& [name, seconds] : g_stages)
    line += (line.empty() ? "" : ", ") + name + " " + format_seconds(seconds);
  return line + "; peak memory " + format_bytes(double(peak_rss_bytes()));
}

Progress::Progress(std::string name, std::uint64_t total)
    : name_(std::move(name)),
      total_(total),
      start_(now_seconds()),
      enabled_(isatty(STDERR_FILENO) && log_level() >= LogLevel::kInfo) {}
Progress::~Progress() {
  finish();
}

void Progress::add(std::uint64_t amount) {
  std::uint64_t done;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    done_ += amount;
    done = done_;
  }
  draw(done);
}
void Progress::set(std::uint64_t done) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    done_ = done;
  }
  draw(done);
}

void Progress::draw(std::uint64_t done) {
  if (!enabled_ || finished_) return;
  const double now = now_seconds();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (now - last_draw_ < 0.25 && done < total_) return;
  last_draw_ = now;
  const double fraction = total_ ? static_cast<double>(done) / total_ : 1.0;
  const double elapsed = now - start_;
  const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  std::fprintf(stderr, "\r%s %5.1f%%  %.1f s  ETA %.1f s   ", name_.c_str(), 100.0 * fraction,
               elapsed, eta);
  std::fflush(stderr);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "\r%s 100.0%%  %.1f s%20s\n", name_.c_str(), now_seconds() - start_, "");
  }
}

}  // namespace sluice
