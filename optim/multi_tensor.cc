// The multi-tensor launch planner (optim/multi_tensor.h).
#include "optim/multi_tensor.h"

#include "framework/error.h"

namespace mantissa::multi_tensor {

std::vector<Launch> plan(std::span<const int64_t> sizes, Limits limits) {
  MT_CHECK(limits.max_tensors > 0 && limits.max_tensors <= 255 && limits.max_blocks > 0 && limits.chunk_size > 0,
           "multi_tensor::plan: bad limits: ", limits.max_tensors, " tensors, ", limits.max_blocks, " blocks, chunk ",
           limits.chunk_size);
  std::vector<Launch> launches;
  Launch current;
  auto flush = [&] {
    if (!current.blocks.empty()) launches.push_back(std::move(current));
    current = Launch{};
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    MT_CHECK(n >= 0, "multi_tensor::plan: tensor ", i, " has ", n, " elements");
    if (n == 0) continue;
    const int64_t chunks = (n + limits.chunk_size - 1) / limits.chunk_size;
    MT_CHECK(chunks <= INT32_MAX, "multi_tensor::plan: tensor ", i, " has ", n, " elements, more than ",
             int64_t{INT32_MAX}, " chunks of ", limits.chunk_size);
    for (int64_t c = 0; c < chunks; ++c) {
      // A new tensor, or this tensor again in a fresh launch: give it a slot, flushing a full list first.
      if (current.tensors.empty() || current.tensors.back() != static_cast<int>(i)) {
        if (static_cast<int>(current.tensors.size()) == limits.max_tensors) flush();
        current.tensors.push_back(static_cast<int>(i));
      }
      current.blocks.push_back({static_cast<int>(current.tensors.size()) - 1, c});
      if (static_cast<int>(current.blocks.size()) == limits.max_blocks) flush();
    }
  }
  flush();
  return launches;
}

}  // namespace mantissa::multi_tensor
