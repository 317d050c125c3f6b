// The RMAT generator: determinism for a seed whatever the thread count, graph invariants
// (symmetric, sorted, no duplicates or self-loops), split sizes, and the planted structure:
// labels follow the communities, and neighbor aggregation makes classes clearly easier to tell
// apart than features alone (so GNN accuracy on synthetic graphs means something).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "formats/dataset.hpp"
#include "formats/importers.hpp"
#include "preprocess/generate.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

GenerateOptions small_options(int scale = 11) {
  GenerateOptions o;
  o.scale = scale;
  o.edge_factor = 8;
  o.features = 16;
  o.classes = 4;
  o.seed = 7;
  return o;
}

double intra_class_fraction(const Dataset& d) {
  std::int64_t same = 0;
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      same += d.labels[d.indices[e]] == d.labels[v];
  return static_cast<double>(same) / static_cast<double>(d.num_edges());
}

// Nearest-centroid accuracy on the test split, centroids from the training split, using
// either each vertex's own features or the mean over itself and its in-neighbors (one
// parameter-free GCN-style aggregation).
double centroid_accuracy(const Dataset& d, bool aggregate) {
  const std::int64_t dim = d.feature_dim;
  std::vector<float> x(d.features.size());
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    float* out = x.data() + std::int64_t(v) * dim;
    std::copy(d.feature_row(v), d.feature_row(v) + dim, out);
    if (!aggregate) continue;
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      for (std::int64_t j = 0; j < dim; ++j) out[j] += d.feature_row(d.indices[e])[j];
    const float scale = 1.0f / static_cast<float>(d.indptr[v + 1] - d.indptr[v] + 1);
    for (std::int64_t j = 0; j < dim; ++j) out[j] *= scale;
  }
  std::vector<double> centroid(std::size_t(d.num_classes) * dim, 0.0);
  std::vector<double> count(d.num_classes, 0.0);
  for (vertex_t v : d.train) {
    count[d.labels[v]] += 1;
    for (std::int64_t j = 0; j < dim; ++j)
      centroid[d.labels[v] * dim + j] += x[std::int64_t(v) * dim + j];
  }
  for (std::int32_t k = 0; k < d.num_classes; ++k)
    for (std::int64_t j = 0; j < dim; ++j) centroid[k * dim + j] /= std::max(1.0, count[k]);
  std::int64_t correct = 0;
  for (vertex_t v : d.test) {
    std::int32_t best = -1;
    double best_distance = 0;
    for (std::int32_t k = 0; k < d.num_classes; ++k) {
      double distance = 0;
      for (std::int64_t j = 0; j < dim; ++j) {
        const double diff = x[std::int64_t(v) * dim + j] - centroid[k * dim + j];
        distance += diff * diff;
      }
      if (best < 0 || distance < best_distance) best = k, best_distance = distance;
    }
    correct += best == d.labels[v];
  }
  return static_cast<double>(correct) / static_cast<double>(d.test.size());
}

TEST(Generate, DeterministicForASeedWhateverTheThreadCount) {
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one = generate_dataset(small_options());
  omp_set_num_threads(std::max(2, threads));
  const Dataset many = generate_dataset(small_options());
  omp_set_num_threads(threads);
  EXPECT_EQ(one.indptr, many.indptr);
  EXPECT_EQ(one.indices, many.indices);
  EXPECT_EQ(one.features, many.features);
  EXPECT_EQ(one.labels, many.labels);
  EXPECT_EQ(one.train, many.train);
  EXPECT_EQ(compute_fingerprint(one), compute_fingerprint(many));
  GenerateOptions other = small_options();
  other.seed = 8;
  EXPECT_NE(compute_fingerprint(generate_dataset(other)), compute_fingerprint(one));
}

TEST(Generate, GraphIsSymmetricSortedWithoutLoopsOrDuplicates) {
  const Dataset d = generate_dataset(small_options());
  validate_dataset(d, "generated");
  EXPECT_EQ(d.num_nodes, 2048);
  EXPECT_TRUE(d.symmetrized);
  EXPECT_GT(d.num_edges(), 2048 * 8);  // symmetrized, minus duplicates and loops
  EXPECT_LT(d.num_edges(), 2 * 2048 * 8);
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    const vertex_t* begin = d.indices.data() + d.indptr[v];
    const vertex_t* end = d.indices.data() + d.indptr[v + 1];
    ASSERT_TRUE(std::adjacent_find(begin, end, std::greater_equal<>()) == end) << v;
    ASSERT_FALSE(std::binary_search(begin, end, v)) << "self-loop at " << v;
    for (const vertex_t* u = begin; u < end; ++u) {
      const vertex_t* ub = d.indices.data() + d.indptr[*u];
      const vertex_t* ue = d.indices.data() + d.indptr[*u + 1];
      ASSERT_TRUE(std::binary_search(ub, ue, v)) << "edge " << *u << "->" << v << " not mirrored";
    }
  }
  // RMAT skew: the largest degree is far above the mean.
  edge_t max_degree = 0;
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    max_degree = std::max(max_degree, d.indptr[v + 1] - d.indptr[v]);
  EXPECT_GT(max_degree, 10 * d.num_edges() / d.num_nodes);
}

TEST(Generate, SplitFractionsAndLabels) {
  const Dataset d = generate_dataset(small_options());
  EXPECT_EQ(d.train.size(), 512u);
  EXPECT_EQ(d.valid.size(), 512u);
  EXPECT_EQ(d.test.size(), 1024u);
  EXPECT_EQ(d.num_classes, 4);
  EXPECT_EQ(d.feature_dim, 16);
  for (vertex_t v = 0; v < d.num_nodes; ++v) ASSERT_EQ(d.labels[v], v * 4 / 2048);
}

TEST(Generate, PlantedLabelsMakeAggregationPay) {
  GenerateOptions o = small_options(13);
  o.classes = 8;
  o.features = 32;
  const Dataset d = generate_dataset(o);
  const double homophily = intra_class_fraction(d);
  const double raw = centroid_accuracy(d, false);
  const double aggregated = centroid_accuracy(d, true);
  std::printf("planted: edge homophily %.3f, centroid accuracy raw %.3f, aggregated %.3f\n",
              homophily, raw, aggregated);
  EXPECT_GT(homophily, 0.75);
  EXPECT_GT(raw, 1.5 / 8);           // features carry signal...
  EXPECT_LT(raw, 0.75);              // ...but do not give the answer away
  EXPECT_GT(aggregated, raw + 0.1);  // neighbors help clearly
  EXPECT_GT(aggregated, 2.0 / 8);
}

TEST(Generate, RandomLabelsCarryNoStructure) {
  GenerateOptions o = small_options();
  o.labels = "random";
  const Dataset d = generate_dataset(o);
  EXPECT_LT(intra_class_fraction(d), 0.4);
  EXPECT_LT(centroid_accuracy(d, true), 0.4);
}

TEST(Generate, RawEdgesImportToTheSameGraph) {
  test::ScratchDir dir;
  const GenerateOptions o = small_options();
  write_generated_edges(o, dir.file("edges.bin"));
  ImportOptions import;
  import.format = "binary";
  import.input = dir.file("edges.bin");
  import.num_nodes = std::int64_t(1) << o.scale;
  import.graph.symmetrize = true;
  import.graph.self_loops = SelfLoops::kRemove;
  ImportReport report;
  const Dataset imported = import_dataset(import, report);
  const Dataset generated = generate_dataset(o);
  EXPECT_EQ(report.input_edges, std::int64_t(8) << 11);
  EXPECT_EQ(imported.indptr, generated.indptr);
  EXPECT_EQ(imported.indices, generated.indices);
  EXPECT_EQ(imported.duplicates_removed, generated.duplicates_removed);
  write_generated_edges(o, dir.file("edges.txt"));
  import.format = "edgelist";
  import.input = dir.file("edges.txt");
  const Dataset text = import_dataset(import, report);
  EXPECT_EQ(text.indices, generated.indices);
}

TEST(GenerateCli, SameSeedSameFileAndInfoReportsIt) {
  test::ScratchDir dir;
  const std::string base = test::bin("sluice-preprocess") +
                           " generate --quiet --scale 10 --edge-factor 4 --features 8 --classes 3 ";
  for (const char* name : {"a.h5", "b.h5"}) {
    const auto result = test::run_command(base + "--seed 5 --output " + dir.file(name));
    ASSERT_EQ(result.exit_code, 0) << result.output;
  }
  ASSERT_EQ(test::run_command(base + "--seed 6 --output " + dir.file("c.h5")).exit_code, 0);
  auto info = [&](const char* name) {
    const auto result = test::run_command(test::bin("sluice-preprocess") + " info --json " +
                                          dir.file(name) + " 2>/dev/null");
    EXPECT_EQ(result.exit_code, 0) << result.output;
    return nlohmann::json::parse(result.output);
  };
  const auto a = info("a.h5"), b = info("b.h5"), c = info("c.h5");
  EXPECT_EQ(a["fingerprint"], b["fingerprint"]);
  EXPECT_NE(a["fingerprint"], c["fingerprint"]);
  EXPECT_EQ(a["nodes"], 1024);
  EXPECT_EQ(a["feature_dim"], 8);
  EXPECT_EQ(a["classes"], 3);
  EXPECT_EQ(a["train"], 256);
  EXPECT_EQ(a["valid"], 256);
  EXPECT_EQ(a["test"], 512);
  EXPECT_EQ(a["symmetrized"], true);
  EXPECT_EQ(a["self_loops"], 0);
  EXPECT_EQ(a["options"]["scale"], 10);
}

TEST(GenerateCli, BadOptionsAreRejected) {
  test::ScratchDir dir;
  const std::string base =
      test::bin("sluice-preprocess") + " generate --quiet --output " + dir.file("g.h5") + " ";
  const auto probabilities = test::run_command(base + "--scale 8 --a 0.7 --b 0.3 --c 0.3");
  EXPECT_NE(probabilities.exit_code, 0);
  EXPECT_NE(probabilities.output.find("RMAT probabilities"), std::string::npos);
  const auto labels = test::run_command(base + "--scale 8 --labels fancy");
  EXPECT_NE(labels.exit_code, 0);
  EXPECT_NE(labels.output.find("--labels"), std::string::npos);
  const auto missing = test::run_command(test::bin("sluice-preprocess") +
                                         " generate --scale 8 --output " + dir.file("no/g.h5"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos);
  EXPECT_TRUE(test::list_dir(dir.path()).empty());
}

}  // namespace
}  // namespace sluice
