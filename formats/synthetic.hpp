// Seeded synthetic vertex data for graphs without their own: random features, random labels
// and random train/valid/test splits. Every value is a pure function of (seed, vertex, column),
// so results do not depend on the thread count.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.hpp"

namespace sluice {

// Standard normal sample from two hashes (Box-Muller).
float hash_to_normal(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c);

// Fills out[0, count) with standard normal samples that depend only on (seed, a, b) and the
// position: one keyed hash per call, one mix per pair of samples (Box-Muller's two outputs).
void fill_normals(std::uint64_t seed, std::uint64_t a, std::uint64_t b, float* out,
                  std::int64_t count);

// n x dim standard-normal features.
std::vector<float> random_features(vertex_t n, std::int64_t dim, std::uint64_t seed);
// n labels uniform in [0, classes).
std::vector<std::int32_t> random_labels(vertex_t n, std::int32_t classes, std::uint64_t seed);

// "0.25,0.5,0.25" -> fractions of (train, valid, test); each in [0, 1], sum <= 1 (+1e-9).
std::array<double, 3> parse_split_fractions(const std::string& text);

struct Split {
  std::vector<vertex_t> train, valid, test;  // sorted
};
// Splits the labeled vertices (label >= 0) at random by the fractions (rounded down; test gets
// the rest when the fractions sum to 1).
Split random_split(const std::vector<std::int32_t>& labels, const std::array<double, 3>& fractions,
                   std::uint64_t seed);

}  // namespace sluice
