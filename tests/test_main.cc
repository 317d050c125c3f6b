// Shared GoogleTest main: quiet logs unless SLUICE_TEST_VERBOSE is set.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/log.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!std::getenv("SLUICE_TEST_VERBOSE")) sluice::set_log_level(sluice::LogLevel::kQuiet);
  return RUN_ALL_TESTS();
}
