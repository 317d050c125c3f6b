// Implementation of common/atomic_file.hpp.
#include "common/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {
namespace {

constexpr const char* kTemporaryTag = ".sluice-tmp-";

// Registry of live temporaries for the signal handler: fixed storage, written under a mutex
// by ordinary code, read (and unlinked) without locks by the handler. A slot's path is
// complete before its flag is set, and the flag is cleared before the path changes.
constexpr int kSlots = 64;
constexpr std::size_t kPathBytes = 4096;
char registered_paths[kSlots][kPathBytes];
std::atomic<int> registered[kSlots];
std::mutex registry_mutex;

void remove_registered_and_reraise(int signal_number) {
  for (int i = 0; i < kSlots; ++i)
    if (registered[i].load()) unlink(registered_paths[i]);
  // SA_RESETHAND restored the default action; it runs once this handler returns.
  raise(signal_number);
}

int register_temporary(const std::string& path) {
  if (path.size() >= kPathBytes) return -1;  // not removable on a signal; still cleaned later
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (int i = 0; i < kSlots; ++i) {
    if (registered[i].load()) continue;
    std::memcpy(registered_paths[i], path.c_str(), path.size() + 1);
    registered[i].store(1);
    return i;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot < 0) return;
  std::lock_guard<std::mutex> lock(registry_mutex);
  registered[slot].store(0);
}

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash + 1);
}

std::string base_name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Removes ".<name>.sluice-tmp-<pid>" entries next to `path` whose process no longer exists.
void remove_leftover_temporaries(const std::string& path) {
  const std::string directory = directory_of(path);
  const std::string prefix = cat(".", base_name_of(path), kTemporaryTag);
  DIR* listing = opendir(directory.c_str());
  if (!listing) return;
  while (const dirent* entry = readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const long pid = std::atol(digits.c_str());
    if (pid == long(getpid())) continue;
    if (pid > 0 && (kill(pid_t(pid), 0) == 0 || errno == EPERM))
      continue;  // that process still runs (maybe writing this output now)
    const std::string leftover = (path.find('/') == std::string::npos ? "" : directory) + name;
    if (unlink(leftover.c_str()) == 0)
      log_info("removed ", leftover, ", left by process ", pid, " that no longer runs");
  }
  closedir(listing);
}

}  // namespace

[[noreturn]] void throw_write_error(const std::string& path, const std::string& what, int error) {
  throw InputError(cat(path, ": cannot write ", what, ": ", std::strerror(error)));
}

std::string temporary_name_for(const std::string& path, long pid) {
  const auto slash = path.find_last_of('/');
  const std::string directory = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  return cat(directory, ".", base_name_of(path), kTemporaryTag, pid);
}

void install_output_signal_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      if (sigaction(signal_number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL)
        continue;  // ignored (nohup) or handled by someone else: leave it
      struct sigaction action {};
      action.sa_handler = remove_registered_and_reraise;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESETHAND;
      sigaction(signal_number, &action, nullptr);
    }
    std::signal(SIGXFSZ, SIG_IGN);
  });
}

AtomicOutput::AtomicOutput(std::string path, std::string what)
    : final_(std::move(path)), what_(std::move(what)) {
  SLUICE_INPUT_CHECK(!final_.empty(), "output path is empty");
  SLUICE_INPUT_CHECK(final_.back() != '/', final_, ": output path is a directory");
  const std::string directory = directory_of(final_);
  struct stat info {};
  SLUICE_INPUT_CHECK(stat(directory.c_str(), &info) == 0 && S_ISDIR(info.st_mode), final_,
                     ": output directory ", directory, " does not exist");
  SLUICE_INPUT_CHECK(!(stat(final_.c_str(), &info) == 0 && S_ISDIR(info.st_mode)), final_,
                     ": output path is a directory");
  install_output_signal_handlers();
  if (stat(final_.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // A device, pipe or socket (/dev/null, /dev/stdout) cannot be replaced: write it in place.
    temporary_ = final_;
    in_place_ = true;
    return;
  }
  remove_leftover_temporaries(final_);
  temporary_ = temporary_name_for(final_, long(getpid()));
  slot_ = register_temporary(temporary_);
}

AtomicOutput::~AtomicOutput() {
  if (!finished_ && !in_place_) unlink(temporary_.c_str());
  unregister_temporary(slot_);
}

void AtomicOutput::discard() {
  if (finished_) return;
  if (!in_place_) unlink(temporary_.c_str());
  finished_ = true;
  unregister_temporary(slot_);
  slot_ = -1;
}

void AtomicOutput::commit() {
  SLUICE_EXPECTS(!finished_, "commit() after commit() or discard() for ", final_);
  if (in_place_) {
    finished_ = true;
    return;
  }
  const int fd = open(temporary_.c_str(), O_RDONLY | O_CLOEXEC);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    if (fsync(fd) != 0) error = errno;
    if (::close(fd) != 0 && error == 0) error = errno;
  }
  if (error == 0 && std::rename(temporary_.c_str(), final_.c_str()) != 0) error = errno;
  if (error != 0) {
    discard();
    throw_write_error(final_, what_, error);
  }
  finished_ = true;
  unregister_temporary(slot_);
  slot_ = -1;
}

bool CheckedFile::Buffer::drain() {
  const char* begin = pbase();
  const char* end = pptr();
  while (begin < end && error == 0) {
    const ssize_t n = ::write(fd, begin, std::size_t(end - begin));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : EIO;
      break;
    }
    begin += n;
  }
  setp(data, data + sizeof data);
  return error == 0;
}

CheckedFile::Buffer::int_type CheckedFile::Buffer::overflow(int_type c) {
  if (!drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(c, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
  }
  return traits_type::not_eof(c);
}

std::streamsize CheckedFile::Buffer::xsputn(const char* s, std::streamsize n) {
  std::streamsize done = 0;
  while (done < n) {
    if (pptr() == epptr() && !drain()) return done;
    const std::streamsize room = epptr() - pptr();
    const std::streamsize take = std::min(room, n - done);
    std::memcpy(pptr(), s + done, std::size_t(take));
    pbump(int(take));
    done += take;
  }
  return done;
}

CheckedFile::CheckedFile(const std::string& path, const std::string& report_as,
                         const std::string& what, Mode mode)
    : report_as_(report_as), what_(what) {
  install_output_signal_handlers();
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  buffer_.fd = ::open(path.c_str(), flags, 0666);
  if (buffer_.fd < 0) throw_write_error(report_as_, what_, errno);
}

CheckedFile::~CheckedFile() {
  if (buffer_.fd >= 0) ::close(buffer_.fd);
}

void CheckedFile::fail(int error) {
  ::close(buffer_.fd);
  buffer_.fd = -1;
  throw_write_error(report_as_, what_, error);
}

void CheckedFile::write(const void* data, std::size_t bytes) {
  stream_.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!stream_ || buffer_.error != 0) fail(buffer_.error ? buffer_.error : EIO);
}

void CheckedFile::flush() {
  SLUICE_EXPECTS(buffer_.fd >= 0, "flush() of closed ", report_as_);
  stream_.flush();
  if (!stream_ || buffer_.error != 0) fail(buffer_.error ? buffer_.error : EIO);
}

void CheckedFile::close() {
  flush();
  // Devices and pipes (an output written in place) do not support fsync.
  if (fsync(buffer_.fd) != 0 && errno != EINVAL && errno != EROFS) fail(errno);
  const int fd = buffer_.fd;
  buffer_.fd = -1;
  if (::close(fd) != 0) throw_write_error(report_as_, what_, errno);
}

AtomicTextFile::AtomicTextFile(const std::string& path, const std::string& what)
    : output_(path, what),
      file_(output_.temporary_path(), path, what, CheckedFile::Mode::kTruncate) {}

void AtomicTextFile::commit() {
  file_.close();
  output_.commit();
}

void remove_regular_file(const std::string& path) {
  struct stat info {};
  if (lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode)) unlink(path.c_str());
}

void require_readable(const std::string& path, const std::string& what) {
  SLUICE_INPUT_CHECK(access(path.c_str(), R_OK) == 0, path, ": cannot read ", what, ": ",
                     std::strerror(errno));
}

}  // namespace sluice
