// Ten Gaussian classes in `dims` dimensions, for the FP8 training tests: a prototype per class (fixed) plus noise
// of standard deviation 1.5, labels uniform, all fixed by the seed. Enough overlap that a small MLP reaches about
// 94% after 60 steps, so that two precisions can differ.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "framework/tensor.h"

namespace mantissa::testing {

struct ClassBatch {
  Tensor x, y;  // [n, dims] f32, [n] i64
};

inline ClassBatch gaussian_classes(int64_t n, int64_t dims, uint32_t seed) {
  std::mt19937 protos(1);
  std::normal_distribution<float> normal;
  std::vector<float> proto(static_cast<size_t>(10 * dims));
  for (float& p : proto) p = normal(protos);
  std::mt19937 gen(seed);
  ClassBatch b{zeros({n, dims}), zeros({n}, {.dtype = DType::kI64})};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(gen() % 10);
    b.y.data<int64_t>()[i] = c;
    for (int64_t j = 0; j < dims; ++j)
      b.x.data<float>()[i * dims + j] = proto[static_cast<size_t>(c * dims + j)] + 1.5f * normal(gen);
  }
  return b;
}

}  // namespace mantissa::testing
