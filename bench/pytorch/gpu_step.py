#!/usr/bin/env python3
"""PyTorch side of bench/gpu_step_bench.cc: whole training steps on one GPU (bench/compare_gpu.sh,
scripts/device_check.sh).

Models: bench/pytorch/mantissa_models.py, the same module trees as mantissa's (models/gpt.h, models/cnn.h):
  gpt  GPT-2 small's shape: 12 layers, 12 heads, width 768, sequence 1024, vocabulary 50304, lm_head tied to
       wte, exact GELU, causal scaled_dot_product_attention, no dropout; batch --gpt_batch (8);
  cnn  conv 3x3 1->32, BN, ReLU, pool 2; conv 3x3 32->64, BN, ReLU, pool 2; linear 1600->128, ReLU,
       linear 128->10; batch --cnn_batch (512), inputs [N, 1, 28, 28].
One step = zero_grad, forward + mean cross-entropy, backward, AdamW(lr 1e-4; --adam: PyTorch's default
foreach path, or fused) and a synchronization, as gpu_step_bench does it. fp16 = autocast(float16) +
GradScaler, bf16 = autocast(bfloat16), fp32 = no autocast and no TF32 (mantissa's f32 GEMMs are exact).
Modes: eager, and compile (torch.compile(model) of the forward and its backward; the first step, which
compiles, is reported as compile_s and left out of the timing).
Prints first "pytorch bf16_peak_tflops=<measured 8192^3 bf16 matmul> torch=<version> device=<name>", the MFU
denominator, then one line per (mode, model, precision):
  pytorch <model> <precision> ms=<median ms/step> items_per_s=<tokens or samples> mfu=<> peak_gib=<>
(eager; `pytorch-compile` in place of `pytorch` for compiled rows, which add compile_s=<first step s>).
Where PyTorch or a CUDA device is missing it prints "gpu_step.py: skipped: <reason>" and exits 0.
  python3 bench/pytorch/gpu_step.py --models gpt --precisions bf16 --mode eager compile
"""
import argparse
import os
import statistics
import sys
import time

try:
    import torch
except ImportError as e:  # the script also runs, and says why it skipped, with a Python that lacks PyTorch
    print(f"gpu_step.py: skipped: PyTorch is not installed for {sys.executable} ({e})", flush=True)
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mantissa_models import CNN, GPT  # noqa: E402

GPT2_SMALL = dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def bf16_peak_tflops() -> float:
    """2 m n k of 8192^3 bf16 products over their time: the median of 5 runs of 10, timed by CUDA events."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(5):
        start.record()
        for _ in range(10):
            a @ b
        stop.record()
        stop.synchronize()
        runs.append(start.elapsed_time(stop) / 1e3 / 10)
    return 2 * 8192 ** 3 / statistics.median(runs) / 1e12


def flops_per_token(model: GPT) -> float:
    # PaLM / nanoGPT: 6 per parameter per token (forward and backward; the tied lm_head counted once, the
    # position embedding left out) plus the attention scores; gpu_step_bench counts the same.
    c = GPT2_SMALL
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * n + 12 * c["n_layer"] * c["n_embd"] * c["block_size"]


def cnn_flops_per_sample() -> float:
    conv = 2 * (26 * 26 * 32 * 9 + 11 * 11 * 64 * 32 * 9)
    fc = 2 * (1600 * 128 + 128 * 10)
    return 3 * (conv + fc)  # forward and the two backward GEMMs of each layer


def run(model_name: str, precision: str, mode: str, a: argparse.Namespace, peak: float) -> str:
    torch.manual_seed(0)
    torch.set_float32_matmul_precision("highest")  # fp32 rows: no TF32, as mantissa's exact f32 GEMMs
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(1)
    if model_name == "gpt":
        model = GPT(GPT2_SMALL).cuda()
        t, v = GPT2_SMALL["block_size"], GPT2_SMALL["vocab_size"]
        x = torch.randint(0, v, (a.gpt_batch, t), device="cuda", generator=g)
        y = torch.randint(0, v, (a.gpt_batch, t), device="cuda", generator=g)
        items, flops_per_item = a.gpt_batch * t, flops_per_token(model)
    else:
        model = CNN().cuda()
        x = torch.randn(a.cnn_batch, 1, 28, 28, device="cuda", generator=g)
        y = torch.randint(0, 10, (a.cnn_batch,), device="cuda", generator=g)
        items, flops_per_item = a.cnn_batch, cnn_flops_per_sample()
    model.train()
    forward = torch.compile(model) if mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=a.adam == "fused")
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    dtype = DTYPES.get(precision)
    torch.cuda.reset_peak_memory_stats()
    times = []
    first = 0.0
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = forward(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        if i == 0:
            first = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    rate = items / (ms / 1e3)
    mfu = rate * flops_per_item / (peak * 1e12)
    gib = torch.cuda.max_memory_allocated() / 2 ** 30
    tag = "pytorch" if mode == "eager" else "pytorch-compile"
    extra = f" compile_s={first:.1f}" if mode == "compile" else ""
    return f"{tag} {model_name} {precision} ms={ms:.3f} items_per_s={rate:.1f} mfu={mfu:.4f} peak_gib={gib:.3f}{extra}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="gpt,cnn")
    p.add_argument("--precisions", default="fp32,fp16,bf16")
    p.add_argument("--mode", nargs="+", choices=["eager", "compile"], default=["eager"])
    p.add_argument("--adam", choices=["foreach", "fused"], default="foreach")
    p.add_argument("--gpt_batch", type=int, default=8)
    p.add_argument("--cnn_batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    a.warmup = max(a.warmup, 1)  # the first step (a compiled run's compilation) is never timed
    if not torch.cuda.is_available():
        print(f"gpu_step.py: skipped: torch {torch.__version__} sees no CUDA device "
              f"(torch.cuda.is_available() is False; built for CUDA {torch.version.cuda})", flush=True)
        return
    peak = bf16_peak_tflops()
    print(f"pytorch bf16_peak_tflops={peak:.1f} torch={torch.__version__} device={torch.cuda.get_device_name()}",
          flush=True)
    for mode in a.mode:
        for m in a.models.split(","):
            for prec in a.precisions.split(","):
                try:
                    print(run(m, prec, mode, a, peak), flush=True)
                except Exception as e:  # a row that fails (say, a compile error) says so; the others still run
                    msg = (str(e).splitlines() or [type(e).__name__])[0][:120]
                    tag = "pytorch" if mode == "eager" else "pytorch-compile"
                    print(f"{tag} {m} {prec} failed: {msg}", flush=True)
                if mode == "compile":
                    torch._dynamo.reset()
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
