// A user's program: includes installed headers, runs an op and a CUDA query, prints the result.
#include <cstdio>

#include "framework/cuda/device.h"
#include "framework/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

int main() {
  using namespace mantissa;
  const Tensor a = from_vector<float>({1, 2, 3});
  const double s = sum(a * a).item();
  std::printf("consumer: sum %g, cuda devices %d\n", s, cuda_device_count());
  return s == 14.0 ? 0 : 1;
}
