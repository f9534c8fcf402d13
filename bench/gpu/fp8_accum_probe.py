#!/usr/bin/env python3
"""What does Hopper's FP8 tensor core really add? Records its answers for issue 35's accumulator model.

Runs FP8 GEMMs through PyTorch's torch._scaled_mm (cuBLASLt) on the GPU with inputs chosen to expose the
accumulator: per row, one large product (2^16) and K-1 equal small products 2^-d smaller, for d = 0..34, with
the large product first in K or last; and random E4M3/E5M2 matrices at several K. Each case runs with
use_fast_accum=False (cuBLASLt promotes partial sums to f32 at intervals) and True (no promotion), with
tensorwise, rowwise and, where this PyTorch and cuBLASLt take them, 1x128/128x128 block scales. Every input
(as FP8 bytes), scale and output (f32; bf16 outputs widened exactly) goes to one .npz, with an index of the
cases and any refusal in a JSON beside it, so that the CPU's accumulator model can be checked against the real
tensor core bit for bit later, on a machine without a GPU. Writes nothing but those two files.

    python3 bench/gpu/fp8_accum_probe.py --out DIR
"""
import argparse
import json
import os
import sys
import traceback

import numpy as np
import torch


def e4m3(x):
    return x.to(torch.float8_e4m3fn)


def bytes_of(t):
    return t.contiguous().view(torch.uint8).cpu().numpy()


def ladder(k, big_last, dtype_b):
    """48 x k A and k x 32 B (B returned as its 32 x k transpose). Rows 0..17: A[r, big] = 256, the other
    entries 2^(r - 9); columns 0..17: B[big, n] = 256, the others 2^(n - 9); so product (r, n) is one 2^16
    and k-1 equal 2^(r + n - 18): 0 to 34 binades apart. Rows 18..47 and columns 18..31 are random."""
    g = torch.Generator().manual_seed(1234 + k)
    a = torch.randn(48, k, generator=g) * 8
    bt = torch.randn(32, k, generator=g) * 8
    big = k - 1 if big_last else 0
    for r in range(18):
        a[r, :] = 2.0 ** (r - 9)
        a[r, big] = 256.0
    for n in range(18):
        bt[n, :] = 2.0 ** (n - 9)
        bt[n, big] = 256.0
    return e4m3(a), bt.to(dtype_b)


def random_pair(m, n, k, dtype_a, dtype_b, seed):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 4).clamp(-400, 400).to(dtype_a)
    bt = (torch.randn(n, k, generator=g) * 4).clamp(-400, 400).to(dtype_b)
    return a, bt


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", help="cpu rehearses the cases through PyTorch's CPU path")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fp8_accum_probe: skipped: no CUDA device")
        return 0
    dev = torch.device(args.device)
    on_gpu = dev.type == "cuda"
    arrays = {}
    index = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if on_gpu else "cpu",
        "capability": list(torch.cuda.get_device_capability()) if on_gpu else [],
        "cublaslt": getattr(torch._C, "_cuda_getCompiledVersion", lambda: None)(),
        "layout": "A is M x K row-major FP8 bytes (key a); B is stored as its N x K transpose (key bt); "
        "out is M x N f32 (bf16 outputs widened exactly)",
        "cases": [],
    }

    def record(name, a, bt, sa, sb, out_dtype, fast, kind):
        entry = {"name": name, "kind": kind, "m": a.shape[0], "n": bt.shape[0], "k": a.shape[1],
                 "a_dtype": str(a.dtype), "b_dtype": str(bt.dtype), "out_dtype": str(out_dtype),
                 "use_fast_accum": fast}
        try:
            ad, bd = a.to(dev), bt.to(dev).t()  # B column-major, as cuBLASLt's FP8 path wants it
            out = torch._scaled_mm(ad, bd, scale_a=sa.to(dev), scale_b=sb.to(dev), out_dtype=out_dtype,
                                   use_fast_accum=fast)
            if on_gpu:
                torch.cuda.synchronize()
            arrays[name + "/out"] = out.float().cpu().numpy()
            entry["ok"] = True
        except Exception as e:  # a refusal is a result too: say what this stack cannot do
            entry["ok"] = False
            entry["error"] = (str(e).splitlines() or [repr(e)])[0][:400]
        key = f"{kind}/{a.shape[1]}/{a.dtype}/{bt.dtype}"
        if key + "/a" not in arrays:
            arrays[key + "/a"] = bytes_of(a)
            arrays[key + "/bt"] = bytes_of(bt)
        entry["inputs"] = key
        arrays[name + "/scale_a"] = sa.float().numpy()
        arrays[name + "/scale_b"] = sb.float().numpy()
        index["cases"].append(entry)
        print(f"{name}: {'ok' if entry['ok'] else 'refused: ' + entry['error']}")

    one = torch.ones((), dtype=torch.float32)
    for k in (32, 128, 256, 1024, 4096):
        for big_last in (False, True):
            for dtype_b in (torch.float8_e4m3fn,):
                a, bt = ladder(k, big_last, dtype_b)
                kind = "ladder_last" if big_last else "ladder_first"
                for fast in (False, True):
                    record(f"{kind}_k{k}_fast{int(fast)}", a, bt, one, one, torch.float32, fast, kind)
    for k in (64, 128, 512, 4096):
        for dta, dtb in ((torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e5m2, torch.float8_e4m3fn)):
            a, bt = random_pair(256, 256, k, dta, dtb, 99 + k)
            tag = "e4m3xe4m3" if dta == torch.float8_e4m3fn else "e5m2xe4m3"
            for fast in (False, True):
                record(f"random_{tag}_k{k}_fast{int(fast)}", a, bt, one, one, torch.float32, fast, "random")
                record(f"random_{tag}_k{k}_fast{int(fast)}_bf16", a, bt, one, one, torch.bfloat16, fast, "random")
            if dta == torch.float8_e4m3fn:
                g = torch.Generator().manual_seed(7 + k)
                sa = torch.pow(2.0, torch.randint(-4, 5, (256, 1), generator=g).float())
                sb = torch.pow(2.0, torch.randint(-4, 5, (1, 256), generator=g).float())
                for fast in (False, True):
                    record(f"rowwise_k{k}_fast{int(fast)}", a, bt, sa, sb, torch.bfloat16, fast, "random")
                if k % 128 == 0:
                    kb = k // 128
                    sa = torch.rand(256, kb, generator=g) + 0.5
                    sb = torch.rand(kb, 2, generator=g) + 0.5
                    # cuBLASLt's block scales want the M (N) index fastest: transposed storage first
                    for layout, (xa, xb) in (("outer", (sa.t().contiguous().t(), sb.t().contiguous().t())),
                                             ("rowmajor", (sa, sb))):
                        record(f"block1x128x128x128_{layout}_k{k}", a, bt, xa, xb, torch.bfloat16, False, "random")
                    sb1 = torch.rand(kb, 256, generator=g) + 0.5
                    record(f"block1x128x1x128_outer_k{k}", a, bt, sa.t().contiguous().t(),
                           sb1.t().contiguous().t(), torch.bfloat16, False, "random")

    np.savez_compressed(os.path.join(args.out, "fp8_accum_probe.npz"), **arrays)
    with open(os.path.join(args.out, "fp8_accum_probe.json"), "w") as f:
        json.dump(index, f, indent=1)
    ok = sum(c["ok"] for c in index["cases"])
    print(f"fp8_accum_probe: {ok} of {len(index['cases'])} cases ran; wrote {args.out}/fp8_accum_probe.{{npz,json}}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
