// Sequential: runs its layers in order.
#include "models/layers/sequential.h"

namespace mantissa {

Tensor Sequential::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    Tensor h = in;
    for (auto& f : forwards_) h = f(h);
    return h;
  });
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  MT_CHECK(i < forwards_.size(), "Sequential: index ", i, " is out of range for ", forwards_.size(), " layers");
  return named_children()[i].second;
}

}  // namespace mantissa
