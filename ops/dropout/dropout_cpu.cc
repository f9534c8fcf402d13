// Dropout mask generation (serial: the generator is one sequential stream) and the masked scale.
#include "ops/dropout/dropout_cpu.h"

#include "framework/dtype.h"
#include "framework/parallel.h"

namespace mantissa::cpu {

void dropout_mask(Generator& generator, float keep, bool* mask, int64_t n) {
  for (int64_t i = 0; i < n; ++i) mask[i] = generator.uniform_float() < keep;
}

template <typename T>
void dropout_apply(const T* x, const bool* mask, double scale, T* out, int64_t n) {
  using C = compute_t<T>;
  const C s = static_cast<C>(scale);
  parallel_for(n, 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = static_cast<T>(mask[i] ? static_cast<C>(x[i]) * s : C(0));
  });
}

template void dropout_apply<float>(const float*, const bool*, double, float*, int64_t);
template void dropout_apply<double>(const double*, const bool*, double, double*, int64_t);
template void dropout_apply<Half>(const Half*, const bool*, double, Half*, int64_t);
template void dropout_apply<BFloat16>(const BFloat16*, const bool*, double, BFloat16*, int64_t);

}  // namespace mantissa::cpu
