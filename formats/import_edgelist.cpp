// The edge-list (text) and binary-pair importers, the format dispatch and the options record.
#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/parallel.hpp"
#include "formats/block_read.hpp"
#include "formats/import_common.hpp"
#include "formats/importers.hpp"
#include "formats/text_input.hpp"
#include "formats/text_tables.hpp"

namespace sluice {

Dataset import_edgelist(const ImportOptions& options, ImportReport& report) {
  SLUICE_INPUT_CHECK(!(options.remap && options.num_nodes > 0),
                     "--num-nodes cannot be combined with --remap");
  Dataset d;
  d.name = options.name.empty() ? detail::base_name(options.input) : options.name;
  d.source = "edgelist:" + options.input;
  d.options = import_options_json(options);
  {
    std::vector<vertex_t> pairs;
    {
      StageTimer timer("read edges " + options.input);
      const std::int64_t limit =
          options.remap ? 0 : (options.num_nodes > 0 ? options.num_nodes : kMaxVertices);
      TextEdges edges = read_text_edges(options.input, limit);
      SLUICE_INPUT_CHECK(edges.edge_count() > 0, options.input, ": empty graph (no edges)");
      if (options.remap) {
        pairs = detail::remap_pairs(edges.wide, d.original_ids, options.input);
        d.num_nodes = static_cast<vertex_t>(d.original_ids.size());
      } else {
        d.num_nodes = options.num_nodes > 0 ? static_cast<vertex_t>(options.num_nodes)
                                            : detail::vertex_count(edges.max_id, options.input);
        pairs = std::move(edges.narrow);
      }
    }
    detail::build_graph(memory_edge_source(pairs), std::int64_t(pairs.size() / 2), options, d,
                        report);
  }
  detail::attach_vertex_data(options, d);
  return d;
}

namespace {

// Reads a binary pair file block by block, converting ids to int32 (all checked by scan()).
class BinaryPairs {
 public:
  BinaryPairs(const std::string& path, int id_bytes) : input_(path), id_bytes_(id_bytes) {
    SLUICE_INPUT_CHECK(id_bytes == 4 || id_bytes == 8, "--id-bytes must be 4 or 8, not ", id_bytes);
    input_.require_regular_file("binary pairs are read in several passes");
    // A plain file holds whole pairs; a stray text header or a wrong --id-bytes shows here.
    SLUICE_INPUT_CHECK(input_.compressed() || input_.size_on_disk() % (2 * id_bytes) == 0, path,
                       ": truncated: ends inside a pair (", input_.size_on_disk(),
                       " bytes is not a multiple of ", 2 * id_bytes,
                       "-byte (src, dst) pairs; see --id-bytes)");
  }

  // Validates every id (>= 0, < limit) and returns the largest; counts pairs.
  std::int64_t scan(std::int64_t limit, std::int64_t& pairs) {
    std::int64_t max_id = -1;
    pairs = 0;
    for_each_raw_block([&](const char* data, std::size_t count, std::int64_t first_pair) {
      max_id = std::max(max_id, check_block(data, count, first_pair, limit));
      pairs += static_cast<std::int64_t>(count);
    });
    return max_id;
  }

  // Delivers the pairs as int32 blocks; when limit > 0, checks each block first (so a graph of
  // known size needs no separate scan) and counts the pairs.
  void deliver(const EdgeBlockVisitor& visit, std::int64_t limit = 0,
               std::int64_t* pairs = nullptr) {
    std::vector<vertex_t> narrow;
    for_each_raw_block([&](const char* data, std::size_t count, std::int64_t first_pair) {
      if (limit > 0) check_block(data, count, first_pair, limit);
      if (pairs) *pairs += static_cast<std::int64_t>(count);
      if (id_bytes_ == 4) {
        visit(reinterpret_cast<const vertex_t*>(data), count);
        return;
      }
      narrow.resize(2 * count);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(2 * count)))
      for (std::int64_t i = 0; i < static_cast<std::int64_t>(2 * count); ++i)
        narrow[i] = static_cast<vertex_t>(read_id(data, i));
      visit(narrow.data(), count);
    });
  }

  // All pairs in memory as int64 (for --remap).
  std::vector<std::int64_t> load_all() {
    std::vector<std::int64_t> pairs;
    for_each_raw_block([&](const char* data, std::size_t count, std::int64_t) {
      const std::size_t old = pairs.size();
      pairs.resize(old + 2 * count);
      for (std::size_t i = 0; i < 2 * count; ++i)
        pairs[old + i] = read_id(data, static_cast<std::int64_t>(i));
    });
    return pairs;
  }

  const std::string& path() const {
    return input_.path();
  }
  std::uint64_t size_on_disk() const {
    return input_.size_on_disk();
  }
  // Pairs in a plain file (0 for gzip: unknown before reading).
  std::int64_t expected_pairs() const {
    return input_.compressed() ? 0
                               : static_cast<std::int64_t>(input_.size_on_disk() / (2 * id_bytes_));
  }

 private:
  // Throws InputError for the first id of the block outside [0, limit); returns the largest.
  std::int64_t check_block(const char* data, std::size_t count, std::int64_t first_pair,
                           std::int64_t limit) const {
    const IdBlockCheck check = check_id_block(static_cast<std::int64_t>(2 * count), limit,
                                              [&](std::int64_t i) { return read_id(data, i); });
    if (check.first_bad >= 0)
      throw_bad_vertex_id(
          cat(input_.path(), ": pair ", first_pair + check.first_bad / 2, " (byte offset ",
              (2 * first_pair + check.first_bad) * id_bytes_, "): "),
          read_id(data, check.first_bad), limit);
    return check.max_id;
  }

  std::int64_t read_id(const char* data, std::int64_t i) const {
    if (id_bytes_ == 4) {
      std::int32_t id;
      std::memcpy(&id, data + 4 * i, 4);
      return id;
    }
    std::int64_t id;
    std::memcpy(&id, data + 8 * i, 8);
    return id;
  }

  template <typename Fn>
  void for_each_raw_block(Fn&& fn) {
    input_.rewind();
    const std::size_t pair_bytes = 2 * static_cast<std::size_t>(id_bytes_);
    // Blocks of 4 Mi pairs, or the whole file when smaller (gzip: its size on disk is a guess).
    const std::size_t block_pairs = std::min<std::size_t>(
        std::size_t(1) << 22,
        input_.size_on_disk() * (input_.compressed() ? 4 : 1) / pair_bytes + 1);
    // int32 storage keeps the buffer aligned for the int32 view handed to the visitor.
    buffer_.resize(block_pairs * pair_bytes / sizeof(vertex_t));
    char* data = reinterpret_cast<char*>(buffer_.data());
    std::int64_t first_pair = 0;
    Progress progress("read " + input_.path(), input_.size_on_disk());
    std::uint64_t offset = 0;
    for (;;) {
      const std::size_t got = input_.compressed()
                                  ? input_.read_full(data, block_pairs * pair_bytes)
                                  : read_parallel(data, block_pairs * pair_bytes, offset);
      offset += got;
      SLUICE_INPUT_CHECK(got % pair_bytes == 0, input_.path(), ": truncated: ends inside a pair (",
                         first_pair * pair_bytes + got, " bytes is not a multiple of ", pair_bytes,
                         "-byte (src, dst) pairs; see --id-bytes)");
      if (got == 0) break;
      fn(data, got / pair_bytes, first_pair);
      progress.set(input_.compressed() ? input_.position_on_disk() : offset);
      first_pair += static_cast<std::int64_t>(got / pair_bytes);
      if (got < block_pairs * pair_bytes) break;
    }
  }

  // Reads a block of a plain file with all threads, split over what the file holds past
  // `offset`; returns the count read.
  std::size_t read_parallel(char* data, std::size_t bytes, std::uint64_t offset) {
    const std::uint64_t file_size = input_.size_on_disk();
    if (offset >= file_size) return 0;
    bytes = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, file_size - offset));
    return read_at_parallel(input_, data, bytes, offset);
  }

  InputFile input_;
  int id_bytes_;
  std::vector<vertex_t> buffer_;
};

}  // namespace

Dataset import_binary(const ImportOptions& options, ImportReport& report) {
  SLUICE_INPUT_CHECK(!(options.remap && options.num_nodes > 0),
                     "--num-nodes cannot be combined with --remap");
  Dataset d;
  d.name = options.name.empty() ? detail::base_name(options.input) : options.name;
  d.source = "binary:" + options.input;
  d.options = import_options_json(options);
  BinaryPairs input(options.input, options.binary_id_bytes);
  report.input_bytes = input.size_on_disk();
  if (options.remap) {
    std::vector<vertex_t> pairs;
    {
      StageTimer timer("read pairs " + options.input);
      std::int64_t count = 0;
      input.scan(std::numeric_limits<std::int64_t>::max(), count);
      SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
      const std::vector<std::int64_t> wide = input.load_all();
      pairs = detail::remap_pairs(wide, d.original_ids, options.input);
    }
    d.num_nodes = static_cast<vertex_t>(d.original_ids.size());
    detail::build_graph(memory_edge_source(pairs), std::int64_t(pairs.size() / 2), options, d,
                        report);
  } else if (options.num_nodes > 0) {
    // The vertex count is known: ids are checked while the first CSR pass reads them.
    d.num_nodes = static_cast<vertex_t>(options.num_nodes);
    std::int64_t passes = 0, count = 0;
    detail::build_graph(
        [&](const EdgeBlockVisitor& visit) {
          if (passes++ == 0)
            input.deliver(visit, options.num_nodes, &count);
          else
            input.deliver(visit);
        },
        input.expected_pairs(), options, d, report);
    SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
  } else {
    std::int64_t count = 0;
    std::int64_t max_id = -1;
    {
      StageTimer timer("scan pairs " + options.input);
      max_id = input.scan(kMaxVertices, count);
    }
    SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
    d.num_nodes = detail::vertex_count(max_id, options.input);
    detail::build_graph([&](const EdgeBlockVisitor& visit) { input.deliver(visit); }, count,
                        options, d, report);
  }
  detail::attach_vertex_data(options, d);
  return d;
}

Dataset import_dataset(const ImportOptions& options, ImportReport& report) {
  if (options.format == "ogb")
    return is_ogb_npz_layout(options.input) ? import_ogb_npz(options, report)
                                            : import_ogb(options, report);
  if (options.format == "edgelist") return import_edgelist(options, report);
  if (options.format == "binary") return import_binary(options, report);
  if (options.format == "npy") return import_npy(options, report);
  throw InputError(
      cat("--format must be ogb, edgelist, binary or npy, not '", options.format, "'"));
}

std::string import_options_json(const ImportOptions& o) {
  nlohmann::json json = {{"format", o.format},
                         {"input", o.input},
                         {"symmetrize", o.graph.symmetrize},
                         {"self_loops", to_string(o.graph.self_loops)},
                         {"deduplicate", true}};
  if (o.format == "ogb") {
    json["split"] = o.split;
  } else {
    json["remap"] = o.remap;
    if (o.num_nodes > 0) json["num_nodes"] = o.num_nodes;
    if (o.format == "binary") json["id_bytes"] = o.binary_id_bytes;
    if (!o.features_path.empty()) json["features"] = o.features_path;
    if (!o.labels_path.empty()) json["labels"] = o.labels_path;
    if (o.random_features > 0) json["random_features"] = o.random_features;
    if (o.random_labels > 0) json["random_labels"] = o.random_labels;
    json["split_fractions"] = {o.split_fractions[0], o.split_fractions[1], o.split_fractions[2]};
    json["seed"] = o.seed;
  }
  if (o.classes > 0) json["classes"] = o.classes;
  return json.dump();
}

}  // namespace sluice
