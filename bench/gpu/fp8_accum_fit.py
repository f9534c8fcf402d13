#!/usr/bin/env python3
"""The FP8 tensor core's accumulator, as a model checked against fp8_accum_probe.py's record, bit for bit.

The model (issue 35), found on the record of an H200 (bench/gpu/2026-11-28), for one output element: the K
products are taken 32 at a time (one K step of Hopper's FP8 MMA). Each step aligns its products and the
running sum to one anchor: the largest of the products' exponent sums (e_a + e_b, the unbiased exponents of
the two FP8 factors, subnormals at the format's minimum; not the exponent of the product's value, whose
significand product lies in [1, 4)) and the running sum's exponent. Every product and the running sum are cut
toward zero to a multiple of 2^(anchor - 13), summed exactly, and the sum is cut toward zero to 14 significant
bits (13 below its leading one) and kept in an f32 register. With cuBLASLt's fast accumulation off, every 128
products the running sum is added into a plain f32 total (round to nearest even) and restarts from zero; with
it on, never. Other numbers can be tried with the flags, to see how the record refutes them.

The bf16-output cases check the scales too: tensorwise and rowwise outputs are the model's sum times the two
scales, rounded once to bf16; 1x128 (and 128x128) block scales multiply each 128-product block's sum (one
promotion interval) and the blocks are summed in f32, then rounded to bf16.

    python3 bench/gpu/fp8_accum_fit.py DIR [--corner 64] [--group 32] [--bits 13] [--sum-bits 13] [--promote 128]
        (DIR holds fp8_accum_probe.npz and .json; prints each case and its mismatched outputs; --corner checks
        the top-left corner of each output, 0 for all of it)
"""
import argparse
import json
import os
import sys

import numpy as np

E4M3 = "torch.float8_e4m3fn"


def fp8_decode(raw, dtype):
    """uint8 FP8 bytes -> (float64 values, unbiased exponents with subnormals at the minimum)."""
    raw = raw.astype(np.int64)
    sign = np.where(raw & 0x80, -1.0, 1.0)
    if dtype == E4M3:
        e, m, bias, mbits = (raw >> 3) & 0xF, raw & 0x7, 7, 3
    else:
        e, m, bias, mbits = (raw >> 2) & 0x1F, raw & 0x3, 15, 2
    normal = (1.0 + m / 2.0**mbits) * np.exp2(e - bias)
    sub = (m / 2.0**mbits) * np.exp2(1 - bias)
    values = sign * np.where(e == 0, sub, normal)
    return values, np.maximum(e, 1) - bias


def cut_to_significant(s, bits):
    """s cut toward zero to bits + 1 significant bits."""
    _, x = np.frexp(np.abs(s))
    q = np.exp2(x - 1 - bits)
    return np.where(s == 0, 0.0, np.trunc(s / q) * q)


def model(a, ea, bt, eb, group=32, bits=13, sum_bits=13, promote=128):
    """a, ea: M x K values and exponents; bt, eb: N x K. Returns the M x N f32 result."""
    m, k = a.shape
    n = bt.shape[0]
    total = np.zeros((m, n), np.float32)
    acc = np.zeros((m, n))
    for start in range(0, k, group):
        prods = a[:, None, start:start + group] * bt[None, :, start:start + group]  # exact in f64
        esum = np.where(prods == 0, -1000, ea[:, None, start:start + group] + eb[None, :, start:start + group])
        _, x = np.frexp(np.abs(acc))
        anchor = np.maximum(esum.max(axis=2), np.where(acc == 0, -1000, x - 1))
        q = np.exp2(anchor - bits)
        s = (np.trunc(prods / q[:, :, None]) * q[:, :, None]).sum(axis=2) + np.trunc(acc / q) * q
        acc = cut_to_significant(s, sum_bits).astype(np.float32).astype(np.float64)
        done = start + group
        if promote and (done % promote == 0 or done >= k):
            total = (total + acc.astype(np.float32)).astype(np.float32)
            acc[:] = 0
    return total if promote else acc.astype(np.float32)


def bf16(x):
    """f32 -> bf16 (round to nearest even) -> f32."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def scaled(c, arrays, a, ea, bt, eb, args):
    """A bf16-output case: the model's sums with the scales applied as cuBLASLt does, rounded to bf16."""
    sa, sb = arrays[c["name"] + "/scale_a"], arrays[c["name"] + "/scale_b"]
    promote = 0 if c["use_fast_accum"] else args.promote
    m, n = a.shape[0], bt.shape[0]
    if not c["name"].startswith("block"):  # tensorwise (1 x 1) or rowwise (M x 1 and 1 x N)
        acc = model(a, ea, bt, eb, args.group, args.bits, args.sum_bits, promote)
        return bf16(acc * sa.reshape(-1, 1)[:m].astype(np.float32) * sb.reshape(1, -1)[:, :n].astype(np.float32))
    blocks = a.shape[1] // 128
    sb_n = sb if sb.shape[1] == c["n"] else np.repeat(sb, 128, axis=1)
    total = np.zeros((m, n), np.float32)
    for i in range(blocks):
        k = slice(128 * i, 128 * (i + 1))
        part = model(a[:, k], ea[:, k], bt[:, k], eb[:, k], args.group, args.bits, args.sum_bits, 0)
        total = (total + part * (sa[:m, i:i + 1] * sb_n[i:i + 1, :n]).astype(np.float32)).astype(np.float32)
    return bf16(total)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--corner", type=int, default=64)
    p.add_argument("--group", type=int, default=32)
    p.add_argument("--bits", type=int, default=13)
    p.add_argument("--sum-bits", type=int, default=13)
    p.add_argument("--promote", type=int, default=128, help="with fast accumulation off (on: never)")
    args = p.parse_args()
    arrays = np.load(os.path.join(args.dir, "fp8_accum_probe.npz"))
    index = json.load(open(os.path.join(args.dir, "fp8_accum_probe.json")))
    print(f"record: {index['gpu']}, torch {index['torch']}, CUDA {index['cuda']}")
    bad_total = elements = 0
    for c in index["cases"]:
        if not c["ok"]:
            continue
        rows = cols = args.corner or max(c["m"], c["n"])
        a, ea = fp8_decode(arrays[c["inputs"] + "/a"][:rows], c["a_dtype"])
        bt, eb = fp8_decode(arrays[c["inputs"] + "/bt"][:cols], c["b_dtype"])
        got = arrays[c["name"] + "/out"][:rows, :cols].astype(np.float32)
        if c["out_dtype"] == "torch.float32" and np.all(arrays[c["name"] + "/scale_a"] == 1):
            want = model(a, ea, bt, eb, args.group, args.bits, args.sum_bits,
                         0 if c["use_fast_accum"] else args.promote)
        elif c["out_dtype"] == "torch.bfloat16":
            want = scaled(c, arrays, a, ea, bt, eb, args)
        else:
            continue
        bad = int(np.sum(want.view(np.uint32) != got.view(np.uint32)))
        bad_total += bad
        elements += got.size
        print(f"  {c['name']}: {bad} of {got.size} outputs differ")
    print(f"fp8_accum_fit: {bad_total} of {elements} outputs differ from the model")
    return 0 if bad_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
