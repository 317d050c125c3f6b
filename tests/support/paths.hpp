// Paths and small helpers shared by tests: a scratch directory per test, the shared datasets,
// and running the command-line tools.
#pragma once

#include <string>
#include <vector>

namespace sluice::test {

std::string shared_datasets();  // ../shared/datasets (configurable at build time)
std::string cora_dir();         // shared_datasets() + "/cora"
std::string bin(
    const std::string& tool);  // path of a built executable, e.g. bin("sluice-preprocess")

// A fresh empty directory under the system temp dir, removed at destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line, capturing its output.
CommandResult run_command(const std::string& command_line);

bool file_exists(const std::string& path);
// Writes text to a file (creating or truncating it).
void write_text(const std::string& path, const std::string& text);
// Lists the entries of a directory (names only).
std::vector<std::string> list_dir(const std::string& path);

}  // namespace sluice::test
