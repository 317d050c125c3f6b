// Cora (public Planetoid split, ../shared/datasets/cora through the OGB importer, symmetrized)
// and the published training settings, shared by the CPU and GPU accuracy tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/dataset.hpp"
#include "formats/plan.hpp"
#include "train/config.hpp"

namespace sluice::test {

bool cora_available();                       // the raw files are where cora_dir() says
const Dataset& cora_dataset();               // imported once per process
Plan cora_plan(int partitions, int chunks);  // range for P = 1, else METIS

// Kipf & Welling's GCN (2 layers, hidden 16, dropout .5, lr .01, wd 5e-4, 200 epochs) and
// Velickovic et al.'s GAT (8 heads x 8, dropout .6, lr .005), Adam, row-normalized features,
// CPU, one thread (contention-free next to other tests under ctest -j).
TrainConfig cora_gcn_config(std::uint64_t seed);
TrainConfig cora_gat_config(std::uint64_t seed);

// Trains seeds 0-4 with config(seed); prints each test accuracy and the mean and spread
// (prefixed by `tag`) and returns the test accuracies.
std::vector<double> cora_five_seeds(const Plan& plan,
                                    const std::function<TrainConfig(std::uint64_t)>& config,
                                    const std::string& tag);

}  // namespace sluice::test
