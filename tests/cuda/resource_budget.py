#!/usr/bin/env python3
"""Every CUDA kernel of the built libraries within its register, local-memory and shared-memory budget.

No GPU and no cuobjdump needed (the CUDA toolkit of CI and of this repository's build machine has neither):
the script reads the machine code nvcc embedded in the objects, the way `cuobjdump --dump-resource-usage`
does. A host object (alone or inside a static library) carries a `.nv_fatbin` section: fat-binary
containers (magic 0xBA55ED50) whose entries hold one ELF cubin per real architecture (and compressed PTX,
skipped). In a cubin, per kernel:
  registers       EIATTR_REGCOUNT of the global `.nv.info` section, keyed by the kernel's symbol;
  local memory    the stack frame in bytes (EIATTR_FRAME_SIZE, MIN_STACK_SIZE, MAX_STACK_SIZE of the global
                  `.nv.info` section, keyed by symbol): register spills and arrays indexed at run time;
  static shared   the size of section `.nv.shared.<kernel>`, less the 1 KiB that sm_90 cubins reserve there;
  block size      EIATTR_MAX_THREADS of `.nv.info.<kernel>` (__launch_bounds__), else 1024.
Budgets (tests/README.md says why):
  local memory    0 bytes: a spill or a stack array turns register traffic into memory traffic;
  registers       ceil8(registers) x 32 x warps(block size) <= 65536: the kernel can be launched with its
                  largest block; without __launch_bounds__ that is 1024 threads, so at most 64 registers;
  static shared   <= 48 KiB (the most a block gets without opting in to more at run time).
A kernel over a budget fails the check with its name, architecture and numbers. KNOWN lists kernels that
break a budget today and are waiting for a fix: they are reported, and fail only if they get worse.
--probe names an object built from resource_probe.cu, whose kernel has known numbers: the check fails if
they do not read back, so a change in the toolkit's format cannot make the check pass by reading nothing.
  python3 tests/cuda/resource_budget.py --probe probe.o --arch 80,90 build/libmantissa_ops.a ...
"""
import argparse
import re
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
EIATTR_MAX_THREADS = 0x05
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

REGISTERS_PER_BLOCK = 65536
STATIC_SHARED_LIMIT = 48 * 1024
DEFAULT_BLOCK = 1024
# From sm_90 on, a kernel's .nv.shared section also holds the 1 KiB that every block reserves for the
# system (sm_80 reserves it too, at launch, outside the section); the budget is on the kernel's own part.
SYSTEM_SHARED = 1024

# Kernels over a budget today, by a regular expression on the demangled name: (what, largest value seen).
# strided_kernel<2, uint32> left (its OffsetCalc had a 104-byte stack frame while it was indexed with a
# run-time dim; ops/cuda/offset_calc.h unrolls over kMaxDims now). softmax_backward_kernel<256, double> needs
# 72 registers since the row kernels loop over the grid; it is always launched with 256 threads (softmax.cu's
# kThreads), so it fits, but it says so nowhere ptxas sees. Declaring __launch_bounds__(256) on the row
# kernels made ptxas spill 4-12 bytes in other instantiations (an error under -warn-spills): fix both together.
KNOWN = [
    (r"softmax_backward_kernel<256, double>", "registers", 72),
]


def section_table(elf):
    """[(name, type, offset, size, info)] of an ELF64 little-endian image."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    raw = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, _link, info = struct.unpack_from("<IIQQQQII", elf, shoff + i * shentsize)
        raw.append((name, typ, off, size, info))
    strings = raw[shstrndx][2]

    def name_at(o):
        end = elf.index(b"\0", strings + o)
        return elf[strings + o:end].decode("ascii", "replace")

    return [(name_at(n), t, o, s, i) for n, t, o, s, i in raw]


def symbol_names(elf, sections):
    """Symbol index -> name, from .symtab."""
    by_name = {s[0]: s for s in sections}
    if ".symtab" not in by_name or ".strtab" not in by_name:
        return {}
    _, _, off, size, _ = by_name[".symtab"]
    stroff = by_name[".strtab"][2]
    names = {}
    for i in range(size // 24):
        st_name, = struct.unpack_from("<I", elf, off + 24 * i)
        end = elf.index(b"\0", stroff + st_name)
        names[i] = elf[stroff + st_name:end].decode("ascii", "replace")
    return names


def attributes(blob):
    """(attribute, value bytes or int) records of an .nv.info section."""
    i = 0
    while i + 2 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == EIFMT_SVAL:
            length, = struct.unpack_from("<H", blob, i + 2)
            yield attr, blob[i + 4:i + 4 + length]
            i += 4 + length
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):  # 4 bytes: format, attribute, a 16-bit value or none
            yield attr, None if fmt == EIFMT_NVAL else struct.unpack_from("<H", blob, i + 2)[0]
            i += 4
        else:
            raise ValueError(f"unknown .nv.info record format {fmt}")


def cubin_kernels(cubin):
    """{kernel: dict(registers, local, shared, threads, bounded)} of one cubin."""
    secs = section_table(cubin)
    syms = symbol_names(cubin, secs)
    kernels = {}
    for name, _t, off, size, _info in secs:
        if name.startswith(".nv.info."):
            k = name[len(".nv.info."):]
            threads = None
            for attr, val in attributes(cubin[off:off + size]):
                if attr == EIATTR_MAX_THREADS and isinstance(val, bytes) and len(val) >= 12:
                    x, y, z = struct.unpack_from("<III", val)
                    threads = x * y * z
            kernels[k] = dict(registers=None, local=0, shared=0, threads=threads or DEFAULT_BLOCK,
                              bounded=threads is not None)
    reserved = SYSTEM_SHARED if any(n.startswith(".nv.shared.reserved.") for n, *_ in secs) else 0
    for name, _t, off, size, info in secs:
        if name.startswith(".text.") and name[6:] in kernels and kernels[name[6:]]["registers"] is None:
            kernels[name[6:]]["registers"] = (info >> 24) or None  # sm_80 cubins; EIATTR_REGCOUNT wins
        elif name.startswith(".nv.shared.") and name[11:] in kernels:
            kernels[name[11:]]["shared"] = max(0, size - reserved)
        elif name == ".nv.info":
            for attr, val in attributes(cubin[off:off + size]):
                if not isinstance(val, bytes) or len(val) < 8:
                    continue
                sym, value = struct.unpack_from("<II", val)
                k = syms.get(sym)
                if k not in kernels:
                    continue
                if attr == EIATTR_REGCOUNT:
                    kernels[k]["registers"] = value
                elif attr in (EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE):
                    kernels[k]["local"] = max(kernels[k]["local"], value)
    return kernels


def fatbin_cubins(blob, where):
    """(arch, cubin) of every cubin entry of the fat-binary containers in blob."""
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            break
        entry, end = pos + header, pos + header + size
        while entry + 16 <= end:
            kind, _v, ehead, esize = struct.unpack_from("<HHIQ", blob, entry)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            payload = blob[entry + ehead:entry + ehead + esize]
            if kind == 2:  # an ELF cubin (1 is PTX)
                if payload[:4] != b"\x7fELF":
                    raise ValueError(f"{where}: an sm_{arch} cubin is not a plain ELF image (compressed?): this "
                                     "check cannot read it; build without fat-binary compression")
                yield arch, payload
            entry += ehead + esize
        pos = end
        while pos < len(blob) and blob[pos] == 0:  # containers are padded to 8 bytes
            pos += 1


def objects(path):
    """(member name, bytes) of an ar archive, or the file itself."""
    data = open(path, "rb").read()
    if not data.startswith(b"!<arch>\n"):
        yield path, data
        return
    pos, long_names = 8, b""
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode().strip()
        size = int(header[48:58].decode().strip())
        body = data[pos + 60:pos + 60 + size]
        if name == "//":
            long_names = body
        elif name.startswith("/") and name[1:].isdigit():
            o = int(name[1:])
            name = long_names[o:long_names.index(b"/\n", o)].decode()
        if name not in ("/", "//", "/SYM64/"):
            yield f"{path}({name.rstrip('/')})", body
        pos += 60 + size + (size & 1)


def kernels_of(path):
    """[(object, arch, kernel, numbers)] of every kernel in path."""
    out = []
    for where, data in objects(path):
        if data[:4] != b"\x7fELF":
            continue
        for name, _t, off, size, _i in section_table(data):
            if name == ".nv_fatbin":
                for arch, cubin in fatbin_cubins(data[off:off + size], where):
                    for k, numbers in cubin_kernels(cubin).items():
                        out.append((where, arch, k, numbers))
    return out


def demangle(names):
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        lines = r.stdout.split("\n")
        return dict(zip(names, lines)) if len(lines) >= len(names) else {n: n for n in names}
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def register_need(registers, threads):
    warps = (threads + 31) // 32
    return (registers + 7) // 8 * 8 * 32 * warps


def check_probe(path, archs):
    """Problems reading the probe (resource_probe.cu): __launch_bounds__(96), 1200 bytes of static shared
    memory, a 64-float local array indexed at run time."""
    problems = []
    found = {}
    for _where, arch, k, n in kernels_of(path):
        if "resource_probe" in k:
            found[arch] = n
    if not found:
        problems.append("no kernel named resource_probe in the probe object")
    for arch in archs or sorted(found):
        n = found.get(arch)
        if n is None:
            problems.append(f"the probe has no sm_{arch} kernel (found sm_{', sm_'.join(map(str, sorted(found)))})")
        elif not (n["threads"] == 96 and n["bounded"] and n["shared"] == 1200 and 0 < (n["registers"] or 0) <= 255
                  and n["local"] >= 256):
            problems.append(f"the probe's sm_{arch} numbers read back wrong: {n} (expected threads 96, shared "
                            "1200, local >= 256, registers 1..255)")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("files", nargs="+", help="static libraries, objects or programs to read")
    p.add_argument("--probe", help="the object built from tests/cuda/resource_probe.cu")
    p.add_argument("--arch", default="80,90",
                   help="real architectures every kernel must be built for (empty: whatever was built)")
    p.add_argument("--table", type=int, default=12, help="rows of the resource table to print (largest first)")
    a = p.parse_args()
    archs = [int(x) for x in a.arch.split(",") if x]

    failures = []
    if a.probe:
        failures += [f"probe: {m}" for m in check_probe(a.probe, archs)]
    rows = []
    for f in a.files:
        try:
            rows += kernels_of(f)
        except (OSError, ValueError, struct.error) as e:
            failures.append(f"{f}: cannot read: {e}")
    names = demangle(sorted({k for _w, _a, k, _n in rows}))
    seen_archs = {}
    known_hits = {}  # KNOWN pattern -> [(arch, kernel, value)]
    for where, arch, k, n in rows:
        seen_archs.setdefault(k, set()).add(arch)
        name = names[k]
        problems = []  # (kind, value, message)
        if n["registers"] is None:
            problems.append(("registers", 0, "no .text section: registers unknown"))
        elif register_need(n["registers"], n["threads"]) > REGISTERS_PER_BLOCK:
            bound = f"__launch_bounds__({n['threads']})" if n["bounded"] else "no __launch_bounds__, so 1024"
            problems.append(("registers", n["registers"],
                             f"{n['registers']} registers x {n['threads']} threads ({bound}) need "
                             f"{register_need(n['registers'], n['threads'])} of a block's {REGISTERS_PER_BLOCK}: "
                             "a launch that large fails; declare the block size with __launch_bounds__"))
        if n["local"] > 0:
            problems.append(("local", n["local"], f"{n['local']} bytes of local memory per thread (stack frame: "
                             "spills or an array indexed at run time; budget 0)"))
        if n["shared"] > STATIC_SHARED_LIMIT:
            problems.append(("shared", n["shared"],
                             f"{n['shared']} bytes of static shared memory (budget {STATIC_SHARED_LIMIT})"))
        for kind, value, msg in problems:
            known = [kn for kn in KNOWN if kn[1] == kind and value <= kn[2] and re.search(kn[0], name)]
            if known:
                known_hits.setdefault(known[0][0], []).append((arch, name, value))
            else:
                failures.append(f"sm_{arch} {name}: {msg} [{where}]")
    for k, got in seen_archs.items():
        missing = [x for x in archs if x not in got]
        if missing:
            failures.append(f"{names[k]}: no machine code for sm_{', sm_'.join(map(str, missing))}")

    rows.sort(key=lambda r: (-(r[3]["registers"] or 0), r[1], names[r[2]]))
    kernels = len({k for _w, _a, k, _n in rows})
    print(f"{kernels} kernels, {len(rows)} (kernel, architecture) pairs in {len(a.files)} files; largest first:")
    print(f"{'arch':<6}{'regs':>5}{'block':>7}{'local':>7}{'shared':>8}  kernel")
    for where, arch, k, n in rows[:a.table]:
        block = f"{n['threads']}{'' if n['bounded'] else '*'}"
        print(f"sm_{arch:<3}{n['registers'] or 0:>5}{block:>7}{n['local']:>7}{n['shared']:>8}  {names[k][:110]}")
    print("(block: __launch_bounds__, or * 1024 where none is declared; local and shared in bytes)")
    for pattern, what, limit in KNOWN:
        hits = known_hits.get(pattern)
        if not hits:
            print(f"note: KNOWN entry '{pattern}' ({what}) no longer matches a kernel over budget: remove it")
            continue
        worst = max(hits, key=lambda h: h[2])
        print(f"known, waiting for a fix: {len(hits)} (kernel, architecture) pairs matching '{pattern}' over the "
              f"{what} budget, at most {worst[2]} (allowed until fixed: {limit}); e.g. sm_{worst[0]} {worst[1][:150]}")
    if failures:
        print(f"\n{len(failures)} over budget:")
        for f in failures:
            print(f"FAIL {f}")
        return 1
    excused = sum(len(h) for h in known_hits.values())
    print(f"\n{len(rows) - excused} of {len(rows)} within budget ({excused} known above): 0 bytes local memory, "
          f"registers x block <= {REGISTERS_PER_BLOCK}, static shared <= {STATIC_SHARED_LIMIT} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
