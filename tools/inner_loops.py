"""Instruction counts of the micro-kernels' inner loops, read off the compiled code.

    python tools/inner_loops.py                 both ISAs' object files, built here
    python tools/inner_loops.py --show          ... and the instructions of each loop

For AVX2 (x86-64, gcc) and NEON (aarch64, aarch64-linux-gnu-gcc) it compiles
csrc/kern_avx2.c and csrc/kern_neon.c with the flags setup.py uses, disassembles
them with objdump, and in the float32 Q·Kᵀ (`qk_*_f32`) and P·V (`pv_*_f32`)
functions finds the loop with the most FMAs: the full register tile's step
along the reduction axis (d for Q·Kᵀ, the keys for P·V).  For that loop it
counts instructions, FMAs, loads and the bytes they load (a memory operand
of an FMA counts as a load), and prints FMAs per loaded byte and FLOPs per
instruction: what one step of the tile asks of the core, on either ISA.

Emulation says nothing of ARM speed; these counts are what can be compared
from here.  Needs gcc, binutils, and for NEON the Debian packages
gcc-aarch64-linux-gnu and binutils-aarch64-linux-gnu (tools/arm64-test.sh
installs them).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFLAGS = ["-std=c11", "-O3", "-fno-math-errno", "-falign-loops=64", "-fopenmp", "-I" + os.path.join(ROOT, "csrc")]

# (ISA, compiler command, objdump, source, lanes of float32 a vector); the clang
# rows only where clang is installed (Apple's compiler is clang)
ISAS = [
    ("avx2", ["gcc"], "objdump", "kern_avx2.c", 8),
    ("avx512", ["gcc"], "objdump", "kern_avx512.c", 16),
    ("neon", ["aarch64-linux-gnu-gcc"], "aarch64-linux-gnu-objdump", "kern_neon.c", 4),
    ("neon", ["clang", "--target=aarch64-linux-gnu"], "aarch64-linux-gnu-objdump", "kern_neon.c", 4),
]

LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
TARGET = re.compile(r"^([0-9a-f]+) <")


def disassemble(cc: list[str], objdump: str, source: str, tmp: str) -> str:
    obj = os.path.join(tmp, os.path.basename(source) + ".o")
    subprocess.run([*cc, *CFLAGS, "-c", os.path.join(ROOT, "csrc", source), "-o", obj], check=True)
    return subprocess.run([objdump, "-d", "--no-show-raw-insn", obj], check=True,
                          capture_output=True, text=True).stdout


def function(dis: str, name: str) -> list[tuple[int, str, str]]:
    """The instructions of one function: (address, mnemonic, operands)."""
    body = dis.split(f"<{name}>:\n", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in body.splitlines():
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2), m.group(3).split("//")[0].strip()))
    return out


def is_branch(isa: str, mnem: str) -> bool:
    if isa == "neon":
        return mnem == "b" or mnem.startswith(("b.", "cbz", "cbnz", "tbz", "tbnz"))
    return mnem.startswith("j")


def loops(isa: str, insns: list[tuple[int, str, str]]) -> list[list[tuple[int, str, str]]]:
    """Every backward branch's loop body, from its target to the branch."""
    found = []
    for i, (addr, mnem, ops) in enumerate(insns):
        if not is_branch(isa, mnem):
            continue
        m = TARGET.match(ops.split(",")[-1].strip())
        if not m:
            continue
        target = int(m.group(1), 16)
        if target <= addr:
            start = next(j for j, x in enumerate(insns) if x[0] >= target)
            found.append(insns[start:i + 1])
    return found


def classify(isa: str, mnem: str, ops: str) -> tuple[int, int, int, int]:
    """(FMAs, loads, bytes loaded, stores) of one instruction, float32 vectors."""
    f, loads, nbytes = load(isa, mnem, ops)
    if isa == "neon":
        stores = int(mnem.startswith("st"))
    else:
        stores = int(mnem.startswith(("vmov", "mov")) and ops.endswith(")"))
    return f, loads, nbytes, stores


def load(isa: str, mnem: str, ops: str) -> tuple[int, int, int]:
    """(FMAs, loads, bytes loaded) of one instruction."""
    if isa == "neon":
        fma = int(mnem in ("fmla", "fmls") and ".4s" in ops)
        if mnem == "ld1r":
            return fma, 1, 4
        if mnem in ("ldr", "ldur") and re.match(r"q\d+", ops):
            return fma, 1, 16
        if mnem == "ldp" and ops.startswith("q"):
            return fma, 2, 32
        if mnem in ("ldr", "ldur") and re.match(r"s\d+", ops):
            return fma, 1, 4
        if mnem == "ld1" and "[" in ops:
            n = len(re.findall(r"v\d+\.4s", ops.split("}")[0]))
            return fma, n, 16 * n
        return fma, 0, 0
    fma = int(mnem.startswith("vfmadd") and ("ymm" in ops or "zmm" in ops))
    mem = "(" in ops  # AT&T syntax: a memory operand
    if not mem or mnem.startswith(("vmov", "mov")) and ops.endswith(")"):
        return fma, 0, 0  # no memory operand, or a store
    if mnem.startswith("prefetch") or mnem == "lea" or mnem.startswith("nop"):
        return fma, 0, 0
    if mnem == "vbroadcastss" or "{1to" in ops:
        return fma, 1, 4
    if "zmm" in ops:
        return fma, 1, 64
    if "ymm" in ops:
        return fma, 1, 32
    if "xmm" in ops:
        return fma, 1, 16
    return fma, 1, 8  # a scalar (pointer, index) load


def tile(source: str, kernel: str) -> tuple[int, int]:
    """The kernel's full register tile, (rows, vectors), as the ISA file
    defines it (QK_R × QK_C, PV_R × PV_C)."""
    text = open(os.path.join(ROOT, "csrc", source)).read()
    k = kernel.upper()
    r, c = (int(re.search(rf"#define {k}_{x} (\d+)", text).group(1)) for x in ("R", "C"))
    return r, c


def is_broadcast(isa: str, mnem: str, ops: str) -> bool:
    """A scalar loaded for every lane (x86: vbroadcastss or an FMA's {1to16};
    NEON: ld1r, or a scalar ldr that a by-element FMLA then uses)."""
    if isa == "neon":
        return mnem == "ld1r" or mnem in ("ldr", "ldur") and re.match(r"s\d+", ops) is not None
    return mnem == "vbroadcastss" or "{1to" in ops


def full_tile_loop(isa: str, insns, rows: int, vectors: int) -> list[tuple[int, str, str]]:
    """The innermost loop (no other loop inside it) that is one step of the
    full tile — rows × vectors FMAs and a broadcast a row — with the fewest
    instructions: the copy where the row count is a constant, not the tail's
    copy that reads its count.  (The decode copies for a few rows have as
    many FMAs but fewer broadcasts.)"""
    every = loops(isa, insns)
    inner = [b for b in every if not any(b2 is not b and b[0][0] <= b2[0][0]
                                         and b2[-1][0] <= b[-1][0] for b2 in every)]
    steps = [b for b in inner
             if sum(classify(isa, m, o)[0] for _, m, o in b) == rows * vectors
             and sum(is_broadcast(isa, m, o) for _, m, o in b) == rows]
    return min(steps, key=len)


def report(show: bool) -> int:
    isas = [x for x in ISAS if x[1][0] != "clang" or shutil.which("clang")]
    missing = sorted({t for _, cc, od, _, _ in isas for t in (cc[0], od) if not shutil.which(t)})
    if missing:
        print(f"inner_loops: missing {', '.join(missing)} (tools/arm64-test.sh installs the "
              "aarch64 ones)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for isa, cc, od, src, lanes in isas:
            dis = disassemble(cc, od, src, tmp)
            for kernel in ("qk", "pv"):
                name = f"{kernel}_{isa}_f32"
                body = full_tile_loop(isa, function(dis, name), *tile(src, kernel))
                fmas = loads = nbytes = stores = 0
                for _, m, o in body:
                    f, l, b, st = classify(isa, m, o)
                    fmas, loads, nbytes, stores = fmas + f, loads + l, nbytes + b, stores + st
                rows.append((f"`{name}` ({cc[0]})", len(body), fmas, loads, nbytes, stores, lanes))
                if show:
                    print(f"-- {name}: the loop at {body[0][0]:#x}")
                    for a, m, o in body:
                        print(f"   {a:8x}  {m:10s} {o}")
    print("| loop | instructions | FMAs | loads | bytes loaded | stores | FMAs per byte "
          "| FLOPs per byte | FLOPs per instruction |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, fmas, loads, nbytes, stores, lanes in rows:
        print(f"| {name} | {n} | {fmas} | {loads} | {nbytes} | {stores} | {fmas / nbytes:.3f} "
              f"| {2 * lanes * fmas / nbytes:.2f} | {2 * lanes * fmas / n:.1f} |")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="store_true", help="print each loop's instructions")
    sys.exit(report(ap.parse_args().show))
