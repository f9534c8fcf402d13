#!/usr/bin/env python3
"""PyTorch side of the CNN training-step comparison (bench/compare_pytorch.sh).

One step = forward of the CNN of models/cnn.h (conv 3x3 1->32, BN, ReLU, max-pool 2; conv 3x3 32->64,
BN, ReLU, max-pool 2; flatten 1600; linear 1600->128, ReLU; linear 128->10), mean cross-entropy,
backward, Adam update; batch 128, inputs [128, 1, 28, 28]; the same shapes and precision as
bench/cnn_step_bench.cc. PyTorch's best settings on this CPU: --memory-format picks NCHW or channels_last
(default: whichever is faster, measured first); bf16 runs under torch.autocast("cpu", torch.bfloat16).
Prints one line per precision: "<name> <median seconds per step>" (and the format used on stderr).
"""
import argparse
import statistics
import sys
import time

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = nn.functional
        x = f.max_pool2d(f.relu(self.bn1(self.conv1(x))), 2)
        x = f.max_pool2d(f.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(f.relu(self.fc1(torch.flatten(x, 1))))


def step_times(precision: str, memory_format: torch.memory_format, steps: int, warmup: int) -> list:
    torch.manual_seed(0)
    model = CNN().to(memory_format=memory_format)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(128, 1, 28, 28).contiguous(memory_format=memory_format)
    y = torch.randint(0, 10, (128,))
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if precision == "f32":
            loss = nn.functional.cross_entropy(model(x), y)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", nargs="+", default=["f32", "bf16_autocast"])
    p.add_argument("--memory-format", choices=["best", *FORMATS], default="best")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    for prec in a.precision:
        if a.memory_format == "best":
            # A short trial of each layout, then the full run in the faster one.
            trial = {name: statistics.median(step_times(prec, fmt, 8, 3)) for name, fmt in FORMATS.items()}
            name = min(trial, key=trial.get)
            print(f"# {prec}: trial s/step " + ", ".join(f"{k} {v:.4f}" for k, v in trial.items()) + f" -> {name}",
                  file=sys.stderr, flush=True)
        else:
            name = a.memory_format
        t = statistics.median(step_times(prec, FORMATS[name], a.steps, a.warmup))
        print(f"pytorch_cnn_step_{prec} {t:.6f} {name}", flush=True)


if __name__ == "__main__":
    main()
