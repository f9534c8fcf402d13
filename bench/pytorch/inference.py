#!/usr/bin/env python3
"""PyTorch side of bench/compare_inference.sh: mixed-precision inference of mantissa's models in PyTorch 2.x.

The forward of the MLP (784-1024-1024-10), the CNN (eval mode) and the character GPT (n_layer 4, n_head 4,
n_embd 256, block 128; logits for all positions), under torch.inference_mode(), in f32 and under
torch.autocast("cpu", bfloat16 / float16) over the fp32 weights; the same cases as bench/inference_bench.cc.
Batch 1 (latency) and 256 (throughput; the GPT 32 sequences). Eager, and with --compile
torch.compile(mode="max-autotune-no-cudagraphs"). Each case reports its outputs' distance from the f32
outputs on the same inputs (max |diff|, top-1 agreement).

Prints one line per case:
  pytorch_infer <model> <precision> <batch> <mode> <median ms> <max_abs_diff> <top1_agree> <p99 ms>
"""

import argparse
import os
import statistics
import sys
import math
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mantissa_models import CNN, GPT, MLP  # noqa: E402

GPT_CONFIG = dict(vocab_size=65, block_size=128, n_layer=4, n_head=4, n_embd=256)
DTYPES = {"f32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_case(name, batch):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return MLP([784, 1024, 1024, 10]), torch.randn(batch, 784, generator=g)
    if name == "cnn":
        return CNN(), torch.randn(batch, 1, 28, 28, generator=g)
    return GPT(GPT_CONFIG), torch.randint(0, 65, (batch, 128), generator=g)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "gpt"], required=True)
    p.add_argument("--precision", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    p.add_argument("--batch", nargs="+", type=int, default=None, help="default: 1 and 256 (GPT: 1 and 32)")
    p.add_argument("--mode", nargs="+", choices=["eager", "compile"], default=["eager"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget", type=float, default=3.0, help="seconds of timed calls per case")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    batches = a.batch or [1, 32 if a.model == "gpt" else 256]
    for batch in batches:
        model, x = make_case(a.model, batch)
        model.eval()
        with torch.inference_mode():
            reference = model(x)
        for precision in a.precision:
            dtype = DTYPES[precision]
            for mode in a.mode:
                torch._dynamo.reset()
                fwd = torch.compile(model, mode="max-autotune-no-cudagraphs") if mode == "compile" else model

                def run():
                    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype or torch.bfloat16,
                                                                   enabled=dtype is not None):
                        return fwd(x)

                out = run().float()
                for _ in range(3):
                    run()
                times = []
                while len(times) < 5 or (sum(times) < a.budget and len(times) < 1000):
                    t0 = time.perf_counter()
                    run()
                    times.append(time.perf_counter() - t0)
                diff = (out - reference).abs().max().item()
                agree = (out.argmax(1) == reference.argmax(1)).float().mean().item()
                times.sort()
                p99 = times[min(len(times), math.ceil(0.99 * len(times))) - 1]
                print(f"pytorch_infer {a.model} {precision} {batch} {mode} {statistics.median(times) * 1e3:.4f} "
                      f"{diff:.6g} {agree:.6f} {p99 * 1e3:.4f}", flush=True)


if __name__ == "__main__":
    main()
