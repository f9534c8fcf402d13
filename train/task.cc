// to_device, classification_task and language_model_task (train/task.h).
#include "train/task.h"

#include "framework/error.h"
#include "models/gpt.h"
#include "ops/elementwise/elementwise.h"
#include "ops/loss/loss.h"
#include "ops/reduce/reduce.h"

namespace mantissa {

void to_device(Example& batch, Device device) {
  if (device.is_cpu()) return;
  for (Tensor& t : batch) t = t.to(device);
}

Task classification_task(std::function<Tensor(const Tensor& x)> forward) {
  Task task;
  task.classifier = true;
  task.loss = [forward](const Example& batch) {
    MT_CHECK(batch.size() == 2, "classification_task: a batch must be {inputs, labels}, got ", batch.size(),
             " tensors");
    return cross_entropy(forward(batch[0]), batch[1]);
  };
  task.evaluate = [forward](const Example& batch) {
    MT_CHECK(batch.size() == 2, "classification_task: a batch must be {inputs, labels}, got ", batch.size(),
             " tensors");
    const Tensor logits = forward(batch[0]);
    EvalSums s;
    s.loss_sum = cross_entropy(logits, batch[1], {.reduction = Reduction::kSum}).item();
    s.correct = static_cast<int64_t>(sum(eq(argmax(logits, 1), batch[1]).to(DType::kF32)).item());
    s.count = batch[1].size(0);
    return s;
  };
  return task;
}

Task language_model_task(GPT& model) {
  Task task;
  task.loss = [&model](const Example& batch) {
    MT_CHECK(batch.size() == 2, "language_model_task: a batch must be {tokens, next tokens}, got ", batch.size(),
             " tensors");
    return model.forward(batch[0], batch[1]).loss;
  };
  task.evaluate = [&model](const Example& batch) {
    MT_CHECK(batch.size() == 2, "language_model_task: a batch must be {tokens, next tokens}, got ", batch.size(),
             " tensors");
    EvalSums s;
    s.count = batch[1].numel();
    s.loss_sum = model.forward(batch[0], batch[1]).loss.item() * static_cast<double>(s.count);
    return s;
  };
  return task;
}

}  // namespace mantissa
