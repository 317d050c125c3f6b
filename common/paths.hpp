// Guards a command's output files against its inputs: an output that names an input (by the
// same path, a symlink or a hard link) or another output is refused before any work is done.
#pragma once

#include <string>
#include <vector>

namespace sluice {

// A file named on the command line, with the option that named it (for messages).
struct NamedPath {
  std::string option;  // e.g. "--dataset"
  std::string path;    // empty: the option was not given (ignored)
};

// Throws InputError naming both options and the path when an output is the same file as an
// input or as another output. Existing files are compared by device and inode, so symlinks and
// hard links are caught; an input directory stands for every file beneath it. Outputs that do
// not exist yet are compared with each other by their absolute path (directory resolved). An
// output given by the same option as an input (a checkpoint read and then rewritten) is allowed.
void check_outputs_do_not_clobber(const std::vector<NamedPath>& inputs,
                                  const std::vector<NamedPath>& outputs);

}  // namespace sluice
