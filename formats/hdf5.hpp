// Thin RAII layer over the HDF5 C API: owned handles, a checking macro, and typed helpers to
// read and write 1-D/2-D datasets and scalar/string attributes. Only formats/ includes HDF5.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "common/memory.hpp"

namespace sluice::h5 {

// Text of the innermost HDF5 error on the current stack (empty if none).
std::string last_error();
[[noreturn]] void fail(const char* call, const char* file, int line);

// Owns one HDF5 identifier; closes it with the right H5*close for its kind.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      other.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

}  // namespace sluice::h5

// Checks an HDF5 call returning herr_t/hid_t/htri_t (negative = failure).
#define SLUICE_H5(call)                                                      \
  ([&]() {                                                                   \
    auto sluice_h5_result = (call);                                          \
    if (sluice_h5_result < 0) ::sluice::h5::fail(#call, __FILE__, __LINE__); \
    return sluice_h5_result;                                                 \
  }())

namespace sluice::h5 {

template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>)
    return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int8_t>)
    return H5T_NATIVE_INT8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return H5T_NATIVE_UINT64;
  else
    static_assert(sizeof(T) == 0, "unsupported HDF5 element type");
}

// Files. Errors name the path. create() truncates.
Handle create_file(const std::string& path);
// Writes one HDF5 output the way every output is written (common/atomic_file.hpp): `body`
// fills a new file created under a temporary name; the file is flushed and closed with
// checked calls and renamed over `path`. Any failure removes the temporary and throws
// InputError "<path>: cannot write <what>: <reason>". Handles that `body` opens must be
// closed when it returns (RAII Handles in its scope).
void write_file(const std::string& path, const std::string& what,
                const std::function<void(hid_t file)>& body);
Handle open_file(const std::string& path, bool writable = false);
bool is_hdf5(const std::string& path);

Handle create_group(hid_t location, const std::string& name);
Handle open_group(hid_t location, const std::string& name);
bool exists(hid_t location, const std::string& path);

// Writes a dataset of shape [rows] (cols == 0) or [rows, cols]; chunked when large so that
// row ranges read cheaply. `data` may be null only when rows == 0.
void write_array(hid_t location, const std::string& name, hid_t type, const void* data,
                 std::uint64_t rows, std::uint64_t cols = 0);
template <typename T>
void write_vector(hid_t location, const std::string& name, const std::vector<T>& values) {
  write_array(location, name, native_type<T>(), values.data(), values.size());
}
template <typename T>
void write_matrix(hid_t location, const std::string& name, const T* values, std::uint64_t rows,
                  std::uint64_t cols) {
  write_array(location, name, native_type<T>(), values, rows, cols);
}

// Shape of a dataset (1 or 2 dims).
std::vector<std::uint64_t> shape(hid_t location, const std::string& name);

// Reads rows [row_begin, row_end) of a 1-D or 2-D dataset into `out` (converting to T).
void read_rows(hid_t location, const std::string& name, hid_t type, std::uint64_t row_begin,
               std::uint64_t row_end, void* out);
// The elements of a dataset of shape `dims` that is to be read whole into memory, elements of
// `element_bytes` each. A file may declare a shape far beyond the data it stores (a corrupt or
// forged file: HDF5 gives the fill value for storage never written), so a shape whose data would
// not fit in the host's available memory throws InputError naming the file, the dataset and both
// sizes (require_memory()) before anything is allocated.
std::uint64_t elements_to_read(hid_t location, const std::string& name,
                               const std::vector<std::uint64_t>& dims, std::size_t element_bytes);

template <typename T>
std::vector<T> read_vector(hid_t location, const std::string& name) {
  const auto dims = shape(location, name);
  const std::uint64_t count = elements_to_read(location, name, dims, sizeof(T));
  std::vector<T> values;
  resize_populated(values, count);
  if (count)
    read_rows(location, name, native_type<T>(), 0, dims.empty() ? 0 : dims[0], values.data());
  return values;
}

// Scalar attributes on a file, group or dataset.
void write_attribute(hid_t location, const std::string& name, hid_t type, const void* value);
void read_attribute(hid_t location, const std::string& name, hid_t type, void* value);
template <typename T>
void write_attr(hid_t location, const std::string& name, T value) {
  write_attribute(location, name, native_type<T>(), &value);
}
template <typename T>
T read_attr(hid_t location, const std::string& name) {
  T value{};
  read_attribute(location, name, native_type<T>(), &value);
  return value;
}
void write_string_attr(hid_t location, const std::string& name, const std::string& value);
std::string read_string_attr(hid_t location, const std::string& name);
bool has_attr(hid_t location, const std::string& name);

}  // namespace sluice::h5
