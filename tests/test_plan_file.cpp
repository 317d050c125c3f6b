// plan.h5: round trip, validation on read, and the partition / stats / verify commands end to
// end (corrupted plans and plans of another dataset must be refused).
#include <gtest/gtest.h>

#include <hdf5.h>

#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "formats/dataset.hpp"
#include "formats/hdf5.hpp"
#include "formats/plan.hpp"
#include "preprocess/plan_verify.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/plans.hpp"

namespace sluice {
namespace {

// n vertices, m mostly local edges; 4 features i % 7, 3 classes v % 3, every other vertex
// trains.
Dataset small_dataset(std::uint64_t seed, vertex_t n = 200, edge_t m = 1200) {
  Dataset d = test::local_multigraph(n, m, seed);
  d.source = "test";
  d.feature_dim = 4;
  d.features.resize(std::size_t(n) * 4);
  for (std::size_t i = 0; i < d.features.size(); ++i) d.features[i] = float(i % 7);
  d.num_classes = 3;
  d.labels.resize(n);
  for (vertex_t v = 0; v < n; ++v) d.labels[v] = v % 3;
  for (vertex_t v = 0; v < n; v += 2) d.train.push_back(v);
  return d;
}

std::string preprocess(const std::string& arguments) {
  return test::bin("sluice-preprocess") + " " + arguments + " 2>&1";
}

TEST(PlanFile, RoundTripKeepsEverything) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(1);
  const Plan plan = test::make_plan(d, test::plan_options(3, 4).partitioner("metis"));
  write_plan(dir.file("plan.h5"), plan);
  const Plan back = read_plan(dir.file("plan.h5"));
  EXPECT_EQ(back.partitions, 3);
  EXPECT_EQ(back.chunks, 4);
  EXPECT_EQ(back.dataset_fingerprint, compute_fingerprint(d));
  EXPECT_EQ(back.new_to_old, plan.new_to_old);
  EXPECT_EQ(back.old_to_new, plan.old_to_new);
  EXPECT_EQ(back.partition_offsets, plan.partition_offsets);
  EXPECT_EQ(back.transition_rows, plan.transition_rows);
  EXPECT_EQ(back.remote_rows, plan.remote_rows);
  EXPECT_EQ(back.stats.volume_reuse_rows, plan.stats.volume_reuse_rows);
  EXPECT_EQ(back.stats.cost_after, plan.stats.cost_after);
  EXPECT_EQ(back.partitioner, "metis");
  ASSERT_EQ(back.chunk_plans.size(), plan.chunk_plans.size());
  for (std::size_t k = 0; k < plan.chunk_plans.size(); ++k) {
    const ChunkPlan& a = plan.chunk_plans[k];
    const ChunkPlan& b = back.chunk_plans[k];
    EXPECT_EQ(a.range, b.range);
    EXPECT_EQ(a.dst_begin, b.dst_begin);
    EXPECT_EQ(a.indptr, b.indptr);
    EXPECT_EQ(a.columns, b.columns);
    EXPECT_EQ(a.load_vertices, b.load_vertices);
    EXPECT_EQ(a.load_slots, b.load_slots);
    EXPECT_EQ(a.reuse_count, b.reuse_count);
    EXPECT_EQ(a.remote_vertices, b.remote_vertices);
    EXPECT_EQ(a.remote_owner, b.remote_owner);
    EXPECT_EQ(a.remote_owner_slots, b.remote_owner_slots);
    EXPECT_EQ(a.remote_slots, b.remote_slots);
    EXPECT_EQ(a.remote_pull, b.remote_pull);
    EXPECT_EQ(a.leave_vertices, b.leave_vertices);
    EXPECT_EQ(a.leave_slots, b.leave_slots);
  }
  EXPECT_EQ(find_plan_violation(d, back), "");
}

TEST(PlanFile, ReadRejectsBrokenShapes) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(2);
  Plan plan = test::make_plan(d, test::plan_options(2, 2).partitioner("range"));
  plan.chunk_plans[1].columns[0] = 1 << 30;  // outside the merged buffer
  write_plan(dir.file("bad.h5"), plan);
  try {
    read_plan(dir.file("bad.h5"));
    FAIL() << "read_plan accepted a column outside the merged buffer";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("merged buffer"), std::string::npos) << e.what();
  }
  test::write_text(dir.file("text.h5"), "not hdf5");
  EXPECT_THROW(read_plan(dir.file("text.h5")), InputError);
  write_dataset(dir.file("d.h5"), d);
  EXPECT_THROW(read_plan(dir.file("d.h5")), InputError);  // a dataset is not a plan
}

// Overwrites one element of a 1-D int32 dataset in an HDF5 file in place.
void poke_int32(const std::string& path, const std::string& name, std::size_t index,
                std::int32_t delta) {
  h5::Handle file = h5::open_file(path, true);
  std::vector<std::int32_t> values = h5::read_vector<std::int32_t>(file, name);
  ASSERT_LT(index, values.size());
  values[index] += delta;
  h5::Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  ASSERT_GE(H5Dwrite(dataset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
}

// Overwrites element `index` of a 1-D dataset in an HDF5 file in place.
template <typename T>
void set_element(const std::string& path, const std::string& name, std::size_t index, T value) {
  h5::Handle file = h5::open_file(path, true);
  std::vector<T> values = h5::read_vector<T>(file, name);
  ASSERT_LT(index, values.size());
  values[index] = value;
  h5::Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  ASSERT_GE(H5Dwrite(dataset, h5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
            0);
}

void expect_plan_input_error(const std::string& path, const std::string& needle) {
  try {
    read_plan(path);
    FAIL() << "read_plan accepted a plan with " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Corruptions the fuzzer (tests/fuzz/fuzz_plan_fields) reaches: each is an InputError, read
// before anything is indexed or allocated with it.
TEST(PlanFile, ReadRejectsCorruptCountsAndOffsets) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(4);
  const Plan plan = test::make_plan(d, test::plan_options(2, 2).partitioner("range"));
  const std::string path = dir.file("plan.h5");

  // An offset far past the data, followed by a smaller one: rejected before any chunk is cut.
  write_plan(path, plan);
  set_element<std::int64_t>(path, "chunks/columns_offsets", 1, std::int64_t(1) << 40);
  expect_plan_input_error(path, "chunks/columns_offsets decreases at chunk 1");

  // A chunk count no array backs: rejected by the first K-entry array, not allocated.
  write_plan(path, plan);
  {
    h5::Handle file = h5::open_file(path, true);
    h5::write_attr<std::int32_t>(file, "chunks", std::numeric_limits<std::int32_t>::max());
  }
  expect_plan_input_error(path, "plan dataset partition has 4 entries, expected 4294967294");

  // Buffer sizes whose sum overflows 32 bits.
  write_plan(path, plan);
  set_element<vertex_t>(path, "transition_rows", 0, std::numeric_limits<vertex_t>::max());
  set_element<vertex_t>(path, "remote_rows", 0, std::numeric_limits<vertex_t>::max());
  expect_plan_input_error(path, "buffer size of partition 0 outside [0, 200]");
}

TEST(PlanCommands, PartitionStatsVerifyEndToEnd) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(3, 400, 3000);
  write_dataset(dir.file("d.h5"), d);
  auto r = test::run_command(preprocess("partition --dataset " + dir.file("d.h5") +
                                        " --partitions 2 --chunks 4 --output " +
                                        dir.file("plan.h5") + " --verify"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("replication factor"), std::string::npos) << r.output;

  r = test::run_command(preprocess("stats " + dir.file("plan.h5") + " --json --quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto json = nlohmann::json::parse(r.output);
  EXPECT_EQ(json["partitions"], 2);
  EXPECT_EQ(json["chunks"], 4);
  for (const char* key : {"replication_factor", "volume_baseline_rows", "volume_p2p_rows",
                          "volume_reuse_rows", "cost_before", "cost_after"})
    EXPECT_TRUE(json.contains(key)) << key;
  const Plan plan = read_plan(dir.file("plan.h5"));
  EXPECT_EQ(json["volume_reuse_rows"].get<std::int64_t>(), plan.stats.volume_reuse_rows);
  EXPECT_GT(json["volume_baseline_rows"].get<std::int64_t>(),
            json["volume_reuse_rows"].get<std::int64_t>());
  // Per-partition balance: destinations and chunk CSR entries (in-degree + 1 each) add up.
  const auto vertices = json["partition_vertices"].get<std::vector<std::int64_t>>();
  const auto entries = json["partition_entries"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(vertices.size(), 2u);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(vertices[0] + vertices[1], 400);
  EXPECT_EQ(vertices[0], plan.partition_offsets[1] - plan.partition_offsets[0]);
  std::int64_t total_entries = 0;
  for (const auto& chunk : plan.chunk_plans) total_entries += chunk.num_entries();
  EXPECT_EQ(entries[0] + entries[1], total_entries);
  // Per-partition host-link rows: loads over the batches, and loads + own vertices.
  const auto loads = json["partition_loads"].get<std::vector<std::int64_t>>();
  const auto link = json["partition_link_rows"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(loads.size(), 2u);
  ASSERT_EQ(link.size(), 2u);
  for (int p = 0; p < 2; ++p) {
    std::int64_t want = 0;
    for (int c = 0; c < plan.chunks; ++c)
      want += std::int64_t(plan.chunk(c, p).load_vertices.size());
    EXPECT_EQ(loads[std::size_t(p)], want) << p;
    EXPECT_EQ(link[std::size_t(p)], want + vertices[std::size_t(p)]) << p;
  }
  EXPECT_EQ(loads[0] + loads[1], plan.stats.volume_reuse_rows);

  r = test::run_command(preprocess("stats " + dir.file("plan.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host->GPU +P2P +reuse"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("link rows"), std::string::npos) << r.output;

  r = test::run_command(
      preprocess("verify --dataset " + dir.file("d.h5") + " --plan " + dir.file("plan.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;

  // One column moved by one slot: verify must fail and name the chunk.
  ASSERT_EQ(test::run_command("cp " + dir.file("plan.h5") + " " + dir.file("bad.h5")).exit_code, 0);
  poke_int32(dir.file("bad.h5"), "chunks/columns", 5, 1);
  r = test::run_command(
      preprocess("verify --dataset " + dir.file("d.h5") + " --plan " + dir.file("bad.h5")));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("chunk (batch"), std::string::npos) << r.output;

  // One load slot changed.
  ASSERT_EQ(test::run_command("cp " + dir.file("plan.h5") + " " + dir.file("bad2.h5")).exit_code,
            0);
  poke_int32(dir.file("bad2.h5"), "chunks/remote_owner_slots", 0, 1);
  r = test::run_command(
      preprocess("verify --dataset " + dir.file("d.h5") + " --plan " + dir.file("bad2.h5")));
  EXPECT_NE(r.exit_code, 0) << r.output;

  // A plan checked against another dataset is refused.
  Dataset other = d;
  other.indices[0] = (other.indices[0] + 1) % other.num_nodes;
  write_dataset(dir.file("other.h5"), other);
  r = test::run_command(
      preprocess("verify --dataset " + dir.file("other.h5") + " --plan " + dir.file("plan.h5")));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("another dataset"), std::string::npos) << r.output;
}

TEST(PlanCommands, MismatchRefusedInLibrary) {
  const Dataset d = small_dataset(4);
  const Plan plan = test::make_plan(d, test::plan_options(2, 2));
  EXPECT_NO_THROW(require_plan_matches(plan, compute_fingerprint(d), "plan.h5", "d.h5"));
  Dataset other = d;
  other.labels[0] = 2;
  EXPECT_THROW(require_plan_matches(plan, compute_fingerprint(other), "plan.h5", "o.h5"),
               InputError);
}

// The chunk count partition --gpu-memory printed ("chose C=N"), or 0 when it printed none.
int chosen_chunks(const std::string& output) {
  const std::size_t at = output.find("chose C=");
  return at == std::string::npos ? 0 : std::stoi(output.substr(at + 8));
}

TEST(PlanCommands, GpuMemoryChoosesSmallestFittingChunks) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(5, 2000, 16000);
  write_dataset(dir.file("d.h5"), d);
  auto r = test::run_command(preprocess("partition --dataset " + dir.file("d.h5") +
                                        " --partitions 2 --gpu-memory 600K --model gcn --hidden 64"
                                        " --layers 2 --output " +
                                        dir.file("plan.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(chosen_chunks(r.output), 0) << r.output;
  EXPECT_NE(r.output.find("(fits)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(does not fit)"), std::string::npos) << r.output;
  r = test::run_command(preprocess("partition --dataset " + dir.file("d.h5") +
                                   " --partitions 2 --gpu-memory 1K --output " +
                                   dir.file("plan2.h5")));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(test::file_exists(dir.file("plan2.h5")));
}

// --chunk-choice: auto (the default) lists the forecast of each count it compared and marks the
// chosen one, which is the C the summary names; smallest lists none; an unknown value is refused
// by name and writes no plan.
TEST(PlanCommands, GpuMemoryChunkChoice) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(5, 2000, 16000);
  write_dataset(dir.file("d.h5"), d);
  const std::string base = "partition --dataset " + dir.file("d.h5") +
                           " --gpu-memory 600K --model gcn --hidden 64 --layers 2 --output ";
  auto r = test::run_command(preprocess(base + dir.file("auto.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int chosen = chosen_chunks(r.output);
  EXPECT_NE(r.output.find(cat("  C=", chosen)), std::string::npos) << r.output;
  const std::size_t mark = r.output.find("(chosen)");
  ASSERT_NE(mark, std::string::npos) << r.output;
  const std::size_t line = r.output.rfind("\n", mark) + 1;
  int forecast_chunks = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + line, "  C=%d forecast epoch", &forecast_chunks), 1)
      << r.output.substr(line, mark - line);
  EXPECT_EQ(forecast_chunks, chosen);
  r = test::run_command(preprocess(base + dir.file("smallest.h5") + " --chunk-choice smallest"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("forecast epoch"), std::string::npos) << r.output;
  EXPECT_LE(chosen_chunks(r.output), chosen);
  r = test::run_command(preprocess(base + dir.file("bad.h5") + " --chunk-choice largest"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown --chunk-choice 'largest' (expected auto or smallest)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(test::file_exists(dir.file("bad.h5")));
}

// The per-GPU estimates partition --gpu-memory prints ("  C=N estimated peak per GPU X"), in
// bytes by chunk count.
std::map<int, double> printed_estimates(const std::string& output) {
  std::map<int, double> out;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    int chunks = 0;
    double value = 0;
    char unit[8] = {};
    if (std::sscanf(line.c_str(), "  C=%d estimated peak per GPU %lf %7s", &chunks, &value, unit) !=
        3)
      continue;
    const std::string u = unit;
    const double scale = u == "KiB"   ? 1024.0
                         : u == "MiB" ? 1024.0 * 1024
                         : u == "GiB" ? 1 << 30
                                      : 1;
    out[chunks] = value * scale;
  }
  return out;
}

// One `partition --gpu-memory` run: the C it chose and the estimates it printed.
struct ChunkSearch {
  int chosen = 0;
  std::map<int, double> estimates;
};

void run_chunk_search(const std::string& args, ChunkSearch& out) {
  const auto r = test::run_command(preprocess(args));
  ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  out.chosen = chosen_chunks(r.output);
  ASSERT_GT(out.chosen, 0) << r.output;
  out.estimates = printed_estimates(r.output);
  ASSERT_FALSE(out.estimates.empty()) << r.output;
}

// `smaller` needs less than `larger`: every chunk count both print is estimated lower, and its
// chosen C is no larger (smaller when they print no count in common: the search moved).
void expect_needs_less(const ChunkSearch& smaller, const ChunkSearch& larger,
                       const std::string& what) {
  EXPECT_LE(smaller.chosen, larger.chosen) << what;
  int shared = 0;
  for (const auto& [chunks, bytes] : smaller.estimates) {
    const auto other = larger.estimates.find(chunks);
    if (other == larger.estimates.end()) continue;
    ++shared;
    EXPECT_LT(bytes, other->second) << what << ", C=" << chunks;
  }
  if (shared == 0) {
    EXPECT_LT(smaller.chosen, larger.chosen) << what;
  }
}

// An RMAT dataset from `sluice-preprocess generate` (edge factor 8, 4 classes, seed 3) at path.
void generate_rmat(const std::string& path, int scale, int features) {
  const auto r =
      test::run_command(preprocess(cat("generate --scale ", scale, " --edge-factor 8 --features ",
                                       features, " --classes 4 --seed 3 --output ", path)));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// GAT's chunk search follows sluice-train's --intermediates and --host-precision: recomputed head
// outputs (either option) need no A buffer, so every chunk count the runs share is estimated
// lower, and the chosen C is no larger (smaller when they share none). Unknown values are
// refused.
TEST(PlanCommands, GpuMemoryCountsGatHeadOutputsOnlyWhereKept) {
  test::ScratchDir dir;
  ASSERT_NO_FATAL_FAILURE(generate_rmat(dir.file("d.h5"), 11, 16));
  const std::string base = "partition --dataset " + dir.file("d.h5") +
                           " --partitions 1 --gpu-memory 400K --model gat --hidden 16 --heads 4"
                           " --layers 2 --output " +
                           dir.file("plan.h5");
  std::map<std::string, ChunkSearch> runs;
  for (const std::string extra : {"", " --host-precision bf16", " --intermediates recompute"})
    ASSERT_NO_FATAL_FAILURE(run_chunk_search(base + extra, runs[extra]));
  for (const std::string recomputed : {" --host-precision bf16", " --intermediates recompute"})
    expect_needs_less(runs[recomputed], runs[""], recomputed);
  EXPECT_EQ(runs[" --host-precision bf16"].estimates, runs[" --intermediates recompute"].estimates);
  for (const std::string bad : {" --host-precision fp16", " --intermediates sometimes"}) {
    const auto r = test::run_command(preprocess(base + bad));
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find("unknown --"), std::string::npos) << r.output;
  }
}

// The chunk search follows sluice-train's --layer-zero-order: GCN's layer 0 multiplying its 64
// features into 8 hidden columns first (auto does, 4 x 8 <= 64) keeps 8-wide transformed rows
// where aggregating first keeps a 64-wide aggregation per chunk row, so every chunk count the
// runs share is estimated lower with auto than with aggregate, and auto's C is no larger
// (smaller when they share none). Unknown values and GAT are refused.
TEST(PlanCommands, GpuMemoryFollowsTheLayerZeroOrder) {
  test::ScratchDir dir;
  ASSERT_NO_FATAL_FAILURE(generate_rmat(dir.file("d.h5"), 11, 64));
  const std::string base = "partition --dataset " + dir.file("d.h5") +
                           " --partitions 1 --gpu-memory 600K --hidden 8 --layers 2 --output " +
                           dir.file("plan.h5");
  ChunkSearch transforming, aggregating;
  ASSERT_NO_FATAL_FAILURE(run_chunk_search(base + " --model gcn", transforming));
  ASSERT_NO_FATAL_FAILURE(
      run_chunk_search(base + " --model gcn --layer-zero-order aggregate", aggregating));
  expect_needs_less(transforming, aggregating, "--layer-zero-order auto against aggregate");
  for (const std::string& bad :
       {std::string(" --model gcn --layer-zero-order sideways"),
        std::string(" --model gat --heads 2 --layer-zero-order transform")}) {
    const auto r = test::run_command(preprocess(base + bad));
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find("--layer-zero-order"), std::string::npos) << r.output;
  }
}

// Whatever the budget, the plan the command writes fits it: the chosen C's line, estimated from
// the plan built, says "(fits)". Some budgets keep the reorganized layout and some refuse it
// because it needs more than the natural one the search sized C for; which ones do moves with
// every change to the estimate, so the budgets step up from 200 KiB until both were seen.
TEST(PlanCommands, GpuMemoryPlanFitsWhetherReorganizedOrNot) {
  test::ScratchDir dir;
  ASSERT_NO_FATAL_FAILURE(generate_rmat(dir.file("d.h5"), 12, 16));
  int reorganized = 0, refused = 0;
  for (int kib = 200; kib <= 800 && (reorganized == 0 || refused == 0); kib += 3) {
    const std::string budget = cat(kib, "K");
    const auto r = test::run_command(
        preprocess("partition --dataset " + dir.file("d.h5") + " --partitions 2 --gpu-memory " +
                   budget + " --model gcn --hidden 32 --layers 2 --output " + dir.file("plan.h5")));
    ASSERT_EQ(r.exit_code, 0) << budget << "\n" << r.output;
    const int C = chosen_chunks(r.output);
    ASSERT_GT(C, 0) << r.output;
    const std::size_t line = r.output.find(cat("  C=", C, " "));
    ASSERT_NE(line, std::string::npos) << r.output;
    const std::string row = r.output.substr(line, r.output.find('\n', line) - line);
    EXPECT_NE(row.find("(fits)"), std::string::npos) << budget << ": " << row;
    const bool kept = read_plan(dir.file("plan.h5")).reorganized;
    reorganized += kept;
    const bool refusal_logged = r.output.find("the reorganized layout needs") != std::string::npos;
    refused += refusal_logged;
    EXPECT_FALSE(kept && refusal_logged) << budget << "\n" << r.output;
  }
  EXPECT_GE(reorganized, 1);
  EXPECT_GE(refused, 1);
}

// --imbalance passes METIS's tolerances; bad values and non-METIS partitioners are refused
// with a message and no plan file.
TEST(PlanCommands, ImbalanceToleranceOption) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(7, 600, 4000);
  write_dataset(dir.file("d.h5"), d);
  const std::string base =
      "partition --dataset " + dir.file("d.h5") + " --partitions 2 --chunks 2 --output ";
  auto r = test::run_command(preprocess(base + dir.file("plan.h5") + " --imbalance 1.05,1.002"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Plan plan = read_plan(dir.file("plan.h5"));
  const std::int64_t first = plan.partition_offsets[1] - plan.partition_offsets[0];
  EXPECT_LE(std::max<std::int64_t>(first, 600 - first), 301) << first;
  for (const std::string& bad : {std::string(" --imbalance 0.95"), std::string(" --imbalance x"),
                                 std::string(" --imbalance 1.1,1.1,1.1"),
                                 std::string(" --imbalance 1.1 --partitioner range")}) {
    r = test::run_command(preprocess(base + dir.file("bad.h5") + bad));
    EXPECT_NE(r.exit_code, 0) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("--imbalance"), std::string::npos) << bad << "\n" << r.output;
    EXPECT_FALSE(test::file_exists(dir.file("bad.h5"))) << bad;
  }
}

TEST(PlanCommands, SweepPrintsReplicationPerCount) {
  test::ScratchDir dir;
  const Dataset d = small_dataset(6, 500, 4000);
  write_dataset(dir.file("d.h5"), d);
  const auto r =
      test::run_command(preprocess("stats --sweep-partitions 1,2,4,8 --json --quiet"
                                   " --dataset " +
                                   dir.file("d.h5")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = nlohmann::json::parse(r.output);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_DOUBLE_EQ(rows[0]["replication_factor"].get<double>(), 1.0);  // P=1: N = V
  for (const auto& row : rows) EXPECT_GE(row["replication_factor"].get<double>(), 1.0);
  EXPECT_GT(rows[3]["replication_factor"].get<double>(),
            rows[1]["replication_factor"].get<double>());
}

}  // namespace
}  // namespace sluice
