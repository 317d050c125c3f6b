// Implementation of formats/hdf5.hpp.
#include "formats/hdf5.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <mutex>

namespace sluice::h5 {
namespace {

// HDF5 prints its error stack to stderr by default; we turn that off once and report the
// innermost message ourselves.
void silence_library_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

// Name of the file holding `location`, for messages about its contents.
std::string file_name(hid_t location) {
  const ssize_t length = H5Fget_name(location, nullptr, 0);
  if (length <= 0) return "HDF5 file";
  std::string name(static_cast<std::size_t>(length) + 1, '\0');
  H5Fget_name(location, name.data(), name.size());
  name.resize(static_cast<std::size_t>(length));
  return name;
}

// A stored attribute must hold exactly one value: H5Aread writes every element into `value`.
void require_scalar(hid_t location, hid_t attribute, const std::string& name) {
  Handle space(SLUICE_H5(H5Aget_space(attribute)));
  const hssize_t count = SLUICE_H5(H5Sget_simple_extent_npoints(space));
  SLUICE_INPUT_CHECK(count == 1, file_name(location), ": attribute ", name, " holds ", count,
                     " values, expected one");
}

herr_t walk_innermost(unsigned n, const H5E_error2_t* error, void* data) {
  auto* text = static_cast<std::string*>(data);
  if (n == 0 && error->desc) *text = error->desc;
  return 0;
}

}  // namespace

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_innermost, &text);
  return text;
}

void fail(const char* call, const char* file, int line) {
  const std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw_internal(file, line, cat("HDF5 call failed: ", call, detail.empty() ? "" : ": ", detail));
}

void Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE:
      H5Fclose(id_);
      break;
    case H5I_GROUP:
      H5Gclose(id_);
      break;
    case H5I_DATASET:
      H5Dclose(id_);
      break;
    case H5I_DATASPACE:
      H5Sclose(id_);
      break;
    case H5I_DATATYPE:
      H5Tclose(id_);
      break;
    case H5I_ATTR:
      H5Aclose(id_);
      break;
    case H5I_GENPROP_LST:
      H5Pclose(id_);
      break;
    default:
      break;
  }
  id_ = H5I_INVALID_HID;
}

Handle create_file(const std::string& path) {
  silence_library_errors();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw InputError(cat(path, ": cannot create HDF5 file: ", last_error()));
  return Handle(file);
}

Handle open_file(const std::string& path, bool writable) {
  silence_library_errors();
  struct stat info {};
  SLUICE_INPUT_CHECK(stat(path.c_str(), &info) == 0, path, ": no such file");
  const hid_t file = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) throw InputError(cat(path, ": not a readable HDF5 file: ", last_error()));
  return Handle(file);
}

bool is_hdf5(const std::string& path) {
  silence_library_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

Handle create_group(hid_t location, const std::string& name) {
  return Handle(
      SLUICE_H5(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

Handle open_group(hid_t location, const std::string& name) {
  return Handle(SLUICE_H5(H5Gopen2(location, name.c_str(), H5P_DEFAULT)));
}

bool exists(hid_t location, const std::string& path) {
  // Check each component so that a missing intermediate group is "false", not an error.
  std::size_t position = 0;
  while (position != std::string::npos) {
    position = path.find('/', position + 1);
    const std::string prefix = path.substr(0, position);
    if (prefix.empty()) continue;
    if (H5Lexists(location, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

void write_array(hid_t location, const std::string& name, hid_t type, const void* data,
                 std::uint64_t rows, std::uint64_t cols) {
  const int rank = cols ? 2 : 1;
  const hsize_t dims[2] = {rows, cols};
  Handle space(SLUICE_H5(H5Screate_simple(rank, dims, nullptr)));
  Handle properties(SLUICE_H5(H5Pcreate(H5P_DATASET_CREATE)));
  const std::uint64_t row_bytes = (cols ? cols : 1) * H5Tget_size(type);
  // Chunk so that one chunk is ~1 MiB of whole rows: cheap row-range reads, small overhead.
  if (rows * row_bytes > (1u << 20)) {
    hsize_t chunk[2] = {std::max<hsize_t>(1, std::min<hsize_t>(rows, (1u << 20) / row_bytes)),
                        cols};
    SLUICE_H5(H5Pset_chunk(properties, rank, chunk));
  }
  Handle dataset(SLUICE_H5(
      H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, properties, H5P_DEFAULT)));
  if (rows && (cols || rank == 1)) {
    SLUICE_EXPECTS(data != nullptr, "no data for non-empty dataset ", name);
    SLUICE_H5(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  }
}

std::vector<std::uint64_t> shape(hid_t location, const std::string& name) {
  Handle dataset(SLUICE_H5(H5Dopen2(location, name.c_str(), H5P_DEFAULT)));
  Handle space(SLUICE_H5(H5Dget_space(dataset)));
  const int rank = SLUICE_H5(H5Sget_simple_extent_ndims(space));
  SLUICE_INPUT_CHECK(rank >= 1 && rank <= 2, file_name(location), ": dataset ", name, " has ", rank,
                     " dimensions, expected 1 or 2");
  hsize_t dims[2] = {0, 0};
  SLUICE_H5(H5Sget_simple_extent_dims(space, dims, nullptr));
  return std::vector<std::uint64_t>(dims, dims + rank);
}

void read_rows(hid_t location, const std::string& name, hid_t type, std::uint64_t row_begin,
               std::uint64_t row_end, void* out) {
  Handle dataset(SLUICE_H5(H5Dopen2(location, name.c_str(), H5P_DEFAULT)));
  Handle space(SLUICE_H5(H5Dget_space(dataset)));
  const int rank = SLUICE_H5(H5Sget_simple_extent_ndims(space));
  hsize_t dims[2] = {0, 0};
  SLUICE_H5(H5Sget_simple_extent_dims(space, dims, nullptr));
  SLUICE_EXPECTS(row_begin <= row_end && row_end <= dims[0], "rows [", row_begin, ", ", row_end,
                 ") out of range for ", name, " with ", dims[0], " rows");
  if (row_end == row_begin) return;
  const hsize_t start[2] = {row_begin, 0};
  const hsize_t count[2] = {row_end - row_begin, rank == 2 ? dims[1] : 1};
  if (rank == 2 && dims[1] == 0) return;
  SLUICE_H5(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr));
  Handle memory(SLUICE_H5(H5Screate_simple(rank, count, nullptr)));
  SLUICE_H5(H5Dread(dataset, type, memory, space, H5P_DEFAULT, out));
}

void write_attribute(hid_t location, const std::string& name, hid_t type, const void* value) {
  Handle space(SLUICE_H5(H5Screate(H5S_SCALAR)));
  if (H5Aexists(location, name.c_str()) > 0) SLUICE_H5(H5Adelete(location, name.c_str()));
  Handle attribute(
      SLUICE_H5(H5Acreate2(location, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)));
  SLUICE_H5(H5Awrite(attribute, type, value));
}

void read_attribute(hid_t location, const std::string& name, hid_t type, void* value) {
  Handle attribute(SLUICE_H5(H5Aopen(location, name.c_str(), H5P_DEFAULT)));
  require_scalar(location, attribute, name);
  SLUICE_H5(H5Aread(attribute, type, value));
}

bool has_attr(hid_t location, const std::string& name) {
  return SLUICE_H5(H5Aexists(location, name.c_str())) > 0;
}

void write_string_attr(hid_t location, const std::string& name, const std::string& value) {
  // Fixed-length UTF-8 strings read back as plain str/bytes in h5py.
  Handle type(SLUICE_H5(H5Tcopy(H5T_C_S1)));
  SLUICE_H5(H5Tset_size(type, std::max<std::size_t>(1, value.size())));
  SLUICE_H5(H5Tset_cset(type, H5T_CSET_UTF8));
  SLUICE_H5(H5Tset_strpad(type, H5T_STR_NULLPAD));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attribute(location, name, type, padded.data());
}

std::string read_string_attr(hid_t location, const std::string& name) {
  Handle attribute(SLUICE_H5(H5Aopen(location, name.c_str(), H5P_DEFAULT)));
  Handle type(SLUICE_H5(H5Aget_type(attribute)));
  SLUICE_EXPECTS(H5Tget_class(type) == H5T_STRING, "attribute ", name, " is not a string");
  SLUICE_EXPECTS(!H5Tis_variable_str(type), "attribute ", name, " is a variable-length string");
  require_scalar(location, attribute, name);
  const std::size_t size = H5Tget_size(type);
  std::string value(size, '\0');
  SLUICE_H5(H5Aread(attribute, type, value.data()));
  value.resize(std::strlen(value.c_str()));
  return value;
}

}  // namespace sluice::h5
