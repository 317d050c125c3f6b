// Reading importer input: a byte stream over a plain or gzip file (detected by its magic
// bytes, decompressed with zlib) that reports truncated or corrupt gzip data and reads pipes,
// FIFOs and /dev/stdin in one sequential pass, a reader that hands out large blocks
// ending at a line boundary together with the number of their first line, and helpers to
// parse such a block in parallel (OpenMP) while keeping exact line numbers for errors.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

struct z_stream_s;

namespace sluice {

// A sequential byte stream over one file; gzip when the file starts with the gzip magic
// (several concatenated gzip members read as one stream). The file is opened once and never
// reopened, so a pipe, FIFO or /dev/stdin reads correctly from its first byte; only rewind()
// and read_at() need a regular file.
class InputFile {
 public:
  explicit InputFile(std::string path);  // throws InputError naming the path
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Reads up to `bytes` bytes; returns 0 only at the end. Throws InputError (naming the file)
  // on read errors and on truncated or corrupt gzip data.
  std::size_t read(char* buffer, std::size_t bytes);
  // Reads exactly `bytes` bytes unless the end comes first; returns the count read.
  std::size_t read_full(char* buffer, std::size_t bytes);
  // Starts again from the first byte. Regular files only: anything else throws the
  // require_regular_file() error.
  void rewind();
  // Plain files only: reads `bytes` at `offset` (pread; safe to call from several threads,
  // independent of read()); returns the count read (short only at the end of the file).
  std::size_t read_at(char* buffer, std::size_t bytes, std::uint64_t offset) const;

  // Throws InputError "<path>: a regular file is needed (got a pipe/FIFO): <why>" unless the
  // input is a regular file (plain or gzip), for readers that take several passes.
  void require_regular_file(const std::string& why) const;

  const std::string& path() const { return path_; }
  bool compressed() const { return compressed_; }
  bool regular() const { return regular_; }
  // The file's size; 0 for a pipe, FIFO or device (unknown before the end).
  std::uint64_t size_on_disk() const { return size_on_disk_; }
  std::uint64_t position_on_disk() const;  // for progress

 private:
  std::size_t read_raw(unsigned char* buffer, std::size_t bytes);
  std::size_t read_plain(char* buffer, std::size_t bytes);
  std::size_t read_gzip(char* buffer, std::size_t bytes);
  bool fill_raw();  // refills the compressed input; false at the end of the file
  void start_gzip();

  std::string path_;
  std::string kind_;  // "regular file", "pipe/FIFO", ...
  int fd_ = -1;
  bool regular_ = false;
  bool compressed_ = false;
  std::uint64_t size_on_disk_ = 0;
  std::uint64_t raw_read_ = 0;  // bytes taken from the file so far
  // Bytes read from the file but not yet consumed: the magic bytes of a plain stream, or
  // compressed input waiting for zlib.
  std::vector<unsigned char> raw_;
  std::size_t raw_begin_ = 0, raw_end_ = 0;
  bool raw_eof_ = false;
  z_stream_s* zstream_ = nullptr;
  bool in_member_ = false;  // inside a gzip member (its end not reached yet)
};

// Hands out the file in blocks of about `block_bytes` that end at a newline (the last block
// may not). Lines are numbered from 1.
class LineBlockReader {
 public:
  explicit LineBlockReader(const std::string& path, std::size_t block_bytes = std::size_t(64)
                                                                              << 20);
  // Sets `block` (valid until the next call) and the number of its first line; false at end.
  bool next(std::string_view& block, std::int64_t& first_line);
  const std::string& path() const { return input_.path(); }
  const InputFile& input() const { return input_; }

 private:
  InputFile input_;
  std::vector<char> buffer_;
  std::size_t carry_begin_ = 0, carry_end_ = 0;  // unconsumed bytes after the last block
  std::int64_t next_line_ = 1;
  bool at_end_ = false;
};

// A piece of a block: whole lines, and the number of its first line.
struct LinePiece {
  std::string_view text;
  std::int64_t first_line = 1;
};
// Cuts a block into about `parts` pieces at newlines (fewer when the block is small).
std::vector<LinePiece> split_lines(std::string_view block, std::int64_t first_line, int parts);

// Runs fn(piece_index, piece) for every piece in parallel. An InputError thrown by any piece is
// rethrown after the loop; the one from the earliest piece wins, so the reported line is the
// first bad line of the block. Other exceptions are rethrown the same way.
template <typename Fn>
void parallel_pieces(const std::vector<LinePiece>& pieces, Fn&& fn);

// Iterates the lines of a piece: skips blank lines and comment lines (first non-blank
// character '#' or '%'), strips '\r'.
class LineCursor {
 public:
  explicit LineCursor(const LinePiece& piece)
      : p_(piece.text.data()), end_(p_ + piece.text.size()), line_(piece.first_line - 1) {}
  // Advances to the next data line; false at the end of the piece.
  bool next(std::string_view& line);
  std::int64_t line_number() const { return line_; }

 private:
  const char* p_;
  const char* end_;
  std::int64_t line_;
};

// Splits a line into tokens separated by whitespace and/or one comma. An empty comma-separated
// field (",," or a comma at the start or end of the line) comes out as an empty token, which
// no number parser accepts, so callers report it.
class Tokens {
 public:
  explicit Tokens(std::string_view line) : p_(line.data()), end_(p_ + line.size()) {}
  bool next(std::string_view& token);

 private:
  const char* p_;
  const char* end_;
  bool started_ = false;      // a field was handed out
  bool after_comma_ = false;  // the last separator held a comma: a field must follow
};

// Whole-token number parsing; false when the token is not a number of that kind. Reals that
// overflow read as infinity (callers report them as not finite); reals too small for the type
// read as the nearest subnormal or zero.
bool parse_int64(std::string_view token, std::int64_t& value);
bool parse_float(std::string_view token, float& value);
bool parse_double(std::string_view token, double& value);

// "path:line: " prefix for messages about text input.
std::string at_line(const std::string& path, std::int64_t line);

// ---- implementation of the template ----
void rethrow_first(std::vector<std::exception_ptr>& errors);

template <typename Fn>
void parallel_pieces(const std::vector<LinePiece>& pieces, Fn&& fn) {
  std::vector<std::exception_ptr> errors(pieces.size());
  const std::int64_t count = static_cast<std::int64_t>(pieces.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (std::int64_t i = 0; i < count; ++i) {
    try {
      fn(static_cast<std::size_t>(i), pieces[i]);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  rethrow_first(errors);
}

}  // namespace sluice
