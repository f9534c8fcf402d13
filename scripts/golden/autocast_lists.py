#!/usr/bin/env python3
"""Checks the "PyTorch CPU" and "PyTorch CUDA" columns of amp/README.md's policy table against the PyTorch
this interpreter has (the --bench virtual environment: build/bench-venv/bin/python).

CPU: each op is run under torch.autocast("cpu", float16) twice, on f32 inputs and on f16 inputs (for
promote: on mixed f16/f32 inputs), and its category is read from the output dtypes:
  lower precision: f32 inputs give f16;  fp32: f16 inputs give f32;  promote: mixed inputs give f32 where
  the op alone would refuse or keep f16, or (cat, stack: ops that promote by themselves, where the output
  cannot tell) the op has a kernel for the AutocastCPU key while neither cast above shows;  none: otherwise.
CUDA: without a GPU the kernels cannot run, so the check is what PyTorch's dispatcher can say on any machine:
whether the op has a kernel registered for the AutocastCUDA key (some category) or not (none).
Prints one line per row and exits 1 when a row disagrees.
Usage: build/bench-venv/bin/python scripts/golden/autocast_lists.py [amp/README.md]
"""
import re
import sys

import torch
import torch.nn.functional as F

f32, f16 = torch.float32, torch.float16


def t(*shape, dtype=f32):
    return torch.rand(*shape, dtype=dtype) + 0.5


# Each op as mantissa's table names it: (the aten names whose AutocastCUDA registration stands for it, a
# call on a list of floating inputs, the number of such inputs).
OPS = {
    "mm": (["aten::mm"], lambda a, b: torch.mm(a, b), [(4, 4), (4, 4)]),
    "bmm": (["aten::bmm"], lambda a, b: torch.bmm(a, b), [(2, 4, 4), (2, 4, 4)]),
    "matmul": (["aten::matmul"], lambda a, b: torch.matmul(a, b), [(4, 4), (4, 4)]),
    "linear": (["aten::linear"], lambda a, b: F.linear(a, b), [(4, 4), (4, 4)]),
    "addmm": (["aten::addmm"], lambda a, b, c: torch.addmm(a, b, c), [(4, 4), (4, 4), (4, 4)]),
    "baddbmm": (["aten::baddbmm"], lambda a, b, c: torch.baddbmm(a, b, c), [(2, 4, 4), (2, 4, 4), (2, 4, 4)]),
    "dot": (["aten::dot"], lambda a, b: torch.dot(a, b), [(4,), (4,)]),
    "conv2d": (["aten::conv2d"], lambda a, b: F.conv2d(a, b), [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "conv1d": (["aten::conv1d"], lambda a, b: F.conv1d(a, b), [(1, 2, 5), (3, 2, 3)]),
    "scaled_dot_product_attention": (["aten::scaled_dot_product_attention"],
                                     lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                                     [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)]),
    "pow": (["aten::pow.Tensor_Tensor", "aten::pow.Tensor_Scalar"], lambda a, b: torch.pow(a, b), [(4,), (4,)]),
    "addcmul": (["aten::addcmul"], lambda a, b, c: torch.addcmul(a, b, c), [(4,), (4,), (4,)]),
    "addcdiv": (["aten::addcdiv"], lambda a, b, c: torch.addcdiv(a, b, c), [(4,), (4,), (4,)]),
    "exp": (["aten::exp"], torch.exp, [(4,)]),
    "log": (["aten::log"], torch.log, [(4,)]),
    "sqrt": (["aten::sqrt"], torch.sqrt, [(4,)]),
    "rsqrt": (["aten::rsqrt"], torch.rsqrt, [(4,)]),
    "abs": (["aten::abs"], torch.abs, [(4,)]),
    "relu": (["aten::relu"], torch.relu, [(4,)]),
    "gelu": (["aten::gelu"], F.gelu, [(4,)]),
    "tanh": (["aten::tanh"], torch.tanh, [(4,)]),
    "sigmoid": (["aten::sigmoid"], torch.sigmoid, [(4,)]),
    "softmax": (["aten::softmax.int"], lambda a: torch.softmax(a, 0), [(4,)]),
    "log_softmax": (["aten::log_softmax.int"], lambda a: torch.log_softmax(a, 0), [(4,)]),
    "layer_norm": (["aten::layer_norm"], lambda a, w, b: F.layer_norm(a, (4,), w, b), [(2, 4), (4,), (4,)]),
    "group_norm": (["aten::group_norm"], lambda a, w, b: F.group_norm(a, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    "sum": (["aten::sum"], torch.sum, [(4,)]),
    "mean": (["aten::mean"], torch.mean, [(4,)]),
    "logsumexp": (["aten::logsumexp"], lambda a: torch.logsumexp(a, 0), [(4,)]),
    "prod": (["aten::prod", "aten::prod.dim_int"], torch.prod, [(4,)]),
    "norm": (["aten::norm.Scalar", "aten::norm.ScalarOpt_dim"], torch.norm, [(4,)]),
    "cumsum": (["aten::cumsum"], lambda a: torch.cumsum(a, 0), [(4,)]),
    "cross_entropy": (["aten::cross_entropy_loss", "aten::nll_loss", "aten::log_softmax.int"],
                      lambda a: F.cross_entropy(a, torch.tensor([1, 0])), [(2, 3)]),
    "nll_loss": (["aten::nll_loss"], lambda a: F.nll_loss(a, torch.tensor([1, 0])), [(2, 3)]),
    "mse_loss": (["aten::mse_loss"], lambda a, b: F.mse_loss(a, b), [(4,), (4,)]),
    "l1_loss": (["aten::l1_loss"], lambda a, b: F.l1_loss(a, b), [(4,), (4,)]),
    "smooth_l1_loss": (["aten::smooth_l1_loss"], lambda a, b: F.smooth_l1_loss(a, b), [(4,), (4,)]),
    "binary_cross_entropy": (["aten::binary_cross_entropy"], lambda a, b: F.binary_cross_entropy(a - 0.5, b - 0.5),
                             [(4,), (4,)]),
    "binary_cross_entropy_with_logits": (["aten::binary_cross_entropy_with_logits"],
                                         lambda a, b: F.binary_cross_entropy_with_logits(a, b - 0.5), [(4,), (4,)]),
    "cat": (["aten::cat"], lambda a, b: torch.cat([a, b]), [(4,), (4,)]),
    "stack": (["aten::stack"], lambda a, b: torch.stack([a, b]), [(4,), (4,)]),
    "scatter_add": (["aten::scatter_add"], lambda a, b: torch.scatter_add(a, 0, torch.tensor([0, 1, 2, 3]), b),
                    [(4,), (4,)]),
    "index_put": (["aten::index_put"], lambda a, b: torch.index_put(a, (torch.tensor([0, 1]),), b), [(4,), (2,)]),
}


def run(fn, shapes, dtypes):
    try:
        with torch.autocast("cpu", dtype=f16):
            out = fn(*[t(*s, dtype=d) for s, d in zip(shapes, dtypes)])
        return out.dtype
    except RuntimeError:
        return "error"


def plain(fn, shapes, dtypes):
    try:
        return fn(*[t(*s, dtype=d) for s, d in zip(shapes, dtypes)]).dtype
    except RuntimeError:
        return "error"


def cpu_category(fn, shapes, registered):
    n = len(shapes)
    if run(fn, shapes, [f32] * n) == f16:
        return "lower precision"
    if run(fn, shapes, [f16] * n) == f32:
        return "fp32"
    if n > 1:
        mixed = [f16] + [f32] * (n - 1)
        if run(fn, shapes, mixed) == f32 and plain(fn, shapes, mixed) != f32:
            return "promote"
    return "promote" if registered else "none"


def readme_rows(path):
    rows = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else "amp/README.md"
    rows = readme_rows(readme)
    cpu_registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"))
    cuda_registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    print(f"torch {torch.__version__}; {len(rows)} rows in {readme}")
    bad = 0
    for op, (want_cpu, want_cuda) in rows.items():
        if op not in OPS:
            print(f"{op}: no probe in this script")
            bad += 1
            continue
        names, fn, shapes = OPS[op]
        got_cpu = cpu_category(fn, shapes, any(n in cpu_registered for n in names))
        registered = any(n in cuda_registered for n in names)
        cuda_ok = registered == (want_cuda != "none")
        ok = got_cpu == want_cpu and cuda_ok
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {op}: CPU {got_cpu} (README: {want_cpu}); CUDA "
              f"{'registered' if registered else 'not registered'} (README: {want_cuda})")
    missing = sorted(set(OPS) - set(rows))
    if missing:
        print("ops probed here but not in the README: " + ", ".join(missing))
        bad += len(missing)
    print(f"{len(rows) - bad} of {len(rows)} rows agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
