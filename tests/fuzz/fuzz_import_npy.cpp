// libFuzzer target: the NumPy importers (import_npy, import_ogb_npz) and the .npy header parser
// under them. Input: a flags byte, then the bytes of one .npy file, which the target places by
// flags & 3:
//   0  edges.npy, imported with --format npy (--num-nodes 64)
//   1  edges.npy.gz (gzip), the same
//   2  raw/data.npz:edge_index of an OGB NumPy layout (64 vertices; num_edges_list declares
//      the array's edge count when its header parses as (2, E))
//   3  raw/data.npz:node_feat of that layout, beside a valid edge_index
// flags & 4 deflates the .npz entries (else stored); flags & 8 also writes the bytes as
// raw/node-label.npz:node_label. Inputs whose header declares more than 64 MiB of data are
// skipped where the importer cannot know the data's length first (gzip): it sizes its arrays by
// the header after checking them against the host's available memory, which is the product's
// rule, not a finding. Post-condition: an imported dataset passes validate_dataset.
#include <zip.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "formats/importers.hpp"
#include "formats/npy.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace sluice;

namespace {

constexpr std::int64_t kVertices = 64;
constexpr std::int64_t kMaxDeclaredBytes = std::int64_t(64) << 20;

// The fuzz bytes as a stream of unknown length, for reading the header the way the importer
// reads a gzip stream.
class BytesStream : public ByteStream {
 public:
  explicit BytesStream(std::string_view bytes) : bytes_(bytes) {}
  std::size_t read(char* buffer, std::size_t bytes) override {
    const std::size_t n = std::min(bytes, bytes_.size() - at_);
    std::memcpy(buffer, bytes_.data() + at_, n);
    at_ += n;
    return n;
  }

 private:
  std::string_view bytes_;
  std::size_t at_ = 0;
};

// The header's shape, or nothing when it does not parse.
std::unique_ptr<NpyArray> header_of(std::string_view bytes) {
  std::unique_ptr<NpyArray> array;
  fuzz::run_expecting_errors(
      [&] { array = std::make_unique<NpyArray>(std::make_unique<BytesStream>(bytes), "input"); });
  return array;
}

void write_gzip(const std::string& path, std::string_view bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (!file) std::abort();
  if (!bytes.empty() && gzwrite(file, bytes.data(), unsigned(bytes.size())) != int(bytes.size()))
    std::abort();
  gzclose(file);
}

std::string npy(const std::string& descr, const std::string& shape, const void* data,
                std::size_t bytes) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += {char(1), char(0), char(header.size() & 0xff), char(header.size() >> 8)};
  return file + header + std::string(static_cast<const char*>(data), bytes);
}
std::string count_npy(std::int64_t count) {
  return npy("<i8", "(1,)", &count, sizeof(count));
}

// A zip archive at `path` holding `entries` (name, bytes), stored or deflated.
void write_zip(const std::string& path,
               const std::vector<std::pair<std::string, std::string>>& entries, bool deflate) {
  int code = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (!archive) std::abort();
  for (const auto& [name, bytes] : entries) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    if (!source) std::abort();
    const zip_int64_t index = zip_file_add(archive, name.c_str(), source, ZIP_FL_OVERWRITE);
    if (index < 0) std::abort();
    zip_set_file_compression(archive, zip_uint64_t(index), deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                             0);
  }
  if (zip_close(archive) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  const int mode = flags & 3;
  const std::unique_ptr<NpyArray> header = header_of(bytes);
  if (mode == 1 && header && header->elements() * header->item_bytes() > kMaxDeclaredBytes)
    return 0;

  ImportReport report;
  if (mode <= 1) {
    ImportOptions options;
    options.format = "npy";
    options.num_nodes = kVertices;
    if (mode == 0) {
      options.input = fuzz::write_file("edges.npy", bytes);
    } else {
      options.input = fuzz::scratch_dir() + "/edges.npy.gz";
      write_gzip(options.input, bytes);
    }
    fuzz::run_expecting_errors([&] {
      const Dataset dataset = import_npy(options, report);
      validate_dataset(dataset, options.input);
    });
    return 0;
  }

  const std::string dir = fuzz::scratch_dir() + "/ogb";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/raw");
  for (const char* split : {"train", "valid", "test"})
    fuzz::write_file(std::string("ogb/split/time/") + split + ".csv", "0\n");
  const bool deflate = flags & 4;
  std::vector<std::pair<std::string, std::string>> entries = {
      {"num_nodes_list.npy", count_npy(kVertices)}};
  if (mode == 2) {
    const bool edge_shape = header && header->shape().size() == 2 && header->shape()[0] == 2;
    entries.push_back({"num_edges_list.npy", count_npy(edge_shape ? header->shape()[1] : 1)});
    entries.push_back({"edge_index.npy", bytes});
  } else {
    const std::int64_t ring[] = {0, 1, 2, 3, 1, 2, 3, 0};
    entries.push_back({"num_edges_list.npy", count_npy(4)});
    entries.push_back({"edge_index.npy", npy("<i8", "(2, 4)", ring, sizeof(ring))});
    entries.push_back({"node_feat.npy", bytes});
  }
  write_zip(dir + "/raw/data.npz", entries, deflate);
  if (flags & 8) write_zip(dir + "/raw/node-label.npz", {{"node_label.npy", bytes}}, deflate);
  ImportOptions options;
  options.format = "ogb";
  options.input = dir;
  fuzz::run_expecting_errors([&] {
    const Dataset dataset = import_ogb_npz(options, report);
    validate_dataset(dataset, dir);
  });
  return 0;
}
