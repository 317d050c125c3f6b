// sluice-train --embeddings-out: every vertex's input of the last layer and its logits, from the
// best-valid model, rows in dataset order with original ids; the logits' argmax is the
// --predictions output, and both matrices equal the double-precision reference model
// (tests/support/reference_model.hpp) run on the saved parameters. CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "formats/checkpoint.hpp"
#include "formats/hdf5.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/reference_model.hpp"

namespace sluice {
namespace {

constexpr vertex_t kVertices = 80;
constexpr int kHidden = 8;
constexpr std::int64_t kFeatures = 6, kClasses = 3;

// Symmetric random graph, 3 classes, a third of the vertices in each split, original ids
// 1000 + 7 v.
Dataset small_dataset() {
  Dataset d = test::random_symmetric_graph(kVertices, 3, 11);
  d.name = "embeddings";
  d.source = "test";
  test::add_hashed_features(d, kFeatures, 11, 0.f, 1.f);
  test::add_hashed_labels(d, int(kClasses), 11);
  for (vertex_t v = 0; v < kVertices; ++v) {
    (v % 3 == 0 ? d.train : v % 3 == 1 ? d.valid : d.test).push_back(v);
    d.original_ids.push_back(1000 + 7 * std::int64_t(v));
  }
  return d;
}

test::ReferenceParameters reference_parameters(const ModelFile& model,
                                               const std::vector<std::string>& names) {
  test::ReferenceParameters parameters;
  for (const std::string& name : names) {
    const auto it = std::find_if(model.tensors.begin(), model.tensors.end(),
                                 [&](const ModelTensor& t) { return t.name == name; });
    if (it == model.tensors.end()) throw std::runtime_error("model file lacks " + name);
    parameters.names.push_back(name);
    parameters.tensors.emplace_back(it->values.begin(), it->values.end());
  }
  return parameters;
}

struct EmbeddingsCase {
  std::string model;
  std::string name;
};

class Embeddings : public ::testing::TestWithParam<EmbeddingsCase> {};

// Two layers (one hidden layer). GCN's last layer narrows (8 -> 3 columns), so its inputs reach
// host memory transformed and the hidden rows are captured on the device; SAGE's hidden rows
// are H^1 in host memory.
TEST_P(Embeddings, MatchPredictionsAndTheReferenceModel) {
  const std::string model = GetParam().model;
  test::ScratchDir dir;
  const Dataset d = small_dataset();
  write_dataset(dir.file("data.h5"), d);
  write_plan(dir.file("plan.h5"),
             test::make_plan(d, test::plan_options(2, 3).partitioner("range")));
  const auto r = test::run_command(
      test::bin("sluice-train") + " --dataset " + dir.file("data.h5") + " --plan " +
      dir.file("plan.h5") + " --threads 1 --no-progress --model " + model +
      " --layers 2 --hidden " + std::to_string(kHidden) +
      " --epochs 6 --eval-every 2 --lr 0.05 --dropout 0.3 --device cpu --embeddings-out " +
      dir.file("emb.h5") + " --predictions " + dir.file("pred.csv") + " --model-out " +
      dir.file("model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  h5::Handle file = h5::open_file(dir.file("emb.h5"));
  EXPECT_EQ(h5::read_string_attr(file, "format"), "sluice-embeddings");
  const ModelFile saved = read_model(dir.file("model.h5"));
  EXPECT_EQ(h5::read_attr<std::int64_t>(file, "epoch"), saved.epoch);
  const std::int64_t hidden_width = kHidden;
  EXPECT_EQ(h5::shape(file, "original_ids"), (std::vector<std::uint64_t>{kVertices}));
  EXPECT_EQ(h5::shape(file, "hidden"),
            (std::vector<std::uint64_t>{kVertices, std::uint64_t(hidden_width)}));
  EXPECT_EQ(h5::shape(file, "logits"),
            (std::vector<std::uint64_t>{kVertices, std::uint64_t(kClasses)}));
  const auto ids = h5::read_vector<std::int64_t>(file, "original_ids");
  const auto hidden = h5::read_vector<float>(file, "hidden");
  const auto logits = h5::read_vector<float>(file, "logits");

  // Row v is dataset vertex v, named by its original id; its argmax is the predictions' row.
  std::ifstream csv(dir.file("pred.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  for (vertex_t v = 0; v < kVertices; ++v) {
    EXPECT_EQ(ids[std::size_t(v)], d.original_ids[std::size_t(v)]) << v;
    ASSERT_TRUE(std::getline(csv, line)) << v;
    std::istringstream fields(line);
    std::int64_t id = -1, prediction = -1;
    char comma = 0;
    fields >> id >> comma >> prediction;
    EXPECT_EQ(id, ids[std::size_t(v)]) << line;
    const float* row = logits.data() + std::int64_t(v) * kClasses;
    EXPECT_EQ(std::max_element(row, row + kClasses) - row, prediction) << "vertex " << v;
  }

  // Reference: logits of the two-layer model on the saved parameters; the hidden rows are a
  // one-layer model's logits (layer 0 alone, kHidden "classes") through ReLU.
  test::ReferenceConfig two;
  two.model = model;
  two.layers = 2;
  two.hidden = kHidden;
  const auto expected_logits = test::reference_logits(
      d, two, reference_parameters(saved, {"layer0.W", "layer0.b", "layer1.W", "layer1.b"}));
  test::ReferenceConfig one = two;
  one.layers = 1;
  Dataset widened = d;
  widened.num_classes = kHidden;
  const auto layer0 =
      test::reference_logits(widened, one, reference_parameters(saved, {"layer0.W", "layer0.b"}));
  ASSERT_EQ(expected_logits.size(), logits.size());
  ASSERT_EQ(layer0.size(), hidden.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(logits[i], expected_logits[i], 1e-4 * (1 + std::abs(expected_logits[i]))) << i;
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    const double expected = std::max(0.0, layer0[i]);
    EXPECT_NEAR(hidden[i], expected, 1e-4 * (1 + std::abs(expected))) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Embeddings,
                         ::testing::Values(EmbeddingsCase{"gcn", "gcn"},
                                           EmbeddingsCase{"sage", "sage"}),
                         [](const auto& info) { return info.param.name; });

// The embeddings file takes part in the output checks: it may not name an input or another
// output, and nothing is written when it cannot be.
TEST(EmbeddingsCli, RefusedWhenItClobbersAnotherFile) {
  test::ScratchDir dir;
  const Dataset d = small_dataset();
  write_dataset(dir.file("data.h5"), d);
  write_plan(dir.file("plan.h5"),
             test::make_plan(d, test::plan_options(2, 3).partitioner("range")));
  const std::string base = test::bin("sluice-train") + " --dataset " + dir.file("data.h5") +
                           " --plan " + dir.file("plan.h5") + " --threads 1 --no-progress" +
                           " --epochs 1 --device cpu";
  auto r = test::run_command(base + " --embeddings-out " + dir.file("plan.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--embeddings-out"), std::string::npos) << r.output;
  r = test::run_command(base + " --embeddings-out " + dir.file("m.h5") + " --model-out " +
                        dir.file("m.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--embeddings-out"), std::string::npos) << r.output;
  r = test::run_command(base + " --embeddings-out " + dir.file("missing/emb.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sluice
