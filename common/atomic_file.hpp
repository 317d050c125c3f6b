// Atomic output files: write to "<path>.tmp.<pid>", rename over <path> on commit(); the
// temporary is removed if the owner is destroyed without commit() (an error was thrown).
#pragma once

#include <string>

namespace sluice {

class AtomicOutput {
 public:
  // Throws InputError when the directory of `path` does not exist or `path` is a directory.
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temporary_path() const { return temporary_; }
  const std::string& final_path() const { return final_; }
  void commit();  // rename temporary -> final

 private:
  std::string final_;
  std::string temporary_;
  bool committed_ = false;
};

// Throws InputError naming `path` if it cannot be opened for reading.
void require_readable(const std::string& path, const std::string& what);

}  // namespace sluice
