// Implementation of formats/npy.hpp.
#include "formats/npy.hpp"

#include <zip.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>

#include "common/error.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "formats/block_read.hpp"
#include "formats/text_input.hpp"

namespace sluice {

const char* to_string(NpyType type) {
  switch (type) {
    case NpyType::kInt32:
      return "<i4";
    case NpyType::kInt64:
      return "<i8";
    case NpyType::kUint32:
      return "<u4";
    case NpyType::kUint64:
      return "<u8";
    case NpyType::kFloat16:
      return "<f2";
    case NpyType::kFloat32:
      return "<f4";
    case NpyType::kFloat64:
      break;
  }
  return "<f8";
}

namespace {

constexpr std::int64_t kBlockElements = std::int64_t(1) << 23;

bool is_integer(NpyType type) {
  return type == NpyType::kInt32 || type == NpyType::kInt64 || type == NpyType::kUint32 ||
         type == NpyType::kUint64;
}

float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = std::uint32_t(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Element i of a block as double / int64, by type (the block is aligned for every type).
template <typename T>
T load(const char* data, std::int64_t i) {
  T value;
  std::memcpy(&value, data + sizeof(T) * i, sizeof(T));
  return value;
}
double element_as_double(NpyType type, const char* data, std::int64_t i) {
  switch (type) {
    case NpyType::kInt32:
      return load<std::int32_t>(data, i);
    case NpyType::kInt64:
      return static_cast<double>(load<std::int64_t>(data, i));
    case NpyType::kUint32:
      return load<std::uint32_t>(data, i);
    case NpyType::kUint64:
      return static_cast<double>(load<std::uint64_t>(data, i));
    case NpyType::kFloat16:
      return half_to_float(load<std::uint16_t>(data, i));
    case NpyType::kFloat32:
      return load<float>(data, i);
    case NpyType::kFloat64:
      break;
  }
  return load<double>(data, i);
}
// Integer element i; values above int64's range become -1 (then rejected as negative ids).
std::int64_t element_as_int(NpyType type, const char* data, std::int64_t i) {
  switch (type) {
    case NpyType::kInt32:
      return load<std::int32_t>(data, i);
    case NpyType::kUint32:
      return load<std::uint32_t>(data, i);
    case NpyType::kUint64: {
      const std::uint64_t value = load<std::uint64_t>(data, i);
      return value > std::uint64_t(std::numeric_limits<std::int64_t>::max())
                 ? -1
                 : static_cast<std::int64_t>(value);
    }
    default:
      break;
  }
  return load<std::int64_t>(data, i);
}

// A .npy file: positional reads of a plain regular file (parallel pieces for large reads), else
// (gzip, pipe, FIFO) reads front to back.
class FileStream : public ByteStream {
 public:
  explicit FileStream(const std::string& path) : input_(path) {}
  std::size_t read(char* buffer, std::size_t bytes) override {
    const bool sequential = input_.compressed() || !input_.regular();
    if (sequential || bytes < (std::size_t(1) << 22)) {
      const std::size_t got =
          sequential ? input_.read_full(buffer, bytes) : input_.read_at(buffer, bytes, offset_);
      offset_ += got;
      return got;
    }
    const std::size_t got = read_at_parallel(input_, buffer, bytes, offset_);
    offset_ += got;
    return got;
  }
  InputFile* positional_file() override {
    return input_.regular() && !input_.compressed() ? &input_ : nullptr;
  }
  std::int64_t known_size() override {
    return positional_file() ? static_cast<std::int64_t>(input_.size_on_disk()) : -1;
  }

 private:
  InputFile input_;
  std::uint64_t offset_ = 0;
};

// One entry of a zip archive, decompressed by libzip when deflated.
class ZipEntryStream : public ByteStream {
 public:
  // size: the entry's uncompressed size as the archive records it (-1: not recorded); libzip
  // checks it against the data when the entry is read to its end.
  ZipEntryStream(zip_file_t* file, std::int64_t size, std::string what)
      : file_(file), size_(size), what_(std::move(what)) {}
  ~ZipEntryStream() override { zip_fclose(file_); }
  std::size_t read(char* buffer, std::size_t bytes) override {
    std::size_t total = 0;
    while (total < bytes) {
      const zip_int64_t got = zip_fread(file_, buffer + total, bytes - total);
      SLUICE_INPUT_CHECK(got >= 0, what_, ": read failed: ", zip_file_strerror(file_));
      if (got == 0) break;
      total += static_cast<std::size_t>(got);
    }
    return total;
  }
  std::int64_t known_size() override { return size_; }

 private:
  zip_file_t* file_;
  std::int64_t size_;
  std::string what_;
};

// The value text after "'key':" in a header dict, up to the next top-level ',' or '}'.
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  const std::string quoted[2] = {"'" + key + "'", "\"" + key + "\""};
  std::size_t at = std::string::npos;
  for (const auto& q : quoted)
    if ((at = header.find(q)) != std::string::npos) {
      at += q.size();
      break;
    }
  SLUICE_INPUT_CHECK(at != std::string::npos, what, ": .npy header has no '", key, "': ", header);
  at = header.find(':', at);
  SLUICE_INPUT_CHECK(at != std::string::npos, what, ": malformed .npy header: ", header);
  ++at;
  int depth = 0;
  std::size_t end = at;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  std::string value = header.substr(at, end - at);
  const auto first = value.find_first_not_of(" \t");
  const auto last = value.find_last_not_of(" \t");
  return first == std::string::npos ? "" : value.substr(first, last - first + 1);
}

}  // namespace

NpyArray::NpyArray(std::unique_ptr<ByteStream> stream, std::string what)
    : stream_(std::move(stream)), what_(std::move(what)) {
  char prefix[12];
  SLUICE_INPUT_CHECK(stream_->read(prefix, 10) == 10 && std::memcmp(prefix, "\x93NUMPY", 6) == 0,
                     what_, ": not a .npy array (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(prefix[6]);
  SLUICE_INPUT_CHECK(major >= 1 && major <= 3, what_, ": .npy format version ", major,
                     " is not supported (1, 2 or 3)");
  std::size_t header_bytes = static_cast<unsigned char>(prefix[8]) |
                             std::size_t(static_cast<unsigned char>(prefix[9])) << 8;
  if (major >= 2) {
    SLUICE_INPUT_CHECK(stream_->read(prefix + 10, 2) == 2, what_, ": truncated .npy header");
    header_bytes |= std::size_t(static_cast<unsigned char>(prefix[10])) << 16 |
                    std::size_t(static_cast<unsigned char>(prefix[11])) << 24;
  }
  SLUICE_INPUT_CHECK(header_bytes < (std::size_t(1) << 20), what_, ": .npy header of ",
                     header_bytes, " bytes is implausibly large");
  data_offset_ = (major >= 2 ? 12 : 10) + header_bytes;
  std::string header(header_bytes, '\0');
  SLUICE_INPUT_CHECK(stream_->read(header.data(), header_bytes) == header_bytes, what_,
                     ": truncated .npy header");

  std::string descr = dict_value(header, "descr", what_);
  SLUICE_INPUT_CHECK(descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"'), what_,
                     ": dtype ", descr, " is not supported (structured arrays are not)");
  descr = descr.substr(1, descr.size() - 2);
  SLUICE_INPUT_CHECK(descr.empty() || descr[0] != '>', what_, ": dtype '", descr,
                     "' is big-endian; convert it with arr.astype(arr.dtype.newbyteorder('<'))");
  const std::string written = descr;
  if (!descr.empty() && (descr[0] == '=' || descr[0] == '|')) descr[0] = '<';
  const std::pair<const char*, NpyType> types[] = {
      {"<i4", NpyType::kInt32},  {"<i8", NpyType::kInt64},   {"<u4", NpyType::kUint32},
      {"<u8", NpyType::kUint64}, {"<f2", NpyType::kFloat16}, {"<f4", NpyType::kFloat32},
      {"<f8", NpyType::kFloat64}};
  bool known = false;
  for (const auto& [name, type] : types)
    if (descr == name) {
      type_ = type;
      known = true;
    }
  SLUICE_INPUT_CHECK(known, what_, ": dtype '", written,
                     "' is not supported (<i4, <i8, <u4, <u8, <f2, <f4, <f8)");
  item_bytes_ = descr[2] - '0';

  const std::string fortran = dict_value(header, "fortran_order", what_);
  SLUICE_INPUT_CHECK(fortran == "False", what_, ": fortran_order ", fortran,
                     " is not supported; save a C-ordered array (np.ascontiguousarray)");

  const std::string shape = dict_value(header, "shape", what_);
  SLUICE_INPUT_CHECK(shape.size() >= 2 && shape.front() == '(' && shape.back() == ')', what_,
                     ": malformed shape ", shape);
  std::size_t at = 1;
  while (at < shape.size() - 1) {
    while (at < shape.size() - 1 && (shape[at] == ' ' || shape[at] == ',')) ++at;
    if (at >= shape.size() - 1) break;
    std::size_t used = 0;
    long long dim = -1;
    try {
      dim = std::stoll(shape.substr(at), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SLUICE_INPUT_CHECK(used > 0 && dim >= 0, what_, ": malformed shape ", shape);
    shape_.push_back(dim);
    at += used;
  }
  std::int64_t bytes = item_bytes_;
  for (const std::int64_t dim : shape_) bytes = saturating_bytes({bytes, dim});
  SLUICE_INPUT_CHECK(bytes < std::numeric_limits<std::int64_t>::max(), what_, ": shape ",
                     shape_text(), " of ", item_bytes_, "-byte elements holds 2^63 bytes or more");
  elements_ = bytes / item_bytes_;
  // Where the stream's length is known (a plain file, a zip entry), the data must all be there.
  const std::int64_t size = stream_->known_size();
  if (size >= 0) {
    const auto length = static_cast<std::uint64_t>(size);
    const auto present =
        static_cast<std::int64_t>((length - std::min(length, data_offset_)) / item_bytes_);
    if (present < elements_) throw_truncated(present);
  }
}

std::string NpyArray::shape_text() const {
  std::string text = "(";
  for (std::size_t i = 0; i < shape_.size(); ++i) text += cat(i ? ", " : "", shape_[i]);
  return text + (shape_.size() == 1 ? ",)" : ")");
}

InputFile* NpyArray::positional_file() {
  return consumed_ == 0 ? stream_->positional_file() : nullptr;
}

void NpyArray::throw_truncated(std::int64_t present) const {
  throw InputError(cat(what_, ": truncated: shape ", shape_text(), " needs ", elements(),
                       " elements of ", item_bytes_, " bytes, the data ends after ", present));
}

const char* NpyArray::next_block(std::int64_t count) {
  buffer_.resize(static_cast<std::size_t>((count * item_bytes_ + 7) / 8));
  char* data = reinterpret_cast<char*>(buffer_.data());
  const std::size_t bytes = static_cast<std::size_t>(count) * item_bytes_;
  const std::size_t got = stream_->read(data, bytes);
  if (got != bytes) throw_truncated(consumed_ + static_cast<std::int64_t>(got) / item_bytes_);
  return data;
}

template <typename Fn>
void NpyArray::for_blocks(std::int64_t count, Fn&& fn) {
  SLUICE_EXPECTS(consumed_ + count <= elements(), what_, ": reading past the array's end");
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t block = std::min(kBlockElements, count - done);
    const char* data = next_block(block);
    fn(data, block, done);
    consumed_ += block;
    done += block;
  }
}

std::int64_t NpyArray::read_ids(std::int64_t count, vertex_t* out, std::size_t stride,
                                std::int64_t limit) {
  SLUICE_INPUT_CHECK(is_integer(type_), what_, ": dtype ", to_string(type_),
                     " holds no vertex ids (expected <i4, <i8, <u4 or <u8)");
  std::int64_t max_id = -1;
  for_blocks(count, [&](const char* data, std::int64_t block, std::int64_t done) {
    vertex_t* target = out + static_cast<std::size_t>(done) * stride;
    const NpyType type = type_;
    const IdBlockCheck check = check_id_block(block, limit, [&](std::int64_t i) {
      const std::int64_t id = element_as_int(type, data, i);
      target[static_cast<std::size_t>(i) * stride] = static_cast<vertex_t>(id);
      return id;
    });
    if (check.first_bad >= 0) {
      const std::string where = cat(what_, ": element ", consumed_ + check.first_bad, ": ");
      if (type_ == NpyType::kUint64 && load<std::uint64_t>(data, check.first_bad) >
                                           std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        throw InputError(cat(where, "vertex id ", load<std::uint64_t>(data, check.first_bad),
                             " out of range [0, ", limit, ")"));
      throw_bad_vertex_id(where, element_as_int(type_, data, check.first_bad), limit);
    }
    max_id = std::max(max_id, check.max_id);
  });
  return max_id;
}

void NpyArray::read_integers(std::int64_t count, std::int64_t* out) {
  SLUICE_INPUT_CHECK(is_integer(type_), what_, ": dtype ", to_string(type_),
                     " is not an integer type");
  for_blocks(count, [&](const char* data, std::int64_t block, std::int64_t done) {
    for (std::int64_t i = 0; i < block; ++i) out[done + i] = element_as_int(type_, data, i);
  });
}

void NpyArray::read_floats(std::int64_t count, float* out) {
  for_blocks(count, [&](const char* data, std::int64_t block, std::int64_t done) {
    constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
    std::int64_t first_bad = kNone;
    float* target = out + done;
    const NpyType type = type_;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (worth_parallel(block))
    for (std::int64_t i = 0; i < block; ++i) {
      const float value = type == NpyType::kFloat32
                              ? load<float>(data, i)
                              : static_cast<float>(element_as_double(type, data, i));
      if (!std::isfinite(value)) first_bad = std::min(first_bad, i);
      target[i] = value;
    }
    SLUICE_INPUT_CHECK(first_bad == kNone, what_, ": element ", consumed_ + first_bad,
                       " is not a finite float32 (", element_as_double(type_, data, first_bad),
                       ")");
  });
}

void NpyArray::read_labels(std::int64_t count, std::int32_t* out, std::int32_t declared_classes) {
  const double upper = declared_classes > 0 ? declared_classes : 2147483647.0;
  for_blocks(count, [&](const char* data, std::int64_t block, std::int64_t done) {
    constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
    std::int64_t first_bad = kNone;
    std::int32_t* target = out + done;
    const NpyType type = type_;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (worth_parallel(block))
    for (std::int64_t i = 0; i < block; ++i) {
      const double value = element_as_double(type, data, i);
      if (std::isnan(value) || value == -1) {
        target[i] = -1;
      } else if (value >= 0 && value < upper && value == std::floor(value)) {
        target[i] = static_cast<std::int32_t>(value);
      } else {
        target[i] = -1;
        first_bad = std::min(first_bad, i);
      }
    }
    if (first_bad != kNone)
      throw InputError(
          cat(what_, ": element ", consumed_ + first_bad, ": label ",
              element_as_double(type_, data, first_bad),
              declared_classes > 0
                  ? cat(" is not an integer in [0, ", declared_classes, ") (--classes)")
                  : std::string(" is not an integer >= 0 (NaN or -1: unlabeled)")));
  });
}

std::unique_ptr<NpyArray> open_npy(const std::string& path) {
  return std::make_unique<NpyArray>(std::make_unique<FileStream>(path), path);
}

NpzArchive::NpzArchive(std::string path) : path_(std::move(path)) {
  int code = 0;
  archive_ = zip_open(path_.c_str(), ZIP_RDONLY, &code);
  if (!archive_) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string message = zip_error_strerror(&error);
    zip_error_fini(&error);
    throw InputError(cat(path_, ": cannot open as a .npz (zip) archive: ", message));
  }
}

NpzArchive::~NpzArchive() {
  if (archive_) zip_discard(archive_);
}

bool NpzArchive::has(const std::string& name) const {
  return zip_name_locate(archive_, (name + ".npy").c_str(), 0) >= 0;
}

std::vector<std::string> NpzArchive::names() const {
  std::vector<std::string> names;
  const zip_int64_t entries = zip_get_num_entries(archive_, 0);
  for (zip_int64_t i = 0; i < entries; ++i) {
    const char* name = zip_get_name(archive_, static_cast<zip_uint64_t>(i), 0);
    if (!name) continue;
    std::string text = name;
    if (text.size() > 4 && text.compare(text.size() - 4, 4, ".npy") == 0)
      names.push_back(text.substr(0, text.size() - 4));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<NpyArray> NpzArchive::open(const std::string& name) const {
  const zip_int64_t index = zip_name_locate(archive_, (name + ".npy").c_str(), 0);
  if (index < 0) {
    std::string list;
    for (const auto& present : names()) list += (list.empty() ? "" : ", ") + present;
    throw InputError(
        cat(path_, ": no array '", name, "' (holds: ", list.empty() ? "none" : list, ")"));
  }
  zip_stat_t stat;
  zip_stat_init(&stat);
  const bool sized = zip_stat_index(archive_, static_cast<zip_uint64_t>(index), 0, &stat) == 0 &&
                     (stat.valid & ZIP_STAT_SIZE) &&
                     stat.size < std::uint64_t(std::numeric_limits<std::int64_t>::max());
  zip_file_t* file = zip_fopen_index(archive_, static_cast<zip_uint64_t>(index), 0);
  SLUICE_INPUT_CHECK(file, path_, ": cannot open array '", name, "': ", zip_strerror(archive_));
  const std::string what = path_ + ":" + name;
  return std::make_unique<NpyArray>(
      std::make_unique<ZipEntryStream>(file, sized ? std::int64_t(stat.size) : -1, what), what);
}

}  // namespace sluice
