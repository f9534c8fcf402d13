// Shape ops that build new tensors from pieces or indices: cat, stack, split (views), index_select,
// gather, scatter_add, index_put, one_hot. The floating ones are differentiable; index tensors are i64 (or i32).
#pragma once

#include <cstdint>
#include <vector>

#include "framework/tensor.h"
#include "ops/op.h"

namespace mantissa {

MT_OP(cat, kPromote, kNone);
// Joins tensors along an existing dim; all sizes but `dim` must match. Mixed floating dtypes promote.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
MT_OP(stack, kPromote, kNone);
// Joins equal-shaped tensors along a new dim inserted at `dim`.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of consecutive chunks of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Views of chunks with the given sizes along dim; the sizes must add up to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// x with dim replaced by the entries of a 1-D (or 0-d) index: out.size(dim) = index.numel().
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (and likewise for any dim); out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
MT_OP(scatter_add, kNone, kPromote);
// x with src added at index along dim: out[i][index[i][j][k]][k] += src[i][j][k] for dim 1 (likewise for any
// dim); repeated indices add. index and src have one shape, no larger than x outside dim; x and src share
// a dtype (under CUDA autocast both go to the wider one). Sums in fp32 for 16-bit and rounds once.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// x with rows of dim 0 set (kReplace) or added to (kAccumulate) at `index`: out[index[i]] = values[i],
// PyTorch's x.index_put_((index,), values) for one integer index tensor (ops/shape/index_put.cc). values
// broadcasts to index.shape + x.shape[1:] and shares x's dtype (under CUDA autocast both go to the wider one).
// With repeated indices kReplace keeps the last write and kAccumulate adds them all.
enum class IndexPutMode { kReplace, kAccumulate };
MT_OP(index_put, kNone, kPromote);
Tensor index_put(const Tensor& x, const Tensor& index, const Tensor& values,
                 IndexPutMode mode = IndexPutMode::kReplace);
// i64 [..., num_classes] with a 1 at each index; num_classes -1 means max(indices) + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace mantissa
