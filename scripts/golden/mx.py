#!/usr/bin/env python3
"""Writes tests/golden/mx.h5: torchao's reference MX (OCP Microscaling v1.0) casts, MXFP8 E4M3 and E5M2.

torchao.prototype.mx_formats.mx_tensor.to_mx(x, elem_dtype, 32) with its default scaling mode (FLOOR: the
block's E8M0 scale is 2^(floor(log2(amax)) - emax of the element format), the OCP specification's section
6.3), and to_dtype(...) back to float32. For each format the file keeps
  scales   the biased E8M0 exponent of each block of 32 values along the last dimension (uint8; 255: nan)
  data     the element bit patterns (uint8)
  dequant  to_dtype(data, scales) in float32, as bits (uint32)
and the same under ScaleCalculationMode.RCEIL (the scale 2^ceil(log2(amax / max)), cuBLAS's rule) in the groups
e4m3_rceil and e5m2_rceil.
/input is float32 bits (uint32) of shape [rows, 128]: seeded normal values; values spread over the whole
float32 exponent range (each block its own magnitude, 2^-149 .. 2^127); blocks whose maximum sits on and
either side of a power of two and of the element format's maximum times a power of two (where the scale and
the rounding change); blocks of zeros, of signed zeros, of float32 subnormals; blocks holding an inf, a nan,
or both; a block whose other values underflow the element format once scaled.

Run by hand, in the bench environment (scripts/install-deps.sh --bench installs torch and torchao):
  python scripts/golden/mx.py [--out tests/golden/mx.h5]
This script is the only producer of that file: do not edit the file by hand; change this and run it again.
"""

import argparse
import datetime
import platform

import h5py
import numpy as np
import torch
import torchao
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.mx_tensor import to_dtype, to_mx

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
BLOCK = 32
COLS = 128
SEED = 20261128


def rows():
    rng = np.random.default_rng(SEED)
    out = [rng.standard_normal((64, COLS)).astype(np.float32)]
    # Each block its own magnitude over the whole float32 range.
    spread = rng.standard_normal((64, COLS)).astype(np.float64)
    exps = rng.integers(-149, 128, size=(64, COLS // BLOCK))
    out.append(np.clip(spread * np.exp2(np.repeat(exps, BLOCK, axis=1)), -3.0e38, 3.0e38).astype(np.float32))
    # Block maxima at and around powers of two and around each format's maximum times a power of two.
    edges = []
    for base in [1.0, 448.0, 57344.0, 480.0, 61440.0, 3.0, 1.5 * 2.0 ** -120, 2.0 ** -126, 2.0 ** 100]:
        for scale in [1.0, 2.0 ** -20, 2.0 ** 20]:
            m = np.float32(base * scale)
            for v in [m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(0))]:
                block = rng.uniform(-1, 1, BLOCK).astype(np.float32) * v
                block[rng.integers(0, BLOCK)] = v * rng.choice([-1, 1])
                edges.append(block)
    edges = np.array(edges, dtype=np.float32)
    pad = (-len(edges)) % (COLS // BLOCK)
    edges = np.concatenate([edges, np.zeros((pad, BLOCK), np.float32)]).reshape(-1, COLS)
    out.append(edges)
    special = np.zeros((4, COLS), np.float32)
    special[0, :BLOCK] = 0.0                                       # zeros
    special[0, BLOCK:2 * BLOCK] = -0.0                             # signed zeros
    special[0, 2 * BLOCK:3 * BLOCK] = np.float32(1e-45) * np.arange(1, BLOCK + 1, dtype=np.float32)  # subnormals
    special[0, 3 * BLOCK:] = rng.standard_normal(BLOCK).astype(np.float32)
    special[1, :] = rng.standard_normal(COLS).astype(np.float32)
    special[1, 3] = np.inf                                        # an inf
    special[1, BLOCK + 5] = np.nan                                # a nan
    special[1, 2 * BLOCK + 1] = -np.inf
    special[1, 2 * BLOCK + 2] = np.nan                            # both
    special[2, :] = rng.standard_normal(COLS).astype(np.float32) * np.float32(1e-6)
    special[2, ::BLOCK] = 1.0e3                                   # the rest underflows once scaled
    special[3, :] = -rng.uniform(0, 1, COLS).astype(np.float32) * np.float32(2.0 ** -140)
    out.append(special)
    return np.concatenate(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/golden/mx.h5")
    args = parser.parse_args()
    x = rows()
    with h5py.File(args.out, "w") as f:
        f.attrs["producer"] = "scripts/golden/mx.py"
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["torchao_version"] = str(torchao.__version__)
        f.attrs["python"] = platform.python_version()
        f.attrs["date"] = datetime.date.today().isoformat()
        f.attrs["block_size"] = BLOCK
        f.attrs["scaling_mode"] = "FLOOR (to_mx's default); RCEIL in the *_rceil groups"
        f["/input"] = x.view(np.uint32)
        xt = torch.from_numpy(x.copy())
        for name, fmt in FORMATS.items():
            for suffix, mode in (("", ScaleCalculationMode.FLOOR), ("_rceil", ScaleCalculationMode.RCEIL)):
                scales, data = to_mx(xt, fmt, BLOCK, mode)
                back = to_dtype(data, scales, fmt, BLOCK, torch.float32)
                g = f.create_group(name + suffix)
                g.attrs["scaling_mode"] = mode.name
                g["scales"] = scales.view(torch.uint8).numpy()
                g["data"] = data.view(torch.uint8).numpy()
                g["dequant"] = back.numpy().view(np.uint32)
    print(f"wrote {args.out}: {x.shape[0]} rows of {COLS}, torch {torch.__version__}, torchao {torchao.__version__}")


if __name__ == "__main__":
    main()
