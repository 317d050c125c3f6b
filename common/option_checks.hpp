// Range checks shared by the command-line parsers of sluice-preprocess and sluice-train: every
// signed integer option must be at least its minimum (0 unless listed), so that a negative
// count, width or dimension stops at parsing with a message naming the option.
#pragma once

#include <boost/program_options/variables_map.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/error.hpp"

namespace sluice {

// An option whose smallest accepted value is not 0, e.g. {"partitions", 1}.
struct OptionMinimum {
  const char* name;
  std::int64_t minimum;
};

// Throws InputError "--NAME must be at least MIN (got VALUE)" for the first signed integer
// option below its minimum; `minimums` lists the options whose minimum is not 0.
inline void check_integer_options(const boost::program_options::variables_map& values,
                                  std::initializer_list<OptionMinimum> minimums = {}) {
  for (const auto& [name, entry] : values) {
    const auto& value = entry.value();
    std::int64_t number = 0;
    if (const int* i = boost::any_cast<int>(&value))
      number = *i;
    else if (const long* l = boost::any_cast<long>(&value))
      number = *l;
    else if (const long long* ll = boost::any_cast<long long>(&value))
      number = *ll;
    else
      continue;
    std::int64_t minimum = 0;
    for (const OptionMinimum& m : minimums)
      if (name == m.name) minimum = m.minimum;
    SLUICE_INPUT_CHECK(number >= minimum, "--", name, " must be at least ", minimum, " (got ",
                       number, ")");
  }
}

}  // namespace sluice
