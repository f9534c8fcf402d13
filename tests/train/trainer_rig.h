// The Trainer tests' rig: a small MLP (16 -> hidden -> 4), Adam and loaders over data labelled by a fixed
// random two-layer teacher, built the same way from the same seeds every time, and the model's weights as one
// flat vector for bit-for-bit comparisons.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "framework/generator.h"
#include "framework/random.h"
#include "models/mlp.h"
#include "ops/elementwise/elementwise.h"
#include "ops/matmul/matmul.h"
#include "ops/reduce/reduce.h"
#include "optim/adam.h"
#include "train/trainer.h"

namespace mantissa::testing {

constexpr int64_t kFeatures = 16, kClasses = 4;

// n examples labelled by a fixed random two-layer "teacher": learnable but not linear.
inline std::shared_ptr<TensorDataset> teacher_data(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Generator teacher(99);
  const Tensor w1 = randn({kFeatures, 32}, {}, &teacher), w2 = randn({32, kClasses}, {}, &teacher);
  const Tensor x = randn({n, kFeatures}, {}, &gen);
  const Tensor y = argmax(matmul(relu(matmul(x, w1)), w2), 1);
  return std::make_shared<TensorDataset>(std::vector<Tensor>{x, y});
}

// A model, its optimizer and loaders, built the same way from the same seed every time.
struct Rig {
  explicit Rig(std::vector<int64_t> hidden = {32}, int64_t batch = 32, int64_t n = 512, uint64_t init_seed = 5)
      : gen(init_seed),
        model(kFeatures, std::move(hidden), kClasses, {.generator = &gen}),
        adam(model.named_parameters(), {.lr = 1e-2}),
        train(teacher_data(n, 1), {.batch_size = batch, .shuffle = Shuffle::kRandom, .seed = 3, .prefetch = 2}),
        test(teacher_data(256, 2), {.batch_size = 100}) {}
  Task task() {
    return classification_task([this](const Tensor& x) { return model.forward(x); });
  }
  Generator gen;
  MLP model;
  Adam adam;
  DataLoader train, test;
};

inline std::vector<float> flat_weights(const Module& m) {
  std::vector<float> out;
  for (const NamedTensor& p : m.named_parameters()) {
    const Tensor c = p.tensor.contiguous();
    out.insert(out.end(), c.data<float>(), c.data<float>() + c.numel());
  }
  return out;
}

}  // namespace mantissa::testing
