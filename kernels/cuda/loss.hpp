// Launcher of the masked softmax cross-entropy with argmax predictions (loss.cu: a lane group
// per row up to 256 classes, a warp per row above).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::cuda {

// For each row i: predictions[i] = argmax_j logits[i, j] (lowest index on ties; predictions may
// be null). mask[i] holds row i's splits (bit 0 train, 1 valid, 2 test; null: every row trains).
// Rows with 0 <= labels[i] < classes and bit 0 add -log softmax[label] to *loss (device double,
// atomically; loss may be null) and get grad = scale * (softmax - onehot); every other row's grad
// is 0. grad may be null (evaluation). labels may be null (no row is labeled). split_counts (6
// device counters, or null): += per bit k the labeled rows with bit k (counter k) and those
// predicted right (3 + k).
void launch_softmax_cross_entropy(const float* logits, std::int64_t ld, std::int64_t rows,
                                  std::int64_t classes, const std::int32_t* labels,
                                  const std::int32_t* mask, float scale, float* grad,
                                  std::int64_t ldg, double* loss, std::int32_t* predictions,
                                  unsigned long long* split_counts, cudaStream_t stream);

}  // namespace sluice::cuda
