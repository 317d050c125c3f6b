// Implementation of preprocess/generate.hpp.
#include "preprocess/generate.hpp"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/memory.hpp"
#include "common/parallel.hpp"
#include "formats/csr_builder.hpp"
#include "formats/synthetic.hpp"

namespace sluice {
namespace {

constexpr std::uint64_t kRmatTag = 0x7a3a;
constexpr std::uint64_t kMixTag = 0x3171;
constexpr std::uint64_t kNoiseTag = 0x4015e;
constexpr std::uint64_t kLevelTag = 0x1e7e1;
constexpr std::uint64_t kPrototypeTag = 0x9707;
constexpr std::uint64_t kSplitSeedTag = 0x5eed;
constexpr std::int64_t kBlockEdges = std::int64_t(1) << 22;

// Cumulative quadrant thresholds per recursion level, in units of 2^-16.
struct LevelThresholds {
  std::uint32_t a, ab, abc;
};

std::vector<LevelThresholds> level_thresholds(const GenerateOptions& o) {
  std::vector<LevelThresholds> levels(o.scale);
  for (int level = 0; level < o.scale; ++level) {
    double p[4] = {o.a, o.b, o.c, 1.0 - o.a - o.b - o.c};
    if (o.noise > 0) {
      // SKG noise: each level scales the quadrants by factors in [1 - noise, 1 + noise].
      double total = 0;
      for (int q = 0; q < 4; ++q) {
        const double u = hash_to_unit(key_hash(o.seed, kLevelTag, level, q));
        p[q] *= 1.0 - o.noise + 2.0 * o.noise * u;
        total += p[q];
      }
      for (auto& x : p) x /= total;
    }
    auto units = [](double x) { return static_cast<std::uint32_t>(std::lround(x * 65536.0)); };
    levels[level] = {units(p[0]), units(p[0] + p[1]), units(p[0] + p[1] + p[2])};
  }
  return levels;
}

// One RMAT draw of `bits` levels for edge `edge` (stream separates independent draws).
void rmat_draw(const GenerateOptions& o, const std::vector<LevelThresholds>& levels,
               std::uint64_t edge, std::uint64_t stream, int bits, std::uint64_t& src,
               std::uint64_t& dst) {
  src = dst = 0;
  // One keyed hash per draw; further 64-bit words (16 bits per level) come from mixing it.
  const std::uint64_t key = key_hash(o.seed, kRmatTag, edge, stream);
  std::uint64_t h = key;
  for (int level = 0; level < bits; ++level) {
    if (level % 4 == 0 && level > 0) h = mix64(key + static_cast<std::uint64_t>(level));
    const std::uint32_t r = static_cast<std::uint32_t>(h >> (16 * (level % 4))) & 0xffffu;
    const LevelThresholds& t = levels[level];
    // Branch-free: the quadrant choice is unpredictable by design.
    const unsigned quadrant = unsigned(r >= t.a) + unsigned(r >= t.ab) + unsigned(r >= t.abc);
    src = (src << 1) | (quadrant >> 1);
    dst = (dst << 1) | (quadrant & 1);
  }
}

std::int64_t block_begin(std::int32_t k, int scale, std::int32_t classes) {
  // The smallest v with (v * classes) >> scale == k.
  return ((std::int64_t(k) << scale) + classes - 1) / classes;
}

std::string generate_options_json(const GenerateOptions& o) {
  nlohmann::json json = {
      {"generator", "rmat"},
      {"scale", o.scale},
      {"edge_factor", o.edge_factor},
      {"a", o.a},
      {"b", o.b},
      {"c", o.c},
      {"noise", o.noise},
      {"features", o.features},
      {"classes", o.classes},
      {"seed", o.seed},
      {"labels", o.labels},
      {"split_fractions", {o.split_fractions[0], o.split_fractions[1], o.split_fractions[2]}},
      {"symmetrize", true},
      {"self_loops", "remove"},
      {"deduplicate", true}};
  if (o.labels == "planted") {
    json["homophily"] = o.homophily;
    json["feature_noise"] = o.feature_noise;
  }
  return json.dump();
}

}  // namespace

void validate_generate_options(const GenerateOptions& o) {
  SLUICE_INPUT_CHECK(o.scale >= 1 && o.scale <= 30, "--scale ", o.scale, " outside [1, 30]");
  SLUICE_INPUT_CHECK(o.edge_factor >= 1, "--edge-factor must be at least 1");
  SLUICE_INPUT_CHECK(o.a >= 0 && o.b >= 0 && o.c >= 0 && o.a + o.b + o.c <= 1.0 + 1e-12,
                     "RMAT probabilities a=", o.a, " b=", o.b, " c=", o.c,
                     " must be >= 0 with a + b + c <= 1");
  SLUICE_INPUT_CHECK(o.noise >= 0 && o.noise < 1, "--noise must be in [0, 1)");
  SLUICE_INPUT_CHECK(o.features >= 1, "--features must be at least 1");
  SLUICE_INPUT_CHECK(o.classes >= 1 && std::int64_t(o.classes) <= (std::int64_t(1) << o.scale),
                     "--classes ", o.classes, " must be in [1, 2^scale]");
  SLUICE_INPUT_CHECK(o.labels == "planted" || o.labels == "random",
                     "--labels must be planted or random, not '", o.labels, "'");
  SLUICE_INPUT_CHECK(o.homophily >= 0 && o.homophily <= 1, "--homophily must be in [0, 1]");
  SLUICE_INPUT_CHECK(o.feature_noise >= 0, "--feature-noise must be >= 0");
  SLUICE_INPUT_CHECK(static_cast<double>(o.edge_factor) * std::ldexp(1.0, o.scale) < 4e12,
                     "--edge-factor x 2^scale is too large");
}

std::int32_t planted_class(std::int64_t v, int scale, std::int32_t classes) {
  return static_cast<std::int32_t>((v * classes) >> scale);
}

void generate_edges(const GenerateOptions& o, std::int64_t begin, std::int64_t end,
                    vertex_t* pairs) {
  const auto levels = level_thresholds(o);
  const bool planted = o.labels == "planted";
#pragma omp parallel for schedule(static) if (worth_parallel(end - begin))
  for (std::int64_t i = begin; i < end; ++i) {
    std::uint64_t src = 0, dst = 0;
    rmat_draw(o, levels, i, 0, o.scale, src, dst);
    if (planted && hash_to_unit(key_hash(o.seed, kMixTag, i)) < o.homophily) {
      // Keep the source; draw the destination inside the source's class block.
      const std::int32_t k = planted_class(static_cast<std::int64_t>(src), o.scale, o.classes);
      const std::int64_t first = block_begin(k, o.scale, o.classes);
      const std::int64_t size = block_begin(k + 1, o.scale, o.classes) - first;
      int bits = 0;
      while ((std::int64_t(1) << bits) < size) ++bits;
      std::uint64_t unused = 0, inner = 0;
      rmat_draw(o, levels, i, 1, bits, unused, inner);
      dst = static_cast<std::uint64_t>(first) + inner % static_cast<std::uint64_t>(size);
    }
    pairs[2 * (i - begin)] = static_cast<vertex_t>(src);
    pairs[2 * (i - begin) + 1] = static_cast<vertex_t>(dst);
  }
}

Dataset generate_dataset(const GenerateOptions& o) {
  validate_generate_options(o);
  const vertex_t n = static_cast<vertex_t>(std::int64_t(1) << o.scale);
  const std::int64_t edges = std::int64_t(o.edge_factor) << o.scale;
  SLUICE_INPUT_CHECK(std::int64_t(1) << o.scale < kMaxVertices, "--scale ", o.scale,
                     " exceeds the 32-bit vertex limit");
  {
    // The drawn pairs and the CSR coexist, then the features are added.
    CsrBuildOptions graph;
    graph.symmetrize = true;
    const std::int64_t bytes =
        saturating_add(saturating_add(saturating_bytes({edges, 2, sizeof(vertex_t)}),
                                      csr_build_bytes(n, edges, graph)),
                       saturating_bytes({n, o.features, sizeof(float)}));
    require_memory(
        {bytes,
         cat("a graph of ", n, " vertices, ", edges, " edges and ", o.features,
             " features per vertex"),
         cat("--scale ", o.scale, " --edge-factor ", o.edge_factor, " --features ", o.features)});
  }
  Dataset d;
  d.name = o.name.empty() ? cat("rmat-s", o.scale, "-e", o.edge_factor) : o.name;
  d.source = "rmat";
  d.options = generate_options_json(o);
  d.num_nodes = n;
  {
    // The drawn edges are kept (8 bytes each, less than the CSR) rather than drawn again for
    // the CSR's second pass: drawing costs more than the CSR build itself.
    std::vector<vertex_t> pairs(2 * static_cast<std::size_t>(edges));
    {
      StageTimer timer("draw edges");
      Progress progress("draw edges", static_cast<std::uint64_t>(edges));
      for (std::int64_t begin = 0; begin < edges; begin += kBlockEdges) {
        const std::int64_t end = std::min(edges, begin + kBlockEdges);
        generate_edges(o, begin, end, pairs.data() + 2 * begin);
        progress.add(static_cast<std::uint64_t>(end - begin));
      }
    }
    CsrBuildOptions graph;
    graph.symmetrize = true;
    graph.self_loops = SelfLoops::kRemove;
    CsrBuildResult csr = build_in_csr(n, memory_edge_source(pairs), graph, edges);
    std::vector<vertex_t>().swap(pairs);
    d.indptr = std::move(csr.indptr);
    d.indices = std::move(csr.indices);
    d.symmetrized = true;
    d.self_loops = "remove";
    d.duplicates_removed = csr.duplicates_removed;
    log_info("rmat: ", n, " vertices, ", edges, " edges drawn, ", d.num_edges(),
             " directed edges after symmetrizing (", csr.duplicates_removed, " duplicates, ",
             csr.self_loops_removed, " self-loops removed)");
  }
  StageTimer timer("features and labels");
  d.num_classes = o.classes;
  d.feature_dim = o.features;
  if (o.labels == "random") {
    d.labels = random_labels(n, o.classes, o.seed);
    d.features = random_features(n, o.features, o.seed);
  } else {
    d.labels.resize(n);
    for (vertex_t v = 0; v < n; ++v) d.labels[v] = planted_class(v, o.scale, o.classes);
    std::vector<float> prototypes(static_cast<std::size_t>(o.classes) * o.features);
    for (std::int32_t k = 0; k < o.classes; ++k)
      for (std::int64_t j = 0; j < o.features; ++j)
        prototypes[k * o.features + j] = hash_to_normal(o.seed, kPrototypeTag, k, j);
    // Prototypes are N(0, 1) per entry, so two of them lie about sqrt(2 D) apart; noise of
    // std feature_noise * sqrt(D / 2) puts a vertex one noise unit from the midpoint.
    const float sigma =
        static_cast<float>(o.feature_noise * std::sqrt(static_cast<double>(o.features) / 2.0));
    d.features.resize(static_cast<std::size_t>(n) * o.features);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(n) * o.features))
    for (vertex_t v = 0; v < n; ++v) {
      const float* prototype = prototypes.data() + std::int64_t(d.labels[v]) * o.features;
      float* row = d.features.data() + std::int64_t(v) * o.features;
      fill_normals(o.seed, kNoiseTag, static_cast<std::uint64_t>(v), row, o.features);
      for (std::int64_t j = 0; j < o.features; ++j) row[j] = prototype[j] + sigma * row[j];
    }
  }
  Split split = random_split(d.labels, o.split_fractions, key_hash(o.seed, kSplitSeedTag));
  d.train = std::move(split.train);
  d.valid = std::move(split.valid);
  d.test = std::move(split.test);
  return d;
}

void write_generated_edges(const GenerateOptions& o, const std::string& path) {
  validate_generate_options(o);
  StageTimer timer("write raw edges " + path);
  const bool text = [&] {
    for (const std::string suffix : {".txt", ".el", ".tsv"})
      if (path.size() > suffix.size() &&
          path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    return false;
  }();
  AtomicOutput output(path, "raw edges");
  CheckedFile file(output.temporary_path(), path, "raw edges", CheckedFile::Mode::kTruncate);
  const std::int64_t edges = std::int64_t(o.edge_factor) << o.scale;
  std::vector<vertex_t> buffer;
  for (std::int64_t begin = 0; begin < edges; begin += kBlockEdges) {
    const std::int64_t end = std::min(edges, begin + kBlockEdges);
    const std::int64_t count = end - begin;
    buffer.resize(2 * static_cast<std::size_t>(count));
    generate_edges(o, begin, end, buffer.data());
    if (!text) {
      file.write(buffer.data(), sizeof(vertex_t) * buffer.size());
      continue;
    }
    const int threads = worth_parallel(count) ? omp_get_max_threads() : 1;
    std::vector<std::string> lines(threads);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int t = omp_get_thread_num();
      const std::int64_t first = count * t / threads, last = count * (t + 1) / threads;
      std::string& out = lines[t];
      out.reserve(static_cast<std::size_t>(last - first) * 16);
      char number[16];
      for (std::int64_t i = first; i < last; ++i) {
        auto r = std::to_chars(number, number + sizeof number, buffer[2 * i]);
        out.append(number, r.ptr);
        out.push_back(' ');
        r = std::to_chars(number, number + sizeof number, buffer[2 * i + 1]);
        out.append(number, r.ptr);
        out.push_back('\n');
      }
    }
    for (const auto& chunk : lines) file.write(chunk.data(), chunk.size());
  }
  file.close();
  output.commit();
  log_info("wrote ", edges, " raw edges to ", path);
}

}  // namespace sluice
