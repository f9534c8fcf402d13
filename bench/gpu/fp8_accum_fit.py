#!/usr/bin/env python3
"""Which accumulator model reproduces the tensor core's FP8 sums? Fits one to fp8_accum_probe.py's record.

The model (issue 35) for one output element: the K products (exact: an FP8 x FP8 product fits an f32) are
taken mma_k at a time, as one MMA instruction adds them; the running sum and that group's products are aligned
to the largest exponent among them, each cut to `bits` bits below that exponent (toward zero), summed exactly,
and the total rounded back to f32 (round to nearest even, or toward zero); every `promote` products (0: never)
the running sum is added into an f32 total, plainly, and restarts from zero. The grid below tries each
combination on every recorded case and prints, per (fast-accum mode), the models that match every output bit
for bit, and the count of mismatched elements for the near misses (the ladders rank the grid; the random matrices with
K <= 512 judge its best dozen, every random case its best two).

    python3 bench/gpu/fp8_accum_fit.py DIR      (DIR holds fp8_accum_probe.npz and .json)
"""
import itertools
import json
import os
import sys

import numpy as np

E4M3 = "torch.float8_e4m3fn"


def fp8_values(raw, dtype):
    """uint8 FP8 bytes -> float64 values (OCP E4M3 without infinities, or E5M2)."""
    raw = raw.astype(np.int64)
    sign = np.where(raw & 0x80, -1.0, 1.0)
    if dtype == E4M3:
        e, m, bias, mbits = (raw >> 3) & 0xF, raw & 0x7, 7, 3
    else:
        e, m, bias, mbits = (raw >> 2) & 0x1F, raw & 0x3, 15, 2
    normal = (1.0 + m / 2.0**mbits) * np.exp2(e - bias)
    sub = (m / 2.0**mbits) * np.exp2(1 - bias)
    return sign * np.where(e == 0, sub, normal)


def model(a, bt, mma_k, bits, rounding, promote):
    """a: M x K, bt: N x K float64 FP8 values; returns the M x N f32 result of the model."""
    m, k = a.shape
    n = bt.shape[0]
    total = np.zeros((m, n), np.float32)
    acc = np.zeros((m, n), np.float64)
    for start in range(0, k, mma_k):
        prods = a[:, None, start:start + mma_k] * bt[None, :, start:start + mma_k]  # exact in f64
        terms = np.concatenate([acc[:, :, None], prods], axis=2)
        mag = np.max(np.abs(terms), axis=2)
        _, ex = np.frexp(mag)  # mag = f * 2^ex, f in [0.5, 1): leading bit is 2^(ex-1)
        quantum = np.exp2(ex - 1 - bits)[:, :, None]
        cut = np.trunc(terms / quantum) * quantum
        s = cut.sum(axis=2)
        if rounding == "rne":
            acc = s.astype(np.float32).astype(np.float64)
        else:  # toward zero: drop the bits below f32's 24
            _, se = np.frexp(np.abs(s))
            q = np.exp2(se - 24)
            acc = np.where(s == 0, 0.0, np.trunc(s / q) * q)
        done = start + mma_k
        if promote and (done % promote == 0 or done >= k):
            total = (total + acc.astype(np.float32)).astype(np.float32)
            acc[:] = 0
    if not promote:
        total = acc.astype(np.float32)
    return total


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    arrays = np.load(os.path.join(d, "fp8_accum_probe.npz"))
    index = json.load(open(os.path.join(d, "fp8_accum_probe.json")))
    print(f"record: {index['gpu']}, torch {index['torch']}, CUDA {index['cuda']}")
    cases = [c for c in index["cases"] if c["ok"] and c["out_dtype"] == "torch.float32"
             and np.all(arrays[c["name"] + "/scale_a"] == 1) and np.all(arrays[c["name"] + "/scale_b"] == 1)]
    grid = list(itertools.product((4, 8, 16, 32, 64), (10, 11, 12, 13, 14, 15, 16, 23, 24, 25, 40),
                                  ("rz", "rne"), (0, 32, 64, 128, 256)))
    def mismatches(sel, params, stop=None):
        bad = total = 0
        for c in sel:
            a = fp8_values(arrays[c["inputs"] + "/a"], c["a_dtype"])
            bt = fp8_values(arrays[c["inputs"] + "/bt"], c["b_dtype"])
            got = arrays[c["name"] + "/out"].astype(np.float32)
            want = model(a, bt, *params)
            bad += int(np.sum(want.view(np.uint32) != got.view(np.uint32)))
            total += got.size
            if stop is not None and bad > stop:
                break
        return bad, total

    for fast in (False, True):
        sel = [c for c in cases if c["use_fast_accum"] == fast]
        ladders = [c for c in sel if c["kind"].startswith("ladder")]
        randoms = sorted((c for c in sel if c["kind"] == "random"), key=lambda c: c["k"])
        # the ladders (48 x 32) sort the grid; the random matrices (256 x 256) judge its best dozen
        ranked = sorted((mismatches(ladders, params)[0], params) for params in grid)[:12]
        print(f"\nuse_fast_accum={fast}: {len(ladders)} ladder and {len(randoms)} random cases")
        print("  ladder mismatches, random mismatches / elements, (mma_k, bits, rounding, promote):")
        small = [c for c in randoms if c["k"] <= 512]
        judged = sorted((mismatches(small, params, stop=1000)[0], lbad, params) for lbad, params in ranked)
        for rbad, lbad, params in judged:
            print(f"  {lbad:6d} {rbad:8d}  {params}  (random K <= 512)")
        for rbad, lbad, params in judged[:2]:
            bad, total = mismatches(randoms, params)
            print(f"  all random cases, {params}: {bad} of {total} elements differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
