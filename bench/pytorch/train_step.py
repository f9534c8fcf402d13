#!/usr/bin/env python3
"""PyTorch side of bench/compare_pytorch.sh: one training step of mantissa's models, timed in PyTorch 2.x.

One step = zero_grad, forward and mean cross-entropy, backward, Adam(lr 1e-3) update, on one fixed batch:
  mlp  784-1024-1024-10, batch 256;
  cnn  models/cnn.h, batch 128, inputs [128, 1, 28, 28];
  gpt    the character GPT (vocab 65, n_layer 4, n_head 4, n_embd 256, block 128), batch 32;
  gpt2s  GPT-2 small (124M parameters: vocab 50257, n_layer 12, n_head 12, n_embd 768, block 1024), batch 1.
The models are bench/pytorch/mantissa_models.py (the ones the AMP golden file is written with). Precisions:
  f32   no autocast;
  bf16  torch.autocast("cpu", torch.bfloat16) over fp32 parameters;
  fp16  torch.autocast("cpu", torch.float16) and torch.amp.GradScaler("cpu") (scale, step, update).
Modes: eager, and compile (torch.compile(model, mode=--compile-mode): the forward and its AOT backward are
compiled; the optimizer is the fused one in both modes). PyTorch at its best on the CPU: Adam(fused=True) (its
fastest CPU Adam, --adam says otherwise), and for the CNN the faster memory format (NCHW or channels_last,
measured first). A compiled run starts from an empty inductor cache (its own temporary directory) so that the
compile time printed is what a user waits the first time.

Prints one line per (precision, mode):
  pytorch_step <model> <precision> <mode> <median s/step> <first-step s> <notes>
where the first step of a compiled run includes the compilation.
  python bench/pytorch/train_step.py --model gpt --precision f32 bf16 fp16 --mode eager compile --threads 2
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mantissa_models import CNN, GPT, MLP  # noqa: E402

GPT_CONFIGS = {"gpt": (dict(vocab_size=65, block_size=128, n_layer=4, n_head=4, n_embd=256), 32),
               "gpt2s": (dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768), 1)}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def make_case(model_name, memory_format):
    """The model and one fixed batch (inputs, targets)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if model_name == "mlp":
        return MLP([784, 1024, 1024, 10]), torch.randn(256, 784, generator=g), torch.randint(0, 10, (256,), generator=g)
    if model_name == "cnn":
        model = CNN().to(memory_format=memory_format)
        x = torch.randn(128, 1, 28, 28, generator=g).contiguous(memory_format=memory_format)
        return model, x, torch.randint(0, 10, (128,), generator=g)
    c, batch = GPT_CONFIGS[model_name]
    idx = torch.randint(0, c["vocab_size"], (batch, c["block_size"]), generator=g)
    return GPT(c), idx, torch.randint(0, c["vocab_size"], (batch, c["block_size"]), generator=g)


def make_adam(params, kind):
    if kind == "fused":
        return torch.optim.Adam(params, lr=1e-3, fused=True)
    if kind == "foreach":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    return torch.optim.Adam(params, lr=1e-3, foreach=False)


def time_steps(model_name, precision, mode, a, memory_format):
    """Seconds of each step after the warm-up, and the first step's seconds."""
    model, x, y = make_case(model_name, memory_format)
    model.train()
    opt = make_adam(model.parameters(), a.adam)
    forward = torch.compile(model, mode=a.compile_mode) if mode == "compile" else model
    scaler = torch.amp.GradScaler("cpu") if precision == "fp16" else None
    dtype = DTYPES.get(precision)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = forward(x, y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    # --warmup and --steps steps, fewer where a step is slow: the warm-up stops after a quarter of
    # --budget seconds (at least one step), the timed steps after --budget seconds (at least three).
    warm = []
    while len(warm) < max(1, a.warmup) and (not warm or sum(warm) < a.budget / 4):
        t0 = time.perf_counter()
        step()
        warm.append(time.perf_counter() - t0)
    times = []
    while len(times) < a.steps and (len(times) < 3 or sum(times) < a.budget):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times, warm[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "gpt", "gpt2s"], required=True)
    p.add_argument("--precision", nargs="+", choices=["f32", "bf16", "fp16"], default=["f32", "bf16", "fp16"])
    p.add_argument("--mode", nargs="+", choices=["eager", "compile"], default=["eager", "compile"])
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    p.add_argument("--adam", choices=["fused", "foreach", "for-loop"], default="fused")
    p.add_argument("--memory-format", choices=["best", *FORMATS], default="best")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--budget", type=float, default=20.0, help="seconds of timed steps, at most (3 steps at least)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for precision in a.precision:
        fmt = "nchw" if a.memory_format == "best" else a.memory_format
        if a.model == "cnn" and a.memory_format == "best":
            # A short eager trial of each layout; both modes then run in the faster one.
            trial = {}
            for name, f in FORMATS.items():
                trial[name] = statistics.median(time_steps("cnn", precision, "eager", argparse.Namespace(
                    **{**vars(a), "steps": 8, "warmup": 3}), f)[0])
            fmt = min(trial, key=trial.get)
        for mode in a.mode:
            if mode == "compile":
                # An empty inductor cache: the first step then shows the whole compile time.
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")
                torch._dynamo.reset()
            try:
                times, first = time_steps(a.model, precision, mode, a, FORMATS[fmt])
            except Exception as e:  # a mode that does not work on this CPU is a row that says so
                msg = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
                print(f"pytorch_step {a.model} {precision} {mode} nan nan failed:{msg.replace(' ', '_')}", flush=True)
                continue
            notes = [f"adam={a.adam}"] + ([f"format={fmt}"] if a.model == "cnn" else [])
            print(f"pytorch_step {a.model} {precision} {mode} {statistics.median(times):.6f} {first:.3f} "
                  + ",".join(notes), flush=True)


if __name__ == "__main__":
    main()
