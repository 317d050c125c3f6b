// Implementation of common/paths.hpp.
#include "common/paths.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

#include "common/error.hpp"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// What one path names: an existing file (device and inode) or, for a file not yet created, its
// absolute path with the directory resolved through symlinks.
struct FileIdentity {
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::string absolute;
};

FileIdentity identify(const std::string& path) {
  FileIdentity identity;
  struct stat info {};
  if (stat(path.c_str(), &info) == 0) {
    identity.exists = true;
    identity.device = info.st_dev;
    identity.inode = info.st_ino;
    return identity;
  }
  std::error_code error;
  const fs::path absolute = fs::absolute(path, error).lexically_normal();
  const fs::path directory = fs::weakly_canonical(absolute.parent_path(), error);
  identity.absolute = (error ? absolute : directory / absolute.filename()).string();
  return identity;
}

bool same_file(const FileIdentity& a, const FileIdentity& b) {
  if (a.exists != b.exists) return false;
  if (a.exists) return a.device == b.device && a.inode == b.inode;
  return a.absolute == b.absolute;
}

// One file an input option reads: the named file itself or, for a directory, a file beneath it.
struct InputFile {
  const NamedPath* input;
  std::string path;
  FileIdentity identity;
};

// The existing files an input stands for; inputs that do not exist are left to the reader to
// report.
void add_input_files(const NamedPath& input, std::vector<InputFile>& files) {
  if (input.path.empty()) return;
  const FileIdentity identity = identify(input.path);
  if (!identity.exists) return;
  files.push_back({&input, input.path, identity});
  std::error_code error;
  if (!fs::is_directory(input.path, error)) return;
  for (fs::recursive_directory_iterator it(input.path, error), end; !error && it != end;
       it.increment(error)) {
    const FileIdentity beneath = identify(it->path().string());
    if (beneath.exists) files.push_back({&input, it->path().string(), beneath});
  }
}

}  // namespace

void check_outputs_do_not_clobber(const std::vector<NamedPath>& inputs,
                                  const std::vector<NamedPath>& outputs) {
  std::vector<InputFile> input_files;
  for (const NamedPath& input : inputs) add_input_files(input, input_files);
  std::vector<std::pair<const NamedPath*, FileIdentity>> checked_outputs;
  for (const NamedPath& output : outputs) {
    if (output.path.empty()) continue;
    const FileIdentity identity = identify(output.path);
    for (const InputFile& file : input_files) {
      if (file.input->option == output.option || !same_file(identity, file.identity)) continue;
      const std::string which =
          file.path == file.input->path
              ? cat(file.input->option, " ", file.path)
              : cat(file.path, " under ", file.input->option, " ", file.input->path);
      throw InputError(cat(output.option, " ", output.path, " is the same file as ", which,
                           ": refusing to overwrite an input"));
    }
    for (const auto& [earlier, earlier_identity] : checked_outputs)
      SLUICE_INPUT_CHECK(!same_file(identity, earlier_identity), output.option, " ", output.path,
                         " is the same file as ", earlier->option, " ", earlier->path,
                         ": refusing to write two outputs to one file");
    checked_outputs.emplace_back(&output, identity);
  }
}

}  // namespace sluice
