#!/usr/bin/env python3
"""PyTorch's side of bench/fp8_gemm_bench.cc on the CPU: torch._scaled_mm (E4M3 x E4M3, per-tensor scales,
bf16 out), torch.mm in f32 and bf16, and the quantization x.mul(scale).clamp(-448, 448).to(float8_e4m3fn) with
its amax, on the same shapes, eager and under torch.compile. Each figure: the median of 7 runs of a timed loop
of at least 0.2 s. Prints one line per case:
  torch <case>/<shape> <mode> ms=<per call> gflops=<2 m n k / time> (quantize: gbs=<input bytes / time>)
  python3 bench/pytorch/fp8_gemm.py [--threads 2] [--modes eager,compile]
"""
import argparse
import statistics
import time

import torch

# name: (m, n, k), as bench/fp8_gemm_bench.cc's kShapes.
SHAPES = {
    "square1024": (1024, 1024, 1024),
    "square2048": (2048, 2048, 2048),
    "mlp_fc1_b128": (128, 1024, 784),
    "gpt_mlp_up_b32": (4096, 512, 128),
}


def values(rows, cols, scale):
    i = torch.arange(rows * cols, dtype=torch.int64)
    return (scale * ((i * 7919 % 1000) - 500).to(torch.float32) / 500.0).view(rows, cols)


def timed(fn):
    fn()
    fn()
    runs = []
    for _ in range(7):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= 0.2:
                break
        runs.append(elapsed / n)
    return statistics.median(runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    one = torch.tensor(1.0)
    for mode in args.modes.split(","):
        wrap = (lambda f: torch.compile(f)) if mode == "compile" else (lambda f: f)
        mm = wrap(lambda a, b: torch.mm(a, b))
        smm = wrap(lambda a, b, sa, sb: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))

        def quantize_impl(x, scale):
            amax = x.abs().max()
            return (x * scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), amax

        quantize = wrap(quantize_impl)
        for shape, (m, n, k) in SHAPES.items():
            x, w = values(m, k, 1.0), values(n, k, 0.5)
            flops = 2 * m * n * k
            cases = {
                "mm_f32": lambda: mm(x, w.t()),
                "mm_bf16": (lambda xb, wb: lambda: mm(xb, wb.t()))(x.bfloat16(), w.bfloat16()),
                "scaled_mm_e4m3": (lambda x8, w8: lambda: smm(x8, w8.t(), one, one))(
                    x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)),
            }
            for name, fn in cases.items():
                try:
                    s = timed(fn)
                    print(f"torch {name}/{shape} {mode} ms={s * 1e3:.4f} gflops={flops / s / 1e9:.2f}", flush=True)
                except Exception as e:  # noqa: BLE001 (a case PyTorch cannot run is reported, not fatal)
                    print(f"torch {name}/{shape} {mode} failed: {type(e).__name__}: {str(e).splitlines()[0]}")
            xq = values(m, k, 3.0)
            scale = torch.tensor(100.0)
            s = timed(lambda: quantize(xq, scale))
            print(f"torch quantize_e4m3/{shape} {mode} ms={s * 1e3:.4f} gbs={4 * m * k / s / 1e9:.2f}", flush=True)


if __name__ == "__main__":
    main()
