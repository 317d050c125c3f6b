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

// The pair file's checks before reading; InputError naming the file.
void check_pair_file(const InputFile& input, int id_bytes) {
  SLUICE_INPUT_CHECK(id_bytes == 4 || id_bytes == 8, "--id-bytes must be 4 or 8, not ", id_bytes);
  input.require_regular_file("binary pairs are read in several passes");
  // A plain file holds whole pairs; a stray text header or a wrong --id-bytes shows here.
  SLUICE_INPUT_CHECK(input.compressed() || input.size_on_disk() % (2 * id_bytes) == 0, input.path(),
                     ": truncated: ends inside a pair (", input.size_on_disk(),
                     " bytes is not a multiple of ", 2 * id_bytes,
                     "-byte (src, dst) pairs; see --id-bytes)");
}

// A binary pair file as interleaved id columns; a plain file's pair count follows from its size
// (gzip: read until the end).
EdgeBlockReader pair_reader(InputFile& input, int id_bytes) {
  const IdType type = id_bytes == 4 ? IdType::kInt32 : IdType::kInt64;
  const std::uint64_t bytes = static_cast<std::uint64_t>(id_bytes);
  const std::int64_t pairs =
      input.compressed() ? -1 : static_cast<std::int64_t>(input.size_on_disk() / (2 * bytes));
  const std::string path = input.path();
  return EdgeBlockReader({&input, 0, 2 * bytes, type}, {&input, bytes, 2 * bytes, type}, pairs,
                         [path, bytes](std::int64_t pair, int end) {
                           return cat(path, ": pair ", pair, " (byte offset ",
                                      (2 * std::uint64_t(pair) + std::uint64_t(end)) * bytes,
                                      "): ");
                         });
}

}  // namespace

Dataset import_binary(const ImportOptions& options, ImportReport& report) {
  SLUICE_INPUT_CHECK(!(options.remap && options.num_nodes > 0),
                     "--num-nodes cannot be combined with --remap");
  Dataset d;
  d.name = options.name.empty() ? detail::base_name(options.input) : options.name;
  d.source = "binary:" + options.input;
  d.options = import_options_json(options);
  InputFile input(options.input);
  check_pair_file(input, options.binary_id_bytes);
  EdgeBlockReader reader = pair_reader(input, options.binary_id_bytes);
  report.input_bytes = input.size_on_disk();
  if (options.remap) {
    std::vector<vertex_t> pairs;
    {
      StageTimer timer("read pairs " + options.input);
      std::int64_t count = 0;
      reader.scan(std::numeric_limits<std::int64_t>::max(), count);
      SLUICE_INPUT_CHECK(count > 0, options.input, ": empty graph (no edges)");
      const std::vector<std::int64_t> wide = reader.load_all();
      pairs = detail::remap_pairs(wide, d.original_ids, options.input);
    }
    d.num_nodes = static_cast<vertex_t>(d.original_ids.size());
    detail::build_graph(memory_edge_source(pairs), std::int64_t(pairs.size() / 2), options, d,
                        report);
  } else {
    detail::import_edge_blocks(reader, options, d, report);
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
