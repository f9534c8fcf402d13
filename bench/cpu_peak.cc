// bench/cpu_peak: this CPU's arithmetic peak per vector instruction (framework/cpu_peak.h), the denominator
// of bench/compare_pytorch.sh's "fraction of peak" columns.
//   bench/cpu_peak [--threads N] [--seconds S]
// Prints one line per instruction: "peak <name> threads=<n> gflops=<x> per_thread_1=<y>", or "absent".
#include "framework/cpu_peak.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  double seconds = 0.5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) {
      threads = std::atoi(arg.c_str() + 10);
    } else if (arg.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(arg.c_str() + 10);
    } else {
      std::fprintf(stderr, "cpu_peak: unknown argument '%s' (usage: cpu_peak [--threads=N] [--seconds=S])\n",
                   arg.c_str());
      return 2;
    }
  }
  if (threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "cpu_peak: --threads must be >= 1 and --seconds > 0\n");
    return 2;
  }
  for (const mantissa::CpuPeak& p : mantissa::measure_cpu_peaks(threads, seconds)) {
    if (p.name.starts_with("amx")) {
      if (p.present) {
        std::printf("peak %s present (not measured: AMX tiles need the kernel's permission, arch_prctl)\n",
                    p.name.c_str());
      } else {
        std::printf("peak %s absent\n", p.name.c_str());
      }
    } else if (!p.present) {
      std::printf("peak %s absent\n", p.name.c_str());
    } else {
      std::printf("peak %s threads=%d gflops=%.1f per_thread_1=%.1f\n", p.name.c_str(), threads, p.gflops,
                  p.per_thread_1);
    }
    std::fflush(stdout);
  }
  return 0;
}
