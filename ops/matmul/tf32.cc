// The TF32 switches (ops/matmul/tf32.h): relaxed atomics, read once per GEMM or conv call.
#include "ops/matmul/tf32.h"

#include <atomic>

namespace mantissa {
namespace {
std::atomic<Tf32> g_matmul_tf32{Tf32::kOff};
std::atomic<Tf32> g_conv_tf32{Tf32::kOff};
}  // namespace

void set_cuda_matmul_tf32(Tf32 mode) { g_matmul_tf32.store(mode, std::memory_order_relaxed); }
Tf32 cuda_matmul_tf32() { return g_matmul_tf32.load(std::memory_order_relaxed); }
void set_cuda_conv_tf32(Tf32 mode) { g_conv_tf32.store(mode, std::memory_order_relaxed); }
Tf32 cuda_conv_tf32() { return g_conv_tf32.load(std::memory_order_relaxed); }

}  // namespace mantissa
