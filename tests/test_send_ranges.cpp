// The row ranges in which a one-chunk device's forward transforms and sends its peers' rows
// (schedule_detail::send_ranges(), Schedule::Impl::send_transforms()): the sent rows first where
// at least as many rows lie above (or else below) them, else two ranges split where two thirds of
// the sent rows lie below; each range's positions in every peer's list and whether they are one run
// of rows; one range where nothing is sent, a list is not ascending, or a range would be empty.
// (That the sends train what pulls train, the two-GPU agreement cases of
// tests/gpu/test_cuda_train.cpp check.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "preprocess/plan_builder.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/graphs.hpp"
#include "tests/support/plans.hpp"
#include "train/schedule_lists.hpp"

namespace sluice {
namespace {

using schedule_detail::ChunkLists;
using schedule_detail::send_ranges;
using schedule_detail::SendRange;

// Lists as receive_pushes() lays them out: each pusher's rows consecutive, pushers ascending.
ChunkLists received(const std::vector<std::vector<vertex_t>>& per_pusher) {
  ChunkLists li;
  for (std::size_t q = 0; q < per_pusher.size(); ++q) {
    li.received.push_back(
        {int(q) + 1, std::int64_t(li.received_rows.size()), std::int64_t(per_pusher[q].size())});
    li.received_rows.insert(li.received_rows.end(), per_pusher[q].begin(), per_pusher[q].end());
  }
  return li;
}

std::vector<std::int64_t> row_ends(const std::vector<SendRange>& ranges) {
  std::vector<std::int64_t> out;
  for (const SendRange& r : ranges) out.push_back(r.row_end);
  return out;
}

TEST(SendRanges, SplitWhereTwoThirdsOfTheSentRowsLieBelow) {
  // Six sent rows: the fifth smallest (position 4 = 2 * 6 / 3) is row 9, so rows 0-8 go first
  // with the four sent rows among them.
  const auto ranges = send_ranges(received({{0, 3, 5, 8, 9, 12}}), 14);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{9, 14}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(ranges[1].received_end, (std::vector<std::int64_t>{6}));
}

TEST(SendRanges, EachPeersListSplitsAtTheSameRow) {
  // Two peers' lists (positions 0-2 and 3-6): rows 1 2 3 4 7 10 15 sorted, the split row 7.
  const auto ranges = send_ranges(received({{1, 4, 7}, {2, 3, 10, 15}}), 16);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{7, 16}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(ranges[1].received_end, (std::vector<std::int64_t>{3, 7}));
}

TEST(SendRanges, SentRowsFirstWhereTheOtherRowsHideTheirCopies) {
  // Rows 0-7 sent (two peers: 0-3 and 2-7), twelve rows above them: rows 0-7 first, each peer's
  // rows one run, then rows 8-19, which send nothing.
  auto ranges = send_ranges(received({{0, 1, 2, 3}, {2, 3, 4, 5, 6, 7}}), 20);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].row_begin, 0);
  EXPECT_EQ(ranges[0].row_end, 8);
  EXPECT_EQ(ranges[0].received_begin, (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{4, 10}));
  EXPECT_EQ(ranges[0].sent_first, (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(ranges[1].row_begin, 8);
  EXPECT_EQ(ranges[1].row_end, 20);
  EXPECT_EQ(ranges[1].received_begin, ranges[1].received_end);
  EXPECT_EQ(ranges[1].sent_first, (std::vector<std::int64_t>{-1, -1}));
  // The same at the end: rows 12-19 first, then rows 0-11.
  ranges = send_ranges(received({{12, 13, 14, 15}, {14, 15, 16, 17, 18, 19}}), 20);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].row_begin, 12);
  EXPECT_EQ(ranges[0].row_end, 20);
  EXPECT_EQ(ranges[0].sent_first, (std::vector<std::int64_t>{12, 14}));
  EXPECT_EQ(ranges[1].row_begin, 0);
  EXPECT_EQ(ranges[1].row_end, 12);
  // Not a run: rows gathered (sent_first -1).
  const auto gapped = send_ranges(received({{1, 3}}), 20);
  ASSERT_EQ(row_ends(gapped), (std::vector<std::int64_t>{4, 20}));
  EXPECT_EQ(gapped[0].sent_first, (std::vector<std::int64_t>{-1}));
  // Fewer rows on either side (five below, five above) than sent (ten): the two-thirds split in
  // row order.
  const auto split = send_ranges(received({{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}}), 20);
  ASSERT_EQ(row_ends(split), (std::vector<std::int64_t>{11, 20}));
  EXPECT_EQ(split[0].row_begin, 0);
  EXPECT_EQ(split[0].sent_first, (std::vector<std::int64_t>{5}));
  EXPECT_EQ(split[1].received_begin, (std::vector<std::int64_t>{6}));
  EXPECT_EQ(split[1].sent_first, (std::vector<std::int64_t>{11}));
}

// A one-chunk plan numbers each partition's boundary vertices first: each device's rows that its
// peer reads are one run at its start, sent first and as one block.
TEST(SendRanges, OneChunkPlansSendOneRunFirst) {
  const Dataset d = test::local_multigraph(400, 1000, 5);
  const Plan plan = test::make_plan(d, test::plan_options(2, 1).partitioner("metis").seed(3));
  std::vector<ChunkLists> lists = schedule_detail::derive_lists(
      d, plan, test::model_spec(test::model_shape("gcn", 2).in_dim(8).hidden(8).classes(3)),
      CommMode::kP2pReuse);
  schedule_detail::receive_pushes(lists, 2);
  for (int p = 0; p < 2; ++p) {
    SCOPED_TRACE(cat("partition ", p));
    const ChunkLists& li = lists[std::size_t(p)];
    const std::int64_t rows = plan.chunk(0, p).num_dst();
    ASSERT_EQ(li.received.size(), 1u);
    const std::int64_t sent = li.received[0].count;
    ASSERT_GT(sent, 0);
    ASSERT_GE(rows - sent, sent) << "a graph whose partitions hold more interior rows";
    const auto ranges = send_ranges(li, rows);
    ASSERT_EQ(ranges.size(), 2u);
    EXPECT_EQ(ranges[0].row_begin, 0);
    EXPECT_EQ(ranges[0].row_end, sent);
    EXPECT_EQ(ranges[0].sent_first, (std::vector<std::int64_t>{0}));
    EXPECT_EQ(ranges[0].received_end[0] - ranges[0].received_begin[0], sent);
    EXPECT_EQ(ranges[1].row_begin, sent);
    EXPECT_EQ(ranges[1].row_end, rows);
  }
}

TEST(SendRanges, OneRangeWhereASplitCannotHelp) {
  // Nothing sent.
  auto ranges = send_ranges(received({}), 10);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{10}));
  EXPECT_TRUE(ranges[0].received_end.empty());
  // A list out of order: its positions are the peer's slots, which must keep their order.
  ranges = send_ranges(received({{1, 2}, {6, 3, 8}}), 10);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{10}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{2, 5}));
  // The split row would be row 0: the first range would be empty.
  ranges = send_ranges(received({{0}, {0}, {0, 5}}), 8);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{1, 2, 4}));
}

}  // namespace
}  // namespace sluice
