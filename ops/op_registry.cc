// The list of op descriptors, by family header: pointers only. The categories live in the descriptors, beside
// their ops (MT_OP in ops/<family>/<family>.h); tests/ops/op_registry_test.cc scans the headers and fails when
// one declares a descriptor that is missing here.
#include "ops/attention/attention.h"
#include "ops/conv/conv.h"
#include "ops/elementwise/elementwise.h"
#include "ops/fp8/blocks.h"
#include "ops/fp8/fp8.h"
#include "ops/loss/loss.h"
#include "ops/matmul/matmul.h"
#include "ops/norm/norm.h"
#include "ops/op.h"
#include "ops/reduce/reduce.h"
#include "ops/shape/shape.h"
#include "ops/softmax/softmax.h"

namespace mantissa {

const std::vector<const OpInfo*>& all_ops() {
  static const std::vector<const OpInfo*> kOps = {
      // ops/matmul/matmul.h
      &ops::mm,
      &ops::bmm,
      &ops::matmul,
      &ops::linear,
      &ops::addmm,
      &ops::baddbmm,
      &ops::dot,
      // ops/conv/conv.h
      &ops::conv2d,
      &ops::conv1d,
      // ops/attention/attention.h
      &ops::scaled_dot_product_attention,
      // ops/elementwise/elementwise.h
      &ops::pow,
      &ops::addcmul,
      &ops::addcdiv,
      &ops::exp,
      &ops::log,
      &ops::sqrt,
      &ops::rsqrt,
      &ops::abs,
      &ops::relu,
      &ops::gelu,
      &ops::tanh,
      &ops::sigmoid,
      &ops::silu,
      // ops/softmax/softmax.h
      &ops::softmax,
      &ops::log_softmax,
      // ops/norm/norm.h
      &ops::layer_norm,
      &ops::group_norm,
      // ops/reduce/reduce.h
      &ops::sum,
      &ops::mean,
      &ops::logsumexp,
      &ops::prod,
      &ops::norm,
      &ops::cumsum,
      // ops/loss/loss.h
      &ops::cross_entropy,
      &ops::nll_loss,
      &ops::mse_loss,
      &ops::l1_loss,
      &ops::smooth_l1_loss,
      &ops::binary_cross_entropy,
      &ops::binary_cross_entropy_with_logits,
      // ops/shape/shape.h
      &ops::cat,
      &ops::stack,
      &ops::scatter_add,
      &ops::index_put,
      // ops/fp8/fp8.h
      &ops::quantize_fp8,
      &ops::amax,
      &ops::scaled_mm,
      &ops::quantize_blocks,
      &ops::hadamard16,
      &ops::block_scaled_mm,
  };
  return kOps;
}

}  // namespace mantissa
