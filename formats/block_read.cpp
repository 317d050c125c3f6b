// Implementation of formats/block_read.hpp.
#include "formats/block_read.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "formats/text_input.hpp"

namespace sluice {

std::size_t read_at_parallel(const InputFile& input, char* buffer, std::size_t bytes,
                             std::uint64_t offset) {
  const int pieces = std::max(8, omp_get_max_threads());
  std::vector<std::size_t> got(pieces, 0);
  std::vector<std::exception_ptr> errors(pieces);
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(std::int64_t(bytes)))
  for (int i = 0; i < pieces; ++i) {
    const std::size_t begin = bytes * i / pieces, end = bytes * (i + 1) / pieces;
    try {
      got[i] = input.read_at(buffer + begin, end - begin, offset + begin);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  }
  rethrow_first(errors);
  std::size_t total = 0;
  for (int i = 0; i < pieces; ++i) {
    total += got[i];
    if (got[i] != bytes * (i + 1) / pieces - bytes * i / pieces) break;
  }
  return total;
}

void throw_bad_vertex_id(const std::string& where, std::int64_t id, std::int64_t limit) {
  SLUICE_INPUT_CHECK(id >= 0, where, "negative vertex id ", id);
  throw InputError(cat(where, "vertex id ", id, " out of range [0, ", limit, ")"));
}

namespace {

// Id i of a block of T ids, as int64 (a uint64 above the int64 range as -1).
template <typename T>
std::int64_t load_id(const char* data, std::int64_t i) {
  T value;
  std::memcpy(&value, data + sizeof(T) * i, sizeof(T));
  if constexpr (std::is_same_v<T, std::uint64_t>)
    return value > std::uint64_t(std::numeric_limits<std::int64_t>::max())
               ? -1
               : static_cast<std::int64_t>(value);
  else
    return static_cast<std::int64_t>(value);
}

// Calls fn(T{}) with the C++ type of `type`.
template <typename Fn>
void with_id_type(IdType type, Fn&& fn) {
  switch (type) {
    case IdType::kInt32:
      return fn(std::int32_t{});
    case IdType::kInt64:
      return fn(std::int64_t{});
    case IdType::kUint32:
      return fn(std::uint32_t{});
    case IdType::kUint64:
      break;
  }
  fn(std::uint64_t{});
}

[[noreturn]] void throw_bad_id(const std::string& where, IdType type, const char* data,
                               std::int64_t i, std::int64_t limit) {
  std::int64_t id = -1;
  with_id_type(type, [&](auto tag) { id = load_id<decltype(tag)>(data, i); });
  if (type == IdType::kUint64 && id < 0) {
    std::uint64_t value;
    std::memcpy(&value, data + 8 * i, 8);
    throw InputError(cat(where, "vertex id ", value, " out of range [0, ", limit, ")"));
  }
  throw_bad_vertex_id(where, id, limit);
}

// Checks ids id_at(0) .. id_at(ids - 1) against limit (when `check`, raising max_id to their
// largest) and stores them as int32 ids to out (when not null); returns the index of the first
// id outside [0, limit), or -1.
template <typename IdAt>
std::int64_t check_and_store(std::int64_t ids, bool check, std::int64_t limit, vertex_t* out,
                             std::int64_t& max_id, IdAt&& id_at) {
  if (check) {
    const IdBlockCheck result = out ? check_id_block(ids, limit,
                                                     [&](std::int64_t k) {
                                                       const std::int64_t id = id_at(k);
                                                       out[k] = static_cast<vertex_t>(id);
                                                       return id;
                                                     })
                                    : check_id_block(ids, limit, id_at);
    max_id = std::max(max_id, result.max_id);
    return result.first_bad;
  }
  if (!out) return -1;
#pragma omp parallel for schedule(static) if (worth_parallel(ids))
  for (std::int64_t k = 0; k < ids; ++k) out[k] = static_cast<vertex_t>(id_at(k));
  return -1;
}

std::string column_files(const IdColumn* columns) {
  const std::string& first = columns[0].file->path();
  return columns[1].file == columns[0].file ? first : first + "," + columns[1].file->path();
}

}  // namespace

int id_bytes(IdType type) {
  return type == IdType::kInt32 || type == IdType::kUint32 ? 4 : 8;
}

EdgeBlockReader::EdgeBlockReader(IdColumn sources, IdColumn destinations, std::int64_t edges,
                                 IdPlace place, std::int64_t block_edges)
    : columns_{sources, destinations}, edges_(edges), place_(std::move(place)) {
  const bool pairs = interleaved();
  for (const IdColumn& column : columns_) {
    SLUICE_EXPECTS(column.file, "an id column without a file");
    SLUICE_EXPECTS(pairs || column.stride == std::uint64_t(id_bytes(column.type)),
                   "id columns must be interleaved pairs or contiguous arrays");
  }
  const bool gzip = columns_[0].file->compressed();
  SLUICE_EXPECTS(!gzip || (pairs && edges < 0 && columns_[0].offset == 0),
                 "gzip input holds interleaved pairs from its first byte, read to its end");
  SLUICE_EXPECTS(gzip || edges >= 0, "a plain file's edge count is known before reading");
  SLUICE_EXPECTS(block_edges > 0, "blocks of ", block_edges, " edges");
  const std::uint64_t edge_bytes = id_bytes(columns_[0].type) + id_bytes(columns_[1].type);
  // Gzip: its size on disk is a guess of the edges it holds.
  block_edges_ =
      gzip ? std::min<std::int64_t>(
                 block_edges, std::int64_t(columns_[0].file->size_on_disk() * 4 / edge_bytes) + 1)
           : std::max<std::int64_t>(1, std::min(block_edges, edges));
  for (int end = 0; end < (pairs ? 1 : 2); ++end)
    raw_[end].resize(
        static_cast<std::size_t>((block_edges_ * std::int64_t(columns_[end].stride) + 7) / 8));
}

bool EdgeBlockReader::interleaved() const {
  const IdColumn &src = columns_[0], &dst = columns_[1];
  const std::uint64_t bytes = id_bytes(src.type);
  return src.file == dst.file && src.type == dst.type && src.stride == 2 * bytes &&
         dst.stride == src.stride && dst.offset == src.offset + bytes;
}

void EdgeBlockReader::read_block(std::int64_t first, std::int64_t count) {
  for (int end = 0; end < (interleaved() ? 1 : 2); ++end) {
    const IdColumn& column = columns_[end];
    const std::size_t bytes = static_cast<std::size_t>(count) * column.stride;
    const std::uint64_t offset = column.offset + std::uint64_t(first) * column.stride;
    const std::size_t got =
        read_at_parallel(*column.file, reinterpret_cast<char*>(raw_[end].data()), bytes, offset);
    SLUICE_INPUT_CHECK(got == bytes, column.file->path(), ": truncated: the data ends at byte ",
                       offset + got, ", before the ids of all ", edges_,
                       " edges (the file shrank while it was read)");
  }
}

std::int64_t EdgeBlockReader::read_sequential(std::int64_t first) {
  InputFile& file = *columns_[0].file;
  const std::size_t pair_bytes = columns_[0].stride;
  const std::size_t got =
      file.read_full(reinterpret_cast<char*>(raw_[0].data()), block_edges_ * pair_bytes);
  SLUICE_INPUT_CHECK(got % pair_bytes == 0, file.path(), ": truncated: ends inside a pair (",
                     std::uint64_t(first) * pair_bytes + got, " bytes is not a multiple of ",
                     pair_bytes, "-byte (src, dst) pairs; see --id-bytes)");
  return static_cast<std::int64_t>(got / pair_bytes);
}

template <typename Fn>
void EdgeBlockReader::for_each_block(Fn&& fn) {
  InputFile& file = *columns_[0].file;
  const std::uint64_t edge_bytes = id_bytes(columns_[0].type) + id_bytes(columns_[1].type);
  if (edges_ >= 0) {
    Progress progress("read " + column_files(columns_), std::uint64_t(edges_) * edge_bytes);
    for (std::int64_t first = 0; first < edges_;) {
      const std::int64_t count = std::min(block_edges_, edges_ - first);
      read_block(first, count);
      fn(first, count);
      first += count;
      progress.set(std::uint64_t(first) * edge_bytes);
    }
    return;
  }
  file.rewind();
  Progress progress("read " + file.path(), file.size_on_disk());
  for (std::int64_t first = 0;;) {
    const std::int64_t count = read_sequential(first);
    if (count == 0) break;
    fn(first, count);
    progress.set(file.position_on_disk());
    first += count;
    if (count < block_edges_) break;
  }
}

const vertex_t* EdgeBlockReader::convert(std::int64_t first, std::int64_t count,
                                         EdgeBlockReader::Pass pass, std::int64_t limit,
                                         std::int64_t& max_id) {
  const bool pairs = interleaved();
  const char* raw[2] = {reinterpret_cast<const char*>(raw_[0].data()),
                        reinterpret_cast<const char*>(raw_[pairs ? 0 : 1].data())};
  // Checked 4-byte pairs are valid int32 pairs as they are.
  const bool in_place = pairs && id_bytes(columns_[0].type) == 4;
  vertex_t* out = nullptr;
  if (pass != Pass::kCheck && !in_place) {
    narrow_.resize(static_cast<std::size_t>(2 * count));
    out = narrow_.data();
  }
  const bool check = pass != Pass::kConvert;
  // Id k of the block in edge order (source, destination of its first edge, ...).
  std::int64_t bad = -1;
  if (pairs) {
    with_id_type(columns_[0].type, [&](auto tag) {
      using T = decltype(tag);
      bad = check_and_store(2 * count, check, limit, out, max_id,
                            [data = raw[0]](std::int64_t k) { return load_id<T>(data, k); });
    });
  } else {
    with_id_type(columns_[0].type, [&](auto source_tag) {
      with_id_type(columns_[1].type, [&](auto destination_tag) {
        using S = decltype(source_tag);
        using D = decltype(destination_tag);
        bad = check_and_store(2 * count, check, limit, out, max_id,
                              [src = raw[0], dst = raw[1]](std::int64_t k) {
                                return k & 1 ? load_id<D>(dst, k >> 1) : load_id<S>(src, k >> 1);
                              });
      });
    });
  }
  if (bad < 0) return in_place ? reinterpret_cast<const vertex_t*>(raw[0]) : out;
  if (pairs)
    throw_bad_id(place_(first + bad / 2, int(bad % 2)), columns_[0].type, raw[0], bad, limit);
  // Two columns: the first bad id in file order, a source before any destination.
  std::int64_t bad_source = -1;
  with_id_type(columns_[0].type, [&](auto tag) {
    using T = decltype(tag);
    bad_source = check_id_block(count, limit, [src = raw[0]](std::int64_t i) {
                   return load_id<T>(src, i);
                 }).first_bad;
  });
  if (bad_source >= 0)
    throw_bad_id(place_(first + bad_source, 0), columns_[0].type, raw[0], bad_source, limit);
  throw_bad_id(place_(first + bad / 2, 1), columns_[1].type, raw[1], bad / 2, limit);
}
std::int64_t EdgeBlockReader::scan(std::int64_t limit, std::int64_t& edges) {
  std::int64_t max_id = -1;
  edges = 0;
  for_each_block([&](std::int64_t first, std::int64_t count) {
    convert(first, count, Pass::kCheck, limit, max_id);
    edges += count;
  });
  return max_id;
}

void EdgeBlockReader::deliver(const EdgeBlockVisitor& visit, std::int64_t limit,
                              std::int64_t* edges) {
  std::int64_t max_id = -1;
  for_each_block([&](std::int64_t first, std::int64_t count) {
    const vertex_t* pairs =
        convert(first, count, limit > 0 ? Pass::kCheckAndConvert : Pass::kConvert, limit, max_id);
    if (edges) *edges += count;
    visit(pairs, static_cast<std::size_t>(count));
  });
}

std::vector<std::int64_t> EdgeBlockReader::load_all() {
  std::vector<std::int64_t> pairs;
  const bool pairs_in_one = interleaved();
  for_each_block([&](std::int64_t, std::int64_t count) {
    const std::size_t old = pairs.size();
    pairs.resize(old + static_cast<std::size_t>(2 * count));
    std::int64_t* out = pairs.data() + old;
    for (int end = 0; end < (pairs_in_one ? 1 : 2); ++end) {
      const char* data = reinterpret_cast<const char*>(raw_[end].data());
      with_id_type(columns_[end].type, [&](auto tag) {
        using T = decltype(tag);
        if (pairs_in_one) {
          for (std::int64_t i = 0; i < 2 * count; ++i) out[i] = load_id<T>(data, i);
        } else {
          for (std::int64_t i = 0; i < count; ++i) out[2 * i + end] = load_id<T>(data, i);
        }
      });
    }
  });
  return pairs;
}

}  // namespace sluice
