// Implementation of formats/text_input.hpp.
#include "formats/text_input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

namespace sluice {

namespace {

constexpr std::size_t kRawBufferBytes = std::size_t(1) << 20;

std::string file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISFIFO(mode)) return "pipe/FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISBLK(mode)) return "block device";
  return "special file";
}

bool gzip_magic(const unsigned char* bytes) {
  return bytes[0] == 0x1f && bytes[1] == 0x8b;
}

}  // namespace

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  SLUICE_INPUT_CHECK(fd_ >= 0, path_, ": cannot open: ", std::strerror(errno));
  struct stat info {};
  if (fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw InputError(cat(path_, ": cannot open: ", std::strerror(error)));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(cat(path_, ": is a directory, expected a file"));
  }
  regular_ = S_ISREG(info.st_mode);
  kind_ = file_kind(info.st_mode);
  size_on_disk_ = regular_ ? static_cast<std::uint64_t>(info.st_size) : 0;
  // The first two bytes tell gzip from plain text; they stay in raw_ for whichever reader
  // follows, so nothing is read twice (a pipe could not give them again).
  raw_.resize(kRawBufferBytes);
  while (raw_end_ < 2) {
    const std::size_t got = read_raw(raw_.data() + raw_end_, 2 - raw_end_);
    if (got == 0) break;
    raw_end_ += got;
  }
  raw_eof_ = raw_end_ < 2;
  const bool gzip = raw_end_ == 2 && gzip_magic(raw_.data());
  const bool gz_name = path_.size() > 3 && path_.compare(path_.size() - 3, 3, ".gz") == 0;
  if (!gzip && gz_name) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(cat(path_, ": not a gzip file (no gzip header)"));
  }
  if (gzip) start_gzip();
}

InputFile::~InputFile() {
  if (zstream_) {
    inflateEnd(zstream_);
    delete zstream_;
  }
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::start_gzip() {
  compressed_ = true;
  if (!zstream_) {
    zstream_ = new z_stream{};
    // 16 + MAX_WBITS: a gzip header and trailer around the deflate data.
    SLUICE_EXPECTS(inflateInit2(zstream_, 16 + MAX_WBITS) == Z_OK, "inflateInit2 failed");
  } else {
    SLUICE_EXPECTS(inflateReset(zstream_) == Z_OK, "inflateReset failed");
  }
  in_member_ = true;
}

std::size_t InputFile::read_raw(unsigned char* buffer, std::size_t bytes) {
  for (;;) {
    const ssize_t got = ::read(fd_, buffer, bytes);
    if (got < 0 && errno == EINTR) continue;
    SLUICE_INPUT_CHECK(got >= 0, path_, ": read error: ", std::strerror(errno));
    raw_read_ += static_cast<std::uint64_t>(got);
    return static_cast<std::size_t>(got);
  }
}

bool InputFile::fill_raw() {
  if (raw_eof_) return false;
  // Keep the unconsumed bytes at the front, then read after them.
  const std::size_t left = raw_end_ - raw_begin_;
  std::memmove(raw_.data(), raw_.data() + raw_begin_, left);
  raw_begin_ = 0;
  raw_end_ = left;
  const std::size_t got = read_raw(raw_.data() + raw_end_, raw_.size() - raw_end_);
  if (got == 0) raw_eof_ = true;
  raw_end_ += got;
  return got > 0;
}

std::size_t InputFile::read(char* buffer, std::size_t bytes) {
  return compressed_ ? read_gzip(buffer, bytes) : read_plain(buffer, bytes);
}

std::size_t InputFile::read_plain(char* buffer, std::size_t bytes) {
  if (bytes == 0) return 0;
  if (raw_begin_ < raw_end_) {
    const std::size_t count = std::min(bytes, raw_end_ - raw_begin_);
    std::memcpy(buffer, raw_.data() + raw_begin_, count);
    raw_begin_ += count;
    return count;
  }
  if (raw_eof_) return 0;
  const std::size_t got = read_raw(reinterpret_cast<unsigned char*>(buffer), bytes);
  if (got == 0) raw_eof_ = true;
  return got;
}

std::size_t InputFile::read_gzip(char* buffer, std::size_t bytes) {
  z_stream& z = *zstream_;
  // inflate takes an unsigned count; hand out at most 1 GiB per call.
  const auto request = static_cast<unsigned>(std::min<std::size_t>(bytes, 1u << 30));
  z.next_out = reinterpret_cast<Bytef*>(buffer);
  z.avail_out = request;
  while (z.avail_out > 0) {
    if (!in_member_) {
      // Between members: another gzip member, or the end of the file.
      while (raw_end_ - raw_begin_ < 2 && fill_raw()) {
      }
      const std::size_t left = raw_end_ - raw_begin_;
      if (left == 0) break;
      SLUICE_INPUT_CHECK(left >= 2 && gzip_magic(raw_.data() + raw_begin_), path_,
                         ": unexpected data after the end of the gzip stream (byte offset ",
                         raw_read_ - left, ")");
      start_gzip();
    }
    if (raw_begin_ == raw_end_ && !fill_raw())
      throw InputError(cat(path_, ": truncated gzip file (unexpected end of data)"));
    z.next_in = raw_.data() + raw_begin_;
    z.avail_in = static_cast<unsigned>(raw_end_ - raw_begin_);
    const int code = inflate(&z, Z_NO_FLUSH);
    raw_begin_ = raw_end_ - z.avail_in;
    if (code == Z_STREAM_END) {
      in_member_ = false;
      continue;
    }
    SLUICE_INPUT_CHECK(code != Z_DATA_ERROR, path_,
                       ": corrupt gzip data: ", z.msg ? z.msg : "invalid deflate data");
    SLUICE_EXPECTS(code == Z_OK || code == Z_BUF_ERROR, "inflate failed with code ", code);
  }
  return request - z.avail_out;
}

std::size_t InputFile::read_full(char* buffer, std::size_t bytes) {
  std::size_t total = 0;
  while (total < bytes) {
    const std::size_t got = read(buffer + total, bytes - total);
    if (got == 0) break;
    total += got;
  }
  return total;
}

std::size_t InputFile::read_at(char* buffer, std::size_t bytes, std::uint64_t offset) const {
  SLUICE_EXPECTS(!compressed_, "read_at on a gzip stream");
  require_regular_file("it is read at random offsets");
  std::size_t total = 0;
  while (total < bytes) {
    const ssize_t got =
        pread(fd_, buffer + total, bytes - total, static_cast<off_t>(offset + total));
    if (got < 0 && errno == EINTR) continue;
    SLUICE_INPUT_CHECK(got >= 0, path_, ": read error: ", std::strerror(errno));
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  return total;
}

void InputFile::require_regular_file(const std::string& why) const {
  SLUICE_INPUT_CHECK(regular_, path_, ": a regular file is needed (got a ", kind_, "): ", why,
                     "; save the stream to a file first");
}

void InputFile::rewind() {
  require_regular_file("this input is read in several passes");
  SLUICE_INPUT_CHECK(lseek(fd_, 0, SEEK_SET) == 0, path_, ": cannot seek: ", std::strerror(errno));
  raw_begin_ = raw_end_ = 0;
  raw_read_ = 0;
  raw_eof_ = false;
  if (compressed_) start_gzip();
}

std::uint64_t InputFile::position_on_disk() const {
  return raw_read_ - (raw_end_ - raw_begin_);
}

LineBlockReader::LineBlockReader(const std::string& path, std::size_t block_bytes) : input_(path) {
  // Small files get a small buffer; gzip data may expand a lot, the buffer grows if needed.
  const std::uint64_t expected =
      input_.regular() ? input_.size_on_disk() * (input_.compressed() ? 8 : 1) + 1 : block_bytes;
  buffer_.resize(std::max<std::size_t>(
      1024, std::min<std::uint64_t>(block_bytes, std::max<std::uint64_t>(expected, 1 << 16))));
}

bool LineBlockReader::next(std::string_view& block, std::int64_t& first_line) {
  // Move the unconsumed tail of the previous block to the front, then fill up.
  const std::size_t carry = carry_end_ - carry_begin_;
  if (carry == 0 && at_end_) return false;
  std::memmove(buffer_.data(), buffer_.data() + carry_begin_, carry);
  std::size_t filled = carry;
  std::size_t cut = 0;  // bytes handed out: up to and including the last newline
  for (;;) {
    if (!at_end_ && filled < buffer_.size()) {
      const std::size_t got = input_.read_full(buffer_.data() + filled, buffer_.size() - filled);
      if (got < buffer_.size() - filled) at_end_ = true;
      filled += got;
    }
    if (at_end_) {
      cut = filled;
      break;
    }
    const char* begin = buffer_.data();
    const char* last = static_cast<const char*>(memrchr(begin, '\n', filled));
    if (last) {
      cut = static_cast<std::size_t>(last - begin) + 1;
      break;
    }
    buffer_.resize(buffer_.size() * 2);  // one line longer than the block: grow
  }
  if (cut == 0) return false;
  block = std::string_view(buffer_.data(), cut);
  first_line = next_line_;
  next_line_ += std::count(block.begin(), block.end(), '\n');
  carry_begin_ = cut;
  carry_end_ = filled;
  return true;
}

std::vector<LinePiece> split_lines(std::string_view block, std::int64_t first_line, int parts) {
  std::vector<LinePiece> pieces;
  const std::size_t min_piece = 1 << 16;
  parts = static_cast<int>(
      std::max<std::size_t>(1, std::min<std::size_t>(parts, block.size() / min_piece + 1)));
  std::size_t begin = 0;
  std::int64_t line = first_line;
  for (int i = 0; i < parts && begin < block.size(); ++i) {
    std::size_t end = i + 1 == parts ? block.size() : block.size() * (i + 1) / parts;
    if (end < begin) end = begin;
    if (end < block.size()) {
      const std::size_t newline = block.find('\n', end);
      end = newline == std::string_view::npos ? block.size() : newline + 1;
    }
    const std::string_view text = block.substr(begin, end - begin);
    pieces.push_back({text, line});
    line += std::count(text.begin(), text.end(), '\n');
    begin = end;
  }
  return pieces;
}

bool LineCursor::next(std::string_view& line) {
  while (p_ < end_) {
    const char* newline = static_cast<const char*>(std::memchr(p_, '\n', end_ - p_));
    const char* stop = newline ? newline : end_;
    const char* begin = p_;
    p_ = newline ? newline + 1 : end_;
    ++line_;
    const char* last = stop;
    while (last > begin && (last[-1] == '\r' || last[-1] == ' ' || last[-1] == '\t')) --last;
    const char* first = begin;
    while (first < last && (*first == ' ' || *first == '\t')) ++first;
    if (first == last || *first == '#' || *first == '%') continue;
    line = std::string_view(first, static_cast<std::size_t>(last - first));
    return true;
  }
  return false;
}

bool Tokens::next(std::string_view& token) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  auto separator = [&](char c) { return blank(c) || c == ','; };
  while (p_ < end_ && blank(*p_)) ++p_;
  const bool field_expected = after_comma_;
  after_comma_ = false;
  if ((field_expected && (p_ == end_ || *p_ == ',')) || (!started_ && p_ < end_ && *p_ == ',')) {
    // An empty field: two commas in a row, or a comma at the start or end of the line.
    started_ = true;
    token = std::string_view(p_, 0);
    if (p_ < end_) {
      ++p_;
      after_comma_ = true;
    }
    return true;
  }
  if (p_ == end_) return false;
  const char* begin = p_;
  while (p_ < end_ && !separator(*p_)) ++p_;
  token = std::string_view(begin, static_cast<std::size_t>(p_ - begin));
  started_ = true;
  while (p_ < end_ && blank(*p_)) ++p_;
  if (p_ < end_ && *p_ == ',') {
    ++p_;
    after_comma_ = true;
  }
  return true;
}

bool parse_int64(std::string_view token, std::int64_t& value) {
  const char* begin = token.data();
  const char* end = begin + token.size();
  if (begin < end && *begin == '+') ++begin;
  const auto result = std::from_chars(begin, end, value);
  return result.ec == std::errc() && result.ptr == end && begin < end;
}

template <typename T>
static bool parse_real(std::string_view token, T& value) {
  const char* begin = token.data();
  const char* end = begin + token.size();
  if (begin < end && *begin == '+') ++begin;
  const auto result = std::from_chars(begin, end, value);
  if (result.ec == std::errc::result_out_of_range) {
    if (result.ptr != end) return false;
    // Out of range is overflow (infinity, reported as not finite by the caller) or underflow
    // (a subnormal or zero, a valid value): strtod/strtof tell them apart.
    const std::string text(token);
    if constexpr (std::is_same_v<T, float>)
      value = std::strtof(text.c_str(), nullptr);
    else
      value = std::strtod(text.c_str(), nullptr);
    return true;
  }
  return result.ec == std::errc() && result.ptr == end && begin < end;
}

bool parse_float(std::string_view token, float& value) {
  return parse_real(token, value);
}
bool parse_double(std::string_view token, double& value) {
  return parse_real(token, value);
}

std::string at_line(const std::string& path, std::int64_t line) {
  return cat(path, ":", line, ": ");
}

void rethrow_first(std::vector<std::exception_ptr>& errors) {
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace sluice
