#!/usr/bin/env python3
"""PyTorch side of the MLP training-step comparison (bench/compare_pytorch.sh).

One step = forward of 784-1024-1024-10 (Linear-ReLU-Linear-ReLU-Linear), mean cross-entropy,
backward, Adam update (or SGD with momentum, --optimizer sgd); batch 256; the same shapes and precision
as bench/mlp_step_bench.cc. Prints one line per precision: "<name> <median seconds per step>".
"""
import argparse
import statistics
import time

import torch


def step_time(precision: str, optimizer: str, steps: int, warmup: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10))
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(256, 784)
    y = torch.randint(0, 10, (256,))
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if precision == "f32":
            loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--precision", nargs="+", default=["f32", "bf16_autocast"])
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for prec in a.precision:
        print(f"pytorch_mlp_step_{prec} {step_time(prec, a.optimizer, a.steps, a.warmup):.6f}", flush=True)


if __name__ == "__main__":
    main()
