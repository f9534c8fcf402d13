#!/usr/bin/env python3
"""Writes tests/golden/amp_training.h5: PyTorch 2.x's own AMP on the CPU, step by step, for mantissa to replay.

Two small models, each trained 60 SGD-momentum steps from the same initial weights on the same batches, in
three runs:
  fp16_backoff  torch.autocast("cpu", float16) + torch.amp.GradScaler("cpu", init_scale=2**24): the first
                steps overflow and back off;
  fp16_growth   the same with the default init_scale 2**16 and growth_interval=5: the scale grows, overflows,
                backs off and grows again;
  bf16          torch.autocast("cpu", bfloat16) without a scaler.
Per step the file keeps the loss, the scale before and after update(), whether the step was skipped and how far
the scale was from deciding otherwise; per run the final weights and the gradients of the first applied step.
The batches come from a seeded numpy generator and are stored, so that mantissa replays the very same data; the
weights are stored by mantissa's parameter names (models/mlp.h, models/gpt.h).

Run by hand, with a torch 2.x environment (tests never need Python):
  python scripts/golden/amp_training.py [--out tests/golden/amp_training.h5]
This script is the only producer of that file: do not edit the file by hand; change this and run it again.
"""

import argparse
import copy
import datetime
import os
import platform
import sys

import h5py
import numpy as np
import torch

# The models, with mantissa's module trees and so its parameter names: one definition, shared with the
# benchmarks.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "pytorch"))
from mantissa_models import GPT, MLP  # noqa: E402

STEPS = 60
SEED = 1234

# The optimizer, as mantissa's tests build it: SGD(params, {.lr = 0.05, .momentum = 0.9}). SGD rather than
# Adam: its update is linear in the gradient, so a gradient unscaled by the wrong factor would show in the
# weights (Adam's m / sqrt(v) is blind to a constant factor), and rounding noise in a gradient whose exact
# value is zero stays noise-sized (Adam turns it into lr-sized steps: the key bias of c_attn, which softmax
# ignores, walks ~1e-2 in 60 steps on both sides, differently). lr 0.05: the loss falls by a fifth to a
# third in 60 steps, and small differences grow slowly enough to compare (at 0.1 the MLP runs on the edge of
# stability and a 1e-7 difference grows to 2e-2 in 60 steps). foreach=False: the single-tensor path.
SGD = dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False, foreach=False)

RUNS = {
    "fp16_backoff": dict(dtype=torch.float16, init_scale=2.0**24, growth_factor=2.0, backoff_factor=0.5,
                         growth_interval=2000),
    "fp16_growth": dict(dtype=torch.float16, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                        growth_interval=5),
    "bf16": dict(dtype=torch.bfloat16, init_scale=None),
}

# ---------------------------------------------------------------------------------------------------------
# The data: numpy only, seeded, stored in the file.


def mlp_batches(rng, n_in, n_out, batch):
    """Gaussian inputs labelled by a fixed random linear teacher (plus label noise), so the loss falls."""
    teacher = rng.standard_normal((n_out, n_in)).astype(np.float32)
    # Rounded to float16 values (which bfloat16 runs round further, on both sides alike): the file then
    # compresses their zero low bits.
    x = rng.standard_normal((STEPS, batch, n_in)).astype(np.float16).astype(np.float32)
    y = np.argmax(x @ teacher.T + 0.5 * rng.standard_normal((STEPS, batch, n_out)), axis=-1).astype(np.int64)
    return x, y


def gpt_batches(rng, vocab, block, batch):
    """Windows of a 4096-token text from a first-order Markov chain with peaked transitions (learnable)."""
    logits = 3.0 * rng.standard_normal((vocab, vocab))
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    cdf = np.cumsum(probs, axis=1)
    text = np.empty(4096, dtype=np.int64)
    text[0] = 0
    u = rng.random(len(text))
    for i in range(1, len(text)):
        text[i] = min(int(np.searchsorted(cdf[text[i - 1]], u[i])), vocab - 1)
    starts = rng.integers(0, len(text) - block - 1, size=(STEPS, batch))
    idx = np.stack([np.stack([text[s:s + block] for s in row]) for row in starts])
    targets = np.stack([np.stack([text[s + 1:s + 1 + block] for s in row]) for row in starts])
    return idx, targets


# ---------------------------------------------------------------------------------------------------------
# One run.


def flip_distance(model, inputs, dtype, scale, overflowed):
    """How far the scale is from changing this step's decision: the smallest k in 1..1024 such that the same
    forward and backward at scale * 2^(k/1024) (a clean step) or scale * 2^(-k/1024) (an overflowed one) decides
    the other way; 1025 when not within an octave. Bisection, taking overflow to be monotone in the scale."""
    probe = copy.deepcopy(model)

    def overflows(s):
        probe.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype):
            loss = probe(*inputs)
        (loss * s).backward()
        return any(not torch.isfinite(p.grad).all().item() for p in probe.parameters() if p.grad is not None)

    direction = -1 if overflowed else 1
    flips = lambda k: overflows(scale * 2.0 ** (direction * k / 1024)) != overflowed  # noqa: E731
    assert overflows(scale) == overflowed
    if not flips(1024):
        return 1025
    lo, hi = 0, 1024
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if flips(mid) else (mid, hi)
    return hi


def train(model, init, batches, run):
    """Trains `model` from `init` (name -> array) over `batches` (list of input tuples) as `run` says."""
    with torch.no_grad():
        params = dict(model.named_parameters())
        assert sorted(params) == sorted(init), (sorted(params), sorted(init))
        for name, p in params.items():
            p.copy_(torch.from_numpy(init[name]))
    opt = torch.optim.SGD(model.parameters(), **SGD)
    scaler = None
    if run["init_scale"] is not None:
        scaler = torch.amp.GradScaler("cpu", init_scale=run["init_scale"], growth_factor=run["growth_factor"],
                                      backoff_factor=run["backoff_factor"], growth_interval=run["growth_interval"])
    loss_log, before, after, skipped, distance = [], [], [], [], []
    first_grads = None  # (step, name -> grad): the grads backward left at the first applied step
    named = list(model.named_parameters())
    for t, inputs in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=run["dtype"]):
            loss = model(*inputs)
        assert loss.dtype == torch.float32  # cross_entropy is on autocast's fp32 list
        loss_log.append(loss.item())
        weights_before = [p.detach().clone() for p in model.parameters()]
        if scaler is None:
            loss.backward()
            if first_grads is None:
                first_grads = (t, {n: p.grad.numpy().copy() for n, p in named})
            opt.step()
            before.append(1.0)
            after.append(1.0)
            skipped.append(0)
            continue
        before.append(scaler.get_scale())
        model_before = copy.deepcopy(model)
        scaler.scale(loss).backward()
        grads = {n: p.grad.numpy().copy() for n, p in named} if first_grads is None else None  # still scaled
        scaler.step(opt)
        found_inf = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        scaler.update()
        after.append(scaler.get_scale())
        skipped.append(int(found_inf > 0))
        distance.append(flip_distance(model_before, inputs, run["dtype"], before[-1], bool(found_inf)))
        # Cross-check: a skipped step leaves every weight alone, an applied one moves some.
        unchanged = all(torch.equal(a, p) for a, p in zip(weights_before, model.parameters()))
        assert unchanged == bool(found_inf), (unchanged, found_inf)
        if first_grads is None and not found_inf:
            first_grads = (t, grads)
    final = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    log = dict(loss=np.array(loss_log, np.float32), scale_before=np.array(before, np.float64),
               scale_after=np.array(after, np.float64), skipped=np.array(skipped, np.int64))
    if scaler is not None:
        log["flip_distance"] = np.array(distance, np.int64)
        # mantissa must take every decision exactly as PyTorch did; one that a 0.5% change of the scale
        # would reverse could be reversed by rounding too, so such a run makes a poor reference.
        t = int(np.argmin(distance))
        assert distance[t] >= 8, (f"step {t} decides {'skip' if skipped[t] else 'apply'} within {distance[t]}/1024 "
                                  "octave of the other way: too close for an exact replay; change SEED or lr")
    return log, final, first_grads


def write_run(group, name, run, log, final, first_grads):
    g = group.create_group(name)
    g.attrs["autocast_dtype"] = "float16" if run["dtype"] == torch.float16 else "bfloat16"
    if run["init_scale"] is None:
        g.attrs["scaler"] = "none: loss.backward(); opt.step() (scale_before/scale_after are 1)"
    else:
        g.attrs["scaler"] = "torch.amp.GradScaler('cpu')"
        for key in ("init_scale", "growth_factor", "backoff_factor"):
            g.attrs[key] = float(run[key])
        g.attrs["growth_interval"] = np.int64(run["growth_interval"])
    for key, value in log.items():
        g.create_dataset(key, data=value)
    fg = g.create_group("final")
    for pname, value in final.items():
        fg.create_dataset(pname, data=value, compression="gzip", shuffle=True)
    gg = g.create_group("first_grads")
    gg.attrs["step"] = np.int64(first_grads[0])
    for pname, value in first_grads[1].items():
        gg.create_dataset(pname, data=value, compression="gzip", shuffle=True)
    print(f"  {name}: loss {log['loss'][0]:.4f} -> {log['loss'][-1]:.4f}, skipped steps "
          f"{np.flatnonzero(log['skipped']).tolist()}, scale {log['scale_before'][0]:g} -> {log['scale_after'][-1]:g}"
          + (f", closest decision {log['flip_distance'].min()}/1024 octave from flipping (step "
             f"{log['flip_distance'].argmin()})" if "flip_distance" in log else ""))


def run_model(f, name, make_model, data, batches, attrs):
    g = f.create_group(name)
    for key, value in attrs.items():
        g.attrs[key] = value
    for key, value in data.items():
        g.create_dataset(key, data=value, compression="gzip", shuffle=True)
    torch.manual_seed(SEED)
    model = make_model()
    init = {pname: p.detach().numpy().copy() for pname, p in model.named_parameters()}
    ig = g.create_group("init")
    for pname, value in init.items():
        ig.create_dataset(pname, data=value, compression="gzip", shuffle=True)
    print(name)
    for run_name, run in RUNS.items():
        log, final, first_grads = train(make_model(), init, batches, run)
        write_run(g, run_name, run, log, final, first_grads)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "..", "tests", "golden", "amp_training.h5")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.normpath(default_out))
    args = parser.parse_args()

    torch.set_num_threads(1)  # one summation order, so that running this again gives the same numbers
    rng = np.random.default_rng(SEED)
    mlp_sizes = [64, 128, 128, 10]
    mlp_batch = 32
    x, y = mlp_batches(rng, mlp_sizes[0], mlp_sizes[-1], mlp_batch)
    gpt_config = dict(vocab_size=65, n_layer=2, n_head=2, n_embd=32, block_size=16)
    gpt_batch = 8
    idx, targets = gpt_batches(rng, gpt_config["vocab_size"], gpt_config["block_size"], gpt_batch)

    with h5py.File(args.out, "w") as f:
        f.attrs["about"] = (
            "PyTorch's own CPU AMP, step by step: a 64-128-128-10 MLP and a 2-layer GPT, each trained "
            f"{STEPS} SGD-momentum steps from /<model>/init on the stored batches in three runs: fp16_backoff "
            "(float16 autocast, GradScaler init_scale 2^24, growth_interval 2000), fp16_growth (float16 "
            "autocast, GradScaler init_scale 2^16, growth_interval 5) and bf16 (bfloat16 autocast, no scaler). "
            "Per run: loss [steps] (f32, the unscaled loss of each step's forward); scale_before [steps] (the "
            "scale that step's backward used); scale_after [steps] (after update()); skipped [steps] (1: inf/nan "
            "grads, optimizer step skipped); flip_distance [steps] (scaled runs only: the smallest k in 1..1024 "
            "such that the same step's forward and backward at scale_before * 2^(+-k/1024) would decide the "
            "other way, 1025 if none within an octave: how far each decision is from a rounding accident); "
            "final/<name> (the weights after the last step); first_grads/<name> (the grads backward left, still "
            "scaled by scale_before, at the first applied step, attribute step: every step before it was "
            "skipped, so the weights were still the initial ones). Parameters are named as mantissa's models "
            "(models/mlp.h, models/gpt.h; the GPT's lm_head.weight is transformer.wte.weight, stored once). "
            "mlp: x [steps, 32, 64] f32 (float16 values), y [steps, 32] i64; gpt: idx and targets "
            "[steps, 8, 16] i64. Each step: zero_grad(set_to_none); forward under torch.autocast('cpu'); "
            "scaler.scale(loss).backward(); scaler.step(opt); scaler.update().")
        f.attrs["generator"] = "scripts/golden/amp_training.py"
        f.attrs["torch"] = str(torch.__version__)
        f.attrs["numpy"] = np.__version__
        f.attrs["python"] = platform.python_version()
        f.attrs["date"] = datetime.date.today().isoformat()
        f.attrs["threads"] = np.int64(torch.get_num_threads())
        f.attrs["optimizer"] = "torch.optim.SGD(" + ", ".join(f"{k}={v}" for k, v in SGD.items()) + ")"
        f.attrs["lr"] = SGD["lr"]
        f.attrs["momentum"] = SGD["momentum"]
        f.attrs["steps"] = np.int64(STEPS)
        f.attrs["seed"] = np.int64(SEED)

        run_model(f, "mlp", lambda: MLP(mlp_sizes), dict(x=x, y=y),
                  [(torch.from_numpy(x[t]), torch.from_numpy(y[t])) for t in range(STEPS)],
                  dict(sizes=np.array(mlp_sizes, np.int64), batch=np.int64(mlp_batch)))
        run_model(f, "gpt", lambda: GPT(gpt_config), dict(idx=idx, targets=targets),
                  [(torch.from_numpy(idx[t]), torch.from_numpy(targets[t])) for t in range(STEPS)],
                  dict(batch=np.int64(gpt_batch), dropout=0.0,
                       **{k: np.int64(v) for k, v in gpt_config.items()}))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
