#!/usr/bin/env python3
"""PyTorch 2.x eager side of the GPU training-step comparison (bench/compare_gpu.sh, issue 7).

Models, the same as mantissa's (models/gpt.h, models/cnn.h):
  gpt: GPT-2 small's shape: 12 layers, 12 heads, width 768, sequence 1024, vocabulary 50304, pre-LN blocks,
       exact GELU, causal scaled_dot_product_attention, lm_head tied to wte, no dropout; batch --gpt_batch.
  cnn: conv 3x3 1->32, BN, ReLU, pool 2; conv 3x3 32->64, BN, ReLU, pool 2; linear 1600->128, ReLU,
       linear 128->10; batch --cnn_batch, inputs [N, 1, 28, 28].
One step = zero_grad, forward + mean cross-entropy, backward, AdamW (fused=False, foreach: PyTorch's
default eager path) ; fp16 = autocast(float16) + GradScaler, bf16 = autocast(bfloat16), fp32 = TF32 off.
Prints one line per (model, precision):
  pytorch <model> <precision> ms=<median ms/step> items_per_s=<tokens or samples> mfu=<fraction> peak_gib=<>
and first a line "pytorch bf16_peak_tflops=<measured>" (8192^3 bf16 matmul), the MFU denominator.
"""
import argparse
import statistics
import time

import torch
from torch import nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, layers=12, heads=12, c=768, t=1024, vocab=50304) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(t, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.layers, self.heads, self.c, self.t = layers, heads, c, t

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)

    def flops_per_token(self) -> float:
        # PaLM / nanoGPT: 6 per parameter per token (forward + backward) plus the attention scores.
        n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
        return 6 * n + 12 * self.layers * self.c * self.t


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32)
        self.conv2, self.bn2 = nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64)
        self.fc1, self.fc2 = nn.Linear(1600, 128), nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))

    @staticmethod
    def flops_per_sample() -> float:
        conv = 2 * (26 * 26 * 32 * 9 + 11 * 11 * 64 * 32 * 9)
        fc = 2 * (1600 * 128 + 128 * 10)
        return 3 * (conv + fc)  # forward + two backward GEMMs


def bf16_peak_tflops() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192 ** 3 * 20 / (time.perf_counter() - t0) / 1e12


def run(model_name: str, precision: str, batch: int, steps: int, warmup: int, peak: float) -> str:
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if model_name == "gpt":
        model = GPT().cuda()
        x = torch.randint(0, 50304, (batch, 1024), device="cuda")
        y = torch.randint(0, 50304, (batch, 1024), device="cuda")
        items, flops_per_item = batch * 1024, model.flops_per_token()
        loss_of = lambda: F.cross_entropy(model(x).view(-1, 50304), y.view(-1))
    else:
        model = CNN().cuda()
        x = torch.randn(batch, 1, 28, 28, device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")
        items, flops_per_item = batch, CNN.flops_per_sample()
        loss_of = lambda: F.cross_entropy(model(x), y)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_of()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    rate = items / (ms / 1e3)
    mfu = rate * flops_per_item / (peak * 1e12)
    gib = torch.cuda.max_memory_allocated() / 2 ** 30
    return f"pytorch {model_name} {precision} ms={ms:.3f} items_per_s={rate:.1f} mfu={mfu:.4f} peak_gib={gib:.3f}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="gpt,cnn")
    p.add_argument("--precisions", default="fp32,fp16,bf16")
    p.add_argument("--gpt_batch", type=int, default=8)
    p.add_argument("--cnn_batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    peak = bf16_peak_tflops()
    print(f"pytorch bf16_peak_tflops={peak:.1f} torch={torch.__version__} device={torch.cuda.get_device_name()}",
          flush=True)
    for m in a.models.split(","):
        for prec in a.precisions.split(","):
            batch = a.gpt_batch if m == "gpt" else a.cnn_batch
            print(run(m, prec, batch, a.steps, a.warmup, peak), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
