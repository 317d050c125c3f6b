// Implementation of tests/fuzz/fuzz_support.hpp.
#include "tests/fuzz/fuzz_support.hpp"

#include <hdf5.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/log.hpp"
#include "preprocess/plan_builder.hpp"

namespace sluice::fuzz {

namespace fs = std::filesystem;

void init() {
  set_log_level(LogLevel::kQuiet);
  omp_set_num_threads(2);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  scratch_dir();
}

namespace {
// Removes the directory when the process exits normally.
struct ScratchDir {
  std::string path;
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};
}  // namespace

const std::string& scratch_dir() {
  static const ScratchDir dir{[] {
    const std::string base = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    std::string pattern = base + "/sluice-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
    return pattern;
  }()};
  return dir.path;
}

std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

std::string write_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  return write_file(name, std::string_view(reinterpret_cast<const char*>(data), size));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::vector<std::string_view> split_at_nul(std::string_view bytes, std::size_t parts) {
  std::vector<std::string_view> pieces;
  while (pieces.size() + 1 < parts) {
    const auto nul = bytes.find('\0');
    if (nul == std::string_view::npos) break;
    pieces.push_back(bytes.substr(0, nul));
    bytes.remove_prefix(nul + 1);
  }
  pieces.push_back(bytes);
  return pieces;
}

Dataset template_dataset() {
  Dataset d;
  d.name = "fuzz-template";
  d.source = "fuzz";
  d.options = "{}";
  d.num_nodes = 12;
  // In-edge lists (sources) of each vertex: a ring over 0..10, chords, a self loop on 4;
  // vertex 11 has no edges.
  const std::vector<std::vector<vertex_t>> in = {{1, 10, 5}, {0, 2},    {1, 3, 7}, {2, 4},
                                                 {3, 4, 5},  {4, 6, 0}, {5, 7},    {6, 8, 2},
                                                 {7, 9},     {8, 10},   {9, 0},    {}};
  d.indptr.push_back(0);
  for (auto row : in) {
    std::sort(row.begin(), row.end());
    d.indices.insert(d.indices.end(), row.begin(), row.end());
    d.indptr.push_back(static_cast<edge_t>(d.indices.size()));
  }
  d.feature_dim = 3;
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    for (int j = 0; j < 3; ++j) d.features.push_back(0.25f * float(v) - float(j));
  d.num_classes = 3;
  for (vertex_t v = 0; v < d.num_nodes; ++v) d.labels.push_back(v == 7 ? -1 : v % 3);
  d.train = {0, 1, 2, 3, 4, 5};
  d.valid = {6, 7, 8};
  d.test = {9, 10, 11};
  return d;
}

Plan template_plan(const Dataset& dataset) {
  PlanOptions options;
  options.partitions = 2;
  options.chunks = 2;
  options.partitioner = "range";
  return build_plan(dataset, options, compute_fingerprint(dataset));
}

// ---- mutate_hdf5 ----

namespace {

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  std::uint8_t byte() { return p_ == end_ ? 0 : *p_++; }
  std::uint32_t u16() { return byte() | (std::uint32_t(byte()) << 8); }
  std::string bytes(std::size_t n) {
    std::string out;
    while (n-- && p_ != end_) out.push_back(static_cast<char>(*p_++));
    return out;
  }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

struct Target {
  std::string object;     // path of the dataset or group
  std::string attribute;  // empty: the dataset itself
};

struct Collector {
  hid_t file;
  std::string object;  // the object whose attributes are being listed
  std::vector<Target> targets;
};

herr_t collect_attribute(hid_t, const char* name, const H5A_info_t*, void* data) {
  auto* collector = static_cast<Collector*>(data);
  collector->targets.push_back({collector->object, name});
  return 0;
}

herr_t visit(hid_t, const char* name, const H5O_info_t* info, void* data) {
  auto* collector = static_cast<Collector*>(data);
  if (info->type == H5O_TYPE_DATASET) collector->targets.push_back({name, ""});
  const hid_t object = H5Oopen(collector->file, name, H5P_DEFAULT);
  if (object >= 0) {
    collector->object = name;
    hsize_t index = 0;
    H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute, collector);
    H5Oclose(object);
  }
  return 0;
}

// A boundary value, as double and as int64 (the one matching the element class is written).
void boundary_value(std::uint8_t pick, std::int64_t& integer, double& real) {
  constexpr std::int64_t ints[] = {0,
                                   -1,
                                   1,
                                   2,
                                   11,
                                   12,
                                   13,
                                   std::numeric_limits<std::int32_t>::max(),
                                   std::numeric_limits<std::int32_t>::min(),
                                   std::numeric_limits<std::int64_t>::max(),
                                   std::numeric_limits<std::int64_t>::min(),
                                   std::int64_t(1) << 32,
                                   std::int64_t(1) << 62};
  constexpr double reals[] = {0.0,
                              -1.0,
                              std::numeric_limits<double>::quiet_NaN(),
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity(),
                              1e300,
                              -1e-300,
                              3.5};
  integer = ints[pick % std::size(ints)];
  real = reals[pick % std::size(reals)];
}

// Number of elements of a dataspace (0 for null spaces).
hssize_t element_count(hid_t space) {
  return H5Sget_simple_extent_npoints(space);
}

void edit_dataset_element(hid_t file, const std::string& path, ByteReader& in, bool raw) {
  const hid_t dataset = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (dataset < 0) return;
  const hid_t space = H5Dget_space(dataset);
  const hid_t type = H5Dget_type(dataset);
  const hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
  const hssize_t count = element_count(space);
  const std::uint32_t pick = in.u16();
  if (count > 0 && native >= 0) {
    const int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[2] = {1, 1};
    H5Sget_simple_extent_dims(space, dims, nullptr);
    const hsize_t element = pick % static_cast<hsize_t>(count);
    hsize_t coords[2] = {rank == 2 ? element / dims[1] : element,
                         rank == 2 ? element % dims[1] : 0};
    const hsize_t one = 1;
    const hid_t memory = H5Screate_simple(1, &one, nullptr);
    if (H5Sselect_elements(space, H5S_SELECT_SET, 1, coords) >= 0) {
      if (raw) {
        std::string value = in.bytes(H5Tget_size(native));
        value.resize(H5Tget_size(native), '\0');
        H5Dwrite(dataset, native, memory, space, H5P_DEFAULT, value.data());
      } else {
        std::int64_t integer;
        double real;
        boundary_value(in.byte(), integer, real);
        if (H5Tget_class(native) == H5T_FLOAT)
          H5Dwrite(dataset, H5T_NATIVE_DOUBLE, memory, space, H5P_DEFAULT, &real);
        else
          H5Dwrite(dataset, H5T_NATIVE_INT64, memory, space, H5P_DEFAULT, &integer);
      }
    }
    H5Sclose(memory);
  }
  if (native >= 0) H5Tclose(native);
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(dataset);
}

// Recreates a dataset with a different first dimension (data kept where it fits, the rest
// repeats the first row).
void resize_dataset(hid_t file, const std::string& path, ByteReader& in) {
  const hid_t dataset = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (dataset < 0) return;
  const hid_t space = H5Dget_space(dataset);
  const hid_t type = H5Dget_type(dataset);
  const hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
  const int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[2] = {0, 1};
  bool ok = native >= 0 && (rank == 1 || rank == 2) &&
            H5Sget_simple_extent_dims(space, dims, nullptr) >= 0;
  const hsize_t row_bytes = ok ? H5Tget_size(native) * (rank == 2 ? dims[1] : 1) : 0;
  std::vector<char> data;
  if (ok) {
    data.resize(dims[0] * row_bytes);
    ok = data.empty() || H5Dread(dataset, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0;
  }
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(dataset);
  if (!ok) {
    if (native >= 0) H5Tclose(native);
    return;
  }
  const hsize_t rows = in.u16() % (2 * dims[0] + 3);
  const std::size_t old_bytes = data.size();
  data.resize(rows * row_bytes);
  for (std::size_t i = old_bytes; i < data.size(); ++i)
    data[i] = old_bytes ? data[i % std::max<std::size_t>(row_bytes, 1) % old_bytes] : 0;
  if (H5Ldelete(file, path.c_str(), H5P_DEFAULT) >= 0) {
    dims[0] = rows;
    const hid_t new_space = H5Screate_simple(rank, dims, nullptr);
    const hid_t created =
        H5Dcreate2(file, path.c_str(), native, new_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (created >= 0) {
      if (!data.empty()) H5Dwrite(created, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
      H5Dclose(created);
    }
    H5Sclose(new_space);
  }
  H5Tclose(native);
}

void edit_attribute(hid_t file, const Target& target, ByteReader& in, bool raw) {
  const hid_t object = H5Oopen(file, target.object.c_str(), H5P_DEFAULT);
  if (object < 0) return;
  const hid_t attribute = H5Aopen(object, target.attribute.c_str(), H5P_DEFAULT);
  if (attribute < 0) {
    H5Oclose(object);
    return;
  }
  const hid_t type = H5Aget_type(attribute);
  const hid_t space = H5Aget_space(attribute);
  if (H5Tget_class(type) == H5T_STRING) {
    // A new fixed-length string of the fuzzer's bytes (length from the input).
    H5Aclose(attribute);
    const std::string value = in.bytes(in.byte() % 48);
    if (H5Adelete(object, target.attribute.c_str()) >= 0) {
      const hid_t string_type = H5Tcopy(H5T_C_S1);
      H5Tset_size(string_type, std::max<std::size_t>(1, value.size()));
      const hid_t scalar = H5Screate(H5S_SCALAR);
      const hid_t created = H5Acreate2(object, target.attribute.c_str(), string_type, scalar,
                                       H5P_DEFAULT, H5P_DEFAULT);
      if (created >= 0) {
        std::string padded = value.empty() ? std::string(1, '\0') : value;
        H5Awrite(created, string_type, padded.data());
        H5Aclose(created);
      }
      H5Sclose(scalar);
      H5Tclose(string_type);
    }
  } else if (element_count(space) == 1) {
    const hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
    if (native >= 0) {
      if (raw) {
        std::string value = in.bytes(H5Tget_size(native));
        value.resize(H5Tget_size(native), '\0');
        H5Awrite(attribute, native, value.data());
      } else {
        std::int64_t integer;
        double real;
        boundary_value(in.byte(), integer, real);
        if (H5Tget_class(native) == H5T_FLOAT)
          H5Awrite(attribute, H5T_NATIVE_DOUBLE, &real);
        else
          H5Awrite(attribute, H5T_NATIVE_INT64, &integer);
      }
      H5Tclose(native);
    }
    H5Aclose(attribute);
  } else {
    H5Aclose(attribute);
  }
  H5Sclose(space);
  H5Tclose(type);
  H5Oclose(object);
}

// Replaces a dataset by one of another rank (0, 1 or 2) holding the first bytes of the old
// data, or an attribute by a 3-element array attribute of the same type.
void change_rank(hid_t file, const Target& target, ByteReader& in) {
  const std::uint8_t pick = in.byte();
  if (!target.attribute.empty()) {
    const hid_t object = H5Oopen(file, target.object.c_str(), H5P_DEFAULT);
    if (object < 0) return;
    const hid_t attribute = H5Aopen(object, target.attribute.c_str(), H5P_DEFAULT);
    if (attribute >= 0) {
      const hid_t type = H5Aget_type(attribute);
      H5Aclose(attribute);
      const hsize_t three = 3;
      std::vector<char> bytes(3 * H5Tget_size(type), static_cast<char>(pick));
      if (H5Adelete(object, target.attribute.c_str()) >= 0) {
        const hid_t space = H5Screate_simple(1, &three, nullptr);
        const hid_t created =
            H5Acreate2(object, target.attribute.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (created >= 0) {
          H5Awrite(created, type, bytes.data());
          H5Aclose(created);
        }
        H5Sclose(space);
      }
      H5Tclose(type);
    }
    H5Oclose(object);
    return;
  }
  const hid_t dataset = H5Dopen2(file, target.object.c_str(), H5P_DEFAULT);
  if (dataset < 0) return;
  const hid_t type = H5Dget_type(dataset);
  const hid_t native = H5Tget_native_type(type, H5T_DIR_ASCEND);
  H5Tclose(type);
  H5Dclose(dataset);
  if (native < 0) return;
  const int rank = pick % 3;
  const hsize_t dims[2] = {hsize_t(1 + (pick >> 2) % 4), hsize_t(1 + (pick >> 4) % 3)};
  std::vector<char> bytes(dims[0] * dims[1] * H5Tget_size(native), 0);
  if (H5Ldelete(file, target.object.c_str(), H5P_DEFAULT) >= 0) {
    const hid_t space = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, nullptr);
    const hid_t created = H5Dcreate2(file, target.object.c_str(), native, space, H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT);
    if (created >= 0) {
      H5Dwrite(created, native, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
      H5Dclose(created);
    }
    H5Sclose(space);
  }
  H5Tclose(native);
}

}  // namespace

void mutate_hdf5(const std::string& path, const std::uint8_t* data, std::size_t size) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) std::abort();  // the template always opens
  ByteReader in(data, size);
  for (int edits = 0; edits < 8 && !in.empty(); ++edits) {
    Collector collector{file, "", {}};
    H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &collector, H5O_INFO_BASIC);
    if (collector.targets.empty()) break;
    const std::uint8_t op = in.byte();
    const Target target = collector.targets[in.byte() % collector.targets.size()];
    const bool is_attribute = !target.attribute.empty();
    switch (op % 4) {
      case 0:
      case 1:
        if (is_attribute)
          edit_attribute(file, target, in, op % 4 == 0);
        else
          edit_dataset_element(file, target.object, in, op % 4 == 0);
        break;
      case 2:
        if (!is_attribute) resize_dataset(file, target.object, in);
        break;
      case 3:
        if (op % 16 == 7) change_rank(file, target, in);
        if (op % 16 != 3) break;  // deletions and rank changes are rarer than edits
        if (is_attribute) {
          H5Adelete_by_name(file, target.object.c_str(), target.attribute.c_str(), H5P_DEFAULT);
        } else if (target.object != ".") {
          H5Ldelete(file, target.object.c_str(), H5P_DEFAULT);
        }
        break;
    }
  }
  if (H5Fclose(file) < 0) std::abort();
}

}  // namespace sluice::fuzz
