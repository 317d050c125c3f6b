// common/log.hpp's compact stage summary: only the outermost stages, grouped by the name before
// ':' or " (", with their times summed and the peak memory; seconds with three digits.
#include <gtest/gtest.h>

#include <string>

#include "common/log.hpp"

namespace sluice {
namespace {

TEST(LogFormat, SecondsKeepThreeSignificantDigits) {
  EXPECT_EQ(format_seconds(0.0004), "0.000 s");
  EXPECT_EQ(format_seconds(0.215863), "0.216 s");
  EXPECT_EQ(format_seconds(1.23456), "1.23 s");
  EXPECT_EQ(format_seconds(12.345), "12.3 s");
  EXPECT_EQ(format_seconds(1234.4), "1234 s");
}

// One process-wide summary: this test is the only one in its executable that times stages.
TEST(StageSummary, OutermostStagesGroupedByName) {
  EXPECT_EQ(stage_summary(), "");
  {
    StageTimer outer("partition (metis, P=2)");
    StageTimer inner("multilevel: coarsen");  // runs inside "partition": left out
  }
  { StageTimer first("csr: count degrees"); }
  { StageTimer second("csr: scatter edges"); }
  const std::string summary = stage_summary();
  EXPECT_EQ(summary.rfind("partition ", 0), 0u) << summary;
  EXPECT_NE(summary.find(" s, csr "), std::string::npos) << summary;
  EXPECT_EQ(summary.find("multilevel"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("count degrees"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("csr", summary.find("csr") + 1), std::string::npos) << summary;
  EXPECT_NE(summary.find("; peak memory "), std::string::npos) << summary;
}

}  // namespace
}  // namespace sluice
