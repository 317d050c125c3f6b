// Implementation of formats/text_input.hpp.
#include "formats/text_input.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

namespace sluice {

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  struct stat info {};
  SLUICE_INPUT_CHECK(stat(path_.c_str(), &info) == 0, path_,
                     ": cannot open: ", std::strerror(errno));
  SLUICE_INPUT_CHECK(!S_ISDIR(info.st_mode), path_, ": is a directory, expected a file");
  size_on_disk_ = static_cast<std::uint64_t>(info.st_size);
  file_ = std::fopen(path_.c_str(), "rb");
  SLUICE_INPUT_CHECK(file_ != nullptr, path_, ": cannot open: ", std::strerror(errno));
  unsigned char magic[2] = {0, 0};
  const std::size_t got = std::fread(magic, 1, 2, file_);
  const bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  const bool gz_name = path_.size() > 3 && path_.compare(path_.size() - 3, 3, ".gz") == 0;
  if (!gzip) {
    std::fclose(file_);
    file_ = nullptr;
    SLUICE_INPUT_CHECK(!gz_name, path_, ": not a gzip file (no gzip header)");
    file_ = std::fopen(path_.c_str(), "rb");
    SLUICE_INPUT_CHECK(file_ != nullptr, path_, ": cannot open: ", std::strerror(errno));
    return;
  }
  std::fclose(file_);
  file_ = nullptr;
  gz_ = gzopen(path_.c_str(), "rb");
  SLUICE_INPUT_CHECK(gz_ != nullptr, path_, ": cannot open gzip file: ", std::strerror(errno));
  gzbuffer(gz_, 1 << 20);
}

InputFile::~InputFile() {
  if (file_) std::fclose(file_);
  if (gz_) gzclose(gz_);
}

std::size_t InputFile::read(char* buffer, std::size_t bytes) {
  if (file_) {
    const std::size_t got = std::fread(buffer, 1, bytes, file_);
    SLUICE_INPUT_CHECK(got == bytes || !std::ferror(file_), path_,
                       ": read error: ", std::strerror(errno));
    return got;
  }
  // gzread takes an unsigned count; read in pieces of at most 1 GiB.
  const unsigned request = static_cast<unsigned>(std::min<std::size_t>(bytes, 1u << 30));
  const int got = gzread(gz_, buffer, request);
  int code = Z_OK;
  const char* message = gzerror(gz_, &code);
  // zlib reports a truncated stream as Z_BUF_ERROR without failing the read.
  SLUICE_INPUT_CHECK(code != Z_BUF_ERROR, path_, ": truncated gzip file (unexpected end of data)");
  SLUICE_INPUT_CHECK(got >= 0 && code == Z_OK, path_, ": corrupt gzip data: ", message);
  return static_cast<std::size_t>(got);
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
  SLUICE_EXPECTS(file_ != nullptr, "read_at on a gzip stream");
  std::size_t total = 0;
  while (total < bytes) {
    const ssize_t got =
        pread(fileno(file_), buffer + total, bytes - total, static_cast<off_t>(offset + total));
    if (got < 0 && errno == EINTR) continue;
    SLUICE_INPUT_CHECK(got >= 0, path_, ": read error: ", std::strerror(errno));
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  return total;
}

void InputFile::rewind() {
  if (file_) {
    std::rewind(file_);
  } else {
    SLUICE_INPUT_CHECK(gzrewind(gz_) == 0, path_, ": cannot rewind gzip file");
  }
}

std::uint64_t InputFile::position_on_disk() const {
  if (file_) return static_cast<std::uint64_t>(std::ftell(file_));
  const auto offset = gzoffset(gz_);
  return offset < 0 ? 0 : static_cast<std::uint64_t>(offset);
}

LineBlockReader::LineBlockReader(const std::string& path, std::size_t block_bytes) : input_(path) {
  // Small files get a small buffer; gzip data may expand a lot, the buffer grows if needed.
  const std::uint64_t expected = input_.size_on_disk() * (input_.compressed() ? 8 : 1) + 1;
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
  auto separator = [](char c) { return c == ' ' || c == '\t' || c == ',' || c == '\r'; };
  while (p_ < end_ && separator(*p_)) ++p_;
  if (p_ == end_) return false;
  const char* begin = p_;
  while (p_ < end_ && !separator(*p_)) ++p_;
  token = std::string_view(begin, static_cast<std::size_t>(p_ - begin));
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
    value = std::numeric_limits<T>::infinity();  // reported as non-finite by the caller
    return result.ptr == end;
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
