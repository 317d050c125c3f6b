// NumPy arrays on disk: a `.npy` file (plain or gzip) or one array of a `.npz` archive (a zip
// of .npy files, stored or deflated; read through libzip). The .npy header is parsed here
// (format versions 1-3, little-endian numeric dtypes, C order); the data is read in large
// blocks and converted in parallel, so an array is never held twice in its on-disk type. A
// plain .npy file also offers its data to positional readers (formats/block_read.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/types.hpp"

struct zip;

namespace sluice {

class InputFile;

enum class NpyType { kInt32, kInt64, kUint32, kUint64, kFloat16, kFloat32, kFloat64 };
const char* to_string(NpyType type);  // the NumPy descr, e.g. "<i8"

// A sequential byte stream: a file or one zip entry. read() returns 0 only at the end.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  virtual std::size_t read(char* buffer, std::size_t bytes) = 0;
  // The plain regular file under the stream, which may be read at any offset; nullptr for gzip,
  // pipes and zip entries.
  virtual InputFile* positional_file() { return nullptr; }
  // The stream's length in bytes where it is known before reading (a plain file, a zip entry's
  // recorded size); -1 where it is not (gzip, pipes).
  virtual std::int64_t known_size() { return -1; }
};

// One array: its header, then its data read front to back.
class NpyArray {
 public:
  // `what` names the array in messages ("dir/raw/data.npz:edge_index" or a file path). Reads
  // and checks the header: InputError for a malformed one, a shape of 2^63 bytes or more, and
  // (where the stream's length is known) data shorter than the shape, so that a caller may
  // size its arrays by the shape once it has checked that they fit in memory (require_memory).
  NpyArray(std::unique_ptr<ByteStream> stream, std::string what);

  const std::string& what() const { return what_; }
  NpyType type() const { return type_; }
  int item_bytes() const { return item_bytes_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t elements() const { return elements_; }
  std::string shape_text() const;  // "(2, 5)"

  // For reading the data in place: the plain regular file that holds the array, with the whole
  // data from byte data_offset(); nullptr when the array can only be read front to back (gzip,
  // pipe, .npz entry) or some of it has been read. The constructor checked that the file holds
  // the shape's data.
  InputFile* positional_file();
  std::uint64_t data_offset() const { return data_offset_; }

  // Reads the next `count` elements as vertex ids into out[0], out[stride], ...: each must be
  // an integer in [0, limit) (InputError naming the array and element otherwise). Returns the
  // largest id read (-1 for none).
  std::int64_t read_ids(std::int64_t count, vertex_t* out, std::size_t stride, std::int64_t limit);
  // Reads the next `count` integer elements as int64.
  void read_integers(std::int64_t count, std::int64_t* out);
  // Reads the next `count` elements as float32 (f2/f4/f8, or integers).
  void read_floats(std::int64_t count, float* out);
  // Reads the next `count` elements as labels: integers >= 0, or floats with an integral value;
  // NaN and -1 mean unlabeled (-1). Labels must be below declared_classes when it is > 0.
  void read_labels(std::int64_t count, std::int32_t* out, std::int32_t declared_classes);

 private:
  // Reads up to `count` elements into the block buffer; InputError when the data ends early.
  const char* next_block(std::int64_t count);
  // InputError "<what>: truncated: ..." for data that ends after `present` elements.
  [[noreturn]] void throw_truncated(std::int64_t present) const;
  template <typename Fn>
  void for_blocks(std::int64_t count, Fn&& fn);

  std::unique_ptr<ByteStream> stream_;
  std::string what_;
  NpyType type_ = NpyType::kInt64;
  int item_bytes_ = 8;
  std::vector<std::int64_t> shape_;
  std::int64_t elements_ = 1;         // the product of shape_
  std::uint64_t data_offset_ = 0;     // bytes of the magic and header
  std::int64_t consumed_ = 0;         // elements read so far
  std::vector<std::int64_t> buffer_;  // 8-byte storage keeps every element type aligned
};

// A .npy file (plain or .npy.gz).
std::unique_ptr<NpyArray> open_npy(const std::string& path);

// A .npz archive; arrays are its "<name>.npy" entries.
class NpzArchive {
 public:
  explicit NpzArchive(std::string path);  // InputError naming the path when it is not a zip
  ~NpzArchive();
  NpzArchive(const NpzArchive&) = delete;
  NpzArchive& operator=(const NpzArchive&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted
  // InputError listing the arrays present when `name` is missing.
  std::unique_ptr<NpyArray> open(const std::string& name) const;

 private:
  std::string path_;
  ::zip* archive_ = nullptr;
};

}  // namespace sluice
