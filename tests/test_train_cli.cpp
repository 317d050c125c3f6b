// sluice-train as a program: a good run writes the report, metrics and predictions; every
// inconsistent combination of options or files fails with a non-zero exit and a message that
// names the option or file at fault; --resume reproduces an uninterrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "formats/checkpoint.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/layout/memory_estimate.hpp"
#include "train/trainer.hpp"

namespace sluice {
namespace {

// n vertices, symmetric; features in [0, 1), 3 classes, a third of the vertices in each split;
// original ids 1000 + 7 v.
Dataset small_dataset(vertex_t n, std::uint64_t seed, std::int64_t feature_dim = 6) {
  Dataset d = test::random_symmetric_graph(n, 3, seed);
  d.name = cat("cli", n);
  d.source = "test";
  test::add_hashed_features(d, feature_dim, seed, 0.f, 1.f);
  test::add_hashed_labels(d, 3, seed);
  for (vertex_t v = 0; v < n; ++v) {
    (v % 3 == 0 ? d.train : v % 3 == 1 ? d.valid : d.test).push_back(v);
    d.original_ids.push_back(1000 + 7 * std::int64_t(v));
  }
  return d;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir();
    const Dataset d = small_dataset(80, 5);
    write_dataset(dir_->file("data.h5"), d);
    const PlanOptions options = test::plan_options(2, 3).partitioner("range");
    write_plan(dir_->file("plan.h5"), test::make_plan(d, options));
    const Dataset other = small_dataset(80, 6);
    write_dataset(dir_->file("other.h5"), other);
    write_plan(dir_->file("other-plan.h5"), test::make_plan(other, options));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string base() {
    return test::bin("sluice-train") + " --dataset " + dir_->file("data.h5") + " --plan " +
           dir_->file("plan.h5") + " --threads 1 --no-progress";
  }
  // Runs with extra arguments; expects failure and a message containing every needle.
  static void expect_error(const std::string& args, const std::vector<std::string>& needles,
                           bool with_base = true) {
    const auto r = test::run_command((with_base ? base() : test::bin("sluice-train")) + " " + args);
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    for (const auto& needle : needles)
      EXPECT_NE(r.output.find(needle), std::string::npos)
          << "'" << args << "' should mention '" << needle << "', got:\n"
          << r.output;
  }
  static test::ScratchDir* dir_;
};
test::ScratchDir* TrainCli::dir_ = nullptr;

// Defaults in --help and the logged configuration: the shortest text that reads back exactly.
TEST(Numbers, ShortestTextThatReadsBack) {
  EXPECT_EQ(format_number(5e-4), "0.0005");
  EXPECT_EQ(format_number(0.01), "0.01");
  EXPECT_EQ(format_number(-1), "-1");
  EXPECT_EQ(format_number(1e-50), "1e-50");
  EXPECT_EQ(format_number(0.1 + 0.2), "0.30000000000000004");
}

TEST_F(TrainCli, HelpShowsDefaultsWithoutFloatNoise) {
  const auto r = test::run_command(test::bin("sluice-train") + " --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--weight-decay arg (=0.0005)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("00000000"), std::string::npos) << r.output;
  // Every sluice-preprocess command's help too.
  for (const std::string command : {"import", "generate", "info", "partition", "stats", "verify"}) {
    const auto help = test::run_command(test::bin("sluice-preprocess") + " " + command + " --help");
    EXPECT_EQ(help.exit_code, 0) << command << "\n" << help.output;
    EXPECT_EQ(help.output.find("00000000"), std::string::npos) << command << "\n" << help.output;
    EXPECT_EQ(help.output.find("99999999"), std::string::npos) << command << "\n" << help.output;
  }
  const auto generate = test::run_command(test::bin("sluice-preprocess") + " generate --help");
  EXPECT_NE(generate.output.find("--homophily arg (=0.8)"), std::string::npos) << generate.output;
}

// The --gpu-memory byte counts of sluice-train and sluice-preprocess partition.
TEST(ByteCounts, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_bytes("1000000", "--x"), 1000000);
  EXPECT_EQ(parse_bytes("1e9", "--x"), 1000000000);
  EXPECT_EQ(parse_bytes("64M", "--x"), 64LL << 20);
  EXPECT_EQ(parse_bytes("1.5GiB", "--x"), 3LL << 29);
  EXPECT_EQ(parse_bytes("2tb", "--x"), 2LL << 40);
  EXPECT_EQ(parse_bytes("0", "--x"), 0);
  for (const char* bad : {"", "G", "12X", "-5", "inf"}) {
    try {
      parse_bytes(bad, "--gpu-memory");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-memory"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TrainCli, HelpListsEveryOption) {
  const auto r = test::run_command(test::bin("sluice-train") + " --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* option : {"--dataset",
                             "--plan",
                             "--model",
                             "--layers",
                             "--hidden",
                             "--heads",
                             "--output-heads",
                             "--epochs",
                             "--lr",
                             "--weight-decay",
                             "--dropout",
                             "--attention-dropout",
                             "--seed",
                             "--optimizer",
                             "--device",
                             "--threads",
                             "--gpus",
                             "--gpu-memory",
                             "--tf32",
                             "--metrics",
                             "--report",
                             "--predictions",
                             "--model-out",
                             "--embeddings-out",
                             "--checkpoint",
                             "--checkpoint-every",
                             "--resume",
                             "--comm",
                             "--intermediates",
                             "--eval-every",
                             "--feature-norm",
                             "--phase-timing",
                             "--no-overlap",
                             "--trace",
                             "--input-rows",
                             "--host-precision",
                             "--vertex-data",
                             "--evaluation-cache",
                             "--evaluation-outputs",
                             "--evaluation-csrs",
                             "--layer-outputs",
                             "--remote-features",
                             "--last-layer-rows",
                             "--gat-layer-zero",
                             "--layer-zero-order",
                             "--peer-access",
                             "--op-times",
                             "--list-devices",
                             "--no-progress",
                             "--quiet",
                             "--verbose",
                             "--help"})
    EXPECT_NE(r.output.find(option), std::string::npos) << option;
}

TEST_F(TrainCli, GoodRunWritesReportMetricsAndPredictions) {
  const std::string report = dir_->file("report.json"), metrics = dir_->file("metrics.jsonl"),
                    predictions = dir_->file("pred.csv");
  const auto r = test::run_command(base() + " --model sage --epochs 4 --eval-every 2 --report " +
                                   report + " --metrics " + metrics + " --predictions " +
                                   predictions + " --model-out " + dir_->file("model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_text(report));
  for (const char* key : {"test_accuracy", "valid_accuracy", "best_epoch", "final_loss", "epochs",
                          "seconds_per_epoch", "median_seconds_per_epoch"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["epochs"], 4);
  EXPECT_GT(j["median_seconds_per_epoch"].get<double>(), 0);
  // Default logs are short: the per-stage lines and the configuration are -v's.
  EXPECT_EQ(r.output.find("configuration:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stage read"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch time median"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stages: read plan"), std::string::npos) << r.output;
  std::ifstream lines(metrics);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const auto m = nlohmann::json::parse(line);
    EXPECT_EQ(m["epoch"], count);
    for (const char* key : {"loss", "seconds", "phases", "transfers", "peak_host_bytes"})
      EXPECT_TRUE(m.contains(key)) << key;
    EXPECT_EQ(m["valid_accuracy"].is_null(), count % 2 == 0);
    // An evaluation's own transfers: it loads features, and training's stores are not its.
    EXPECT_EQ(m["eval_transfers"].is_null(), count % 2 == 0);
    if (count % 2 == 1) {
      EXPECT_GT(m["eval_transfers"]["h2d_gather_bytes"].get<std::int64_t>(), 0);
      EXPECT_LT(m["eval_transfers"]["d2h_bytes"].get<std::int64_t>(),
                m["transfers"]["d2h_bytes"].get<std::int64_t>());
    }
    ++count;
  }
  EXPECT_EQ(count, 4);
  const std::string csv = read_text(predictions);
  EXPECT_EQ(csv.rfind("original_id,prediction,label\n1000,", 0), 0u) << csv.substr(0, 80);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 81);
  // The model file holds the best-valid parameters with their shapes.
  const ModelFile saved = read_model(dir_->file("model.h5"));
  EXPECT_EQ(saved.epoch, j["best_epoch"].get<std::int64_t>());
  ASSERT_EQ(saved.tensors.size(), 4u);
  for (const auto& t : saved.tensors) {
    EXPECT_EQ(std::int64_t(t.values.size()), t.rows * t.cols) << t.name;
    if (t.name == "layer0.W") {
      EXPECT_EQ(t.rows, 12);  // SAGE: [W_self; W_neigh] over 6 features
      EXPECT_EQ(t.cols, 16);
    }
  }
}

// --trace: every device's phases of every batch of every pass, on the run's clock (inside the
// host track's epoch ranges), in a file Perfetto reads (Chrome trace JSON).
TEST_F(TrainCli, TraceHoldsEveryBatchOfEveryPass) {
  const std::string trace = dir_->file("trace.json");
  const auto r =
      test::run_command(base() + " --model gcn --epochs 2 --eval-every 2 --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(read_text(trace));
  // "pid category" -> compute ranges and their batches (a batch of a layer that transforms first
  // has several: its arrivals' transforms, the chunk, the leaving rows' weight gradients).
  std::map<std::string, int> compute;
  std::map<std::string, std::set<int>> computed_batches;
  std::map<std::string, int> phases;  // phase name -> ranges
  std::vector<std::pair<double, double>> host;
  std::vector<std::pair<double, double>> device, issues;
  std::map<std::string, std::set<int>> issued;  // pass -> batches the host issued
  std::set<std::string> processes;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const double ts = e["ts"], dur = e["dur"];
    EXPECT_GE(dur, 0.0);
    if (e["cat"] == "host") {
      host.emplace_back(ts, ts + dur);
      continue;
    }
    const std::string category = e["cat"];
    if (category.rfind("issue ", 0) == 0) {  // the host's issue of a batch
      EXPECT_EQ(e["pid"], 2);                // the host process
      EXPECT_EQ(e["tid"], 1);
      EXPECT_EQ(e["name"], "issue " + std::to_string(e["args"]["batch"].get<int>()));
      issued[category.substr(6)].insert(e["args"]["batch"].get<int>());
      issues.emplace_back(ts, ts + dur);
      continue;
    }
    const std::string name = e["name"];
    const std::string phase = name.substr(0, name.find(' '));
    ++phases[phase];
    EXPECT_EQ(name, phase + " " + std::to_string(e["args"]["batch"].get<int>()));
    if (phase == "compute") {
      const std::string key =
          std::to_string(e["pid"].get<int>()) + " " + e["cat"].get<std::string>();
      ++compute[key];
      computed_batches[key].insert(e["args"]["batch"].get<int>());
    }
    device.emplace_back(ts, ts + dur);
  }
  EXPECT_EQ(processes, (std::set<std::string>{"device 0", "device 1", "host"}));
  // 2 partitions x 3 chunks, 2 layers: each pass computes batches 0..2 on every device; 2
  // training epochs (the last layer's forward and backward fused into one pass), 1 evaluation.
  // GCN's last layer (16 -> 3) transforms first: more than one compute range per batch.
  for (int p = 0; p < 2; ++p) {
    for (const char* pass : {"forward 0", "fused 1", "backward 0", "evaluate 0", "evaluate 1"}) {
      const std::string key = std::to_string(p) + " " + pass;
      EXPECT_EQ(computed_batches[key], (std::set<int>{0, 1, 2})) << key;
      const bool training = key.find("evaluate") == std::string::npos;
      EXPECT_GE(compute[key], training ? 6 : 3) << key;
    }
    EXPECT_EQ(compute["0 forward 0"], 6);  // the first layer aggregates first: one range
    for (const char* pass : {"forward 1", "backward 1"})
      EXPECT_EQ(compute.count(std::to_string(p) + " " + pass), 0u) << p << " " << pass;
  }
  EXPECT_GT(phases["load"], 0);
  EXPECT_GT(phases["p2p"], 0);
  EXPECT_GT(phases["flush"], 0);
  ASSERT_EQ(host.size(), 3u);  // 2 training steps, 1 evaluation
  for (const char* pass : {"forward 0", "fused 1", "backward 0", "evaluate 0", "evaluate 1"})
    EXPECT_EQ(issued[pass], (std::set<int>{0, 1, 2})) << pass;
  EXPECT_EQ(issues.size(), 2u * 3 * 3 + 2 * 3);
  // Whether [begin, end] lies in one of the host's ranges, `slack` microseconds wider.
  const auto in_a_host_range = [&](double begin, double end, double slack) {
    return std::any_of(host.begin(), host.end(), [&](const std::pair<double, double>& range) {
      return begin >= range.first - slack && end <= range.second + slack;
    });
  };
  for (const auto& [begin, end] : issues)
    EXPECT_TRUE(in_a_host_range(begin, end, 0.0)) << "issue " << begin << " .. " << end;
  // Device ranges, with the microsecond of slack they always had.
  for (const auto& [begin, end] : device)
    EXPECT_TRUE(in_a_host_range(begin, end, 1.0)) << begin << " .. " << end;
}

// scripts/bench/trace_summary.py reads a training step's passes in order from the trace, on the
// 2 x 3 plan and on a one-chunk plan, whose last pass loads the next step's first blocks (ranges
// named after the first pass) after every other pass has computed.
TEST_F(TrainCli, TraceSummaryFindsEveryPassOfAStep) {
  const std::string one_chunk = dir_->file("plan-1x1.h5");
  write_plan(one_chunk, test::make_plan(small_dataset(80, 5), test::plan_options(1, 1)));
  for (const std::string& plan : {dir_->file("plan.h5"), one_chunk}) {
    SCOPED_TRACE(plan);
    const std::string trace = dir_->file("summary-trace.json");
    auto r = test::run_command(
        test::bin("sluice-train") + " --dataset " + dir_->file("data.h5") + " --plan " + plan +
        " --threads 1 --no-progress --model gcn --epochs 3 --trace " + trace);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = test::run_command(std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR +
                          "/scripts/bench/trace_summary.py --json " + trace);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto summary = nlohmann::json::parse(r.output)[trace];
    EXPECT_EQ(summary["step"], "epoch 2 training step");
    std::vector<std::string> passes;
    for (const auto& pass : summary["passes"]) {
      passes.push_back(pass["pass"]);
      for (const auto& device : pass["devices"]) {
        // Every batch has its issue on the host track, so each gets a host lead.
        const auto batches = device["batches"].size();
        ASSERT_GT(batches, 0u);
        for (const auto& batch : device["batches"]) EXPECT_TRUE(batch["host_lead_ms"].is_number());
        EXPECT_TRUE(device["median_host_lead_ms"].is_number());
        EXPECT_LE(device["host_bound_batches"].get<std::size_t>(), batches);
        const double span = device["span_ms"];
        for (const char* lane : {"transfer_lane_busy_ms", "store_lane_busy_ms"}) {
          EXPECT_GE(device[lane].get<double>(), 0.0) << lane;
          EXPECT_LE(device[lane].get<double>(), span + 1e-3) << lane;
        }
      }
    }
    EXPECT_EQ(passes, (std::vector<std::string>{"forward 0", "fused 1", "backward 0"}));
    EXPECT_GE(summary["next_step_loads_ms"].get<double>(), 0.0);
    // --evaluation: the last epoch's evaluation, its passes the forward passes of each layer.
    r = test::run_command(std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR +
                          "/scripts/bench/trace_summary.py --evaluation --json " + trace);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto evaluation = nlohmann::json::parse(r.output)[trace];
    EXPECT_EQ(evaluation["step"], "epoch 2 evaluation");
    passes.clear();
    for (const auto& pass : evaluation["passes"]) passes.push_back(pass["pass"]);
    EXPECT_EQ(passes, (std::vector<std::string>{"evaluate 0", "evaluate 1"}));
  }
}

// trace_summary.py --op-totals sums a step's operation ranges (CUDA's --op-times) per pass,
// operation and device, largest first, and leaves ranges of other steps and the parts inside
// an operation ("gat_forward.scores") out of the device totals.
TEST_F(TrainCli, TraceSummarySumsOperationsPerDevice) {
  const std::string trace = dir_->file("operations-trace.json");
  {
    std::ofstream out(trace);
    out << R"({"traceEvents": [
      {"ph": "X", "cat": "host", "name": "epoch 0 training step", "pid": 2, "tid": 0, "ts": 0, "dur": 1000},
      {"ph": "X", "cat": "op forward 0", "name": "spmm", "pid": 0, "tid": 0, "ts": 10, "dur": 300},
      {"ph": "X", "cat": "op forward 0", "name": "spmm", "pid": 1, "tid": 0, "ts": 12, "dur": 320},
      {"ph": "X", "cat": "op forward 0", "name": "gemm A B", "pid": 0, "tid": 0, "ts": 400, "dur": 100},
      {"ph": "X", "cat": "op forward 0", "name": "gemm A B", "pid": 0, "tid": 0, "ts": 520, "dur": 50},
      {"ph": "X", "cat": "op fused 1", "name": "gat_forward", "pid": 1, "tid": 0, "ts": 600, "dur": 200},
      {"ph": "X", "cat": "op fused 1", "name": "gat_forward.scores", "pid": 1, "tid": 0, "ts": 600, "dur": 80},
      {"ph": "X", "cat": "op fused 1", "name": "pull_rows", "pid": 1, "tid": 1, "ts": 600, "dur": 40},
      {"ph": "X", "cat": "host", "name": "epoch 1 training step", "pid": 2, "tid": 0, "ts": 1500, "dur": 1000},
      {"ph": "X", "cat": "op forward 0", "name": "spmm", "pid": 0, "tid": 0, "ts": 2000, "dur": 300}
    ]})";
  }
  const auto r =
      test::run_command(std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR +
                        "/scripts/bench/trace_summary.py --epoch 0 --op-totals --json " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto totals = nlohmann::json::parse(r.output)[trace];
  EXPECT_EQ(totals["step"], "epoch 0 training step");
  EXPECT_EQ(totals["devices"], (std::vector<std::string>{"0", "1"}));
  const auto& rows = totals["operations"];
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0]["operation"], "spmm");  // 0.62 ms over both devices
  EXPECT_DOUBLE_EQ(rows[0]["devices"]["0"]["ms"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(rows[0]["devices"]["1"]["ms"].get<double>(), 0.32);
  EXPECT_EQ(rows[1]["operation"], "gat_forward");
  EXPECT_EQ(rows[2]["operation"], "gemm A B");
  EXPECT_EQ(rows[2]["devices"]["0"]["calls"], 2);
  EXPECT_DOUBLE_EQ(rows[2]["devices"]["0"]["ms"].get<double>(), 0.15);
  EXPECT_FALSE(rows[2]["devices"].contains("1"));
  EXPECT_DOUBLE_EQ(totals["device_totals_ms"]["0"].get<double>(), 0.45);
  EXPECT_DOUBLE_EQ(totals["device_totals_ms"]["1"].get<double>(), 0.56);  // no .scores part
}

// On several GPUs one device may begin a pass while another still computes the previous one:
// each device's ranges of a pass count as prefetched only before that device's own previous
// pass ended. Device 1 below begins backward 0 (at 0.50 ms) before device 0 ends fused 1
// (0.60 ms): both devices' backward 0 is listed, device 1's with nothing prefetched, device 0's
// with its load during its own fused 1 as prefetched.
TEST_F(TrainCli, TraceSummaryTakesEachDevicesPassesAsItsOwn) {
  const std::string trace = dir_->file("two-devices-trace.json");
  {
    std::ofstream out(trace);
    out << R"({"traceEvents": [
      {"ph": "X", "cat": "host", "name": "epoch 0 training step", "pid": 2, "tid": 0, "ts": 0, "dur": 1000},
      {"ph": "X", "cat": "forward 0", "name": "compute 0", "pid": 0, "tid": 0, "ts": 10, "dur": 190, "args": {"batch": 0}},
      {"ph": "X", "cat": "forward 0", "name": "compute 0", "pid": 1, "tid": 0, "ts": 10, "dur": 150, "args": {"batch": 0}},
      {"ph": "X", "cat": "fused 1", "name": "compute 0", "pid": 0, "tid": 0, "ts": 250, "dur": 350, "args": {"batch": 0}},
      {"ph": "X", "cat": "fused 1", "name": "compute 0", "pid": 1, "tid": 0, "ts": 200, "dur": 290, "args": {"batch": 0}},
      {"ph": "X", "cat": "backward 0", "name": "load 0", "pid": 0, "tid": 1, "ts": 550, "dur": 40, "args": {"batch": 0}},
      {"ph": "X", "cat": "backward 0", "name": "compute 0", "pid": 0, "tid": 0, "ts": 610, "dur": 300, "args": {"batch": 0}},
      {"ph": "X", "cat": "backward 0", "name": "compute 0", "pid": 1, "tid": 0, "ts": 500, "dur": 300, "args": {"batch": 0}}
    ]})";
  }
  const auto r = test::run_command(std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR +
                                   "/scripts/bench/trace_summary.py --json " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(r.output)[trace];
  const auto& passes = summary["passes"];
  ASSERT_EQ(passes.size(), 3u);
  const auto& backward = passes[2];
  EXPECT_EQ(backward["pass"], "backward 0");
  ASSERT_EQ(backward["devices"].size(), 2u);
  EXPECT_EQ(backward["devices"][0]["device"], 0);
  EXPECT_DOUBLE_EQ(backward["devices"][0]["start_ms"].get<double>(), 0.61);
  EXPECT_DOUBLE_EQ(backward["devices"][0]["prefetched_ms"].get<double>(), 0.04);
  EXPECT_EQ(backward["devices"][1]["device"], 1);
  EXPECT_DOUBLE_EQ(backward["devices"][1]["start_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(backward["devices"][1]["compute_lane_busy_ms"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(backward["start_ms"].get<double>(), 0.5);
}

// The schedule loads batch 0 of a pass during the last batch of the pass before (on the
// transfer lane; the CPU backend runs it in line): in the trace, device 0's first "load 0" of
// fused 1 (layer 1's forward and backward) and of backward 0 (GAT reloads its input) begins
// before the last compute of forward 0 and of fused 1 ends.
// --no-overlap loads every batch in line, with the same losses.
TEST_F(TrainCli, NextPassLoadsDuringTheLastBatch) {
  struct Run {
    double final_loss = 0;
    std::map<std::string, double> first_load, last_compute_end;  // by pass, device 0
  };
  auto run = [&](const std::string& options, const std::string& name) {
    const std::string trace = dir_->file(name + ".json"), report = dir_->file(name + "-r.json");
    const auto r = test::run_command(base() + options +
                                     " --model gat --heads 2 --hidden 4 --epochs 1 --eval-every "
                                     "1000 --trace " +
                                     trace + " --report " + report);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    Run out;
    out.final_loss = nlohmann::json::parse(read_text(report))["final_loss"].get<double>();
    const auto events = nlohmann::json::parse(read_text(trace));
    for (const auto& e : events["traceEvents"]) {
      if (e["ph"] != "X" || e["cat"] == "host" || e["pid"] != 0) continue;
      const std::string pass = e["cat"], name = e["name"];
      const double begin = e["ts"], end = begin + e["dur"].get<double>();
      if (name == "load 0" && !out.first_load.count(pass)) out.first_load[pass] = begin;
      if (name == "compute 2") out.last_compute_end[pass] = end;
    }
    return out;
  };
  const Run on = run("", "prefetch-on"), off = run(" --no-overlap", "prefetch-off");
  for (const auto& [pass, before] :
       {std::pair<std::string, std::string>{"fused 1", "forward 0"}, {"backward 0", "fused 1"}}) {
    ASSERT_TRUE(on.first_load.count(pass) && on.last_compute_end.count(before)) << pass;
    EXPECT_LT(on.first_load.at(pass), on.last_compute_end.at(before)) << pass;
    ASSERT_TRUE(off.first_load.count(pass) && off.last_compute_end.count(before)) << pass;
    EXPECT_GE(off.first_load.at(pass), off.last_compute_end.at(before)) << pass;
  }
  EXPECT_EQ(on.final_loss, off.final_loss);
}

TEST_F(TrainCli, ResumeReproducesAnUninterruptedRun) {
  const std::string ck = dir_->file("resume.h5");
  const std::string common = base() + " --model gat --heads 2 --hidden 4 --epochs 6";
  auto r = test::run_command(common + " --report " + dir_->file("full.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(base() + " --model gat --heads 2 --hidden 4 --epochs 3 --checkpoint " + ck +
                        " --checkpoint-every 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(common + " --checkpoint " + ck + " --resume --report " +
                        dir_->file("resumed.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto full = nlohmann::json::parse(read_text(dir_->file("full.json")));
  const auto resumed = nlohmann::json::parse(read_text(dir_->file("resumed.json")));
  EXPECT_EQ(full["losses"], resumed["losses"]);
  EXPECT_EQ(full["final_loss"], resumed["final_loss"]);
  EXPECT_EQ(full["test_accuracy"], resumed["test_accuracy"]);
  EXPECT_EQ(full["best_epoch"], resumed["best_epoch"]);
  // A different model configuration is refused.
  expect_error(
      "--model gat --heads 2 --hidden 4 --epochs 6 --lr 0.5 --checkpoint " + ck + " --resume",
      {"--resume", ck, "different"});
}

TEST_F(TrainCli, MissingAndMismatchedFiles) {
  expect_error("--plan " + dir_->file("plan.h5"), {"--dataset"}, false);
  expect_error("--dataset " + dir_->file("data.h5"), {"--plan"}, false);
  expect_error("--dataset " + dir_->file("nope.h5") + " --plan " + dir_->file("plan.h5"),
               {"nope.h5"}, false);
  expect_error("--dataset " + dir_->file("data.h5") + " --plan " + dir_->file("missing-plan.h5"),
               {"missing-plan.h5"}, false);
  expect_error("--dataset " + dir_->file("data.h5") + " --plan " + dir_->file("other-plan.h5"),
               {"other-plan.h5", "data.h5", "different dataset"}, false);
  expect_error("--resume", {"--resume", "--checkpoint"});
  expect_error("--resume --checkpoint " + dir_->file("no-checkpoint.h5"), {"no-checkpoint.h5"});
  expect_error("--checkpoint-every 2", {"--checkpoint"});
  expect_error("--report " + dir_->file("no-such-dir/report.json") + " --epochs 1",
               {"no-such-dir"});
}

TEST_F(TrainCli, NonsensicalHyperparameters) {
  expect_error("--layers 0", {"--layers"});
  expect_error("--hidden 0", {"--hidden"});
  expect_error("--model gat --heads 0", {"--heads"});
  expect_error("--model gat --output-heads 0", {"--output-heads"});
  expect_error("--dropout 1", {"--dropout"});
  expect_error("--dropout -0.1", {"--dropout"});
  expect_error("--attention-dropout 1.5", {"--attention-dropout"});
  expect_error("--lr 0", {"--lr"});
  expect_error("--lr -0.01", {"--lr"});
  expect_error("--weight-decay -1", {"--weight-decay"});
  expect_error("--epochs -1", {"--epochs"});
  expect_error("--eval-every 0", {"--eval-every"});
  expect_error("--epochs abc", {"epochs"});
  expect_error("--model transformer", {"--model", "transformer"});
  expect_error("--optimizer lbfgs", {"--optimizer", "lbfgs"});
  expect_error("--comm carrier-pigeon", {"--comm"});
  expect_error("--intermediates sometimes", {"--intermediates"});
  expect_error("--layer-zero-order sideways", {"--layer-zero-order", "sideways"});
  expect_error("--model gat --layer-zero-order transform",
               {"--layer-zero-order", "--gat-layer-zero"});
  expect_error("--feature-norm l2", {"--feature-norm"});
  expect_error("--last-layer-rows some", {"--last-layer-rows", "some", "auto, loss or all"});
  expect_error("--evaluation-cache on", {"--evaluation-cache", "'on'", "auto or off"});
  expect_error("--evaluation-outputs gpu", {"--evaluation-outputs", "'gpu'", "auto or host"});
  expect_error("--evaluation-csrs once", {"--evaluation-csrs", "'once'", "auto or each-pass"});
  expect_error("--no-such-option", {"no-such-option"});
}

// A plan over --gpu-memory fails with a message giving the plan's estimated need and the
// sluice-preprocess command that finds a chunk count that fits; the plan that command builds
// then trains within the same budget.
TEST_F(TrainCli, OverBudgetNamesTheCommandThatFindsAFittingPlan) {
  // Rows wide enough that the per-row buffers outweigh the sparse structure and the per-chunk
  // lists (on 80 vertices of 6 features no chunk count lowers the estimate).
  const Dataset d = small_dataset(4000, 5, 64);
  write_dataset(dir_->file("wide.h5"), d);
  test::PlanOptionsBuilder options = test::plan_options(2, 1).partitioner("range");
  const Plan one_chunk = test::make_plan(d, options);
  write_plan(dir_->file("plan1.h5"), one_chunk);
  const ModelShape shape =
      test::model_shape("gcn", 2).in_dim(d.feature_dim).hidden(64).classes(d.num_classes);
  // A run under --gpu-memory pushes the loss rows' sums (LossRowExchange, trainer.cpp).
  LayoutOptions pushing;
  pushing.loss_row_exchange = LossRowExchange::kPushSums;
  const std::int64_t need =
      estimate_peak_gpu_bytes(one_chunk, loss_row_flags(d, one_chunk.old_to_new), shape, pushing);
  const std::int64_t budget = need / 2;
  const std::string run = test::bin("sluice-train") + " --dataset " + dir_->file("wide.h5") +
                          " --threads 1 --no-progress --epochs 2 --hidden 64 --gpu-memory " +
                          std::to_string(budget) + " --plan ";
  const auto failed = test::run_command(run + dir_->file("plan1.h5"));
  ASSERT_NE(failed.exit_code, 0) << failed.output;
  EXPECT_NE(failed.output.find("out of memory"), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find("needs about " + format_bytes(double(need)) + " per GPU"),
            std::string::npos)
      << failed.output;
  const std::string expected = "sluice-preprocess partition --dataset " + dir_->file("wide.h5") +
                               " --partitions 2 --partitioner range --gpu-memory " +
                               std::to_string(budget) +
                               " --model gcn --hidden 64 --layers 2 --output PLAN";
  const auto at = failed.output.find(expected);
  ASSERT_NE(at, std::string::npos) << failed.output;
  std::string command = expected;
  command.replace(0, std::string("sluice-preprocess").size(), test::bin("sluice-preprocess"));
  command.replace(command.size() - 4, 4, dir_->file("plan-fit.h5"));
  const auto partitioned = test::run_command(command);
  ASSERT_EQ(partitioned.exit_code, 0) << partitioned.output;
  const Plan fitting = read_plan(dir_->file("plan-fit.h5"));
  EXPECT_GT(fitting.chunks, 1);
  // The message names the chunk count that command chooses (same partition, same search).
  EXPECT_NE(failed.output.find("; C=" + std::to_string(fitting.chunks) + " fits ("),
            std::string::npos)
      << failed.output;
  EXPECT_LE(estimate_peak_gpu_bytes(fitting, loss_row_flags(d, fitting.old_to_new), shape), budget);
  const auto fitted = test::run_command(run + dir_->file("plan-fit.h5"));
  EXPECT_EQ(fitted.exit_code, 0) << fitted.output;
}

TEST_F(TrainCli, DeviceChoices) {
  expect_error("--device tpu", {"--device", "tpu"});
  expect_error("--gpus 2", {"--gpus"});
  if (!cuda_backend_available())
    expect_error("--device cuda --epochs 1", {"--device cuda", "CUDA"});
  else
    GTEST_LOG_(INFO) << "CUDA is usable here; the no-CUDA error is not testable";
}

namespace {
// The best-valid epoch's reported accuracies equal its predictions (by dataset vertex id)
// counted over each split.
void expect_accuracies_count_the_best_predictions(const Dataset& d, const TrainResult& r) {
  ASSERT_GE(r.best_epoch, 0);
  ASSERT_EQ(r.best_predictions.size(), std::size_t(d.num_nodes));
  const auto counted = [&](const std::vector<vertex_t>& split) {  // labeled vertices only
    std::int64_t correct = 0, labeled = 0;
    for (const vertex_t v : split) {
      const std::int32_t label = d.labels[std::size_t(v)];
      if (label < 0) continue;
      ++labeled;
      correct += r.best_predictions[std::size_t(v)] == label;
    }
    return double(correct) / double(labeled);
  };
  EXPECT_DOUBLE_EQ(r.best_valid_accuracy, counted(d.valid));
  EXPECT_DOUBLE_EQ(r.test_accuracy, counted(d.test));
  EXPECT_DOUBLE_EQ(r.train_accuracy, counted(d.train));
  EXPECT_GT(r.train_accuracy, 0.0);
  EXPECT_LT(r.train_accuracy, 1.0);  // not every vertex right: a wrong order would show
}
}  // namespace

// On a plan whose renumbering moves every partition's vertices.
TEST(TrainAccuracy, ReportedAccuraciesCountTheBestPredictions) {
  const Dataset d = test::random_dataset(700, 5, 16, 4, 29, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(3, 2));
  const TrainResult r =
      train(d, plan,
            test::train_config().model("gcn").hidden(16).epochs(6).eval_every(1).predictions(
                "predictions.csv"));
  expect_accuracies_count_the_best_predictions(d, r);
}

// The evaluations of the epochs keep their predictions on the devices; the best-valid epoch's
// come from one evaluation with its parameters after the epochs, here with later epochs between.
TEST(TrainAccuracy, AnEarlierBestEpochsPredictionsAreItsOwn) {
  const Dataset d = test::random_dataset(700, 5, 16, 4, 29, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(3, 2));
  const int epochs = 12;
  const TrainResult r = train(
      d, plan,
      test::train_config().model("gcn").hidden(16).epochs(epochs).eval_every(1).lr(0.5).predictions(
          "predictions.csv"));
  ASSERT_LT(r.best_epoch, epochs - 1) << "the case needs an earlier best epoch";
  expect_accuracies_count_the_best_predictions(d, r);
  // Not asked for, the predictions are not computed.
  const TrainResult without = train(
      d, plan, test::train_config().model("gcn").hidden(16).epochs(epochs).eval_every(1).lr(0.5));
  EXPECT_TRUE(without.best_predictions.empty());
  EXPECT_EQ(without.best_epoch, r.best_epoch);
}

// With embeddings asked for, that evaluation also gives the best-valid epoch's outputs: its
// predictions are their logits' argmax.
TEST(TrainAccuracy, EmbeddingsComeFromTheBestEpochsEvaluation) {
  const Dataset d = test::random_dataset(700, 5, 16, 4, 29, test::ReverseEdgesIntoSources::kAdd);
  const Plan plan = test::make_plan(d, test::plan_options(3, 2));
  const int epochs = 12;
  TrainConfig config =
      test::train_config().model("gcn").hidden(16).epochs(epochs).eval_every(1).lr(0.5);
  config.embeddings_out = "embeddings.h5";  // train() writes no file: it fills best_outputs
  const TrainResult r = train(d, plan, config);
  ASSERT_LT(r.best_epoch, epochs - 1) << "the case needs an earlier best epoch";
  expect_accuracies_count_the_best_predictions(d, r);
  ASSERT_EQ(r.best_outputs.predictions, r.best_predictions);
  const std::int64_t classes = r.best_outputs.classes;
  ASSERT_EQ(r.best_outputs.logits.size(), std::size_t(d.num_nodes * classes));
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    const float* row = r.best_outputs.logits.data() + std::int64_t(v) * classes;
    EXPECT_EQ(std::max_element(row, row + classes) - row, r.best_predictions[std::size_t(v)])
        << "vertex " << v;
  }
}

// The host-memory evaluation cache pays off only from the second evaluation: under a budget that
// sends it to host memory, a run whose only evaluation follows its last epoch allocates none,
// and a run that evaluates after every epoch does.
TEST_F(TrainCli, HostEvaluationCacheOnlyWhenAnotherEvaluationFollows) {
  const std::string data = dir_->file("cache-data.h5"), plan = dir_->file("cache-plan.h5");
  const std::string preprocess = test::bin("sluice-preprocess");
  ASSERT_EQ(test::run_command(preprocess + " generate --quiet --scale 10 --edge-factor 8 " +
                              "--features 16 --classes 4 --seed 1 --output " + data)
                .exit_code,
            0);
  ASSERT_EQ(test::run_command(preprocess + " partition --dataset " + data +
                              " --partitions 1 --chunks 3 --output " + plan)
                .exit_code,
            0);
  const std::string train = test::bin("sluice-train") + " --dataset " + data + " --plan " + plan +
                            " --model gcn --threads 1 --no-progress --device cpu";
  // What the device holds with nothing capped, the evaluation cache among it: as a budget, it
  // leaves the cache no room beside the rest.
  const auto unbounded = test::run_command(train + " --epochs 1 -v");
  ASSERT_EQ(unbounded.exit_code, 0) << unbounded.output;
  std::smatch allocated;
  ASSERT_TRUE(std::regex_search(unbounded.output, allocated,
                                std::regex(R"(device 0: ([0-9.]+) KiB allocated)")))
      << unbounded.output;
  const double kib = std::stod(allocated[1].str());
  const std::string budget = " --gpu-memory " + std::to_string(std::int64_t(kib * 1024) + 64);
  const std::string to_host = "does not fit beside the rest";
  const std::string kept = "aggregation of the features kept in host memory";
  const auto once = test::run_command(train + budget + " --epochs 2 --eval-every 2");
  ASSERT_EQ(once.exit_code, 0) << once.output;
  ASSERT_NE(once.output.find(to_host), std::string::npos) << once.output;
  EXPECT_EQ(once.output.find(kept), std::string::npos) << once.output;
  const auto every = test::run_command(train + budget + " --epochs 2 --eval-every 1");
  ASSERT_EQ(every.exit_code, 0) << every.output;
  EXPECT_NE(every.output.find(kept), std::string::npos) << every.output;
}

}  // namespace
}  // namespace sluice
