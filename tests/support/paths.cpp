// Implementation of tests/support/paths.hpp.
#include "tests/support/paths.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace sluice::test {

std::string shared_datasets() {
  if (const char* env = std::getenv("SLUICE_SHARED_DATASETS")) return env;
  return SLUICE_SHARED_DATASETS;
}
std::string cora_dir() {
  return shared_datasets() + "/cora";
}
std::string bin(const std::string& tool) {
  // SLUICE_BIN_DIR in the environment wins (tests run from a copied bundle on another machine).
  if (const char* env = std::getenv("SLUICE_BIN_DIR"); env && *env)
    return std::string(env) + "/" + tool;
  return std::string(SLUICE_BIN_DIR) + "/" + tool;
}

ScratchDir::ScratchDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/sluice-test-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}
ScratchDir::~ScratchDir() {
  const std::string command = "rm -rf '" + path_ + "'";
  if (std::system(command.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", path_.c_str());
}

CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  const std::string full = command_line + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command_line);
  std::array<char, 4096> buffer;
  std::size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

}  // namespace sluice::test
