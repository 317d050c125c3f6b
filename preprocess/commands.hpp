// The subcommands of sluice-preprocess. Each takes the arguments after the subcommand name
// (args[0] is the subcommand itself), parses them with Boost.Program_options, and returns the
// process exit code. Errors are thrown (InputError for the user's mistakes).
#pragma once

#include <string>
#include <vector>

namespace sluice {

int run_import(const std::vector<std::string>& args);     // preprocess/cmd_import.cpp
int run_generate(const std::vector<std::string>& args);   // preprocess/cmd_import.cpp
int run_info(const std::vector<std::string>& args);       // preprocess/cmd_import.cpp
int run_partition(const std::vector<std::string>& args);  // preprocess/cmd_partition.cpp
int run_stats(const std::vector<std::string>& args);      // preprocess/cmd_partition.cpp
int run_verify(const std::vector<std::string>& args);     // preprocess/cmd_partition.cpp

}  // namespace sluice
