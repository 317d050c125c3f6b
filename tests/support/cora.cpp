// Implementation of tests/support/cora.hpp.
#include "tests/support/cora.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "formats/importers.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "train/trainer.hpp"

namespace sluice::test {

bool cora_available() {
  return file_exists(cora_dir() + "/raw/edge.csv.gz");
}

const Dataset& cora_dataset() {
  static const Dataset dataset = [] {
    ImportOptions options;
    options.format = "ogb";
    options.input = cora_dir();
    options.graph.symmetrize = true;
    ImportReport report;
    return import_ogb(options, report);
  }();
  return dataset;
}

Plan cora_plan(int partitions, int chunks) {
  return make_plan(cora_dataset(), plan_options(partitions, chunks));
}

TrainConfig cora_gcn_config(std::uint64_t seed) {
  return train_config()
      .model("gcn")
      .layers(2)
      .hidden(16)
      .dropout(0.5)
      .lr(0.01)
      .weight_decay(5e-4)
      .epochs(200)
      .optimizer("adam")
      .feature_norm("row")
      .seed(seed)
      .threads(1);
}

TrainConfig cora_gat_config(std::uint64_t seed) {
  return train_config(cora_gcn_config(seed))
      .model("gat")
      .heads(8)
      .hidden(8)
      .output_heads(1)
      .dropout(0.6)
      .lr(0.005);
}

std::vector<double> cora_five_seeds(const Plan& plan,
                                    const std::function<TrainConfig(std::uint64_t)>& config,
                                    const std::string& tag) {
  std::vector<double> accuracies;
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    const TrainResult r = train(cora_dataset(), plan, config(seed));
    accuracies.push_back(r.test_accuracy);
    std::printf("[cora] %s seed %llu: test %.1f%% (valid %.1f%% at epoch %lld), %.4f s/epoch\n",
                tag.c_str(), static_cast<unsigned long long>(seed), 100 * r.test_accuracy,
                100 * r.best_valid_accuracy, static_cast<long long>(r.best_epoch),
                r.seconds_per_epoch);
  }
  const double n = double(accuracies.size());
  const double mean = std::accumulate(accuracies.begin(), accuracies.end(), 0.0) / n;
  double variance = 0;
  for (double a : accuracies) variance += (a - mean) * (a - mean);
  std::printf("[cora] %s: mean %.2f%% +- %.2f%% (sd), min %.1f%%, max %.1f%%\n", tag.c_str(),
              100 * mean, 100 * std::sqrt(variance / (n - 1)),
              100 * *std::min_element(accuracies.begin(), accuracies.end()),
              100 * *std::max_element(accuracies.begin(), accuracies.end()));
  return accuracies;
}

}  // namespace sluice::test
