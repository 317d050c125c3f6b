// Pieces of the block-wise readers of large binary inputs (the .npy arrays of formats/npy.cpp,
// the binary pair files of formats/import_edgelist.cpp and the plain .npy edge arrays of
// formats/import_npz.cpp): a positional read of one block with all threads, the vertex id check
// of a block, and a reader that streams edges from a file's id columns to the CSR builder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "formats/csr_builder.hpp"

namespace sluice {

class InputFile;

// Reads `bytes` bytes of a plain file at `offset` in pieces (one per thread, at least 8), in
// parallel (the copy out of the page cache is a sizeable part of an import); returns the count
// read, short only at the end of the file (it stops at the first short piece: a file that
// shrank while being read).
// Rethrows the first piece's error.
std::size_t read_at_parallel(const InputFile& input, char* buffer, std::size_t bytes,
                             std::uint64_t offset);

struct IdBlockCheck {
  std::int64_t max_id = -1;     // the largest id; -1 for an empty block
  std::int64_t first_bad = -1;  // index of the first id outside [0, limit); -1 when none
};

// Visits ids id_at(0) .. id_at(count - 1) in parallel (id_at may store the id as it reads it)
// and reports the largest and the first outside [0, limit), whatever the thread count.
template <typename IdAt>
IdBlockCheck check_id_block(std::int64_t count, std::int64_t limit, IdAt&& id_at) {
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  std::int64_t block_max = -1, first_bad = kNone;
#pragma omp parallel for schedule(static) reduction(max          \
                                                    : block_max) \
    reduction(min                                                \
              : first_bad) if (worth_parallel(count))
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t id = id_at(i);
    block_max = std::max(block_max, id);
    if (id < 0 || id >= limit) first_bad = std::min(first_bad, i);
  }
  return {block_max, first_bad == kNone ? -1 : first_bad};
}

// Throws InputError "<where>negative vertex id <id>" or "<where>vertex id <id> out of range
// [0, <limit>)"; `where` names the file and the position, ending in ": ".
[[noreturn]] void throw_bad_vertex_id(const std::string& where, std::int64_t id,
                                      std::int64_t limit);

// Little-endian integer vertex ids of binary inputs. A uint64 id above the int64 range reads as
// -1 (and is reported with its own value).
enum class IdType { kInt32, kInt64, kUint32, kUint64 };
int id_bytes(IdType type);

// Where the ids of one end of every edge lie in a file: the id of edge i at byte
// offset + i * stride.
struct IdColumn {
  InputFile* file = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t stride = 0;
  IdType type = IdType::kInt32;
};

// Names the id of one end (0: source, 1: destination) of an edge in messages:
// "<file>: <position>: ".
using IdPlace = std::function<std::string(std::int64_t edge, int end)>;

// Streams the edges of a file to the CSR builder block by block (4 Mi edges), as int32 pairs,
// never holding them all. The two id columns are either interleaved (src, dst) pairs of one
// file (destination offset = source offset + id size, stride = two ids), read as one range per
// block, or two contiguous arrays (stride = one id; in one file or in two), read as two ranges
// per block and interleaved while converting. Plain files are read with parallel positional
// reads (read_at_parallel), so every pass may read them again; interleaved pairs in a gzip file
// are read front to back from a rewind. 4-byte ids that an earlier pass has checked are handed
// to the visitor without a copy.
class EdgeBlockReader {
 public:
  static constexpr std::int64_t kBlockEdges = std::int64_t(1) << 22;

  // edges: the edge count, or -1 for gzip pairs (read until the end of the file). block_edges:
  // the edges of a full block.
  EdgeBlockReader(IdColumn sources, IdColumn destinations, std::int64_t edges, IdPlace place,
                  std::int64_t block_edges = kBlockEdges);

  // Checks every id (in [0, limit), InputError naming its place otherwise), counts the edges
  // and returns the largest id (-1 for none).
  std::int64_t scan(std::int64_t limit, std::int64_t& edges);
  // Delivers the edges as int32 pair blocks. limit > 0: checks each block first (a graph of
  // known size needs no separate scan) and adds the count to *edges when given; limit 0: the
  // ids must have been checked by an earlier pass.
  void deliver(const EdgeBlockVisitor& visit, std::int64_t limit = 0,
               std::int64_t* edges = nullptr);
  // All ids as interleaved int64 pairs (for --remap; the ids checked by an earlier scan).
  std::vector<std::int64_t> load_all();

  // The edges a pass delivers; 0 when unknown before reading (gzip).
  std::int64_t expected_edges() const { return edges_ < 0 ? 0 : edges_; }

 private:
  enum class Pass { kCheck, kCheckAndConvert, kConvert };
  bool interleaved() const;
  // Calls fn(block) for each block of edges read into the raw buffers.
  template <typename Fn>
  void for_each_block(Fn&& fn);
  // Reads edges [first, first + count) of a plain file into the raw buffers.
  void read_block(std::int64_t first, std::int64_t count);
  // Reads up to block_edges_ pairs of a gzip file; returns the pairs read.
  std::int64_t read_sequential(std::int64_t first);
  // Checks the ids of the block read (edges first .. first + count - 1) against limit, raising
  // max_id to their largest, and/or converts them to int32 pairs (in narrow_, or in place for
  // interleaved 4-byte ids); returns the pairs (kCheck: nothing converted). A bad id is
  // reported at its place: the block's first in file order (for two columns, its first bad
  // source, else its first bad destination).
  const vertex_t* convert(std::int64_t first, std::int64_t count, Pass pass, std::int64_t limit,
                          std::int64_t& max_id);

  IdColumn columns_[2];
  std::int64_t edges_;
  IdPlace place_;
  std::int64_t block_edges_ = 0;
  // 8-byte storage keeps every id type aligned; in interleaved mode raw_[0] holds the pairs.
  std::vector<std::int64_t> raw_[2];
  std::vector<vertex_t> narrow_;
};

}  // namespace sluice
