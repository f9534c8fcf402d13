#!/usr/bin/env python3
"""Writes tests/golden/fp4.h5: torchao's reference FP4 (E2M1) casts, MXFP4 and NVFP4, on the CPU.

Everything comes from torchao 0.18's pure-PyTorch (emulated) code in torchao.prototype.mx_formats, run eagerly:
  /e2m1/cast        kernels.f32_to_f4_unpacked(x) (round to nearest even; |x| >= 6 and inf saturate to +-6;
                    the sign of zero kept; a nan becomes a finite code chosen by its payload, see `nan_rule`)
                    and kernels.f4_unpacked_to_f32 of the result, for the float32 inputs `input`: signed zeros,
                    every E2M1 value, every midpoint between neighbours and the float32 values either side of
                    each, values above 6 up to the float32 maximum, +-inf, nans with payloads, float32
                    subnormals, and seeded random values over several magnitudes; `code` (uint8, sign in bit 3)
                    and `value` (float32). /e2m1/decode: all 16 codes and their float32 values.
  /mxfp4/<case>     mx_tensor.MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32, scaling_mode) (that is
                    mx_tensor.to_mx, checked equal) with scaling_mode FLOOR (the default) in <case>/floor and
                    RCEIL in <case>/rceil; per mode `scale` (biased E8M0, uint8, one per block of 32 along the
                    last dimension; 255: nan), `packed` (the uint8 torchao stores: element 2i in the low nibble,
                    2i+1 in the high one), `codes` (one uint8 per element), `elements` (the codes decoded,
                    float32, unscaled) and `dequant` (MXTensor.dequantize(torch.float32) = to_dtype(...)).
  /nvfp4/<case>     nvfp4_tensor.NVFP4Tensor.to_nvfp4(x, 16, per_tensor_scale) (nvfp4_quantize underneath), per
                    variant <case>/<variant>: `none` without a per-tensor scale, `dyn` with
                    per_tensor_amax_to_scale(max|x|) (= amax / (448 * 6), as torchao's dynamic activation path
                    computes it), and on some cases `calib_low` / `calib_high` with a calibrated amax 64 times
                    too small / too large (block scales clamped at 448 / at 2^-6). Per variant
                    `per_tensor_scale` (float32 [1], absent for `none`), `scale` (the E4M3 block scales' bits,
                    uint8, one per 16 values), `scale_f32` (those decoded), `hp_scale` (get_hp_scales():
                    per_tensor_scale * scale in float32), `packed`, `codes`, `elements` and `dequant`
                    (dequantize(torch.float32)); for bfloat16 inputs also `dequant_bf16` (dequantize() in the
                    input's dtype, bits as uint16).
Inputs are float32 datasets `input` [rows, cols] (h5py writes float32 bits as they are: nan payloads and signed
zeros survive); a bfloat16 case also keeps `input_bf16` (bits, uint16), and `input` is its exact float32 value.
Cases: seeded normal values; each block its own magnitude over the float32 range; block maxima on and beside
the edges where the scale changes (powers of two, E8M0 / E4M3 rounding midpoints, the clamps) and where the
elements' rounding ties sit; for NVFP4, blocks (`recip`, `recip_pts`) holding values near E2M1 midpoints where
torchao's multiplication by a rounded reciprocal (x * (1 / s), x * ((1 / pts) / s)) picks another code than a
division would; zero, signed-zero and subnormal blocks; blocks holding inf, -inf and nan; a block whose other
values underflow; an all-zero tensor (its `dyn` per-tensor scale is 0 and torchao's output is nan); bfloat16
input. Codes and elements of a block whose scale is nan (E8M0 255, E4M3 0x7f / 0xff) are whatever nan reached the
cast (x86's default nan is negative), and dequant is nan regardless: compare them only where the scale is not.

Run by hand, in the bench environment (scripts/install-deps.sh --bench installs torch and torchao):
  python scripts/golden/fp4.py [--out tests/golden/fp4.h5]
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
from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, f32_to_f4_unpacked, unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import MXTensor, to_dtype, to_mx
from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

SEED = 20261128
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
MIDPOINTS = (E2M1[:-1] + E2M1[1:]) / 2  # 0.25 0.75 1.25 1.75 2.5 3.5 5
FP4 = torch.float4_e2m1fn_x2
MX_BLOCK, MX_COLS = 32, 128
NV_BLOCK, NV_COLS = 16, 64
MODES = {"floor": ScaleCalculationMode.FLOOR, "rceil": ScaleCalculationMode.RCEIL}
F32 = np.float32
NAN_BITS = [0x7FC00000, 0x7F800001, 0x7FA00000, 0x7FE00000, 0x7FFFFFFF, 0x7F900000, 0x7FC00001, 0x7FDFFFFF]


def up(x):
    return np.nextafter(F32(x), F32(np.inf))


def down(x):
    return np.nextafter(F32(x), F32(-np.inf))


def around(x):
    x = F32(x)
    return [down(x), x, up(x)]


def f32(values):
    return np.asarray(values, dtype=np.float32)


def blocks_to_rows(blocks, block, cols):
    """Stacks [n, block] blocks into rows of `cols`, padding with zero blocks."""
    blocks = f32(blocks).reshape(-1, block)
    per_row = cols // block
    pad = (-len(blocks)) % per_row
    return np.concatenate([blocks, np.zeros((pad, block), np.float32)]).reshape(-1, cols)


def block_with_max(rng, amax, block, sign=None):
    """A block of uniform(-1, 1) * amax values with one element exactly +-amax."""
    amax = F32(amax)
    b = (rng.uniform(-1, 1, block) * np.float64(amax)).astype(np.float32)
    b[rng.integers(0, block)] = amax * (sign if sign is not None else rng.choice([-1, 1]))
    return b


def tie_block(scale, block):
    """Every E2M1 value and midpoint and their float32 neighbours, times `scale` (a power of two), both signs,
    with max |x| = 6 * scale so that FLOOR's and RCEIL's scale is `scale`."""
    v = [6.0]
    for m in MIDPOINTS:
        v += around(m)
    v += [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.75, up(0.0), down(6.0)]
    v = f32(v)
    v = np.concatenate([v, -v])
    out = []
    for i in range(0, len(v), block - 1):
        chunk = v[i:i + block - 1]
        b = np.concatenate([[6.0], chunk, np.zeros(block - 1 - len(chunk))]).astype(np.float64)
        out.append((b * scale).astype(np.float32))
    return out


# ----------------------------------------------------------------------------------------------------------
# E2M1 cast
# ----------------------------------------------------------------------------------------------------------

def cast_inputs():
    rng = np.random.default_rng(SEED)
    v = [0.0]
    for x in list(E2M1) + list(MIDPOINTS) + [6.5, 7.0, 8.0]:
        v += around(x)
    v += [5.5, 5.75, 6.0000005, 12.0, 1e3, 1e10, 1e30, np.finfo(np.float32).max, np.inf,
          0.125, 0.1875, 0.24999999, 0.2500001, 0.49999997, 0.99999994,
          np.finfo(np.float32).tiny, np.finfo(np.float32).smallest_subnormal, 2.0 ** -140, 1e-40, 1e-30, 1e-10]
    pos = f32(v)
    rnd = np.concatenate([
        rng.uniform(0, 8, 700),
        np.abs(rng.standard_normal(700)) * np.exp2(rng.uniform(-12, 12, 700)),
        np.exp2(rng.uniform(-30, 10, 400)),
        # Random values on the E2M1 grid's halves and quarters, where the ties sit.
        rng.integers(0, 33, 200) / 4.0,
    ]).astype(np.float32)
    values = np.concatenate([pos, -pos, rnd * rng.choice([-1, 1], len(rnd)).astype(np.float32)])
    nans = np.array(NAN_BITS, dtype=np.uint32)
    bits = np.concatenate([values.view(np.uint32), nans, nans | 0x80000000])
    return bits.view(np.float32)


def write_cast(f):
    x = cast_inputs()
    xt = torch.from_numpy(x.copy())
    code = f32_to_f4_unpacked(xt)
    value = f4_unpacked_to_f32(code)
    g = f.create_group("e2m1/cast")
    g["input"] = x
    g["code"] = code.numpy()
    g["value"] = value.numpy()
    g.attrs["function"] = "torchao.prototype.mx_formats.kernels.f32_to_f4_unpacked, f4_unpacked_to_f32"
    g.attrs["rounding"] = "round to nearest, ties to even; |x| >= 6 (and inf) saturate to +-6; sign of zero kept"
    specials = {"+inf": np.inf, "-inf": -np.inf}
    for name, s in specials.items():
        c = int(f32_to_f4_unpacked(torch.tensor([s], dtype=torch.float32))[0])
        g.attrs[f"{name}_code"] = c
    nan_codes = []
    for b in NAN_BITS + [b | 0x80000000 for b in NAN_BITS]:
        t = torch.from_numpy(np.array([b], dtype=np.uint32).view(np.float32).copy())
        nan_codes.append(f"0x{b:08x}->{int(f32_to_f4_unpacked(t)[0])}")
    g.attrs["nan_codes"] = ", ".join(nan_codes)
    g.attrs["nan_rule"] = ("no nan code: a nan goes through the normal-range path, code = sign | "
                           "((bits & 0x7fffffff) - 0x3f000000 + 0x1fffff + ((bits >> 22) & 1)) >> 22 & 0xff: 2, 3 "
                           "or 4 by the payload's top bits rounded to one bit (0x7fc00000 -> 3, i.e. 1.5; "
                           "0xffc00000 -> 11, i.e. -1.5)")
    g.attrs["torch_native_cast"] = ("x.to(torch.float4_e2m1fn_x2) raises NotImplementedError in torch "
                                    + torch.__version__)
    d = f.create_group("e2m1/decode")
    codes = torch.arange(16, dtype=torch.uint8)
    d["code"] = codes.numpy()
    d["value"] = f4_unpacked_to_f32(codes).numpy()
    d.attrs["function"] = "torchao.prototype.mx_formats.kernels.f4_unpacked_to_f32"
    return len(x)


# ----------------------------------------------------------------------------------------------------------
# MXFP4
# ----------------------------------------------------------------------------------------------------------

def mx_cases():
    rng = np.random.default_rng(SEED + 1)
    B, C = MX_BLOCK, MX_COLS
    cases = {}
    cases["normal"] = rng.standard_normal((16, C)).astype(np.float32)
    spread = rng.standard_normal((16, C))
    exps = rng.integers(-149, 128, size=(16, C // B))
    cases["wide"] = np.clip(spread * np.exp2(np.repeat(exps, B, axis=1)), -3.0e38, 3.0e38).astype(np.float32)
    # Block maxima where FLOOR's scale changes (powers of two), where the element saturates (6 and 8 times a power
    # of two), where RCEIL's amax / 6 crosses a power of two (6 * 2^k * (1 + j ulp)), where FLOOR's scale goes
    # below 2^-126 (torchao divides by 2^-126 but multiplies back by 2^-127), and at the top of float32.
    edges = []
    for k in [0, -20, 20, -100, 100, -123, -124, -125, -126, 125, 126, 127]:
        p = 2.0 ** k
        with np.errstate(over="ignore"):  # 6 * 2^127 and the like overflow to inf and are left out
            maxima = around(p) + around(6 * p) + around(7 * p) + around(5 * p) + [down(8 * p)]
            maxima += [F32(6 * p) * F32(1 + j * 2.0 ** -23) for j in [1, 2, 8, 64]] + [up(3 * p)]
        for m in maxima:
            if np.isfinite(m):
                edges.append(block_with_max(rng, m, B))
    for m in [1e-40, 1e-45, 2.0 ** -127, 1.5 * 2.0 ** -125, np.finfo(np.float32).max]:
        edges.append(block_with_max(rng, m, B))
    cases["edges"] = blocks_to_rows(edges, B, C)
    ties = []
    for k in [0, -3, 7, -126, -130, 120]:
        ties += tie_block(2.0 ** k, B)
    cases["ties"] = blocks_to_rows(ties, B, C)
    z = np.zeros((4, C), np.float32)
    z[0, :B] = 0.0
    z[0, B:2 * B] = -0.0
    z[0, 2 * B:3 * B] = F32(1e-45) * np.arange(1, B + 1, dtype=np.float32)
    z[0, 3 * B:] = -F32(1e-45) * np.arange(1, B + 1, dtype=np.float32)
    z[1, :B] = rng.choice([0.0, -0.0], B)
    z[1, B:2 * B] = 0.0
    z[1, B + 7] = -3.0
    z[1, 2 * B:] = rng.standard_normal(2 * B)
    z[2:] = rng.standard_normal((2, C))
    z[2, :B] = 0.0
    z[3, 3 * B:] = np.finfo(np.float32).tiny * rng.uniform(-1, 1, B)
    cases["zeros"] = z
    s = rng.standard_normal((4, C)).astype(np.float32)
    s[0, 3] = np.inf
    s[0, B + 5] = -np.inf
    s[0, 2 * B + 1] = np.nan
    s[0, 3 * B + 2] = np.inf
    s[0, 3 * B + 3] = np.nan
    s[1, :B] = np.inf
    s[1, B:2 * B] = np.nan
    s[1, 2 * B + 4] = -np.inf
    s[1, 2 * B + 5] = -np.inf
    payloads = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF] * (B // 4), dtype=np.uint32)
    s[1, 3 * B:] = payloads.view(np.float32)
    s[2, 7] = np.inf
    s[2, 8:B] = 0.0
    s[3, B + 9] = np.nan
    cases["special"] = s
    u = (rng.standard_normal((4, C)) * 1e-6).astype(np.float32)
    u[:, ::B] = 1.0e3
    u[2:, ::B] = 6.0
    cases["underflow"] = u
    per_block = np.exp2(np.repeat(rng.integers(-133, 128, (8, C // B)), B, axis=1))
    bf = np.concatenate([rng.standard_normal((8, C)) * np.exp2(rng.integers(-20, 20, (8, 1))),
                         np.clip(rng.standard_normal((8, C)) * per_block, -3.0e38, 3.0e38)])
    cases["bf16"] = torch.from_numpy(bf.astype(np.float32)).to(torch.bfloat16)
    return cases


def same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def write_mx(f):
    n = 0
    for name, x in mx_cases().items():
        g = f.create_group(f"mxfp4/{name}")
        if isinstance(x, torch.Tensor):
            xt = x.contiguous()
            g["input_bf16"] = xt.view(torch.uint16).numpy()
            g["input"] = xt.float().numpy()
        else:
            xt = torch.from_numpy(x.copy())
            g["input"] = x
        g.attrs["input_dtype"] = str(xt.dtype)
        g.attrs["block_size"] = MX_BLOCK
        for mode_name, mode in MODES.items():
            t = MXTensor.to_mx(xt, FP4, MX_BLOCK, scaling_mode=mode)
            scale, packed = to_mx(xt, FP4, MX_BLOCK, scaling_mode=mode)
            assert torch.equal(scale.view(torch.uint8), t.scale.view(torch.uint8))
            assert torch.equal(packed, t.qdata)
            back = t.dequantize(torch.float32)
            assert same_bits(back, to_dtype(packed, scale, FP4, MX_BLOCK, torch.float32))
            codes = unpack_uint4(packed.view(torch.uint8).contiguous())
            m = g.create_group(mode_name)
            m["scale"] = t.scale.view(torch.uint8).numpy()
            m["packed"] = packed.view(torch.uint8).numpy()
            m["codes"] = codes.numpy()
            m["elements"] = f4_unpacked_to_f32(codes).numpy()
            m["dequant"] = back.numpy()
            if xt.dtype == torch.bfloat16:
                m["dequant_bf16"] = t.dequantize().view(torch.uint16).numpy()
            m.attrs["function"] = ("torchao.prototype.mx_formats.mx_tensor.MXTensor.to_mx(x, "
                                   f"torch.float4_e2m1fn_x2, {MX_BLOCK}, "
                                   f"scaling_mode=ScaleCalculationMode.{mode.name}) (= mx_tensor.to_mx)")
            m.attrs["dequant_function"] = "MXTensor.dequantize(torch.float32) (= mx_tensor.to_dtype)"
            m.attrs["scaling_mode"] = mode.name
            m.attrs["torchao_version"] = str(torchao.__version__)
        n += xt.numel()
    return n


# ----------------------------------------------------------------------------------------------------------
# NVFP4
# ----------------------------------------------------------------------------------------------------------

def e4m3_values():
    v = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    v = v[np.isfinite(v) & (v > 0)]
    return np.unique(v)


def e2m1_code(q):
    """torchao's clamp to +-6 and E2M1 cast, on float32 numpy values."""
    q = np.clip(f32(q), -6, 6)
    return f32_to_f4_unpacked(torch.from_numpy(q.copy())).numpy()


def near(values, ulps=6):
    """The float32 values within `ulps` steps of each of `values`."""
    b = f32(values).view(np.uint32).astype(np.int64)
    return (b[..., None] + np.arange(-ulps, ulps + 1)).ravel().astype(np.uint32).view(np.float32)


def recip_blocks(pts=None):
    """Blocks of 16 whose E4M3 scale is s (not a power of two) and whose other values are the float32 values near
    the E2M1 midpoints times s (times pts) where torchao's x * (1 / s) (x * ((1 / pts) / s) with a per-tensor
    scale) rounds to another code than x / s (x / (pts * s), x * (1 / (pts * s))) would; both signs."""
    out = []
    for e in ([-6, -3, 0, 3, 6, 8] if pts is None else [-6, 0, 6]):
        for mant in ([6, 7] if pts is None else range(1, 8)):
            s = F32((1 + mant / 8) * 2.0 ** e)
            if s > 448:
                continue
            if pts is None:
                hp, r = s, F32(1) / s
                alts = [lambda x: x / s]
            else:
                hp, r = F32(pts * s), F32(F32(1) / pts) / s
                alts = [lambda x: x / hp, lambda x: x * (F32(1) / hp)]
            xs = near(MIDPOINTS * hp)
            mine = e2m1_code(xs * r)
            keep = np.zeros(len(xs), bool)
            for alt in alts:
                keep |= mine != e2m1_code(alt(xs))
            xs = xs[keep][:7]
            if len(xs):
                b = np.zeros(NV_BLOCK, np.float32)
                b[0] = F32(6) * hp
                b[1:1 + 2 * len(xs)] = np.concatenate([xs, -xs])
                out.append(b)
    return out


def nv_cases():
    rng = np.random.default_rng(SEED + 2)
    B, C = NV_BLOCK, NV_COLS
    cases = {}
    cases["normal"] = rng.standard_normal((16, C)).astype(np.float32)
    spread = rng.standard_normal((16, C))
    exps = np.concatenate([rng.integers(-40, 40, size=(12, C // B)), rng.integers(-149, 128, size=(4, C // B))])
    cases["wide"] = np.clip(spread * np.exp2(np.repeat(exps, B, axis=1)), -3.0e38, 3.0e38).astype(np.float32)
    # Block maxima whose amax / 6 is an E4M3 value, an E4M3 rounding midpoint, or a float32 step either side;
    # around 6 * 448 = 2688 (the clamp), 6 * 2^-6 (the lower clamp) and E4M3's subnormal range below it.
    e = e4m3_values()
    picks = [2.0 ** -9, 2.0 ** -7, 2.0 ** -6, 2.0 ** -5, 0.875, 1.0, 1.125, 1.25, 1.75, 13.0, 240.0, 256.0, 416.0,
             448.0]
    edges = []
    for s in picks:
        i = int(np.searchsorted(e, s))
        amaxes = around(6 * s)
        if i + 1 < len(e):
            amaxes += around(6 * (e[i] + e[i + 1]) / 2)
        for a in amaxes:
            edges.append(block_with_max(rng, a, B))
    for a in [2688.0 * 2, 1e6, 1e-3, 1e-6, 1e-30, 1e-40]:
        edges.append(block_with_max(rng, a, B))
    cases["scale_edges"] = blocks_to_rows(edges, B, C)
    # Blocks whose E4M3 scale s is not a power of two, holding the E2M1 values and midpoints (and neighbours)
    # times s: the elements are x * (1 / s) rounded in float32, so a tie x = 5 s can land either side of 5.
    recip = []
    for s in [1.125, 1.375, 0.6875, 3.25, 5.5, 0.0390625, 104.0, 1.0]:
        recip += tie_block(s, B)
    cases["recip"] = blocks_to_rows(recip + recip_blocks(), B, C)
    # The same with a per-tensor scale: max |x| = 1000 makes `dyn`'s pts = 1000 / 2688 in float32.
    pts = F32(F32(1000.0) / F32(2688.0))
    first = block_with_max(rng, 1000.0, B)
    cases["recip_pts"] = blocks_to_rows([first] + recip_blocks(pts), B, C)
    z = rng.standard_normal((4, C)).astype(np.float32)
    z[0, :B] = 0.0
    z[0, B:2 * B] = -0.0
    z[0, 2 * B:3 * B] = F32(1e-45) * np.arange(1, B + 1, dtype=np.float32)
    z[1, :B] = rng.choice([0.0, -0.0], B)
    z[1, B:2 * B] = 0.0
    z[1, B + 3] = 2.5
    z[2, 3 * B:] = np.finfo(np.float32).tiny * rng.uniform(-1, 1, B)
    cases["zeros"] = z
    s = rng.standard_normal((4, C)).astype(np.float32)
    s[0, 3] = np.inf
    s[0, B + 5] = -np.inf
    s[0, 2 * B + 1] = np.nan
    s[0, 3 * B + 2] = np.inf
    s[0, 3 * B + 3] = np.nan
    s[1, :B] = np.inf
    s[1, B:2 * B] = np.nan
    s[2, 7] = np.inf
    s[2, 8:B] = 0.0
    cases["special"] = s
    u = (rng.standard_normal((4, C)) * 1e-4).astype(np.float32)
    u[:, ::B] = 1.0e3
    cases["underflow"] = u
    cases["all_zero"] = np.zeros((2, C), np.float32)
    bf = rng.standard_normal((8, C)) * np.exp2(rng.integers(-10, 10, (8, 1)))
    cases["bf16"] = torch.from_numpy(bf.astype(np.float32)).to(torch.bfloat16)
    return cases


NV_EXTRA = {"normal", "wide", "scale_edges", "special"}


def nv_variants(name, xt):
    amax = torch.max(torch.abs(xt))
    out = {"none": None, "dyn": per_tensor_amax_to_scale(amax)}
    if name in NV_EXTRA:
        finite = torch.abs(xt.float())
        finite = torch.max(finite[torch.isfinite(finite)])
        out["calib_low"] = per_tensor_amax_to_scale(finite / 64)
        out["calib_high"] = per_tensor_amax_to_scale(finite * 64)
    return out


def write_nv(f):
    n = 0
    for name, x in nv_cases().items():
        g = f.create_group(f"nvfp4/{name}")
        if isinstance(x, torch.Tensor):
            xt = x.contiguous()
            g["input_bf16"] = xt.view(torch.uint16).numpy()
            g["input"] = xt.float().numpy()
        else:
            xt = torch.from_numpy(x.copy())
            g["input"] = x
        g.attrs["input_dtype"] = str(xt.dtype)
        g.attrs["block_size"] = NV_BLOCK
        for vname, pts in nv_variants(name, xt).items():
            t = NVFP4Tensor.to_nvfp4(xt, block_size=NV_BLOCK, per_tensor_scale=pts)
            packed = t.qdata.view(torch.uint8).contiguous()
            codes = unpack_uint4(packed)
            v = g.create_group(vname)
            if pts is not None:
                v["per_tensor_scale"] = pts.reshape(1).numpy()
            v["scale"] = t.scale.view(torch.uint8).numpy()
            v["scale_f32"] = t.scale.float().numpy()
            v["hp_scale"] = t.get_hp_scales().numpy()
            v["packed"] = packed.numpy()
            v["codes"] = codes.numpy()
            v["elements"] = f4_unpacked_to_f32(codes).numpy()
            v["dequant"] = t.dequantize(torch.float32).numpy()
            if xt.dtype == torch.bfloat16:
                v["dequant_bf16"] = t.dequantize().view(torch.uint16).numpy()
            v.attrs["function"] = ("torchao.prototype.mx_formats.nvfp4_tensor.NVFP4Tensor.to_nvfp4(x, block_size=16, "
                                   "per_tensor_scale=...) (nvfp4_quantize; use_triton_kernel=False)")
            v.attrs["per_tensor_scale_rule"] = {
                "none": "None (single-level: block scale = clamp(amax/6, 2^-6, 448) in E4M3)",
                "dyn": "per_tensor_amax_to_scale(torch.max(torch.abs(x))) = amax.float() / 2688",
                "calib_low": "per_tensor_amax_to_scale(max finite |x| / 64)",
                "calib_high": "per_tensor_amax_to_scale(max finite |x| * 64)",
            }[vname]
            v.attrs["dequant_function"] = "NVFP4Tensor.dequantize(torch.float32): elements * get_hp_scales()"
            v.attrs["torchao_version"] = str(torchao.__version__)
        n += xt.numel()
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/golden/fp4.h5")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with h5py.File(args.out, "w") as f:
        f.attrs["producer"] = "scripts/golden/fp4.py"
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["torchao_version"] = str(torchao.__version__)
        f.attrs["python"] = platform.python_version()
        f.attrs["machine"] = platform.machine()
        f.attrs["date"] = datetime.date.today().isoformat()
        f.attrs["mx_block_size"] = MX_BLOCK
        f.attrs["nvfp4_block_size"] = NV_BLOCK
        n_cast = write_cast(f)
        n_mx = write_mx(f)
        n_nv = write_nv(f)
    print(f"wrote {args.out}: {n_cast} casts, {n_mx} MXFP4 and {n_nv} NVFP4 inputs, "
          f"torch {torch.__version__}, torchao {torchao.__version__}")


if __name__ == "__main__":
    main()
