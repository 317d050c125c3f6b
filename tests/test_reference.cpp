// The double-precision reference (tests/support/reference_model.hpp): its gradients against
// central finite differences for GCN, SAGE and GAT (dropout on: the masks are deterministic),
// the optimizer wiring, and that training reduces the loss on a separable graph.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/hash.hpp"
#include "formats/dataset.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/reference_model.hpp"

namespace sluice {
namespace {

using test::ReferenceConfig;
using test::ReferenceParameters;

// The drawn graph of tests/support/graphs.hpp (6 vertices; 1's self loop is skipped, 2 has no
// in-edges). Vertex 5 is a training vertex without a label: it is skipped but still counts in
// |train|.
Dataset tiny_graph() {
  Dataset d = test::drawn_graph();
  d.feature_dim = 3;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int i = 0; i < 18; ++i) d.features.push_back(dist(gen));
  d.num_classes = 3;
  d.labels = {0, 1, 2, 0, 1, -1};
  d.train = {0, 1, 3, 4, 5};
  d.valid = {2};
  d.test = {3, 5};
  return d;
}

// Initial parameters plus noise, so that biases are non-zero too.
ReferenceParameters perturbed_parameters(const Dataset& d, const ReferenceConfig& c) {
  ReferenceParameters p = test::init_reference_parameters(d, c);
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> dist(-0.3, 0.3);
  for (auto& t : p.tensors)
    for (double& x : t) x += dist(gen);
  return p;
}

void check_gradients(const ReferenceConfig& config, std::int64_t epoch) {
  const Dataset d = tiny_graph();
  ReferenceParameters p = perturbed_parameters(d, config);
  const test::ReferenceGradients analytic = test::reference_gradients(d, config, p, epoch);
  EXPECT_NEAR(analytic.loss, test::reference_loss(d, config, p, epoch), 1e-14);
  ASSERT_EQ(analytic.gradients.names, p.names);
  const double h = 1e-6;
  for (std::size_t k = 0; k < p.tensors.size(); ++k) {
    double diff2 = 0, norm2 = 0;
    for (std::size_t i = 0; i < p.tensors[k].size(); ++i) {
      double& w = p.tensors[k][i];
      const double saved = w;
      w = saved + h;
      const double plus = test::reference_loss(d, config, p, epoch);
      w = saved - h;
      const double minus = test::reference_loss(d, config, p, epoch);
      w = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double g = analytic.gradients.tensors[k][i];
      EXPECT_NEAR(g, numeric, 1e-6 * std::max(std::fabs(numeric), 1e-3))
          << config.model << " " << p.names[k] << "[" << i << "]";
      diff2 += (g - numeric) * (g - numeric);
      norm2 += numeric * numeric;
    }
    EXPECT_GT(norm2, 0.0) << p.names[k] << " has an all-zero gradient";
    EXPECT_LT(std::sqrt(diff2 / norm2), 1e-6) << config.model << " " << p.names[k];
  }
}

TEST(Reference, GcnGradientMatchesFiniteDifferences) {
  ReferenceConfig c;
  c.model = "gcn";
  c.layers = 2;
  c.hidden = 4;
  c.dropout = 0.3;
  c.seed = 7;
  check_gradients(c, 2);
  c.layers = 3;
  check_gradients(c, 0);
}

TEST(Reference, SageGradientMatchesFiniteDifferences) {
  ReferenceConfig c;
  c.model = "sage";
  c.layers = 2;
  c.hidden = 4;
  c.dropout = 0.3;
  c.seed = 8;
  check_gradients(c, 1);
}

TEST(Reference, GatWithTwoHeadsGradientMatchesFiniteDifferences) {
  ReferenceConfig c;
  c.model = "gat";
  c.layers = 2;
  c.hidden = 3;
  c.heads = 2;
  c.output_heads = 2;
  c.dropout = 0.2;
  c.attention_dropout = 0.3;
  c.seed = 9;
  check_gradients(c, 3);
  c.output_heads = 1;
  c.attention_dropout = -1;
  check_gradients(c, 0);
}

TEST(Reference, ParameterNamesShapesAndInitialization) {
  const Dataset d = tiny_graph();
  ReferenceConfig c;
  c.model = "gat";
  c.hidden = 4;
  c.heads = 2;
  c.output_heads = 3;
  c.seed = 21;
  const ReferenceParameters p = test::init_reference_parameters(d, c);
  const std::vector<std::string> names = {"layer0.W",       "layer0.b",      "layer0.att_src",
                                          "layer0.att_dst", "layer1.W",      "layer1.b",
                                          "layer1.att_src", "layer1.att_dst"};
  EXPECT_EQ(p.names, names);
  EXPECT_EQ(p.get("layer0.W").size(), 3u * 8u);
  EXPECT_EQ(p.get("layer0.b").size(), 8u);
  EXPECT_EQ(p.get("layer1.W").size(), 8u * 9u);  // 3 heads of 3 classes
  EXPECT_EQ(p.get("layer1.b").size(), 3u);
  EXPECT_EQ(p.get("layer1.att_dst").size(), 9u);
  // Element 5 of layer 1's W (q = 0): Glorot bound sqrt(6 / (8 + 9)).
  const double r = hash_to_unit(key_hash(21, 3, 1, 0, 5));
  EXPECT_DOUBLE_EQ(p.get("layer1.W")[5], (2 * r - 1) * std::sqrt(6.0 / 17.0));
  // att_src of layer 0 (q = 1): bound sqrt(6 / (F + 1)).
  const double ra = hash_to_unit(key_hash(21, 3, 0, 1, 7));
  EXPECT_DOUBLE_EQ(p.get("layer0.att_src")[7], (2 * ra - 1) * std::sqrt(6.0 / 5.0));
  for (double b : p.get("layer0.b")) EXPECT_EQ(b, 0.0);

  c.model = "sage";
  const ReferenceParameters s = test::init_reference_parameters(d, c);
  EXPECT_EQ(s.names, (std::vector<std::string>{"layer0.W", "layer0.b", "layer1.W", "layer1.b"}));
  EXPECT_EQ(s.get("layer0.W").size(), 6u * 4u);  // [W_self; W_neigh]
  EXPECT_EQ(s.get("layer1.W").size(), 8u * 3u);
}

TEST(Reference, DropoutDependsOnEpochAndNotOnEvaluation) {
  const Dataset d = tiny_graph();
  ReferenceConfig c;
  c.model = "gcn";
  c.hidden = 5;
  c.dropout = 0.5;
  const ReferenceParameters p = perturbed_parameters(d, c);
  const double e0 = test::reference_loss(d, c, p, 0), e1 = test::reference_loss(d, c, p, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, test::reference_loss(d, c, p, 0));
  ReferenceConfig no_dropout = c;
  no_dropout.dropout = 0;
  EXPECT_EQ(test::reference_loss(d, c, p, 0, false), test::reference_loss(d, no_dropout, p, 0));
}

TEST(Reference, OptimizerStepsFollowTheFormulas) {
  const Dataset d = tiny_graph();
  for (const std::string optimizer : {"sgd", "adam"}) {
    ReferenceConfig c;
    c.model = "sage";
    c.hidden = 4;
    c.dropout = 0.25;
    c.lr = 0.1;
    c.weight_decay = 0.01;
    c.optimizer = optimizer;
    const ReferenceParameters p0 = test::init_reference_parameters(d, c);
    const test::ReferenceGradients g = test::reference_gradients(d, c, p0, 0);
    const test::ReferenceResult r = test::train_reference(d, c, 1);
    ASSERT_EQ(r.losses.size(), 1u);
    EXPECT_DOUBLE_EQ(r.losses[0], g.loss);
    for (std::size_t k = 0; k < p0.tensors.size(); ++k)
      for (std::size_t i = 0; i < p0.tensors[k].size(); ++i) {
        const double w = p0.tensors[k][i];
        const double grad = g.gradients.tensors[k][i] + 0.01 * w;
        // Adam's first step: m_hat = g, v_hat = g^2.
        const double expected =
            optimizer == "sgd" ? w - 0.1 * grad : w - 0.1 * grad / (std::fabs(grad) + 1e-8);
        EXPECT_NEAR(r.final_parameters.tensors[k][i], expected, 1e-12) << optimizer;
      }
  }
}

// Two clusters of 12 vertices (ring plus chords inside each cluster); the class shows in noisy
// features (tests/support/graphs.hpp). Every model learns it: the loss falls by more than half,
// train accuracy is 1.
TEST(Reference, TrainingReducesTheLossOnASeparableGraph) {
  const Dataset d = test::two_clusters_dataset();
  for (const std::string model : {"gcn", "sage", "gat"}) {
    ReferenceConfig c;
    c.model = model;
    c.hidden = 8;
    c.heads = 2;
    c.optimizer = "adam";
    c.lr = 0.02;
    c.dropout = 0.1;
    c.seed = 1;
    const test::ReferenceResult r = test::train_reference(d, c, 40);
    ASSERT_EQ(r.losses.size(), 40u);
    EXPECT_LT(r.losses.back(), 0.5 * r.losses.front()) << model;
    const test::ReferenceAccuracy acc = test::evaluate_reference(d, c, r.final_parameters);
    EXPECT_EQ(acc.train, 1.0) << model;
    EXPECT_EQ(acc.test, 1.0) << model;
  }
}

}  // namespace
}  // namespace sluice
