// Multi-tensor apply, the host half: packs the (pointer, n) lists of many tensors (all the grads or all
// the parameters of an optimizer) into a few kernel launches whose lists travel in the kernel's
// parameters (PyTorch's multi_tensor_apply idea), so one optimizer step is a handful of launches instead
// of one per tensor. Each CUDA block works on one chunk of one tensor. Plain host code, tested on the CPU
// (tests/optim/multi_tensor_test.cc); the kernels are in optim/cuda/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace mantissa::multi_tensor {

// The limits, from the kernel-parameter budget: 4 KiB, the limit on every toolkit (CUDA 12.1+ allows
// 32 KiB on Volta and newer; 4 KiB keeps one layout everywhere and a launch already covers up to 20 M
// elements). kReservedBytes leave room for the kernel's other arguments (options, scalar pointers).
inline constexpr int kKernelParamBytes = 4096;
inline constexpr int kReservedBytes = 256;
// Elements per chunk (per CUDA block): large enough that a block's start-up cost is noise, small enough
// that a 1 M-element tensor spreads over 16 blocks.
inline constexpr int64_t kChunkSize = int64_t{1} << 16;
// Blocks per launch: each costs 5 bytes of the list (a 1-byte tensor index, a 4-byte chunk index).
inline constexpr int kMaxBlocks = 320;
// Tensors per launch for `depth` pointers per tensor: each tensor costs depth pointers plus its length;
// at most 110 (so the tensor index fits a byte with room to spare).
constexpr int max_tensors(int depth) {
  return std::min(110, (kKernelParamBytes - kReservedBytes - kMaxBlocks * 5) / (8 * depth + 8));
}

// The list one launch gets in its parameters: for tensor t of the launch, ptr[d][t] is its d-th pointer
// (grad, param, moments, ... as the kernel defines; null allowed where the kernel allows it) and n[t]
// its length; block b works on chunk block_chunk[b] of tensor block_tensor[b].
template <int kDepth>
struct TensorListMeta {
  static constexpr int kMaxTensors = max_tensors(kDepth);
  void* ptr[kDepth][kMaxTensors];
  int64_t n[kMaxTensors];
  int32_t block_chunk[kMaxBlocks];
  uint8_t block_tensor[kMaxBlocks];
};
static_assert(sizeof(TensorListMeta<1>) <= kKernelParamBytes - kReservedBytes);
static_assert(sizeof(TensorListMeta<8>) <= kKernelParamBytes - kReservedBytes);

struct Limits {
  int max_tensors;
  int max_blocks = kMaxBlocks;
  int64_t chunk_size = kChunkSize;
};

// One launch: `tensors` indexes the caller's list (a tensor split across launches appears in each);
// blocks[b] is (index into `tensors`, chunk of that tensor).
struct Launch {
  struct Block {
    int tensor;
    int64_t chunk;
  };
  std::vector<int> tensors;
  std::vector<Block> blocks;
};

// Plans the launches over tensors of `sizes` elements: every element of every tensor lies in exactly one
// block of one launch; empty tensors get none. Tensors keep their order; a tensor whose chunks do not fit
// the current launch continues in the next one.
std::vector<Launch> plan(std::span<const int64_t> sizes, Limits limits);

// Fills a launch's parameter block: ptrs[d][i] is the d-th pointer of the caller's tensor i.
template <int kDepth>
void fill_meta(const Launch& launch, const std::vector<void*> (&ptrs)[kDepth], std::span<const int64_t> sizes,
               TensorListMeta<kDepth>& meta) {
  for (size_t t = 0; t < launch.tensors.size(); ++t) {
    const int i = launch.tensors[t];
    for (int d = 0; d < kDepth; ++d) meta.ptr[d][t] = ptrs[d][static_cast<size_t>(i)];
    meta.n[t] = sizes[static_cast<size_t>(i)];
  }
  for (size_t b = 0; b < launch.blocks.size(); ++b) {
    meta.block_tensor[b] = static_cast<uint8_t>(launch.blocks[b].tensor);
    meta.block_chunk[b] = static_cast<int32_t>(launch.blocks[b].chunk);
  }
}

}  // namespace mantissa::multi_tensor
