// Which instruction-set builds of the CPU block loops this CPU runs, checked once per process.
#pragma once

namespace mantissa::cpu {

// AVX-512 F, BW, DQ and VL: what the block loops' `target("avx512f,avx512bw,avx512dq,avx512vl")` builds
// (GELU's, linear_act's epilogue) need; without them the AVX2 baseline build runs.
inline bool has_avx512_block_isa() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return yes;
}

}  // namespace mantissa::cpu
