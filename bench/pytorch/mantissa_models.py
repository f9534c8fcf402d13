"""mantissa's models in PyTorch, with mantissa's module trees and so its parameter names.

Shared by the benchmarks (bench/pytorch/train_step.py) and the AMP golden writer
(scripts/golden/amp_training.py), so that both compare against one definition of each model:
  MLP   models/mlp.h: layers.{0,2,4}.{weight,bias} with ReLU between;
  CNN   models/cnn.h: conv 3x3 1->32, BN, ReLU, max-pool 2; conv 3x3 32->64, BN, ReLU, max-pool 2;
        flatten 1600; linear 1600->128, ReLU; linear 128->10;
  GPT   models/gpt.h: nanoGPT's tree; lm_head.weight is transformer.wte.weight (tied, no bias); exact (erf)
        GELU; scaled_dot_product_attention with the causal mask.
Each forward(inputs, targets) returns the mean cross-entropy loss, forward(inputs) the logits.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        mods = []
        for i in range(len(sizes) - 1):
            mods.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                mods.append(nn.ReLU())
        self.layers = nn.Sequential(*mods)

    def forward(self, x, y=None):
        logits = self.layers(x)
        return logits if y is None else F.cross_entropy(logits, y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(1600, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x, y=None):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        logits = self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))
        return logits if y is None else F.cross_entropy(logits, y)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(c["n_embd"], 4 * c["n_embd"]),
                                      c_proj=nn.Linear(4 * c["n_embd"], c["n_embd"])))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x))))  # exact (erf) gelu, as mantissa's


class GPT(nn.Module):
    """c: a dict with vocab_size, block_size, n_layer, n_head, n_embd."""

    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=nn.LayerNorm(c["n_embd"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        # nanoGPT's initialisation, as mantissa's GPT constructor does it.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name:
                nn.init.ones_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x)).view(B * T, -1)
        return logits if targets is None else F.cross_entropy(logits, targets.view(B * T))
