// The synthetic graph generator behind `sluice-preprocess generate`: RMAT edges (symmetrized,
// deduplicated, no self-loops), deterministic for a seed whatever the thread count, with
// either random labels/features or *planted* ones: classes are contiguous id blocks, a
// fraction `homophily` of the edges stays inside the source's block, and features are noisy
// class prototypes, so that a GNN's accuracy on the graph means something.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "formats/dataset.hpp"

namespace sluice {

struct GenerateOptions {
  int scale = 14;                       // 2^scale vertices
  int edge_factor = 16;                 // edge_factor * 2^scale edges drawn (before symmetrization)
  double a = 0.57, b = 0.19, c = 0.19;  // RMAT quadrant probabilities; d = 1 - a - b - c
  double noise = 0.0;                   // per-level perturbation of a, b, c, d (0 = plain RMAT)
  std::int64_t features = 64;
  std::int32_t classes = 8;
  std::uint64_t seed = 1;
  std::string labels = "planted";  // planted | random
  double homophily = 0.8;          // planted: fraction of edges drawn inside the class block
  double feature_noise = 1.0;      // planted: noise std relative to half the prototype distance
  std::array<double, 3> split_fractions{0.25, 0.25, 0.5};  // train, valid, test
  std::string name;                                        // empty: "rmat-s<scale>-e<edge_factor>"
};

// Checks ranges; throws InputError naming the option.
void validate_generate_options(const GenerateOptions& options);

// Class of vertex v under planted labels: contiguous blocks of ids.
std::int32_t planted_class(std::int64_t v, int scale, std::int32_t classes);

// Writes the raw drawn edges [begin, end) as interleaved (src, dst) pairs into `pairs`.
void generate_edges(const GenerateOptions& options, std::int64_t begin, std::int64_t end,
                    vertex_t* pairs);

// The full dataset (graph, features, labels, splits).
Dataset generate_dataset(const GenerateOptions& options);

// Writes the raw drawn edges (before symmetrization and deduplication) to `path`: text
// "src dst" lines when the name ends in .txt, .el or .tsv, else little-endian int32 pairs.
// For importer benchmarks and tests.
void write_generated_edges(const GenerateOptions& options, const std::string& path);

}  // namespace sluice
