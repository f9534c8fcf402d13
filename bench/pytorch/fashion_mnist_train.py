#!/usr/bin/env python3
"""PyTorch reference for issue 5's accuracy results: the same MLP or CNN, recipe and data as
`mantissa-train --model=mlp|cnn` (Adam 1e-3, batch 128, shuffled, inputs normalized with the training
set's mean 0.2860 and std 0.3530), several seeds, test accuracy after each epoch.
  fashion_mnist_train.py --model cnn --epochs 3 --seeds 1 2 3 [--bf16]
"""
import argparse
import gzip
import time

import numpy as np
import torch
from torch import nn

DIR = "/usr/share/datasets/fashion-mnist"


def load(split):
    with gzip.open(f"{DIR}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(f"{DIR}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32) / 255.0) - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64)
        self.fc1, self.fc2 = nn.Linear(1600, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = nn.functional.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    xtr, ytr = load("train")
    xte, yte = load("t10k")
    for seed in a.seeds:
        torch.manual_seed(seed)
        model = CNN() if a.model == "cnn" else mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        accs, t0 = [], time.time()
        for _ in range(a.epochs):
            model.train()
            for idx in torch.randperm(len(xtr)).split(128):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                    loss = nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                correct = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                              for i in range(0, len(xte), 1000))
            accs.append(correct / len(xte))
        print(f"{a.model} {'bf16' if a.bf16 else 'fp32'} seed {seed}: test accuracy by epoch "
              + " ".join(f"{x:.4f}" for x in accs) + f" ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
