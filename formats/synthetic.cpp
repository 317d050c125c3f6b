// Implementation of formats/synthetic.hpp.
#include "formats/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/parallel.hpp"
#include "formats/text_input.hpp"

namespace sluice {

namespace {
constexpr std::uint64_t kFeatureTag = 0xfea7;
constexpr std::uint64_t kLabelTag = 0x1abe1;
constexpr std::uint64_t kSplitTag = 0x5b117;
}  // namespace

float hash_to_normal(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::uint64_t h = key_hash(seed, a, b, c);
  // Two 32-bit uniforms in (0, 1].
  const double u1 = (static_cast<double>(h >> 32) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(h & 0xffffffffu) * (1.0 / 4294967296.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

void fill_normals(std::uint64_t seed, std::uint64_t a, std::uint64_t b, float* out,
                  std::int64_t count) {
  const std::uint64_t base = key_hash(seed, a, b);
  for (std::int64_t j = 0; j < count; j += 2) {
    const std::uint64_t h = mix64(base + static_cast<std::uint64_t>(j));
    const double u1 = (static_cast<double>(h >> 32) + 1.0) * (1.0 / 4294967296.0);
    const double u2 = static_cast<double>(h & 0xffffffffu) * (1.0 / 4294967296.0);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    out[j] = static_cast<float>(radius * std::cos(angle));
    if (j + 1 < count) out[j + 1] = static_cast<float>(radius * std::sin(angle));
  }
}

std::vector<float> random_features(vertex_t n, std::int64_t dim, std::uint64_t seed) {
  std::vector<float> features(static_cast<std::size_t>(n) * static_cast<std::size_t>(dim));
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(n) * dim))
  for (vertex_t v = 0; v < n; ++v)
    fill_normals(seed, kFeatureTag, static_cast<std::uint64_t>(v),
                 features.data() + std::size_t(v) * dim, dim);
  return features;
}

std::vector<std::int32_t> random_labels(vertex_t n, std::int32_t classes, std::uint64_t seed) {
  SLUICE_INPUT_CHECK(classes > 0, "the number of random labels must be positive");
  std::vector<std::int32_t> labels(n);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(n)))
  for (vertex_t v = 0; v < n; ++v)
    labels[v] = static_cast<std::int32_t>(key_hash(seed, kLabelTag, v) % std::uint64_t(classes));
  return labels;
}

std::array<double, 3> parse_split_fractions(const std::string& text) {
  std::array<double, 3> fractions{};
  Tokens tokens(text);
  std::string_view token;
  int count = 0;
  while (tokens.next(token)) {
    SLUICE_INPUT_CHECK(count < 3, "--split-fractions '", text,
                       "': expected three numbers train,valid,test");
    double value = 0;
    SLUICE_INPUT_CHECK(parse_double(token, value) && value >= 0 && value <= 1,
                       "--split-fractions '", text, "': '", token, "' is not a fraction in [0, 1]");
    fractions[count++] = value;
  }
  SLUICE_INPUT_CHECK(count == 3, "--split-fractions '", text,
                     "': expected three numbers train,valid,test");
  SLUICE_INPUT_CHECK(fractions[0] + fractions[1] + fractions[2] <= 1 + 1e-9, "--split-fractions '",
                     text, "': fractions sum to more than 1");
  return fractions;
}

Split random_split(const std::vector<std::int32_t>& labels, const std::array<double, 3>& fractions,
                   std::uint64_t seed) {
  // Order the labeled vertices by a per-vertex hash: a seeded shuffle independent of threads.
  std::vector<std::pair<std::uint64_t, vertex_t>> keyed;
  for (std::size_t v = 0; v < labels.size(); ++v)
    if (labels[v] >= 0) keyed.emplace_back(key_hash(seed, kSplitTag, v), static_cast<vertex_t>(v));
  std::sort(keyed.begin(), keyed.end());
  const auto count = static_cast<double>(keyed.size());
  const auto train_end = static_cast<std::size_t>(std::floor(fractions[0] * count + 1e-9));
  const auto valid_end =
      train_end + static_cast<std::size_t>(std::floor(fractions[1] * count + 1e-9));
  const double total = fractions[0] + fractions[1] + fractions[2];
  const auto test_end =
      std::abs(total - 1.0) < 1e-9
          ? keyed.size()
          : std::min(keyed.size(),
                     valid_end + static_cast<std::size_t>(std::floor(fractions[2] * count + 1e-9)));
  Split split;
  for (std::size_t i = 0; i < test_end; ++i) {
    auto& target = i < train_end ? split.train : i < valid_end ? split.valid : split.test;
    target.push_back(keyed[i].second);
  }
  for (auto* ids : {&split.train, &split.valid, &split.test}) std::sort(ids->begin(), ids->end());
  return split;
}

}  // namespace sluice
