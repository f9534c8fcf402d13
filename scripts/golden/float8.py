#!/usr/bin/env python3
"""Writes tests/golden/float8.h5: PyTorch 2.x's float8 conversions (float8_e4m3fn and float8_e5m2) on the CPU.

For each format the file keeps
  decode      the float32 value of each of the 256 bit patterns, as float32 bits (uint32), so that nan
              payloads and the sign of zero are kept;
  to          the bit pattern x.to(format) gives for each input of /input (PyTorch's conversion: round to
              nearest even; e4m3fn saturates finite overflow and inf to +-448 and keeps nan; e5m2 turns
              overflow into inf);
  saturated   the bit pattern of x.clamp(-max, max).to(format): the saturating cast float8 training uses
              (torchao's to_fp8_saturated), finite for every finite or infinite input.
/input holds the float32 inputs as bits (uint32): every representable value of both formats, the halfway
points between neighbours and the float32 values either side of each (every rounding boundary), the subnormal
range down to below half the smallest subnormal, the overflow boundaries, signed zeros, infinities, nans with
payloads, float32 subnormals and the float32 extremes, and seeded random values over the whole float32 range;
each with both signs.

Run by hand, with a torch 2.x environment (tests never need Python):
  python scripts/golden/float8.py [--out tests/golden/float8.h5]
This script is the only producer of that file: do not edit the file by hand; change this and run it again.
"""

import argparse
import datetime
import platform

import h5py
import numpy as np
import torch

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
SEED = 20261125


def f32_bits(values):
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def representable(fmt):
    """The finite non-negative values of a format, ascending, decoded by PyTorch itself."""
    values = torch.arange(256, dtype=torch.uint8).view(fmt).float().numpy()
    finite = values[np.isfinite(values) & (values >= 0) & ~np.signbit(values)]
    return np.unique(finite)


def inputs():
    v = []
    for fmt in FORMATS.values():
        r = representable(fmt).astype(np.float64)
        # The value the format would have next above its maximum: the overflow boundary is halfway to it.
        step = r[-1] - r[-2]
        ext = np.concatenate([r, [r[-1] + step, r[-1] + 2 * step]])
        mids = (ext[:-1] + ext[1:]) / 2
        # Below the smallest subnormal: halfway to zero, and a quarter of it.
        tiny = np.array([r[1] / 2, r[1] / 4, r[1] * 0.75, r[1] * 1.25])
        for x in np.concatenate([ext, mids, tiny]).astype(np.float32):
            v.extend([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    specials = np.array([0.0, np.inf, np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                         np.finfo(np.float32).smallest_subnormal, 1e-30, 1e-10, 1e10, 1e30, 65504.0, 65520.0,
                         65536.0, 1e5, 1e6], dtype=np.float32)
    v.extend(specials)
    rng = np.random.default_rng(SEED)
    # Random float32 bit patterns with exponents over the whole range, and a denser set near the formats' ranges.
    v.extend(rng.integers(0, 0x7F800000, size=2000, dtype=np.uint32).view(np.float32))
    v.extend((2.0 ** rng.uniform(-24, 18, size=4000)).astype(np.float32))
    pos = np.array(v, dtype=np.float32)
    pos = pos[~np.isnan(pos)]
    values = np.concatenate([pos, -pos])
    bits = np.unique(values.view(np.uint32))
    # Quiet and signalling nans with payloads, both signs (the nan check comes before any rounding).
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000, 0x7FC00001], dtype=np.uint32)
    return np.concatenate([bits, nans, nans | 0x80000000]).astype(np.uint32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/golden/float8.h5")
    args = parser.parse_args()
    torch.set_num_threads(1)

    x_bits = inputs()
    x = torch.from_numpy(x_bits.view(np.float32).copy())
    with h5py.File(args.out, "w") as f:
        f.attrs["producer"] = "scripts/golden/float8.py"
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["numpy_version"] = np.__version__
        f.attrs["python"] = platform.python_version()
        f.attrs["date"] = datetime.date.today().isoformat()
        f.attrs["device"] = "cpu"
        f.create_dataset("input", data=x_bits)
        for name, fmt in FORMATS.items():
            g = f.create_group(name)
            fmax = torch.finfo(fmt).max
            g.attrs["max"] = fmax
            g.attrs["torch_dtype"] = str(fmt)
            patterns = torch.arange(256, dtype=torch.uint8).view(fmt)
            g.create_dataset("decode", data=patterns.float().numpy().view(np.uint32))
            g.create_dataset("to", data=x.to(fmt).view(torch.uint8).numpy())
            g.create_dataset("saturated", data=x.clamp(-fmax, fmax).to(fmt).view(torch.uint8).numpy())
    print(f"wrote {args.out}: {len(x_bits)} inputs, torch {torch.__version__}")


if __name__ == "__main__":
    main()
