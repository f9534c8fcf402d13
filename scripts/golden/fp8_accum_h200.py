#!/usr/bin/env python3
"""tests/golden/fp8_accum_h200.h5: a slice of the H200's FP8 GEMM record (bench/gpu/2026-11-28), for the CPU
test of mantissa's tensor-core accumulator model (ops/fp8/accumulator.h) without a GPU.

The record is bench/gpu/fp8_accum_probe.py's output from the first lent GPU (torch._scaled_mm through cuBLASLt,
scales 1, f32 out). This copies, unchanged, the ladder cases up to K = 1024 (48 x 32 outputs: one large product
and K-1 equal small ones, 0 to 34 binades apart) and the top-left corner of the random cases (64 x 64 outputs
for K 64, 128 and 512; 32 x 32 for K 4096), E4M3 x E4M3 and E5M2 x E4M3. Per input set a group /<name> with `a`
(M x K FP8 bytes, row-major), `bt` (N x K bytes: B transposed), `out_fast0` and `out_fast1` (M x N f32 bits with
cuBLASLt's fast accumulation off and on) and `meta` (uint32: m, n, k, a is E5M2, b is E5M2). Under /scaled,
the rowwise (K up to 512) and block-scaled cases (bf16 outputs, E4M3 x E4M3), 64 x 64 corners with their
scales.

    python3 scripts/golden/fp8_accum_h200.py bench/gpu/2026-11-28 tests/golden/fp8_accum_h200.h5
"""
import json
import os
import sys

import h5py
import numpy as np


def main():
    src, dst = sys.argv[1], sys.argv[2]
    arrays = np.load(os.path.join(src, "fp8_accum_probe.npz"))
    index = json.load(open(os.path.join(src, "fp8_accum_probe.json")))
    scaled = []
    with h5py.File(dst + ".tmp", "w") as f:
        f.attrs["source"] = f"{index['gpu']}, torch {index['torch']}, CUDA {index['cuda']}, bench/gpu/2026-11-28"
        for c in index["cases"]:
            if not c["ok"]:
                continue
            if c["out_dtype"] == "torch.bfloat16" and (c["name"].startswith("rowwise") or c["name"].startswith("block")):
                if "rowmajor" not in c["name"] and not (c["name"].startswith("rowwise") and c["k"] > 512):
                    scaled.append(c)
                continue
            if c["out_dtype"] != "torch.float32" or np.any(arrays[c["name"] + "/scale_a"] != 1):
                continue
            if c["kind"].startswith("ladder"):
                if c["k"] > 1024:
                    continue
                rows, cols = c["m"], c["n"]
            else:
                rows = cols = 32 if c["k"] >= 4096 else 64
            name = c["name"].rsplit("_fast", 1)[0]
            fast = "out_fast1" if c["use_fast_accum"] else "out_fast0"
            if name not in f:
                g = f.create_group(name)
                g["a"] = arrays[c["inputs"] + "/a"][:rows].astype(np.uint8)
                g["bt"] = arrays[c["inputs"] + "/bt"][:cols].astype(np.uint8)
                g["meta"] = np.array([rows, cols, c["k"], c["a_dtype"].endswith("e5m2"),
                                      c["b_dtype"].endswith("e5m2")], np.uint32)
            f[name][fast] = arrays[c["name"] + "/out"][:rows, :cols].astype(np.float32).view(np.uint32)
        # The scaled cases (bf16 out), 64 x 64 corners with the scales that reach them: /scaled/<name> with `a`,
        # `bt`, `scale_a`, `scale_b` (f32 bits, shaped as torch._scaled_mm took them, sliced to the corner),
        # `out` (f32 bits of the bf16 outputs) and `meta` (m, n, k, fast accumulation).
        for c in scaled:
            rows = cols = 64
            sa, sb = arrays[c["name"] + "/scale_a"], arrays[c["name"] + "/scale_b"]
            sa = sa[:rows]
            sb = sb[:, :cols] if sb.shape[1] == c["n"] else sb[:, :1]
            g = f.create_group("scaled/" + c["name"])
            g["a"] = arrays[c["inputs"] + "/a"][:rows].astype(np.uint8)
            g["bt"] = arrays[c["inputs"] + "/bt"][:cols].astype(np.uint8)
            g["scale_a"] = np.ascontiguousarray(sa, np.float32).view(np.uint32)
            g["scale_b"] = np.ascontiguousarray(sb, np.float32).view(np.uint32)
            g["out"] = arrays[c["name"] + "/out"][:rows, :cols].astype(np.float32).view(np.uint32)
            g["meta"] = np.array([rows, cols, c["k"], c["use_fast_accum"]], np.uint32)
    os.replace(dst + ".tmp", dst)
    print(f"wrote {dst}: {os.path.getsize(dst)} bytes")


if __name__ == "__main__":
    main()
