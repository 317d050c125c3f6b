// The row ranges in which a one-chunk device's forward transforms and sends its peers' rows
// (schedule_detail::send_ranges(), Schedule::Impl::send_transforms()): two ranges split where
// two thirds of the sent rows lie below, each range's positions in every peer's list; one range
// where nothing is sent, a list is not ascending, or a range would be empty. (That the sends
// train what pulls train, the two-GPU agreement cases of tests/gpu/test_cuda_train.cpp check.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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
  const auto ranges = send_ranges(received({{0, 3, 5, 8, 9, 12}}), 20);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{9, 20}));
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
  ranges = send_ranges(received({{0}, {0}, {0, 5}}), 10);
  ASSERT_EQ(row_ends(ranges), (std::vector<std::int64_t>{10}));
  EXPECT_EQ(ranges[0].received_end, (std::vector<std::int64_t>{1, 2, 4}));
}

}  // namespace
}  // namespace sluice
