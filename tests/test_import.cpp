// Importers: Cora from the shared OGB raw layout, small edge-list and binary files written by
// the tests (symmetrize, self-loops, duplicates, remap, gzip, random features and splits), and
// the CLI round trip through `import` and `info --json`.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "formats/csr_builder.hpp"
#include "formats/dataset.hpp"
#include "formats/importers.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

std::vector<vertex_t> row(const Dataset& d, vertex_t v) {
  return std::vector<vertex_t>(d.indices.begin() + d.indptr[v],
                               d.indices.begin() + d.indptr[v + 1]);
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())), int(text.size()));
  gzclose(file);
}

template <typename T>
void write_binary(const std::string& path, const std::vector<T>& values) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::fwrite(values.data(), sizeof(T), values.size(), file);
  std::fclose(file);
}

ImportOptions edgelist_options(const std::string& path) {
  ImportOptions o;
  o.format = "edgelist";
  o.input = path;
  return o;
}

TEST(ImportOgb, CoraSymmetrized) {
  ImportOptions o;
  o.format = "ogb";
  o.input = test::cora_dir();
  o.graph.symmetrize = true;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.name, "cora");
  EXPECT_EQ(d.num_nodes, 2708);
  EXPECT_EQ(d.num_edges(), 10556);
  EXPECT_EQ(report.input_edges, 5278);
  EXPECT_EQ(report.duplicates_removed, 0);
  EXPECT_EQ(d.feature_dim, 1433);
  EXPECT_EQ(d.num_classes, 7);
  EXPECT_EQ(d.train.size(), 140u);
  EXPECT_EQ(d.valid.size(), 500u);
  EXPECT_EQ(d.test.size(), 1000u);
  EXPECT_EQ(d.train.front(), 0);
  EXPECT_EQ(d.valid.front(), 140);
  EXPECT_EQ(d.test.front(), 1708);
  EXPECT_TRUE(d.symmetrized);
  // The first line of edge.csv is "0,633": both directions are stored.
  const auto row0 = row(d, 0), row633 = row(d, 633);
  EXPECT_TRUE(std::binary_search(row0.begin(), row0.end(), 633));
  EXPECT_TRUE(std::binary_search(row633.begin(), row633.end(), 0));
  // Features are binary bag-of-words; node 0 has a 1 in column 19 (first feature line).
  EXPECT_EQ(d.feature_row(0)[19], 1.0f);
  EXPECT_EQ(d.feature_row(0)[0], 0.0f);
  EXPECT_EQ(d.labels[0], 3);
  EXPECT_EQ(d.labels[1], 4);
  EXPECT_NE(d.options.find("\"split\":\"public\""), std::string::npos) << d.options;
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    const auto r = row(d, v);
    EXPECT_TRUE(std::adjacent_find(r.begin(), r.end(), std::greater_equal<>()) == r.end());
  }
}

TEST(ImportOgb, CoraDirectedKeepsEdgeDirection) {
  ImportOptions o;
  o.format = "ogb";
  o.input = test::cora_dir() + "/";
  o.split = "public";
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.num_edges(), 5278);
  EXPECT_FALSE(d.symmetrized);
  // Edge 0 -> 633 is an in-edge of 633 only.
  const auto row633 = row(d, 633);
  EXPECT_TRUE(std::binary_search(row633.begin(), row633.end(), 0));
  const auto row0 = row(d, 0);
  EXPECT_FALSE(std::binary_search(row0.begin(), row0.end(), 633));
}

// 0->1 twice (duplicate), 1->2, 2->2 (self-loop), 3->0, with comments and mixed separators.
const char* kSmallEdges =
    "# a comment\n"
    "% another comment\n"
    "0 1\n"
    "0\t1\n"
    "1,2\n"
    "\n"
    "2 , 2\n"
    "3 0 0.5\n";

TEST(ImportEdgeList, DirectedKeepDeduplicates) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), kSmallEdges);
  ImportReport report;
  const Dataset d = import_dataset(edgelist_options(dir.file("g.txt")), report);
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(report.input_edges, 5);
  EXPECT_EQ(report.duplicates_removed, 1);
  EXPECT_EQ(d.duplicates_removed, 1);
  EXPECT_EQ(d.num_edges(), 4);
  EXPECT_EQ(row(d, 0), (std::vector<vertex_t>{3}));
  EXPECT_EQ(row(d, 1), (std::vector<vertex_t>{0}));
  EXPECT_EQ(row(d, 2), (std::vector<vertex_t>{1, 2}));
  EXPECT_EQ(row(d, 3), (std::vector<vertex_t>{}));
  EXPECT_EQ(d.feature_dim, 0);
  EXPECT_EQ(d.num_classes, 0);
  EXPECT_TRUE(d.train.empty());
}

TEST(ImportEdgeList, SymmetrizeAndRemoveSelfLoops) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), kSmallEdges);
  ImportOptions o = edgelist_options(dir.file("g.txt"));
  o.graph.symmetrize = true;
  o.graph.self_loops = SelfLoops::kRemove;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(report.self_loops_removed, 1);
  EXPECT_EQ(row(d, 0), (std::vector<vertex_t>{1, 3}));
  EXPECT_EQ(row(d, 1), (std::vector<vertex_t>{0, 2}));
  EXPECT_EQ(row(d, 2), (std::vector<vertex_t>{1}));
  EXPECT_EQ(row(d, 3), (std::vector<vertex_t>{0}));
  EXPECT_EQ(d.num_edges(), 6);
}

TEST(ImportEdgeList, AddSelfLoops) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), kSmallEdges);
  ImportOptions o = edgelist_options(dir.file("g.txt"));
  o.graph.self_loops = SelfLoops::kAdd;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(report.self_loops_added, 3);  // vertex 2 already had one
  EXPECT_EQ(row(d, 0), (std::vector<vertex_t>{0, 3}));
  EXPECT_EQ(row(d, 2), (std::vector<vertex_t>{1, 2}));
  EXPECT_EQ(row(d, 3), (std::vector<vertex_t>{3}));
  EXPECT_EQ(d.self_loops, "add");
}

TEST(ImportEdgeList, RemapSparseIdsKeepsOriginalIds) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), "1000 70\n70 5000000000\n1000 5000000000\n");
  ImportOptions o = edgelist_options(dir.file("g.txt"));
  o.remap = true;
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.num_nodes, 3);
  EXPECT_EQ(d.original_ids, (std::vector<std::int64_t>{70, 1000, 5000000000LL}));
  EXPECT_EQ(row(d, 0), (std::vector<vertex_t>{1}));     // 1000 -> 70
  EXPECT_EQ(row(d, 2), (std::vector<vertex_t>{0, 1}));  // 70, 1000 -> 5e9
}

TEST(ImportEdgeList, NonZeroBasedIdsWithoutRemapLeaveIsolatedVertices) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), "5 7\n7 6\n");
  ImportReport report;
  const Dataset d = import_dataset(edgelist_options(dir.file("g.txt")), report);
  EXPECT_EQ(d.num_nodes, 8);
  EXPECT_EQ(row(d, 7), (std::vector<vertex_t>{5}));
  EXPECT_EQ(row(d, 0), (std::vector<vertex_t>{}));
}

TEST(ImportEdgeList, GzipInputWithFeatureAndLabelFiles) {
  test::ScratchDir dir;
  write_gzip(dir.file("g.txt.gz"), "0 1\n1 2\n2 0\n");
  test::write_text(dir.file("f.csv"), "1,2\n3,4\n5,6e-1\n");
  test::write_text(dir.file("l.txt"), "1\nnan\n2.0\n");
  ImportOptions o = edgelist_options(dir.file("g.txt.gz"));
  o.features_path = dir.file("f.csv");
  o.labels_path = dir.file("l.txt");
  o.split_fractions = {0.5, 0.5, 0.0};
  ImportReport report;
  const Dataset d = import_dataset(o, report);
  EXPECT_EQ(d.num_edges(), 3);
  EXPECT_EQ(d.feature_dim, 2);
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 4, 5, 0.6f}));
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{1, -1, 2}));
  EXPECT_EQ(d.num_classes, 3);
  // Two labeled vertices, split 1/1/0; the unlabeled vertex 1 is in no split.
  EXPECT_EQ(d.train.size() + d.valid.size() + d.test.size(), 2u);
  EXPECT_EQ(d.train.size(), 1u);
  for (const auto* split : {&d.train, &d.valid, &d.test})
    for (vertex_t v : *split) EXPECT_NE(v, 1);
}

TEST(ImportEdgeList, RandomFeaturesLabelsAndSplitAreSeeded) {
  test::ScratchDir dir;
  std::string text;
  for (int v = 0; v < 400; ++v)
    text += std::to_string(v) + " " + std::to_string((v * 7 + 1) % 400) + "\n";
  test::write_text(dir.file("g.txt"), text);
  ImportOptions o = edgelist_options(dir.file("g.txt"));
  o.random_features = 8;
  o.random_labels = 5;
  o.seed = 42;
  ImportReport report;
  const Dataset a = import_dataset(o, report);
  const Dataset b = import_dataset(o, report);
  EXPECT_EQ(a.feature_dim, 8);
  EXPECT_EQ(a.num_classes, 5);
  EXPECT_EQ(compute_fingerprint(a), compute_fingerprint(b));
  // The HongTu setting: 25% train, 50% valid, 25% test.
  EXPECT_EQ(a.train.size(), 100u);
  EXPECT_EQ(a.valid.size(), 200u);
  EXPECT_EQ(a.test.size(), 100u);
  o.seed = 43;
  const Dataset c = import_dataset(o, report);
  EXPECT_NE(compute_fingerprint(a), compute_fingerprint(c));
  for (std::int32_t label : a.labels) EXPECT_TRUE(label >= 0 && label < 5);
}

TEST(ImportBinary, Int32PairsMatchTheEdgeList) {
  test::ScratchDir dir;
  write_binary<std::int32_t>(dir.file("g.bin"), {0, 1, 0, 1, 1, 2, 2, 2, 3, 0});
  test::write_text(dir.file("g.txt"), kSmallEdges);
  ImportOptions o;
  o.format = "binary";
  o.input = dir.file("g.bin");
  o.graph.symmetrize = true;
  ImportReport report;
  const Dataset bin = import_dataset(o, report);
  EXPECT_EQ(report.input_edges, 5);
  EXPECT_EQ(report.duplicates_removed, 2);  // 0->1 twice, so 1->0 twice after symmetrizing
  ImportOptions t = edgelist_options(dir.file("g.txt"));
  t.graph.symmetrize = true;
  const Dataset text = import_dataset(t, report);
  EXPECT_EQ(bin.indptr, text.indptr);
  EXPECT_EQ(bin.indices, text.indices);
}

TEST(ImportBinary, Int64PairsAndRemap) {
  test::ScratchDir dir;
  write_binary<std::int64_t>(dir.file("g.bin"), {10, 20, 20, 30, 30, 10});
  ImportOptions o;
  o.format = "binary";
  o.input = dir.file("g.bin");
  o.binary_id_bytes = 8;
  ImportReport report;
  const Dataset plain = import_dataset(o, report);
  EXPECT_EQ(plain.num_nodes, 31);
  EXPECT_EQ(row(plain, 20), (std::vector<vertex_t>{10}));
  o.remap = true;
  const Dataset compact = import_dataset(o, report);
  EXPECT_EQ(compact.num_nodes, 3);
  EXPECT_EQ(compact.original_ids, (std::vector<std::int64_t>{10, 20, 30}));
  EXPECT_EQ(row(compact, 0), (std::vector<vertex_t>{2}));
}

TEST(ImportBinary, GzipCompressedPairs) {
  test::ScratchDir dir;
  const std::vector<std::int32_t> pairs = {0, 1, 1, 2, 2, 0, 3, 1};
  write_binary(dir.file("g.bin"), pairs);
  write_gzip(dir.file("g.bin.gz"),
             std::string(reinterpret_cast<const char*>(pairs.data()), pairs.size() * 4));
  ImportOptions o;
  o.format = "binary";
  o.input = dir.file("g.bin");
  ImportReport report;
  const Dataset plain = import_dataset(o, report);
  o.input = dir.file("g.bin.gz");
  const Dataset compressed = import_dataset(o, report);
  EXPECT_EQ(report.input_edges, 4);
  EXPECT_EQ(compressed.indptr, plain.indptr);
  EXPECT_EQ(compressed.indices, plain.indices);
  EXPECT_EQ(row(compressed, 1), (std::vector<vertex_t>{0, 3}));
}

TEST(ImportBinary, ManyBlocksBuildTheSameGraphAsText) {
  // More pairs than one read block (4 Mi pairs) would be slow in a test; instead check a
  // larger random graph against the edge-list path.
  test::ScratchDir dir;
  std::vector<std::int32_t> pairs;
  std::string text;
  std::uint64_t state = 12345;
  for (int i = 0; i < 20000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const int src = static_cast<int>((state >> 33) % 3000);
    const int dst = static_cast<int>((state >> 13) % 3000);
    pairs.push_back(src);
    pairs.push_back(dst);
    text += std::to_string(src) + " " + std::to_string(dst) + "\n";
  }
  write_binary(dir.file("g.bin"), pairs);
  test::write_text(dir.file("g.txt"), text);
  for (const SelfLoops mode : {SelfLoops::kKeep, SelfLoops::kAdd, SelfLoops::kRemove}) {
    ImportOptions b;
    b.format = "binary";
    b.input = dir.file("g.bin");
    b.graph.symmetrize = true;
    b.graph.self_loops = mode;
    ImportOptions t = edgelist_options(dir.file("g.txt"));
    t.graph = b.graph;
    ImportReport rb, rt;
    const Dataset db = import_dataset(b, rb), dt = import_dataset(t, rt);
    EXPECT_EQ(db.indices, dt.indices);
    EXPECT_EQ(db.indptr, dt.indptr);
    EXPECT_EQ(rb.duplicates_removed, rt.duplicates_removed);
    validate_dataset(db, "binary");
    for (vertex_t v = 0; v < db.num_nodes; ++v) {
      const auto r = row(db, v);
      ASSERT_TRUE(std::adjacent_find(r.begin(), r.end(), std::greater_equal<>()) == r.end());
      const bool has_loop = std::binary_search(r.begin(), r.end(), v);
      if (mode == SelfLoops::kAdd) {
        ASSERT_TRUE(has_loop);
      }
      if (mode == SelfLoops::kRemove) {
        ASSERT_FALSE(has_loop);
      }
    }
  }
}

// The CSR by definition: every directed entry (dst, src) collected, sorted, deduplicated.
CsrBuildResult reference_csr(vertex_t n, const std::vector<vertex_t>& pairs,
                             const CsrBuildOptions& options) {
  std::vector<std::pair<vertex_t, vertex_t>> entries;  // (dst, src)
  CsrBuildResult result;
  result.input_edges = std::int64_t(pairs.size() / 2);
  std::int64_t loops = 0;
  for (std::size_t i = 0; i < pairs.size(); i += 2) {
    const vertex_t src = pairs[i], dst = pairs[i + 1];
    if (src == dst) {
      ++loops;
      if (options.self_loops == SelfLoops::kRemove) continue;
    }
    entries.emplace_back(dst, src);
    if (options.symmetrize && src != dst) entries.emplace_back(src, dst);
  }
  std::sort(entries.begin(), entries.end());
  const std::size_t before = entries.size();
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  result.duplicates_removed = std::int64_t(before - entries.size());
  if (options.self_loops == SelfLoops::kRemove) result.self_loops_removed = loops;
  if (options.self_loops == SelfLoops::kAdd) {
    std::vector<bool> has_loop(std::size_t(n), false);
    for (const auto& [dst, src] : entries)
      if (dst == src) has_loop[std::size_t(dst)] = true;
    for (vertex_t v = 0; v < n; ++v)
      if (!has_loop[std::size_t(v)]) {
        entries.emplace_back(v, v);
        ++result.self_loops_added;
      }
    std::sort(entries.begin(), entries.end());
  }
  result.indptr.assign(std::size_t(n) + 1, 0);
  for (const auto& [dst, src] : entries) {
    ++result.indptr[std::size_t(dst) + 1];
    result.indices.push_back(src);
  }
  for (vertex_t v = 0; v < n; ++v) result.indptr[v + 1] += result.indptr[v];
  return result;
}

// Delivers the pairs in blocks of an odd size, so blocks split the staging unevenly.
EdgeSource odd_block_source(const std::vector<vertex_t>& pairs) {
  return [&pairs](const EdgeBlockVisitor& visit) {
    const std::size_t block = 300007, count = pairs.size() / 2;
    for (std::size_t begin = 0; begin < count; begin += block)
      visit(pairs.data() + 2 * begin, std::min(block, count - begin));
  };
}

// 1.3 M pairs on 200 k vertices: every phase takes its parallel path (several staging rounds
// per block; rows sorted in batches, in short batches, alone, and alone with more than 4096
// entries at the hubs; several compaction rounds). Every thread count builds the CSR of the
// definition, for every self-loop mode, symmetrized or not.
TEST(CsrBuilder, EveryThreadCountBuildsTheReferenceCsr) {
  const vertex_t n = 200000;
  std::vector<vertex_t> pairs;
  std::uint64_t state = 99;
  for (int i = 0; i < 1300000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto src = static_cast<vertex_t>((state >> 20) % n);
    // A fifth of the edges point at 7 hubs, another fifth at 300 vertices 7 apart (rows of
    // about 900 entries with short rows between them); some are self-loops.
    pairs.push_back(src);
    pairs.push_back(i % 5 == 0    ? static_cast<vertex_t>((state >> 40) % 7)
                    : i % 5 == 1  ? static_cast<vertex_t>(100 + 7 * ((state >> 40) % 300))
                    : i % 97 == 0 ? src
                                  : static_cast<vertex_t>((state >> 7) % n));
  }
  pairs.insert(pairs.end(), pairs.begin(), pairs.begin() + 20000);  // duplicates
  const int threads = omp_get_max_threads();
  for (const bool symmetrize : {false, true}) {
    for (const SelfLoops loops : {SelfLoops::kKeep, SelfLoops::kAdd, SelfLoops::kRemove}) {
      CsrBuildOptions options;
      options.symmetrize = symmetrize;
      options.self_loops = loops;
      const CsrBuildResult reference = reference_csr(n, pairs, options);
      for (const int t : {1, 2, 3, 5}) {
        omp_set_num_threads(t);
        // A small edge estimate gives the smallest staging rounds.
        const CsrBuildResult built = build_in_csr(n, odd_block_source(pairs), options, 1);
        const std::string what = std::string(to_string(loops)) +
                                 (symmetrize ? " symmetrized, " : ", ") + std::to_string(t) +
                                 " threads";
        EXPECT_EQ(built.indptr, reference.indptr) << what;
        EXPECT_EQ(built.indices, reference.indices) << what;
        EXPECT_EQ(built.input_edges, reference.input_edges) << what;
        EXPECT_EQ(built.duplicates_removed, reference.duplicates_removed) << what;
        EXPECT_EQ(built.self_loops_removed, reference.self_loops_removed) << what;
        EXPECT_EQ(built.self_loops_added, reference.self_loops_added) << what;
      }
      omp_set_num_threads(threads);
      EXPECT_GT(reference.duplicates_removed, 20000);
      EXPECT_GT(reference.indptr[1] - reference.indptr[0], 4096);  // a hub row
    }
  }
}

// Ids of 24 bits leave 8 bits of the 32-bit sort keys for the row within a group (of 256 rows,
// not 1024): sources and destinations near the top of the id range, and rows at the group
// boundaries, land where the reference puts them.
TEST(CsrBuilder, WideIdsBuildTheReferenceCsr) {
  const vertex_t n = (vertex_t(1) << 23) + 3;
  std::vector<vertex_t> pairs;
  std::uint64_t state = 5;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto high = static_cast<vertex_t>(n - 1 - (state >> 50) % 600);
    const auto any = static_cast<vertex_t>((state >> 20) % n);
    const auto boundary = static_cast<vertex_t>(((state >> 8) % 32768) * 256 + (i % 2 ? 255 : 0));
    pairs.push_back(i % 3 == 0 ? high : any);
    pairs.push_back(i % 3 == 1 ? high : (i % 3 == 2 ? boundary : any));
  }
  pairs.insert(pairs.end(), pairs.begin(), pairs.begin() + 2000);  // duplicates
  const int threads = omp_get_max_threads();
  for (const bool symmetrize : {false, true}) {
    CsrBuildOptions options;
    options.symmetrize = symmetrize;
    options.self_loops = symmetrize ? SelfLoops::kRemove : SelfLoops::kKeep;
    const CsrBuildResult reference = reference_csr(n, pairs, options);
    for (const int t : {1, 3}) {
      omp_set_num_threads(t);
      const CsrBuildResult built = build_in_csr(n, odd_block_source(pairs), options);
      EXPECT_EQ(built.indptr, reference.indptr) << t << " threads";
      EXPECT_EQ(built.indices, reference.indices) << t << " threads";
      EXPECT_EQ(built.duplicates_removed, reference.duplicates_removed) << t << " threads";
    }
    omp_set_num_threads(threads);
    EXPECT_GE(reference.duplicates_removed, 1000);
  }
}

// Compaction moves chunks of 256 rows left by the duplicates removed before them. Four shapes
// of that shift, on 64 077 vertices (not a multiple of 256) with every third row empty: heavy
// rows full of duplicates at the front (a shift of many chunks at once), no duplicates before
// row 30 000 (chunks that stay in place), a few duplicates in every row (a shift that grows by
// less than a chunk at a time, so each chunk writes over its predecessor's entries), and 40
// duplicates in all (a shift of a few entries: the rows move by pieces, with the entries each
// piece writes over saved aside). Every thread count builds the CSR of the definition.
TEST(CsrBuilder, CompactionOfEveryShiftBuildsTheReferenceCsr) {
  const vertex_t n = 250 * 256 + 77;
  enum class Duplicates { kHeavyFirstRows, kLateRows, kEveryRow, kFew };
  for (const Duplicates shape : {Duplicates::kHeavyFirstRows, Duplicates::kLateRows,
                                 Duplicates::kEveryRow, Duplicates::kFew}) {
    std::vector<vertex_t> pairs;
    std::uint64_t state = 17;
    const auto draw = [&state](std::uint64_t range) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return static_cast<vertex_t>((state >> 24) % range);
    };
    const auto add = [&pairs](vertex_t src, vertex_t dst) {
      pairs.push_back(src);
      pairs.push_back(dst);
    };
    for (vertex_t v = 0; v < n; ++v) {
      if (v % 3 == 2) continue;  // an empty row
      const int distinct = v < 12 && shape == Duplicates::kHeavyFirstRows ? 3000 : 2 + v % 5;
      for (int i = 0; i < distinct; ++i) add(draw(std::uint64_t(n)), v);
    }
    const std::size_t distinct_pairs = pairs.size() / 2;
    for (std::size_t i = 0; i < distinct_pairs; ++i) {
      const vertex_t src = pairs[2 * i], dst = pairs[2 * i + 1];
      const bool repeat = shape == Duplicates::kHeavyFirstRows ? dst < 12
                          : shape == Duplicates::kLateRows     ? dst >= 30000 && i % 4 == 0
                          : shape == Duplicates::kEveryRow     ? i % 3 == 0
                                                               : i % 4000 == 1;
      for (int copy = 0; repeat && copy < (dst < 12 ? 3 : 1); ++copy) add(src, dst);
    }
    CsrBuildOptions options;
    const CsrBuildResult reference = reference_csr(n, pairs, options);
    const int threads = omp_get_max_threads();
    for (const int t : {1, 2, 3, 7}) {
      omp_set_num_threads(t);
      const CsrBuildResult built = build_in_csr(n, odd_block_source(pairs), options);
      const std::string what =
          "shape " + std::to_string(int(shape)) + ", " + std::to_string(t) + " threads";
      EXPECT_EQ(built.indptr, reference.indptr) << what;
      EXPECT_EQ(built.indices, reference.indices) << what;
      EXPECT_EQ(built.duplicates_removed, reference.duplicates_removed) << what;
    }
    omp_set_num_threads(threads);
    if (shape == Duplicates::kFew)
      EXPECT_GE(reference.duplicates_removed, 40);
    else
      EXPECT_GT(reference.duplicates_removed, 10000) << int(shape);
    EXPECT_EQ(reference.indptr[3], reference.indptr[2]);  // row 2 is empty
  }
}

TEST(ImportCli, CoraRoundTripThroughImportAndInfo) {
  test::ScratchDir dir;
  const auto result =
      test::run_command(test::bin("sluice-preprocess") + " import --format ogb --input " +
                        test::cora_dir() + " --symmetrize --output " + dir.file("cora.h5"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const Dataset d = read_dataset(dir.file("cora.h5"));
  EXPECT_EQ(d.num_nodes, 2708);
  EXPECT_EQ(d.num_edges(), 10556);
  EXPECT_EQ(d.feature_dim, 1433);
  EXPECT_EQ(d.num_classes, 7);
  const auto info = test::run_command(test::bin("sluice-preprocess") + " info --json " +
                                      dir.file("cora.h5") + " 2>/dev/null");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  const auto json = nlohmann::json::parse(info.output);
  EXPECT_EQ(json["nodes"], 2708);
  EXPECT_EQ(json["edges"], 10556);
  EXPECT_EQ(json["feature_dim"], 1433);
  EXPECT_EQ(json["classes"], 7);
  EXPECT_EQ(json["train"], 140);
  EXPECT_EQ(json["valid"], 500);
  EXPECT_EQ(json["test"], 1000);
  EXPECT_EQ(json["symmetrized"], true);
  EXPECT_EQ(json["fingerprint"], compute_fingerprint(d));
  EXPECT_EQ(json["name"], "cora");
  EXPECT_EQ(test::list_dir(dir.path()), (std::vector<std::string>{"cora.h5"}));
}

TEST(ImportCli, EdgeListWithRemapStoresOriginalIds) {
  test::ScratchDir dir;
  test::write_text(dir.file("g.txt"), "100 200\n200 300\n");
  const auto result = test::run_command(
      test::bin("sluice-preprocess") + " import --format edgelist --remap --symmetrize --input " +
      dir.file("g.txt") + " --random-features 4 --random-labels 2 --output " + dir.file("g.h5"));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const Dataset d = read_dataset(dir.file("g.h5"));
  EXPECT_EQ(d.original_ids, (std::vector<std::int64_t>{100, 200, 300}));
  EXPECT_EQ(d.num_edges(), 4);
  EXPECT_EQ(d.feature_dim, 4);
  EXPECT_NE(d.options.find("\"remap\":true"), std::string::npos) << d.options;
}

TEST(ImportCli, HelpExitsZeroAndUnknownOptionsAreRejected) {
  for (const char* command : {"import", "generate", "info"}) {
    const auto help = test::run_command(test::bin("sluice-preprocess") + " " + command + " --help");
    EXPECT_EQ(help.exit_code, 0) << help.output;
    EXPECT_NE(help.output.find("usage: sluice-preprocess"), std::string::npos) << help.output;
  }
  const auto bad = test::run_command(test::bin("sluice-preprocess") +
                                     " import --format ogb --input x --output y --bogus 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("bogus"), std::string::npos) << bad.output;
  const auto number =
      test::run_command(test::bin("sluice-preprocess") + " generate --scale twelve --output y.h5");
  EXPECT_NE(number.exit_code, 0);
  const auto format = test::run_command(test::bin("sluice-preprocess") +
                                        " import --format csv --input x --output /tmp/y.h5");
  EXPECT_NE(format.exit_code, 0);
  EXPECT_NE(format.output.find("--format"), std::string::npos) << format.output;
}

}  // namespace
}  // namespace sluice
