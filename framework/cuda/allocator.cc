// pin_memory, the one allocator function with the same code in every build (the CUDA allocators are
// framework/cuda/host/allocator.cc; a build without CUDA has framework/cuda/absent/allocator.cc).
#include "framework/cuda/allocator.h"

#include "framework/error.h"

namespace mantissa {

Tensor pin_memory(const Tensor& t) {
  MT_CHECK(t.defined() && t.device().is_cpu(), "pin_memory: expected a CPU tensor, got ",
           t.defined() ? t.device().str() : std::string("an undefined one"));
  if (is_pinned(t) && t.is_contiguous()) return t;
  Tensor out = empty_pinned(t.shape(), t.dtype());
  copy_(out, t);
  return out;
}

}  // namespace mantissa
