#!/usr/bin/env python3
"""cuBLAS's own speed on the GEMMs of bench/cuda_gemm_bench.cc, through PyTorch, and the comparison table.

mantissa's GEMMs are cuBLASLt calls (ops/matmul/matmul.cu), so cuBLAS reached through PyTorch on the same shapes
is the figure they should reach: a ratio well under 1 means a worse layout, algorithm or workspace choice,
or overhead around the call. Shapes (as cuda_gemm_bench's): 4096^3, and the GEMMs of a GPT-2-small step
(8 x 1024 tokens, width 768) as linear computes them, x [tokens, in] @ W[out, in]^T. Dtypes: bf16 and f16
(f32 accumulation, no reduced-precision reductions, as mantissa's cuBLASLt descriptors), tf32 (f32 inputs
on the tensor cores), f32 (exact) and fp8 (torch._scaled_mm, E4M3 x E4M3, per-tensor scales, bf16 out; not
the LM head, whose 50257 columns FP8 cannot take). Each figure: the median of 10 runs of 20 calls timed by CUDA events.
Prints one line per (dtype, shape):
  cublas_gemm <dtype> <shape> ms=<per call> tflops=<2 m n k / time>
and, with --mantissa-json (cuda_gemm_bench --benchmark_format=json's output), the markdown table of both
with the ratio mantissa / cuBLAS and each side's best bf16 figure (the peak that MFU is reported against).
Where PyTorch or a CUDA device is missing it prints "gpu_gemm.py: skipped: <reason>" and exits 0.
  python3 bench/pytorch/gpu_gemm.py --mantissa-json cuda_gemm.json
"""
import argparse
import json
import statistics
import sys

TOKENS, WIDTH = 8 * 1024, 768
# name: (m, n, k, b transposed), as bench/cuda_gemm_bench.cc's shapes().
SHAPES = {
    "square4096": (4096, 4096, 4096, False),
    "gpt2_qkv": (TOKENS, 3 * WIDTH, WIDTH, True),
    "gpt2_attn_proj": (TOKENS, WIDTH, WIDTH, True),
    "gpt2_mlp_up": (TOKENS, 4 * WIDTH, WIDTH, True),
    "gpt2_mlp_down": (TOKENS, WIDTH, 4 * WIDTH, True),
    "gpt2_lm_head": (TOKENS, 50257, WIDTH, True),
}
DTYPES = ["bf16", "f16", "tf32", "f32", "fp8"]


def measure_fp8(torch, m, n, k):
    """torch._scaled_mm, E4M3 x E4M3 with per-tensor scales, bf16 out: x [m, k] @ W[n, k]^T (cuBLASLt's FP8)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.rand(m, k, device="cuda", generator=g).mul_(2).sub_(1).to(torch.float8_e4m3fn)
    b = torch.rand(n, k, device="cuda", generator=g).mul_(2).sub_(1).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")

    def call():
        torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    return timed(torch, call, m, n, k)


def timed(torch, call, m, n, k):
    for _ in range(3):
        call()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(10):
        start.record()
        for _ in range(20):
            call()
        stop.record()
        stop.synchronize()
        runs.append(start.elapsed_time(stop) / 20)
    ms = statistics.median(runs)
    return ms, 2 * m * n * k / (ms * 1e-3) / 1e12


def measure(torch, dtype_name, m, n, k, trans_b):
    if dtype_name == "fp8":
        return measure_fp8(torch, m, n, k)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(dtype_name, torch.float32)
    torch.set_float32_matmul_precision("high" if dtype_name == "tf32" else "highest")
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.rand(m, k, device="cuda", generator=g).mul_(2).sub_(1).to(dtype)
    b = torch.rand(n, k, device="cuda", generator=g).mul_(2).sub_(1).to(dtype)
    if not trans_b:
        b = b.view(k, n)  # B [k, n] row-major, as the square case's kNo
    c = torch.empty(m, n, device="cuda", dtype=dtype)

    def call():
        torch.mm(a, b.t() if trans_b else b, out=c)

    return timed(torch, call, m, n, k)


def mantissa_figures(path):
    """{(dtype, shape): TFLOP/s} from cuda_gemm_bench's JSON (names cuda_gemm/<dtype>/<shape>[/manual_time])."""
    out = {}
    with open(path) as f:
        text = f.read()
    # Google Benchmark writes its JSON after any line a program printed first; start at the first brace.
    data = json.loads(text[text.index("{"):]) if "{" in text else {}
    for b in data.get("benchmarks", []):
        parts = b.get("name", "").split("/")
        if len(parts) >= 3 and parts[0] == "cuda_gemm" and not b.get("error_occurred") and "TFLOP/s" in b:
            out[(parts[1], parts[2])] = float(b["TFLOP/s"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mantissa-json", help="cuda_gemm_bench --benchmark_format=json output, for the table")
    p.add_argument("--dtypes", default=",".join(DTYPES))
    a = p.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"gpu_gemm.py: skipped: PyTorch is not installed for {sys.executable} ({e})", flush=True)
        return
    if not torch.cuda.is_available():
        print(f"gpu_gemm.py: skipped: torch {torch.__version__} sees no CUDA device", flush=True)
        return
    # f32 accumulation throughout, as mantissa asks cuBLASLt for (PyTorch allows reduced-precision split-K
    # reductions for f16 and bf16 by default).
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    print(f"cublas_gemm torch={torch.__version__} cuda={torch.version.cuda} device={torch.cuda.get_device_name()}",
          flush=True)
    ours = {}
    for d in a.dtypes.split(","):
        for name, (m, n, k, tb) in SHAPES.items():
            if d == "fp8" and any(v % 16 for v in (m, n, k)):
                continue  # FP8 GEMMs need every dim a multiple of 16 (not the 50257-wide LM head)
            ms, tflops = measure(torch, d, m, n, k, tb)
            ours[(d, name)] = tflops
            print(f"cublas_gemm {d} {name} ms={ms:.4f} tflops={tflops:.1f}", flush=True)
        torch.cuda.empty_cache()
    if not a.mantissa_json:
        return
    mt = mantissa_figures(a.mantissa_json)
    print("\n| dtype | shape | m x n x k | mantissa TFLOP/s | cuBLAS (PyTorch) TFLOP/s | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for (d, name), theirs in ours.items():
        m, n, k, tb = SHAPES[name]
        mine = mt.get((d, name))
        ratio = f"{mine / theirs:.2f}" if mine else "-"
        shape = f"{m}x{n}x{k}{' (B^T)' if tb else ''}"
        print(f"| {d} | {name} | {shape} | {f'{mine:.1f}' if mine else '-'} | {theirs:.1f} | {ratio} |")
    best = lambda fig: max((v for (d, _), v in fig.items() if d == "bf16"), default=0.0)  # noqa: E731
    print(f"\nbest bf16: mantissa {best(mt):.1f} TFLOP/s, cuBLAS {best(ours):.1f} TFLOP/s")


if __name__ == "__main__":
    main()
