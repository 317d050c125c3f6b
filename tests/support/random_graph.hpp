// Small random datasets for the training tests (CPU equivalence and CPU/CUDA agreement): a
// directed graph with isolated, source-only and sink-only vertices, random features, labels
// (some unlabeled) and train/valid/test splits, deterministic in the seed.
#pragma once

#include <cstdint>

#include "formats/dataset.hpp"

namespace sluice::test {

// Vertices v % 23 == 7 never receive the drawn edges. Every other drawn edge u <- v also adds
// v <- u (partly symmetric); kSkip leaves those out too where v % 23 == 7 (such a v then has no
// in-edges at all), kAdd keeps them.
enum class ReverseEdgesIntoSources { kSkip, kAdd };

// n vertices, each vertex except v % 17 == 5 drawing out_degree neighbors (duplicates merge,
// self loops may occur), dim features in [-1, 1), labels in [0, classes) with v % 13 == 3
// unlabeled, about 40/30/30 % train/valid/test. Passes validate_dataset.
Dataset random_dataset(vertex_t n, int out_degree, std::int64_t dim, std::int32_t classes,
                       std::uint64_t seed, ReverseEdgesIntoSources reverse_into_sources);

// `d` over the union of its edges and their reverses (a symmetric graph; self loops kept), its
// features, labels and splits as they were. Passes validate_dataset.
Dataset symmetrized(Dataset d);

// `d` with `extra` more in-edges into each of its first `hubs` vertices (sources spread over the
// graph): its edge-balanced chunks then hold few destinations at the start and many at the end,
// as a skewed real graph's do. Passes validate_dataset.
Dataset with_dense_start(Dataset d, vertex_t hubs, vertex_t extra);

}  // namespace sluice::test
