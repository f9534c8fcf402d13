// Sequential: runs its layers in order.
#include "models/layers/sequential.h"

namespace mantissa {

Tensor Sequential::forward(const Tensor& x) {
  return call_hooked(x, [this](const Tensor& in) {
    Tensor h = in;
    for (size_t i = 0; i < forwards_.size(); ++i) {
      if (i + 1 < forwards_.size()) {
        const Fusion& next = fusions_[i + 1];
        if (next.linear != nullptr && !next.activation->has_hooks()) {
          h = next.linear->forward_act(h, next.act);
          ++i;
          continue;
        }
      }
      h = forwards_[i](h);
    }
    return h;
  });
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  MT_CHECK(i < forwards_.size(), "Sequential: index ", i, " is out of range for ", forwards_.size(), " layers");
  return named_children()[i].second;
}

}  // namespace mantissa
