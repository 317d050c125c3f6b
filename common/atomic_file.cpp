// Implementation of common/atomic_file.hpp.
#include "common/atomic_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.hpp"

namespace sluice {

AtomicOutput::AtomicOutput(std::string path) : final_(std::move(path)) {
  SLUICE_INPUT_CHECK(!final_.empty(), "output path is empty");
  const auto slash = final_.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "." : final_.substr(0, slash + 1);
  struct stat info {};
  SLUICE_INPUT_CHECK(stat(directory.c_str(), &info) == 0 && S_ISDIR(info.st_mode), final_,
                     ": output directory ", directory, " does not exist");
  SLUICE_INPUT_CHECK(!(stat(final_.c_str(), &info) == 0 && S_ISDIR(info.st_mode)), final_,
                     ": output path is a directory");
  temporary_ = cat(final_, ".tmp.", getpid());
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) std::remove(temporary_.c_str());
}

void AtomicOutput::commit() {
  SLUICE_EXPECTS(!committed_, "commit() called twice for ", final_);
  if (std::rename(temporary_.c_str(), final_.c_str()) != 0)
    throw InputError(cat(final_, ": cannot rename ", temporary_, ": ", std::strerror(errno)));
  committed_ = true;
}

void require_readable(const std::string& path, const std::string& what) {
  SLUICE_INPUT_CHECK(access(path.c_str(), R_OK) == 0, path, ": cannot read ", what, ": ",
                     std::strerror(errno));
}

}  // namespace sluice
