// Logging, per-stage timing with peak memory, and a terminal progress line with ETA.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace sluice {

enum class LogLevel { kQuiet = 0, kInfo = 1, kDebug = 2 };
void set_log_level(LogLevel level);
LogLevel log_level();

// Writes "[sluice +12.3s] message" to stderr (seconds since program start).
void log_line(LogLevel level, const std::string& message);
template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() >= LogLevel::kInfo) log_line(LogLevel::kInfo, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() >= LogLevel::kDebug) log_line(LogLevel::kDebug, cat(std::forward<Args>(args)...));
}

// Seconds since an arbitrary fixed point (steady clock).
double now_seconds();

// Times a named stage; on destruction (or finish()) logs its wall time, the process's
// current and peak resident memory (a debug line), and adds the time of a stage that started
// while no other stage was running to stage_summary().
class StageTimer {
 public:
  explicit StageTimer(std::string name);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  double finish();  // logs once, returns seconds
  double elapsed() const;

 private:
  std::string name_;
  double start_;
  bool top_level_ = false;
  bool done_ = false;
};

// One line of the outermost stages finished so far, their names up to the first ':' or " ("
// with the times of equal names summed, and the process's peak resident memory:
// "read dataset 0.22 s, train 4.1 s; peak memory 25.9 MiB". Empty when no stage finished.
std::string stage_summary();
// "0.215 s", "12.3 s", "1234 s": three significant digits, at least whole seconds.
std::string format_seconds(double seconds);

// A progress line ("name  45.0%  12.3 s  ETA 15.0 s") redrawn on a terminal at most ~4 times a
// second; prints nothing when stderr is not a terminal. Thread-safe update via add().
class Progress {
 public:
  Progress(std::string name, std::uint64_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void add(std::uint64_t amount);
  void set(std::uint64_t done);
  void finish();

 private:
  void draw(std::uint64_t done);
  std::string name_;
  std::uint64_t total_;
  double start_;
  double last_draw_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::uint64_t done_ = 0;
};

// Human-readable byte counts ("1.50 GiB").
std::string format_bytes(double bytes);

// The shortest decimal text that reads back as exactly `value` ("0.0005", not
// "0.00050000000000000001"): for defaults shown in --help and logged configurations.
std::string format_number(double value);

// A byte count from the command line: "1000000", "1e9", "64M", "40G", "1.5GiB" (suffixes
// K/M/G/T with optional B or iB, case-insensitive, powers of 1024). Throws InputError naming
// `option` for anything else, negative or not finite.
std::int64_t parse_bytes(const std::string& text, const std::string& option);

}  // namespace sluice
