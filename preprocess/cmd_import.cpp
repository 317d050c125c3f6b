// The import, generate and info subcommands of sluice-preprocess: option parsing, the stage
// report (time, throughput, peak memory) and the one-line summary on stdout.
#include <omp.h>
#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/option_checks.hpp"
#include "common/paths.hpp"
#include "formats/dataset.hpp"
#include "formats/importers.hpp"
#include "formats/synthetic.hpp"
#include "preprocess/commands.hpp"
#include "preprocess/generate.hpp"
#include "preprocess/info.hpp"

namespace po = boost::program_options;

namespace sluice {
namespace {

// Parses args[1..]; prints the help and returns false for --help.
bool parse_args(const std::vector<std::string>& args, const char* usage,
                const po::options_description& options,
                const po::positional_options_description& positional, po::variables_map& vm) {
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  po::store(po::command_line_parser(rest).options(options).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << usage << "\n" << options << std::flush;
    return false;
  }
  po::notify(vm);
  check_integer_options(vm, {{"scale", 1}, {"edge-factor", 1}, {"features", 1}});
  return true;
}

void add_common_options(po::options_description& options) {
  options.add_options()("help,h", "print this help and exit")(
      "threads", po::value<int>()->default_value(0), "OpenMP threads (0: all cores)")(
      "quiet,q", po::bool_switch(), "log nothing but errors")(
      "verbose,v", po::bool_switch(), "also log each stage's time and memory, and other details");
}

void apply_common_options(const po::variables_map& vm) {
  if (vm["threads"].as<int>() > 0) omp_set_num_threads(vm["threads"].as<int>());
  if (vm["quiet"].as<bool>()) set_log_level(LogLevel::kQuiet);
  if (vm["verbose"].as<bool>()) set_log_level(LogLevel::kDebug);
}

std::uint64_t file_size(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 ? static_cast<std::uint64_t>(info.st_size) : 0;
}

// Writes the dataset and reports throughput, peak memory and the size ratio.
void write_and_report(const std::string& output, const Dataset& d, std::int64_t input_edges,
                      double start, const char* verb) {
  write_dataset(output, d);
  const double seconds = now_seconds() - start;
  const std::uint64_t bytes = file_size(output);
  const std::uint64_t peak = peak_rss_bytes();
  log_debug(verb, " done in ", seconds, " s: ", input_edges, " input edges (",
            input_edges / std::max(seconds, 1e-9) / 1e6, " M edges/s), ", d.num_edges(),
            " stored edges (", d.num_edges() / std::max(seconds, 1e-9) / 1e6, " M edges/s)");
  log_info(verb, " stages: ", stage_summary(), " = ",
           bytes ? static_cast<double>(peak) / bytes : 0.0, " x the output file (",
           format_bytes(static_cast<double>(bytes)), ")");
  std::printf("wrote %s: %d nodes, %lld edges, %lld features, %d classes, split %zu/%zu/%zu\n",
              output.c_str(), d.num_nodes, static_cast<long long>(d.num_edges()),
              static_cast<long long>(d.feature_dim), d.num_classes, d.train.size(), d.valid.size(),
              d.test.size());
}

const char* kImportUsage =
    "usage: sluice-preprocess import --format ogb|edgelist|binary|npy --input PATH --output "
    "data.h5 "
    "[options]\n"
    "\n"
    "Imports a graph into a Sluice dataset (in-edge CSR, features, labels, splits).\n"
    "  ogb       PATH is an OGB node-property dataset directory: raw/edge.csv[.gz] (src,dst),\n"
    "            raw/node-feat, raw/node-label (nan = unlabeled), raw/num-node-list,\n"
    "            raw/num-edge-list, split/<name>/{train,valid,test}.csv[.gz]; or OGB's NumPy\n"
    "            layout (taken when raw/data.npz exists): raw/data.npz (edge_index (2, E),\n"
    "            num_nodes_list, num_edges_list, node_feat), raw/node-label.npz (node_label)\n"
    "  edgelist  PATH is a text file of \"src dst\" lines (whitespace or commas; # and %\n"
    "            comment lines; extra columns ignored; .gz accepted)\n"
    "  binary    PATH holds little-endian (src, dst) pairs of int32 (--id-bytes 4) or int64\n"
    "  npy       PATH is a .npy edge array of shape (2, E) or (E, 2), or \"SRC.npy,DST.npy\"\n"
    "            (two 1-D arrays); dtypes <i4, <i8, <u4, <u8\n"
    "Duplicate edges are always removed (and counted). Edge-list, binary and npy imports take\n"
    "features and labels from --features/--labels files or draw them (--random-*), then split\n"
    "the labeled vertices at random by --split-fractions.\n";

}  // namespace

int run_import(const std::vector<std::string>& args) {
  const double start = now_seconds();
  ImportOptions o;
  std::string output, self_loops, fractions;
  po::options_description options("import options");
  options.add_options()("format", po::value(&o.format)->required(), "ogb, edgelist, binary or npy")(
      "input", po::value(&o.input)->required(), "OGB dataset directory, or the edge file")(
      "output", po::value(&output)->required(), "dataset file to write (HDF5)")(
      "name", po::value(&o.name), "dataset name (default: from the input path)")(
      "symmetrize", po::bool_switch(&o.graph.symmetrize), "add the reverse of every edge")(
      "self-loops", po::value(&self_loops)->default_value("keep"), "add, remove or keep")(
      "split", po::value(&o.split), "ogb: split directory name (default: the only one)")(
      "remap", po::bool_switch(&o.remap),
      "compact sparse ids to 0..k-1 (ascending input id) and store the input ids")(
      "num-nodes", po::value(&o.num_nodes)->default_value(0),
      "vertex count; ids must be below it (default: largest id + 1)")(
      "id-bytes", po::value(&o.binary_id_bytes)->default_value(4), "binary: 4 or 8")(
      "features", po::value(&o.features_path),
      "text table, one row per vertex in id order (ascending input id with --remap)")(
      "labels", po::value(&o.labels_path), "one label per line (nan or -1 = unlabeled)")(
      "random-features", po::value(&o.random_features)->default_value(0),
      "draw D standard-normal features per vertex")("random-labels",
                                                    po::value(&o.random_labels)->default_value(0),
                                                    "draw labels uniformly from K classes")(
      "classes", po::value(&o.classes)->default_value(0),
      "declared number of classes; labels must be below it (default: max label + 1)")(
      "split-fractions", po::value(&fractions)->default_value("0.25,0.5,0.25"),
      "train,valid,test fractions of the labeled vertices (edgelist, binary)")(
      "seed", po::value(&o.seed)->default_value(1), "seed for random features, labels, split");
  add_common_options(options);
  po::variables_map vm;
  if (!parse_args(args, kImportUsage, options, {}, vm)) return 0;
  apply_common_options(vm);
  check_outputs_do_not_clobber(
      {{"--input", o.input}, {"--features", o.features_path}, {"--labels", o.labels_path}},
      {{"--output", output}});
  o.graph.self_loops = parse_self_loops(self_loops);
  o.split_fractions = parse_split_fractions(fractions);
  SLUICE_INPUT_CHECK(o.num_nodes >= 0 && o.num_nodes < kMaxVertices, "--num-nodes ", o.num_nodes,
                     " outside [0, ", kMaxVertices, ")");
  SLUICE_INPUT_CHECK(o.random_features >= 0 && o.random_labels >= 0 && o.classes >= 0,
                     "--random-features, --random-labels and --classes must be >= 0");
  { AtomicOutput probe(output); }  // fail now, not after the import, if the path is bad
  log_info("import ", o.format, " ", o.input, " -> ", output, " options ", import_options_json(o),
           ", ", omp_get_max_threads(), " threads");
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  write_and_report(output, d, report.input_edges, start, "import");
  return 0;
}

namespace {
const char* kGenerateUsage =
    "usage: sluice-preprocess generate --scale S --edge-factor E --features D --classes K "
    "--seed N --output data.h5 [options]\n"
    "\n"
    "Generates an RMAT graph of 2^S vertices from E * 2^S drawn edges, symmetrized, without\n"
    "duplicates or self-loops; deterministic for a seed whatever the thread count.\n"
    "Labels 'planted' (default): classes are contiguous id blocks, a fraction --homophily of\n"
    "the edges is drawn inside the source's block, and features are class prototypes plus\n"
    "Gaussian noise (--feature-noise 1 puts a vertex one noise unit from the midpoint between\n"
    "two prototypes), so a GNN beats a feature-only model. 'random': uniform labels and\n"
    "standard-normal features. Split: train 0.25, valid 0.25, test 0.5 of all vertices.\n";
}  // namespace

int run_generate(const std::vector<std::string>& args) {
  const double start = now_seconds();
  GenerateOptions o;
  std::string output, edges_output, fractions;
  po::options_description options("generate options");
  options.add_options()("scale", po::value(&o.scale)->required(), "2^S vertices")(
      "edge-factor", po::value(&o.edge_factor)->default_value(16), "E * 2^S edges drawn")(
      "features", po::value(&o.features)->default_value(64), "feature dimension D")(
      "classes", po::value(&o.classes)->default_value(8), "number of classes K")(
      "seed", po::value(&o.seed)->default_value(1), "random seed")("output", po::value(&output),
                                                                   "dataset file to write (HDF5)")(
      "a", po::value(&o.a)->default_value(0.57, "0.57"), "RMAT probability of quadrant a")(
      "b", po::value(&o.b)->default_value(0.19, "0.19"), "RMAT probability of quadrant b")(
      "c", po::value(&o.c)->default_value(0.19, "0.19"),
      "RMAT probability of quadrant c (d = 1-a-b-c)")(
      "noise", po::value(&o.noise)->default_value(0.0), "per-level noise on a, b, c, d")(
      "labels", po::value(&o.labels)->default_value("planted"), "planted or random")(
      "homophily", po::value(&o.homophily)->default_value(0.8, "0.8"),
      "planted: fraction of edges drawn inside the class block")(
      "feature-noise", po::value(&o.feature_noise)->default_value(1.0),
      "planted: feature noise relative to half the distance between class prototypes")(
      "split-fractions", po::value(&fractions)->default_value("0.25,0.25,0.5"),
      "train,valid,test fractions")("name", po::value(&o.name), "dataset name")(
      "edges-output", po::value(&edges_output),
      "also write the raw drawn edges (int32 pairs; text when the name ends in .txt/.el/.tsv)");
  add_common_options(options);
  po::variables_map vm;
  if (!parse_args(args, kGenerateUsage, options, {}, vm)) return 0;
  apply_common_options(vm);
  check_outputs_do_not_clobber({}, {{"--output", output}, {"--edges-output", edges_output}});
  o.split_fractions = parse_split_fractions(fractions);
  validate_generate_options(o);
  SLUICE_INPUT_CHECK(!output.empty() || !edges_output.empty(),
                     "give --output (and/or --edges-output)");
  if (!output.empty()) {
    AtomicOutput probe(output);
  }
  if (!edges_output.empty()) {
    { AtomicOutput probe(edges_output); }
    write_generated_edges(o, edges_output);
  }
  if (output.empty()) return 0;
  const Dataset d = generate_dataset(o);
  write_and_report(output, d, std::int64_t(o.edge_factor) << o.scale, start, "generate");
  return 0;
}

int run_info(const std::vector<std::string>& args) {
  std::string path;
  bool json = false;
  po::options_description options("info options");
  options.add_options()("file", po::value(&path)->required(), "dataset file (positional)")(
      "json", po::bool_switch(&json), "print one JSON object");
  add_common_options(options);
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  if (!parse_args(args,
                  "usage: sluice-preprocess info FILE [--json]\n\nPrints counts, degree "
                  "statistics, feature dimension, classes and split sizes of a dataset.\n",
                  options, positional, vm))
    return 0;
  apply_common_options(vm);
  if (json) set_log_level(LogLevel::kQuiet);
  const DatasetStats stats = dataset_stats(path);
  std::cout << (json ? stats_json(stats) + "\n" : stats_text(stats)) << std::flush;
  return 0;
}

}  // namespace sluice
