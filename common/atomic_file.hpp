// How every command writes its outputs (docs/architecture.md, "How outputs are written"):
// the content goes to a temporary ".<name>.sluice-tmp-<pid>" in the output's directory, every
// write, flush, fsync and close is checked, and only a complete file is renamed over <name>.
// A failure removes the temporary and throws InputError naming the output and the OS reason.
// Live temporaries are registered so that SIGINT, SIGTERM and SIGHUP remove them before the
// process dies; SIGXFSZ is ignored so that a file-size limit is an EFBIG write error. A
// temporary left by a process that no longer runs (kill -9, power loss) is removed by the
// next AtomicOutput for the same output. An output that exists and is not a regular file (a
// device such as /dev/null or /dev/full, a pipe) is written in place with the same checks.
#pragma once

#include <cstddef>
#include <ostream>
#include <streambuf>
#include <string>

namespace sluice {

// Throws InputError "<path>: cannot write <what>: <strerror(error)>".
[[noreturn]] void throw_write_error(const std::string& path, const std::string& what, int error);

// The temporary name AtomicOutput uses for `path` in process `pid`.
std::string temporary_name_for(const std::string& path, long pid);

// Installs the handlers that remove registered temporaries on SIGINT/SIGTERM/SIGHUP (only for
// signals whose disposition is the default) and ignores SIGXFSZ. Idempotent; AtomicOutput
// calls it, commands may call it at start.
void install_output_signal_handlers();

class AtomicOutput {
 public:
  // Throws InputError when the directory of `path` does not exist or `path` is a directory.
  // Removes leftover temporaries of `path` whose process is gone. Creates no file.
  explicit AtomicOutput(std::string path, std::string what = "output");
  ~AtomicOutput();  // removes the temporary unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temporary_path() const { return temporary_; }
  const std::string& final_path() const { return final_; }
  const std::string& what() const { return what_; }
  // fsyncs the temporary (which must be closed by its writer) and renames it over the final
  // path; throws (and removes the temporary) on failure.
  void commit();
  // Removes the temporary now; the owner is done and must not commit.
  void discard();

 private:
  std::string final_;
  std::string what_;
  std::string temporary_;
  int slot_ = -1;  // registration for the signal handler
  bool finished_ = false;
  bool in_place_ = false;  // an existing device, pipe or socket: no temporary, no rename
};

// A file descriptor behind an ostream whose every write is checked: the first failing write
// records errno and puts the stream in a failed state; check() and close() turn that into
// throw_write_error naming the file.
class CheckedFile {
 public:
  enum class Mode { kTruncate, kAppend };
  // Opens (creating) `path`; `report_as` is the path named in errors (the final output of a
  // temporary). Throws on failure.
  CheckedFile(const std::string& path, const std::string& report_as, const std::string& what,
              Mode mode);
  ~CheckedFile();  // closes without checking: call close() on the success path
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;

  std::ostream& stream() { return stream_; }
  void write(const void* data, std::size_t bytes);  // checked at once
  void flush();                                     // flushes to the kernel; throws on error
  void close();                                     // flush, fsync, close; throws on error

 private:
  class Buffer : public std::streambuf {
   public:
    int fd = -1;
    int error = 0;  // errno of the first failed write
    char data[1 << 16];
    Buffer() { setp(data, data + sizeof data); }
    bool drain();

   protected:
    int_type overflow(int_type c) override;
    int sync() override { return drain() ? 0 : -1; }
    std::streamsize xsputn(const char* s, std::streamsize n) override;
  };
  [[noreturn]] void fail(int error);
  Buffer buffer_;
  std::ostream stream_{&buffer_};
  std::string report_as_;
  std::string what_;
};

// A text output written through AtomicOutput and CheckedFile:
//   AtomicTextFile out(path, "report"); out.stream() << ...; out.commit();
class AtomicTextFile {
 public:
  AtomicTextFile(const std::string& path, const std::string& what);
  std::ostream& stream() { return file_.stream(); }
  void commit();

 private:
  AtomicOutput output_;
  CheckedFile file_;
};

// Removes `path` if it is a regular file (never a device or pipe given as an output).
void remove_regular_file(const std::string& path);

// Throws InputError naming `path` if it cannot be opened for reading.
void require_readable(const std::string& path, const std::string& what);

}  // namespace sluice
