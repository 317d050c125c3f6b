// Implementation of formats/hdf5.hpp.
#include "formats/hdf5.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>

#include "common/atomic_file.hpp"

namespace sluice::h5 {
namespace {

// HDF5 closes every identifier still open from an atexit handler. After a failed write
// (disk full, file-size limit) a file whose close failed is left half-closed, and that
// handler crashes on it; write_file closes what it opened, so the handler is turned off.
// This runs during static initialization, before any HDF5 call (only formats/ calls HDF5).
const bool kNoLibraryAtexit = [] {
  H5dont_atexit();
  return true;
}();

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

// The path in its file of the object `name` below `location` ("/parameters/layer0.W").
std::string object_path(hid_t location, const std::string& name) {
  if (!name.empty() && name.front() == '/') return name;
  const ssize_t length = H5Iget_name(location, nullptr, 0);
  std::string path;
  if (length > 0) {
    path.assign(static_cast<std::size_t>(length) + 1, '\0');
    H5Iget_name(location, path.data(), path.size());
    path.resize(static_cast<std::size_t>(length));
  }
  if (path.empty() || path.back() != '/') path += '/';
  return path + name;
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

// Reads below this many bytes go through H5Dread alone.
constexpr std::uint64_t kDirectReadBytes = std::uint64_t(16) << 20;
// Adjacent pieces of a direct read merge up to this many bytes (one pread each), and fewer where
// that leaves threads idle (direct_piece_bytes()).
constexpr std::uint64_t kDirectPieceBytes = std::uint64_t(64) << 20;
constexpr std::uint64_t kMinDirectPieceBytes = std::uint64_t(1) << 20;

// The piece size of a direct read or write of `bytes`: up to kDirectPieceBytes, small enough to
// give every thread about four pieces (the copy out of the page cache is the bulk of the read).
std::uint64_t direct_piece_bytes(std::uint64_t bytes) {
  const std::uint64_t share = bytes / (4 * std::uint64_t(std::max(1, omp_get_max_threads())));
  return std::clamp(share, kMinDirectPieceBytes, kDirectPieceBytes);
}

// A run of bytes of the file and where it goes.
struct Piece {
  std::uint64_t file_offset = 0, bytes = 0;
  char* out = nullptr;
};

// Where rows [row_begin, row_end) of an open dataset lie in its file, as pieces of at most
// direct_piece_bytes() each mapped to `target` (the rows' bytes in memory): when the dataset is
// stored contiguously or in chunks of whole rows, unfiltered, in the sec2 driver's plain file,
// with `type` as its file type, its bytes are where HDF5's chunk index says. Sets `file_name`.
// Returns false when the dataset does not qualify (or a chunk is not allocated).
bool direct_pieces(hid_t dataset, hid_t type, int rank, const hsize_t* dims,
                   std::uint64_t row_begin, std::uint64_t row_end, char* target,
                   std::vector<Piece>& pieces, std::string& file_name) {
  const std::uint64_t element = H5Tget_size(type);
  const std::uint64_t row_bytes = element * (rank == 2 ? dims[1] : 1);
  if (element == 0 || row_bytes == 0) return false;
  Handle file_type(H5Dget_type(dataset));
  if (file_type.get() < 0 || H5Tequal(file_type, type) <= 0) return false;
  Handle file(H5Iget_file_id(dataset));
  if (file.get() < 0) return false;
  Handle access(H5Fget_access_plist(file));
  if (access.get() < 0 || H5Pget_driver(access) != H5FD_SEC2) return false;
  Handle creation(H5Fget_create_plist(file));
  hsize_t base = 0;  // file addresses count from the end of the user block
  if (creation.get() < 0 || H5Pget_userblock(creation, &base) < 0) return false;
  Handle layout_list(H5Dget_create_plist(dataset));
  if (layout_list.get() < 0 || H5Pget_nfilters(layout_list) != 0) return false;
  const std::uint64_t piece_bytes = direct_piece_bytes((row_end - row_begin) * row_bytes);
  const auto add = [&](std::uint64_t offset, std::uint64_t bytes, char* to) {
    if (!pieces.empty()) {
      Piece& last = pieces.back();
      if (last.file_offset + last.bytes == offset && last.out + last.bytes == to &&
          last.bytes + bytes <= piece_bytes) {
        last.bytes += bytes;
        return;
      }
    }
    pieces.push_back({offset, bytes, to});
  };
  const H5D_layout_t layout = H5Pget_layout(layout_list);
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t address = H5Dget_offset(dataset);
    if (address == HADDR_UNDEF) return false;
    for (std::uint64_t done = row_begin * row_bytes; done < row_end * row_bytes;) {
      const std::uint64_t bytes = std::min(piece_bytes, row_end * row_bytes - done);
      add(base + address + done, bytes, target + (done - row_begin * row_bytes));
      done += bytes;
    }
  } else if (layout == H5D_CHUNKED) {
#if H5_VERSION_GE(1, 10, 5)
    hsize_t chunk[2] = {0, 0};
    if (H5Pget_chunk(layout_list, rank, chunk) != rank || chunk[0] == 0 ||
        (rank == 2 && chunk[1] != dims[1]))
      return false;
    const std::uint64_t chunk_bytes = chunk[0] * row_bytes;
    for (std::uint64_t first = row_begin - row_begin % chunk[0]; first < row_end;
         first += chunk[0]) {
      const hsize_t coordinates[2] = {first, 0};
      unsigned filter_mask = 0;
      haddr_t address = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(dataset, coordinates, &filter_mask, &address, &size) < 0 ||
          address == HADDR_UNDEF || size != chunk_bytes)
        return false;  // e.g. a chunk never written (its rows are the fill value)
      const std::uint64_t begin = std::max<std::uint64_t>(first, row_begin);
      const std::uint64_t end = std::min<std::uint64_t>(first + chunk[0], row_end);
      add(base + address + (begin - first) * row_bytes, (end - begin) * row_bytes,
          target + (begin - row_begin) * row_bytes);
    }
#else
    return false;
#endif
  } else {
    return false;
  }
  std::vector<char> name(std::size_t(SLUICE_H5(H5Fget_name(file, nullptr, 0))) + 1);
  SLUICE_H5(H5Fget_name(file, name.data(), name.size()));
  file_name = name.data();
  return true;
}

// Which way a direct transfer copies: file to memory (pread) or memory to file (pwrite).
enum class Direction { kRead, kWrite };

// A direct write goes out in steps of this many bytes, and each step's writeback to the disk
// starts (sync_file_range) as soon as it is in the page cache: the disk writes while the rest of
// the file is copied and the fingerprint computed, and the output's closing fsync
// (AtomicOutput::commit) waits only for what remains.
constexpr std::uint64_t kWritebackStepBytes = std::uint64_t(8) << 20;
// Threads of a direct write: the kernel copies buffered writes to one file one at a time (under
// the file's lock), so more threads would only wait; a few keep the copy going while one starts
// a writeback.
constexpr int kWriteThreads = 4;

// Starts the writeback of bytes [offset, offset + bytes) of the file; returns 0 or the errno of a
// failure. Files that do not support it (a pipe) return 0: it only starts early what the fsync
// before the rename does anyway.
int start_writeback(int descriptor, off_t offset, std::uint64_t bytes) {
  if (::sync_file_range(descriptor, offset, off_t(bytes), SYNC_FILE_RANGE_WRITE) == 0) return 0;
  return errno == ESPIPE || errno == EINVAL || errno == ENOSYS ? 0 : errno;
}

// Copies every piece between the file open as `descriptor` and memory on OpenMP threads (the
// HDF5 library itself is called from this thread only): a read on every thread, a write on up to
// kWriteThreads, starting the writeback of every kWritebackStepBytes written. Returns the first
// errno seen, 0 when none (EIO for a transfer that stops short).
int transfer_pieces(int descriptor, const std::vector<Piece>& pieces, Direction direction) {
  int error = 0;
  const std::int64_t count = std::int64_t(pieces.size());
  const int threads = direction == Direction::kRead
                          ? omp_get_max_threads()
                          : std::min(omp_get_max_threads(), kWriteThreads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (count > 1)
  for (std::int64_t i = 0; i < count; ++i) {
    const Piece& piece = pieces[std::size_t(i)];
    for (std::uint64_t done = 0; done < piece.bytes;) {
      const off_t at = off_t(piece.file_offset + done);
      const std::uint64_t step = std::min(piece.bytes - done, kWritebackStepBytes);
      const ssize_t moved = direction == Direction::kRead
                                ? ::pread(descriptor, piece.out + done, piece.bytes - done, at)
                                : ::pwrite(descriptor, piece.out + done, step, at);
      int failed = moved < 0 ? errno : moved == 0 ? EIO : 0;
      if (failed == 0 && direction == Direction::kWrite)
        failed = start_writeback(descriptor, at, std::uint64_t(moved));
      if (failed != 0) {
#pragma omp critical(sluice_h5_direct_error)
        if (error == 0) error = failed;
        break;
      }
      done += std::uint64_t(moved);
    }
  }
  return error;
}

// Rows [row_begin, row_end) of an open dataset straight from the file (direct_pieces()), read
// with pread by OpenMP threads. Returns false without reading when the dataset does not
// qualify or the read is small; the caller reads through H5Dread then.
bool read_rows_direct(hid_t dataset, hid_t type, int rank, const hsize_t* dims,
                      std::uint64_t row_begin, std::uint64_t row_end, void* out) {
  const std::uint64_t row_bytes = H5Tget_size(type) * (rank == 2 ? dims[1] : 1);
  if ((row_end - row_begin) * row_bytes < kDirectReadBytes) return false;
  std::vector<Piece> pieces;
  std::string name;
  if (!direct_pieces(dataset, type, rank, dims, row_begin, row_end, static_cast<char*>(out), pieces,
                     name))
    return false;
  const int descriptor = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) return false;
  const int error = transfer_pieces(descriptor, pieces, Direction::kRead);
  ::close(descriptor);
  SLUICE_INPUT_CHECK(error == 0, name, ": reading ", (row_end - row_begin) * row_bytes,
                     " bytes of a dataset failed: ", std::strerror(error));
  return true;
}

// Every row of a dataset just created with its chunks allocated and no fill value written
// (write_array()), written straight into the file with pwrite by OpenMP threads. Returns false
// without writing when the dataset does not qualify; the caller writes through H5Dwrite then.
bool write_rows_direct(hid_t dataset, hid_t type, int rank, const hsize_t* dims, const void* data) {
  std::vector<Piece> pieces;
  std::string name;
  // The pieces only read from `data`: Piece::out names the memory side of either direction.
  if (!direct_pieces(dataset, type, rank, dims, 0, dims[0],
                     const_cast<char*>(static_cast<const char*>(data)), pieces, name))
    return false;
  const int descriptor = ::open(name.c_str(), O_WRONLY | O_CLOEXEC);
  if (descriptor < 0) return false;
  const int error = transfer_pieces(descriptor, pieces, Direction::kWrite);
  const int closed = ::close(descriptor) != 0 ? errno : 0;
  const std::uint64_t bytes = dims[0] * H5Tget_size(type) * (rank == 2 ? dims[1] : 1);
  if (error != 0 || closed != 0)
    throw InputError(cat("writing ", bytes, " bytes of a dataset failed: ",
                         std::strerror(error != 0 ? error : closed)));
  return true;
}

// The operating system's message that HDF5's file driver quotes ("error message = '...'")
// when a read or write call fails; empty when the stack holds none.
herr_t walk_os_message(unsigned, const H5E_error2_t* error, void* data) {
  auto* text = static_cast<std::string*>(data);
  if (!text->empty() || !error->desc) return 0;
  const std::string desc = error->desc;
  const std::string key = "error message = '";
  const auto begin = desc.find(key);
  if (begin == std::string::npos) return 0;
  const auto end = desc.find('\'', begin + key.size());
  if (end != std::string::npos) *text = desc.substr(begin + key.size(), end - begin - key.size());
  return 0;
}

// The OS message of the last failed HDF5 call on this thread (set by fail()).
thread_local std::string last_os_message;

}  // namespace

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_innermost, &text);
  return text;
}

void fail(const char* call, const char* file, int line) {
  const std::string detail = last_error();
  last_os_message.clear();
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_os_message, &last_os_message);
  H5Eclear2(H5E_DEFAULT);
  throw_internal(file, line,
                 cat("HDF5 call failed: ", call, detail.empty() ? "" : ": ", detail,
                     last_os_message.empty() ? "" : " (", last_os_message,
                     last_os_message.empty() ? "" : ")"));
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

void write_file(const std::string& path, const std::string& what,
                const std::function<void(hid_t file)>& body) {
  AtomicOutput output(path, what);
  silence_library_errors();
  const hid_t file =
      H5Fcreate(output.temporary_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) {
    std::string reason;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_os_message, &reason);
    if (reason.empty()) reason = last_error();
    H5Eclear2(H5E_DEFAULT);
    throw InputError(cat(path, ": cannot write ", what, ": ", reason));
  }
  // The reason of a failure: the OS message when HDF5 quotes one, else the exception's text.
  std::string failure;
  try {
    last_os_message.clear();
    body(file);
    SLUICE_H5(H5Fflush(file, H5F_SCOPE_GLOBAL));
  } catch (const std::exception& e) {
    failure = last_os_message.empty() ? std::string(e.what()) : last_os_message;
  }
  if (H5Fclose(file) < 0 && failure.empty()) {
    std::string reason;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_os_message, &reason);
    failure = reason.empty() ? cat("H5Fclose failed: ", last_error()) : reason;
  }
  H5Eclear2(H5E_DEFAULT);
  if (!failure.empty()) {
    output.discard();
    throw InputError(cat(path, ": cannot write ", what, ": ", failure));
  }
  output.commit();
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
  // A large dataset gets every chunk allocated at creation and no fill value, so that its rows
  // can go straight into the file from every thread (write_rows_direct()).
  const bool direct = data && rows * row_bytes >= kDirectReadBytes;
  if (direct) {
    SLUICE_H5(H5Pset_alloc_time(properties, H5D_ALLOC_TIME_EARLY));
    SLUICE_H5(H5Pset_fill_time(properties, H5D_FILL_TIME_NEVER));
  }
  Handle dataset(SLUICE_H5(
      H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, properties, H5P_DEFAULT)));
  if (rows && (cols || rank == 1)) {
    SLUICE_EXPECTS(data != nullptr, "no data for non-empty dataset ", name);
    if (direct && write_rows_direct(dataset, type, rank, dims, data)) return;
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

std::uint64_t elements_to_read(hid_t location, const std::string& name,
                               const std::vector<std::uint64_t>& dims, std::size_t element_bytes) {
  constexpr auto kMax = std::uint64_t(std::numeric_limits<std::int64_t>::max());
  std::uint64_t count = 1;
  for (const std::uint64_t d : dims) count = d != 0 && count > kMax / d ? kMax : count * d;
  const std::uint64_t bytes = count > kMax / element_bytes ? kMax : count * element_bytes;
  // Small reads cannot exhaust memory; the check reads /proc, which a plan's many arrays would
  // repeat.
  constexpr std::uint64_t kCheckedBytes = std::uint64_t(64) << 20;
  if (bytes >= kCheckedBytes) {
    std::string text = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) text += cat(i ? ", " : "", dims[i]);
    require_memory(
        {std::int64_t(bytes), "reading it",
         cat(file_name(location), ": ", object_path(location, name), " of shape ", text, "]")});
  }
  return count;
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
  if (read_rows_direct(dataset, type, rank, dims, row_begin, row_end, out)) return;
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
