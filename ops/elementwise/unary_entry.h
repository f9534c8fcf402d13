// The typed entry of a unary elementwise op with its backward node, shared by the files that define such
// ops (unary.cc, silu.cc): cast by the descriptor, check, map the CPU functor or the CUDA op code, and
// record a node that applies the derivative's functor or code (or, under create_graph, the derivative
// written with differentiable ops). An activation can live in a file of its own: unary.cc instantiates
// every op for four dtypes, flat and strided, and each op added there spends GCC's inline budget for the
// unit (exp, sigmoid and gelu's loops stopped inlining fast_expf when silu was added to it).
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "framework/autograd.h"
#include "ops/autocast.h"
#include "ops/elementwise/typed_entries.h"
#include "ops/op.h"
#include "ops/pointwise_math.h"

namespace mantissa::unary_entry {

enum class Saves { kInput, kOutput };

// df(g, saved) written with differentiable ops, for create_graph.
using GraphDf = Tensor (*)(const Tensor& g, const Tensor& saved);

// Backward of y = f(x): dx = df(g, saved) elementwise. CUDA tensors run the op code instead of the
// functor; both evaluate the same formula of ops/pointwise_math.h. When the gradient must carry history
// (create_graph), graph_df computes it instead.
template <typename DF>
struct UnaryBackward final : Node {
  SavedTensor saved;
  const char* op_name;
  DF df;
  gpu::BinaryOp device_df;  // df's op code for CUDA tensors
  GraphDf graph_df;
  UnaryBackward(const char* name, Saves what, DF f, gpu::BinaryOp device_f, GraphDf graph_f)
      : saved(this, what == Saves::kInput ? "self" : "result"),
        op_name(name),
        df(std::move(f)),
        device_df(device_f),
        graph_df(graph_f) {}
  std::string_view name() const override { return op_name; }
  bool supports_create_graph() const override { return true; }
  std::vector<Tensor> apply(std::vector<Tensor>&& g) override {
    const Tensor& s = saved.get();
    if (compute_requires_grad({&g[0], &s})) return {graph_df(g[0], s)};
    return {map_binary(g[0], s, op_name, df, {device_df})};
  }
};

template <typename F, typename DF>
Tensor unary(const Tensor& x_in, const OpInfo& op, const char* backward_name, Saves saves, F&& f, DF df,
             gpu::UnaryOp device_f, gpu::BinaryOp device_df, GraphDf graph_df) {
  const Tensor x = amp::cast_input(op, x_in);
  const std::string_view name = op.name;
  MT_CHECK(is_floating(x.dtype()), name, ": expected a floating tensor, got ", dtype_name(x.dtype()));
  Tensor out = map_unary(x, name, f, {device_f});
  if (compute_requires_grad({&x})) {
    auto node = make_node<UnaryBackward<DF>>({&x}, backward_name, saves, std::move(df), device_df, graph_df);
    node->saved = saves == Saves::kInput ? x : out;
    set_history(out, node);
  }
  return out;
}

}  // namespace mantissa::unary_entry
