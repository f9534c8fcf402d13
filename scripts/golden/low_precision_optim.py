#!/usr/bin/env python3
"""Writes tests/golden/low_precision_optim.h5: the reference answers for issue 36's low-precision optimizer state.

  /dynamic_map/signed, /dynamic_map/unsigned
        bitsandbytes.functional.create_dynamic_map(signed=...) (8 bits, 7 exponent bits): the 256 float32 values
        of Dettmers et al.'s dynamic quantization map, sorted, as bitsandbytes publishes them (Adam's first moment
        uses the signed map, its second moment the unsigned one).
  /blockwise/<case>
        bitsandbytes.functional.quantize_blockwise(x, code=map, blocksize=B) on the CPU (bitsandbytes' compiled
        cquantize_blockwise_cpu_fp32) and dequantize_blockwise of the result: `input` (float32 [n]), `signed`
        (which map), `blocksize`, `codes` (uint8 [n]), `absmax` (float32, one per block) and `dequant` (float32).
        Each call gets its own copy of the map: bitsandbytes' CPU quantizer overwrites the map's first entry
        with -1.0 (its binary search needs the range to reach -1), which would otherwise leak into the
        dequantization and into later calls.
  /bf16_sr/<case>
        torchao.optim.quant_utils._fp32_to_bf16_sr(x): float32 to bfloat16 with stochastic rounding, rounding away
        from zero when a uniform 16-bit integer is below the 16 bits the cast drops. `input` (float32 [n]),
        `random` (the int32 draws torch.randint(0, 2^16) made inside the call, replayed from the same generator
        state) and `output` (the bfloat16 results' bits, uint16).

Cases: seeded normal values over several magnitudes with a ragged last block; positive values (the second
moment's); values on and beside the map's entries and the midpoints between them (the ties: bitsandbytes keeps
the lower entry); one block whose values are all tiny beside one large one; a block with a single non-zero value.
An all-zero block is not a case: bitsandbytes divides by its zero absmax (nan), mantissa gives it code of 0.
For the rounding: values with zero, small and large low halves, negatives, exact bfloat16 values (never rounded),
values above bfloat16's largest finite (rounding up reaches inf), and +-inf.

Run by hand, in the bench environment (scripts/install-deps.sh --bench installs torch, torchao and bitsandbytes):
  python scripts/golden/low_precision_optim.py [--out tests/golden/low_precision_optim.h5]
This script is the only producer of that file: do not edit the file by hand; change this and run it again.
"""

import argparse
import datetime
import platform

import bitsandbytes
import bitsandbytes.functional as bnbf
import h5py
import numpy as np
import torch
import torchao
from torchao.optim.quant_utils import _fp32_to_bf16_sr

SEED = 20261128


def blockwise_case(group, name, x, signed, blocksize):
    x = np.ascontiguousarray(x, dtype=np.float32)
    code = bnbf.create_dynamic_map(signed=signed)
    codes, state = bnbf.quantize_blockwise(torch.from_numpy(x.copy()), code=code.clone(), blocksize=blocksize)
    state.code = code.clone()
    dequant = bnbf.dequantize_blockwise(codes, state)
    g = group.create_group(name)
    g.create_dataset("input", data=x)
    g.attrs["signed"] = int(signed)
    g.attrs["blocksize"] = blocksize
    g.create_dataset("codes", data=codes.numpy().astype(np.uint8))
    g.create_dataset("absmax", data=state.absmax.numpy().astype(np.float32))
    g.create_dataset("dequant", data=dequant.numpy().astype(np.float32))


def sr_case(group, name, x, seed):
    x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32).copy())
    torch.manual_seed(seed)
    random = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32)
    torch.manual_seed(seed)
    out = _fp32_to_bf16_sr(x.clone())
    g = group.create_group(name)
    g.create_dataset("input", data=x.numpy())
    g.create_dataset("random", data=random.numpy())
    g.create_dataset("output", data=out.view(torch.int16).numpy().view(np.uint16))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/golden/low_precision_optim.h5")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    with h5py.File(args.out, "w") as f:
        f.attrs["torch"] = str(torch.__version__)
        f.attrs["torchao"] = str(torchao.__version__)
        f.attrs["bitsandbytes"] = str(bitsandbytes.__version__)
        f.attrs["python"] = platform.python_version()
        f.attrs["date"] = datetime.date.today().isoformat()
        f.attrs["script"] = "scripts/golden/low_precision_optim.py"

        maps = f.create_group("dynamic_map")
        signed_map = bnbf.create_dynamic_map(signed=True).numpy().astype(np.float32)
        unsigned_map = bnbf.create_dynamic_map(signed=False).numpy().astype(np.float32)
        maps.create_dataset("signed", data=signed_map)
        maps.create_dataset("unsigned", data=unsigned_map)

        bw = f.create_group("blockwise")
        scales = np.repeat(10.0 ** rng.integers(-6, 3, size=3), 2048)[:5000]
        blockwise_case(bw, "normal", rng.standard_normal(5000) * scales, True, 2048)
        blockwise_case(bw, "positive", np.abs(rng.standard_normal(4500)) ** 2 * 1e-3, False, 2048)
        blockwise_case(bw, "small_blocks", rng.standard_normal(1000), True, 256)
        # Map entries, the midpoints between neighbours and the float32 values either side of each, in blocks
        # whose absmax is 1 (so the normalized value is the value itself).
        for signed, m in ((True, signed_map), (False, unsigned_map)):
            mids = (m[:-1].astype(np.float64) + m[1:]) / 2
            mids = mids.astype(np.float32)
            vals = np.concatenate([m, mids, np.nextafter(mids, np.float32(2)), np.nextafter(mids, np.float32(-2))])
            vals = np.clip(vals, -1.0, 1.0).astype(np.float32)
            vals = vals.reshape(-1)
            n = len(vals)
            block = 512
            padded = np.zeros((n + block - 1) // block * block, dtype=np.float32)
            padded[:n] = vals
            padded[::block] = 1.0  # every block's absmax is exactly 1
            blockwise_case(bw, "ties_signed" if signed else "ties_unsigned", padded, signed, block)
        tiny = rng.standard_normal(2048) * 1e-7
        tiny[100] = 3.0
        blockwise_case(bw, "tiny_beside_large", tiny, True, 2048)
        single = np.zeros(2048, dtype=np.float32)
        single[7] = -0.25
        blockwise_case(bw, "single_nonzero", single, True, 2048)

        sr = f.create_group("bf16_sr")
        mags = 10.0 ** rng.uniform(-30, 30, size=4000)
        sr_case(sr, "random", rng.standard_normal(4000) * mags, SEED + 1)
        bits = rng.integers(0, 1 << 16, size=2000, dtype=np.uint32)
        base = (rng.integers(0x3F00, 0x4100, size=2000, dtype=np.uint32) << 16) | bits
        base[:16] &= 0xFFFF0000  # exact bfloat16 values
        base[16:32] = (base[16:32] & 0xFFFF0000) | 0xFFFF
        base[32:48] = (base[32:48] & 0xFFFF0000) | 0x0001
        base[48:1000] |= 0x80000000  # negatives
        sr_case(sr, "low_halves", base.view(np.float32), SEED + 2)
        edge = np.array([0x7F7F0001, 0x7F7FFFFF, 0xFF7F8000, 0x7F800000, 0xFF800000, 0x00000001, 0x80008000,
                         0x00000000, 0x80000000, 0x007FFFFF], dtype=np.uint32)
        sr_case(sr, "edges", np.tile(edge, 64).view(np.float32), SEED + 3)


if __name__ == "__main__":
    main()
